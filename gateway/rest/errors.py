"""The one way the HTTP front end renders an error: `{"error": message}` as JSON, with the
status and headers the error's class carries (`wire.errors`, the one table of statuses).

Both the handlers (`BaseHandler.write_error`) and the connection layer, which refuses
before any handler exists (over capacity, a request head too large), render through
`render`; a front end whose clients expect another shape (TorchServe's, OpenAI's) hands
its own document to it. It knows no handler and no connection.
"""
from __future__ import annotations

from typing import Any

import orjson

from wire.errors import GatewayError

CONTENT_TYPE = "application/json"


def document(message: str) -> dict[str, Any]:
    """The body every HTTP error carries: what was wrong, for a person to read."""
    return {"error": message}


def render(error: GatewayError, body: dict[str, Any] | None = None) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of `error`; `body`: the document in a front end's own shape
    (default: `document`)."""
    encoded = orjson.dumps(body if body is not None else document(error.message))
    return error.http_status, {"Content-Type": CONTENT_TYPE, **error.http_headers}, encoded
