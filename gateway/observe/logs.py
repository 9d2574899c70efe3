"""Logging setup: human-readable text (default) or one JSON object per line.

Structured fields passed with `extra={...}` (model, batch_id, rows, request_ids, ...)
become top-level keys in JSON lines, so log pipelines can filter on them. Nothing on the
hot path logs at INFO: the per-batch line is DEBUG and is only formatted when enabled.

A message that repeats (same logger, level and text before its arguments: a refused
connection, a malformed request, an access-log 4xx) is written at most `REPEATS_PER_WINDOW`
times per `REPEAT_WINDOW_S`; a line of its own then says how many were left out and what the
last of them said, so a flood of bad clients costs a few lines, not a disk.
"""
from __future__ import annotations

import atexit
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
    last_left_out: str = ""  # the last message left out, as it would have read


class RepeatFilter(logging.Filter):
    """Lets through `limit` records of one kind per `window_s`, then counts the rest.

    What was left out is said in a record of its own, written once the kind's window has
    ended, before the next record of any kind: "N more like '<the last one left out>' ...".
    It is never added to another message: a kind is a call site, and the next message of
    the same site may say something else (a reload that failed for another reason)."""

    def __init__(self, emit: Callable[[logging.LogRecord], object] | None = None,
                 window_s: float = REPEAT_WINDOW_S, limit: int = REPEATS_PER_WINDOW,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.emit = emit  # where a summary goes (the handler this filter guards); None: nowhere
        self.window_s = window_s
        self.limit = limit
        self.clock = clock
        self._kinds: dict[tuple[str, int, str], _Repeats] = {}
        self._unsaid: dict[tuple[str, int, str], _Repeats] = {}  # kinds with records left out

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "repeat_summary", False):
            return True  # our own: never limited, never counted
        now = self.clock()
        if self._unsaid:
            self._say_left_out(now)
        kind = (record.name, record.levelno, str(record.msg))
        repeats = self._kinds.get(kind)
        if repeats is None or now - repeats.window_start >= self.window_s:
            if len(self._kinds) >= 10_000:  # kinds are log call sites: only a bug makes this many
                self._kinds.clear()
            self._kinds[kind] = _Repeats(now)
            return True
        if repeats.written < self.limit:
            repeats.written += 1
            return True
        repeats.left_out += 1
        repeats.last_left_out = record.getMessage()
        self._unsaid[kind] = repeats
        return False

    def flush(self) -> None:
        """Say what was left out now, whether or not its window has ended (at exit)."""
        self._say_left_out(float("inf"))

    def _say_left_out(self, now: float) -> None:
        for kind, repeats in list(self._unsaid.items()):
            if now - repeats.window_start < self.window_s:
                continue
            del self._unsaid[kind]
            name, level, _ = kind
            summary = logging.makeLogRecord({
                "name": name, "levelno": level, "levelname": logging.getLevelName(level), "repeat_summary": True,
                "msg": "%d more like '%s' were not logged in the %g s after %s (%d of them were)",
                "args": (repeats.left_out, repeats.last_left_out, self.window_s,
                         _wall_time(self.clock() - repeats.window_start), repeats.written)})
            if self.emit is not None:
                self.emit(summary)


def _wall_time(seconds_ago: float) -> str:
    return datetime.fromtimestamp(time.time() - seconds_ago).strftime("%H:%M:%S")


def configure(level: str = "INFO", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    repeats = RepeatFilter(emit=handler.handle)
    handler.addFilter(repeats)
    atexit.register(repeats.flush)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Tornado logs every request at INFO: that is per-request logging on the hot path.
    logging.getLogger("tornado.access").setLevel(max(logging.WARNING, root.level))
