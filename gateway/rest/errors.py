"""The one way the HTTP front end renders an error: `{"error": message}` as JSON, with the
status and headers the error's class carries (`wire.errors`, the one table of statuses).

Both the handlers (`BaseHandler.write_error`) and the connection layer, which refuses
before any handler exists (over capacity, a request head too large), render through
`render` (`raw_answer`: a whole answer, for a socket no Tornado connection serves yet); a
front end whose clients expect another shape (TorchServe's, OpenAI's) hands its own
document to it. It knows no handler and no connection.
"""
from __future__ import annotations

from http.client import responses
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


def raw_answer(error: GatewayError) -> bytes:
    """`error` as a whole HTTP/1.1 answer that closes the connection, for a socket no
    Tornado connection serves yet."""
    code, fields, body = render(error)
    head = [f"HTTP/1.1 {code} {responses[code]}", *(f"{k}: {v}" for k, v in fields.items()),
            "Connection: close", f"Content-Length: {len(body)}"]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body
