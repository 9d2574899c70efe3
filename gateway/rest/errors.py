"""The one way the HTTP front end renders an error: `{"error": message}` as JSON, with the
status and headers the error's class carries (`wire.errors`, the one table of statuses).

Both paths of a route (`BaseHandler.write_error`, and the lean delegate's `failure`) and
the connection layer, which refuses before any handler exists (over capacity, a request
head too large), render through `render` (`failure`: any exception a route raised;
`raw_answer`: a whole answer, for a socket no Tornado connection serves yet); a front end
whose clients expect another shape (TorchServe's, OpenAI's) hands its own document to it.
It knows no handler and no connection.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from http.client import responses
from typing import Any

import orjson

from wire.errors import GatewayError

log = logging.getLogger("gateway.rest.base")  # where an unexpected error has always been logged
CONTENT_TYPE = "application/json"
INTERNAL_ERROR = "internal error"  # all a client learns of a fault: never a traceback or an address

# A route's error document: (message, status, the GatewayError or None) in, its body out.
Document = Callable[[str, int, "GatewayError | None"], dict[str, Any]]


def document(message: str) -> dict[str, Any]:
    """The body every HTTP error carries: what was wrong, for a person to read."""
    return {"error": message}


def render(error: GatewayError, body: dict[str, Any] | None = None) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of `error`; `body`: the document in a front end's own shape
    (default: `document`)."""
    encoded = orjson.dumps(body if body is not None else document(error.message))
    return error.http_status, {"Content-Type": CONTENT_TYPE, **error.http_headers}, encoded


def failure(error: BaseException, document: Document) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of anything a route raised: a GatewayError as its class
    says, anything else as a 500 that says no more than `INTERNAL_ERROR`."""
    if isinstance(error, GatewayError):
        return render(error, document(error.message, error.http_status, error))
    return 500, {"Content-Type": CONTENT_TYPE}, orjson.dumps(document(INTERNAL_ERROR, 500, None))


def log_unexpected(path: str, error: BaseException | None) -> None:
    """A fault of the gateway's own while serving `path`: logged whole, for its operators."""
    log.error("unexpected error serving %s", path,
              exc_info=(type(error), error, error.__traceback__) if error is not None else None)


def raw_answer(error: GatewayError) -> bytes:
    """`error` as a whole HTTP/1.1 answer that closes the connection, for a socket no
    Tornado connection serves yet."""
    code, fields, body = render(error)
    head = [f"HTTP/1.1 {code} {responses[code]}", *(f"{k}: {v}" for k, v in fields.items()),
            "Connection: close", f"Content-Length: {len(body)}"]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body
