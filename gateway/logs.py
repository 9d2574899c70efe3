"""Logging setup: human-readable text (default) or one JSON object per line.

Structured fields passed with `extra={...}` (model, batch_id, rows, request_ids, ...)
become top-level keys in JSON lines, so log pipelines can filter on them. Nothing on the
hot path logs at INFO: the per-batch line is DEBUG and is only formatted when enabled.
"""
from __future__ import annotations

import logging
import sys
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


def configure(level: str = "INFO", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Tornado logs every request at INFO: that is per-request logging on the hot path.
    logging.getLogger("tornado.access").setLevel(max(logging.WARNING, root.level))
