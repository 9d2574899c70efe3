"""Orphan protection shared by the real-predictor scripts (stdlib only: each script runs
in its own predictor venv and imports this as a sibling module).

The harness holds the write end of each server's stdin pipe; when the test process dies
without stopping the server, stdin reaches EOF and the server shuts itself down, so no
orphan keeps its ports, memory and CPU."""
from __future__ import annotations

import os
import threading
from collections.abc import Callable


def on_stdin_eof(action: Callable[[], None]) -> None:
    """Run `action` (from a daemon thread) once stdin reaches EOF."""

    def watch() -> None:
        # os.read on fd 0, not sys.stdin: a daemon thread blocked inside the buffered
        # reader holds its lock, and the interpreter then aborts at exit ("could not
        # acquire lock for <_io.BufferedReader name='<stdin>'> at interpreter shutdown").
        try:
            while os.read(0, 65536):
                pass
        except OSError:
            pass
        action()

    threading.Thread(target=watch, name="stdin-eof-watchdog", daemon=True).start()
