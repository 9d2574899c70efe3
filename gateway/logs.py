"""Logging setup: human-readable text (default) or one JSON object per line.

Structured fields passed with `extra={...}` (model, batch_id, rows, request_ids, ...)
become top-level keys in JSON lines, so log pipelines can filter on them. Nothing on the
hot path logs at INFO: the per-batch line is DEBUG and is only formatted when enabled.

A message that repeats (same logger, level and text before its arguments: a refused
connection, a malformed request, an access-log 4xx) is written at most `REPEATS_PER_WINDOW`
times per `REPEAT_WINDOW_S`; the next one written after that says how many were left out,
so a flood of bad clients costs a few lines, not a disk.
"""
from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        document = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        document.update({key: value for key, value in vars(record).items() if key not in _STANDARD})
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(document, default=str).decode()


REPEAT_WINDOW_S = 10.0
REPEATS_PER_WINDOW = 5


@dataclass(slots=True)
class _Repeats:
    window_start: float
    written: int = 1
    left_out: int = 0


class RepeatFilter(logging.Filter):
    """Lets through `limit` records of one kind per `window_s`, then counts the rest."""

    def __init__(self, window_s: float = REPEAT_WINDOW_S, limit: int = REPEATS_PER_WINDOW,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window_s = window_s
        self.limit = limit
        self.clock = clock
        self._kinds: dict[tuple[str, int, str], _Repeats] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        kind = (record.name, record.levelno, str(record.msg))
        now = self.clock()
        repeats = self._kinds.get(kind)
        if repeats is None or now - repeats.window_start >= self.window_s:
            if len(self._kinds) >= 10_000:  # kinds are log call sites: only a bug makes this many
                self._kinds.clear()
            self._kinds[kind] = _Repeats(now)
            if repeats is not None and repeats.left_out:
                record.msg = (f"{record.msg} [{repeats.left_out} more like this in the last "
                              f"{self.window_s:g} s were not logged]")
            return True
        if repeats.written < self.limit:
            repeats.written += 1
            return True
        repeats.left_out += 1
        return False


def configure(level: str = "INFO", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RepeatFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Tornado logs every request at INFO: that is per-request logging on the hot path.
    logging.getLogger("tornado.access").setLevel(max(logging.WARNING, root.level))
