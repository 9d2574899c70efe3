"""The one place the HTTP front end reaches into Tornado's private internals, and why.

Each use below does what no documented hook of Tornado 6 allows; each is named in
`PRIVATE_NAMES`, which `tests/rest/test_tornado_internals.py` checks against the Tornado
installed, so that an upgrade that renames or drops one fails loudly there, naming it,
instead of quietly changing how the gateway answers:

* `reset_answer` (`RequestHandler.clear`'s four attributes): a handler's answer reset
  without Tornado's `Server` header, and with a `Date` formatted once a second instead of
  on every answer (`email.utils`' formatting was ~1% of a request). `clear` is a
  documented override point; what it must set is not.
* `drop_header_timeout` (`HTTP1ConnectionParameters.header_timeout`): the connection
  layer's one sweep times a connection's wait for a head (`gateway.rest.connections`);
  Tornado's own costs a future and a timer per request (~2% of one). The constructor takes
  no such argument from `HTTPServer`.
* `accept_tls` (`TCPServer._handle_connection`): Tornado's path from an accepted socket to
  a TLS stream, for the connections the layer accepts itself (its cap and accept backoff).
* `keep_after_early_answer` (`HTTP1Connection`'s class, and its `_read_finished`,
  `_disconnect_on_finish` and `_request_headers`): Tornado makes each request's connection
  itself, with no factory to ask for another class, and closes a connection answered
  before its body was read without saying so. The swapped class keeps it when the rest of
  the body is small, or says `Connection: close`.

It knows Tornado and nothing of the gateway: the connection layer and the handlers call it.
"""
from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import tornado.http1connection
import tornado.httpserver
import tornado.httputil
import tornado.web

# Every private name used here, by the class that holds it (checked by the tests).
PRIVATE_NAMES: dict[str, tuple[str, ...]] = {
    "tornado.web.RequestHandler.clear": ("_headers", "_write_buffer", "_status_code", "_reason"),
    "tornado.http1connection.HTTP1ConnectionParameters": ("header_timeout",),
    "tornado.tcpserver.TCPServer": ("_handle_connection",),
    "tornado.http1connection.HTTP1Connection": ("_read_finished", "_disconnect_on_finish", "_request_headers"),
}


def reset_answer(handler: tornado.web.RequestHandler, date: str) -> None:
    """What `RequestHandler.clear` does, less the `Server` header, with `date` as `Date`."""
    handler._headers = tornado.httputil.HTTPHeaders({"Content-Type": "text/html; charset=UTF-8", "Date": date})
    handler.set_default_headers()
    handler._write_buffer = []
    handler._status_code = 200
    handler._reason = tornado.httputil.responses[200]


def drop_header_timeout(server: tornado.httpserver.HTTPServer) -> None:
    """No timer of Tornado's own on a connection's wait for a head (the caller times it)."""
    server.conn_params.header_timeout = None


def accept_tls(server: tornado.httpserver.HTTPServer, connection: socket.socket, address: Any) -> None:
    """Hand an accepted socket to Tornado's TLS handshake, then `handle_stream`."""
    server._handle_connection(connection, address)


def keep_after_early_answer(request_conn: tornado.httputil.HTTPConnection,
                            drainable: Callable[[tornado.httputil.HTTPHeaders], bool]) -> None:
    """Keep `request_conn`'s connection after an answer sent before the request's body was
    read, when `drainable` says the rest of the body may be read and dropped; else the
    answer says `Connection: close` (see `EarlyAnswerConnection`)."""
    if type(request_conn) is tornado.http1connection.HTTP1Connection:
        request_conn.__class__ = EarlyAnswerConnection
        request_conn.drainable = drainable  # type: ignore[attr-defined]


class EarlyAnswerConnection(tornado.http1connection.HTTP1Connection):
    """Tornado's exchange of one request and its answer on a connection, but for an answer
    that goes before the request's body is read. Tornado closes the connection then (the
    only way it knows not to read the body), without saying so in the answer, and a client
    that sends its next request on it fails. Here the connection is kept when the rest of
    the body is small (`drainable`): Tornado reads it past the handler and drops it, then
    serves the next request; otherwise the answer says `Connection: close`."""

    drainable: Callable[[tornado.httputil.HTTPHeaders], bool]

    def write_headers(self, start_line: tornado.httputil.RequestStartLine | tornado.httputil.ResponseStartLine,
                      headers: tornado.httputil.HTTPHeaders, chunk: bytes | None = None) -> Any:
        if not self._read_finished and not self._disconnect_on_finish and not self.is_client:
            assert self._request_headers is not None  # a server writes an answer after a head
            if headers.get("Connection", "").lower() == "close" or not self.drainable(self._request_headers):
                self._disconnect_on_finish = True  # Tornado adds `Connection: close` for it
        return super().write_headers(start_line, headers, chunk)

    def finish(self) -> None:
        if self._read_finished or self._disconnect_on_finish:
            super().finish()
            return
        # Answered before a body write_headers found small: Tornado's finish closes a connection
        # whose read is unfinished; told it is finished, it keeps it and reads the body after.
        self._read_finished = True
        try:
            super().finish()
        finally:
            self._read_finished = False
