"""The READY line of the real-predictor scripts whose servers print logs of their own
(stdlib only: each script runs in its own predictor venv and imports this as a sibling
module).

`tools.processes` reads a server's first stdout line, which must be READY. A server whose
framework logs to stdout (Infinity, KServe, uvicorn) keeps a private copy of stdout for
that line alone (`stdout_for_ready_only`) and sends everything else to stderr; a thread
(`announce_when_ready`) prints the line once every readiness URL answers 200."""
from __future__ import annotations

import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import TextIO


def stdout_for_ready_only() -> TextIO:
    """A private copy of stdout for the READY line; this process's stdout is stderr from now
    on, so nothing else reaches the launcher's pipe (or fills it)."""
    ready_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    return ready_out


def answers(url: str) -> bool:
    """Whether GET `url` answers 200 (no proxy: the servers are on loopback)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=2) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


def announce_when_ready(ready_out: TextIO, urls: Sequence[str], line: str, timeout: float = 300.0) -> None:
    """From a daemon thread: print `line` (READY key=value ...) on `ready_out` once every
    one of `urls` answers 200, within `timeout` seconds."""

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(answers(url) for url in urls):
                ready_out.write(line + "\n")
                ready_out.flush()
                return
            time.sleep(0.1)

    threading.Thread(target=watch, name="ready-line", daemon=True).start()
