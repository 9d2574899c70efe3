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
* `write_whole_answer` (`HTTP1Connection`'s answer state: `_response_start_line`,
  `_chunking_output`, `_expected_content_remaining`, `_pending_write`, `_write_finished`,
  `_request_start_line`, `_finish_request`): an answer whose body is whole (its length
  known, nothing chunked) written as one prebuilt bytes write, where Tornado's general
  `write_headers`, `write` and `finish` build an `HTTPHeaders`, a future per write, a
  generator and a regular-expression search per header line (~6% of a request's CPU on
  the lean path). It sets what Tornado's own path sets, in the same order, and decides
  keep-alive with the same rules (a test compares both on every case). When nothing is
  queued on the stream the bytes go straight to the socket (`BaseIOStream`'s
  `_write_buffer`, `_connecting`, `_total_write_index`, `_total_write_done_index`,
  `_maybe_add_error_listener`): Tornado's write costs 4-5 us of Python per system call.

* `request_summary` and `status_reason` (`RequestHandler._request_summary` and `_reason`):
  what Tornado's own access line shows of a request (`METHOD uri (remote ip)`), and the
  reason phrase an error is answered with (its own, or an `HTTPError`'s), for a server of
  ours that logs and renders them as Tornado does (the simulated predictor,
  `tools/simulated_predictor/server.py`). Tornado has no public accessor for either.

It knows Tornado and nothing of the gateway: the connection layer, the handlers and the
simulated predictor call it.
"""
from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Mapping
from typing import Any

import tornado.http1connection
import tornado.httpserver
import tornado.httputil
import tornado.iostream
import tornado.web
from tornado.concurrent import future_add_done_callback

# Every private name used here, by the class that holds it (checked by the tests).
PRIVATE_NAMES: dict[str, tuple[str, ...]] = {
    "tornado.web.RequestHandler.clear": ("_headers", "_write_buffer", "_status_code", "_reason"),
    "tornado.web.RequestHandler": ("_request_summary", "_reason"),
    "tornado.http1connection.HTTP1ConnectionParameters": ("header_timeout",),
    "tornado.tcpserver.TCPServer": ("_handle_connection",),
    "tornado.iostream.BaseIOStream": (
        "_write_buffer", "_connecting", "_total_write_index", "_total_write_done_index", "_maybe_add_error_listener"),
    "tornado.http1connection.HTTP1Connection": (
        "_read_finished", "_disconnect_on_finish", "_request_headers", "_request_start_line", "_response_start_line",
        "_chunking_output", "_expected_content_remaining", "_pending_write", "_write_finished", "_finish_request"),
}


def reset_answer(handler: tornado.web.RequestHandler, date: str) -> None:
    """What `RequestHandler.clear` does, less the `Server` header, with `date` as `Date`."""
    handler._headers = tornado.httputil.HTTPHeaders({"Content-Type": "text/html; charset=UTF-8", "Date": date})
    handler.set_default_headers()
    handler._write_buffer = []
    handler._status_code = 200
    handler._reason = tornado.httputil.responses[200]


def request_summary(handler: tornado.web.RequestHandler) -> str:
    """`METHOD uri (remote ip)`: the request as Tornado's own access line shows it."""
    return handler._request_summary()


def status_reason(handler: tornado.web.RequestHandler) -> str:
    """The reason phrase of the status the handler answers (`send_error`'s, or an
    `HTTPError`'s own)."""
    return handler._reason


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

    def write_whole(self, code: int, fields: Mapping[str, str], date: str, body: bytes) -> bool:
        """`write_headers(start_line, headers, body)` then `finish()` of this class, for a
        server's answer of `fields`, `Date` and `Content-Length`, as one write of bytes built here; False
        (nothing done) for what only Tornado's general path handles: a closed stream, a
        HEAD request, an answer with no body by its code (1xx, 204, 304), a framing field
        among `fields`. Every attribute is left as that path leaves it, but the future
        `write_headers` returns, which nothing here waits on (Tornado clears it at the
        answer's end, as `_clear_callbacks` would), and a header line with CR or LF raises
        the same ValueError before anything is written."""
        request = self._request_start_line
        if (self.stream.closed() or self.is_client or request is None or request.method == "HEAD"
                or code < 200 or code in (204, 304)):
            return False
        head = {_name(name): value for name, value in fields.items()}
        if "Content-Length" in head or "Transfer-Encoding" in head:
            return False
        head["Date"] = date
        assert self._request_headers is not None  # a server writes an answer after a head
        # EarlyAnswerConnection.write_headers: an answer before the body keeps the connection if it is small.
        if not self._read_finished and not self._disconnect_on_finish and (
                head.get("Connection", "").lower() == "close" or not self.drainable(self._request_headers)):
            self._disconnect_on_finish = True
        start_line, status = _status(code)
        self._response_start_line = start_line
        self._chunking_output = False  # a Content-Length is given
        head["Content-Length"] = str(len(body))
        if request.version == "HTTP/1.1" and self._disconnect_on_finish:
            head["Connection"] = "close"
        if request.version == "HTTP/1.0" and self._request_headers.get("Connection", "").lower() == "keep-alive":
            head["Connection"] = "Keep-Alive"
        lines = [f"{name}: {value}" for name, value in head.items()]
        text = "\r\n".join(lines)
        # write_headers refuses a line holding CR or LF: here, any beyond the separators.
        if text.count("\n") != len(lines) - 1 or text.count("\r") != len(lines) - 1:
            for line in lines:
                if "\r" in line or "\n" in line:
                    raise ValueError(f"Illegal characters (CR or LF) in header: {line.encode('latin1')!r}")
        data = (status + text + "\r\n\r\n").encode("latin1") + body
        self._expected_content_remaining = 0  # the whole body is in this write
        self._pending_write = _write_now(self.stream, data)
        # HTTP1Connection.finish, as this class's finish runs it: it leaves _disconnect_on_finish as
        # write_headers decided (an unread body the answer did not keep is already to be closed).
        self._write_finished = True
        self.stream.set_nodelay(True)
        future_add_done_callback(self._pending_write, self._finish_request)
        return True

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


def write_whole_answer(request_conn: tornado.httputil.HTTPConnection, code: int, fields: Mapping[str, str],
                       date: str, body: bytes) -> None:
    """Send an answer of `code` with the header `fields`, then `date` as `Date` and the
    `Content-Length` of the whole `body`, and finish it: what `write_headers(start_line,
    headers, body)` then `finish()` do. One prebuilt write on the connections the layer
    swapped (`EarlyAnswerConnection.write_whole`), else Tornado's own path."""
    if type(request_conn) is EarlyAnswerConnection and request_conn.write_whole(code, fields, date, body):
        return
    head = tornado.httputil.HTTPHeaders()
    for name, value in fields.items():  # not HTTPHeaders(fields): Mapping.update's generic path costs more
        head[name] = value
    head["Date"] = date
    head["Content-Length"] = str(len(body))
    reason = tornado.httputil.responses.get(code, "Unknown")
    request_conn.write_headers(tornado.httputil.ResponseStartLine("HTTP/1.1", code, reason), head, body)
    request_conn.finish()


def _write_now(stream: tornado.iostream.IOStream, data: bytes) -> asyncio.Future[None]:
    """`stream.write(data)`, sent straight to the socket when nothing is queued before it:
    what Tornado's write does then (a buffer, a peek and an advance of it, and the future of
    each write in a queue) cost 4-5 us of Python for one system call. What the socket does
    not take, or an error, goes through Tornado's own write, which queues it or closes."""
    if (stream._write_buffer or stream._connecting or stream.max_write_buffer_size is not None
            or isinstance(stream, tornado.iostream.SSLIOStream)):
        return stream.write(data)
    try:
        sent = stream.socket.send(data)
    except BlockingIOError:
        sent = 0
    except OSError:
        return stream.write(data)  # Tornado's handling of the error: it logs, closes the stream, fails the future
    # BaseIOStream.write and _handle_write's accounting of what went.
    stream._total_write_index += sent
    stream._total_write_done_index += sent
    if sent < len(data):
        return stream.write(memoryview(data)[sent:])
    future: asyncio.Future[None] = asyncio.Future()
    future.set_result(None)
    stream._maybe_add_error_listener()
    return future


# An answer's status line, and the start line Tornado keeps of it, by code.
_STATUS: dict[int, tuple[tornado.httputil.ResponseStartLine, str]] = {}
# A header name as `HTTPHeaders` spells it (`content-type` is sent `Content-Type`).
_NAMES: dict[str, str] = {}


def _status(code: int) -> tuple[tornado.httputil.ResponseStartLine, str]:
    status = _STATUS.get(code)
    if status is None:
        reason = tornado.httputil.responses.get(code, "Unknown")
        status = _STATUS[code] = (tornado.httputil.ResponseStartLine("HTTP/1.1", code, reason),
                                  f"HTTP/1.1 {code:d} {reason}\r\n")  # as write_headers formats it
    return status


def _name(name: str) -> str:
    spelt = _NAMES.get(name)
    if spelt is None:
        # HTTPHeaders' normalization of a name; bounded as its own cache is (names come from code).
        spelt = "-".join(word.capitalize() for word in name.split("-"))
        if len(_NAMES) < 1000:
            _NAMES[name] = spelt
    return spelt
