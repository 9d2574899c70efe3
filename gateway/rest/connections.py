"""The HTTP front end's connection layer: what a connection may cost before it is a request.

Tornado's HTTPServer, with the guards a production proxy puts in front of an application:
- a cap on open connections: beyond `max_connections` a new connection is answered 503
  (`Retry-After`) and closed at once, so refusing costs one accept, never a spin;
- an accept that fails for want of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM)
  stops accepting for a backoff that doubles up to a second, instead of being retried on
  every pass of the loop;
- timeouts per phase: a new connection must deliver its first request's headers within
  `header_timeout_s`; a kept-alive connection must deliver its next request's headers within
  `idle_timeout_s` of its last answer; a body must arrive within `body_timeout_s` of its
  headers. One sweep over the connections enforces all three, so a request pays for no
  timer of its own (Tornado's body timeout costs one per request);
- an answer sent before the request's body was read (a refusal from the head alone: an
  unknown model's 404, a 413, a 401, ...) keeps the connection when the body still to come
  is small: a declared `Content-Length` of at most `DRAIN_BYTES` is read and dropped, and
  the connection serves the next request, as it would after reading the body. Otherwise (a
  larger or chunked body, `Expect: 100-continue`, a 414 or 431) the answer says
  `Connection: close`, and the connection is closed;
- such a close is not lost to a client that writes its whole body before it reads: it
  lingers (`gateway.rest.lingering`). A lingering socket counts against `max_connections`
  until it closes; a connection accepted at the cap closes the oldest lingering socket at
  once rather than be refused, so descriptors stay bounded by the cap;
- a request head is judged before routing: a request target over 8 KiB gets 414, a header
  block over 64 KiB gets 431, and an absolute-form target (`POST http://host/path`, which
  RFC 9112 says servers must accept) is served as its path.

It must not know handlers, models or the service: it hands each request to the delegate it
wraps (`gateway.rest.app.make_front_end`). Every refusal here is counted in `gateway.observe.metrics.ConnectionStats` and logged through
the ordinary loggers, whose repeats `gateway.observe.logs` rate-limits.
"""
from __future__ import annotations

import errno
import logging
import re
import socket
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import tornado.httpserver
import tornado.httputil
import tornado.ioloop
import tornado.iostream

from gateway.observe.metrics import ConnectionStats
from gateway.rest import errors, tornado_internals
from gateway.rest.lingering import LingeringSockets, LingeringStream, set_body_unread
from wire.errors import GatewayError, HeaderFieldsTooLarge, OverCapacity, RequestHeadTooLarge

log = logging.getLogger(__name__)

MAX_REQUEST_TARGET_BYTES = 8 * 1024   # 414 beyond (nginx's default buffer for a request line)
MAX_HEADER_BYTES = 64 * 1024          # 431 beyond (Tornado's own default)
# What Tornado reads while looking for the end of a head. Between MAX_HEADER_BYTES and this,
# the client gets 431 or 414; beyond it the connection is closed unanswered (Go's default
# bound on a request head).
HEAD_READ_LIMIT = 1024 * 1024
# An answer sent before its request's body: a body declared up to this is read and dropped and the
# connection kept. A few reads cost less than the client's new connection would (a handshake, TLS's
# key exchange), and it covers the small JSON requests whose refusals are common (a wrong model name).
DRAIN_BYTES = 64 * 1024
SWEEP_INTERVAL_S = 0.25               # how often timeouts are checked: their resolution
ACCEPTS_PER_WAKEUP = 128              # as Tornado's accept loop: then let other work run
BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 1.0
# accept() failing for want of a resource, which retrying at once cannot fix.
_RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_CONTENT_LENGTH = re.compile(r"[0-9]{1,12}")


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    header_timeout_s: float
    body_timeout_s: float
    idle_timeout_s: float
    max_connections: int


@dataclass(slots=True)
class _Deadline:
    """When to close a connection: while it waits for a head or receives a body (None while
    its request is handled: the request's own deadline applies then)."""
    stream: tornado.iostream.IOStream
    at: float | None


class GuardedHTTPServer(tornado.httpserver.HTTPServer):
    """Tornado's HTTPServer behind the guards listed in the module docstring."""

    def initialize(  # type: ignore[override]  # Tornado's Configurable constructor hook
        self, app: tornado.httputil.HTTPServerConnectionDelegate, *, limits: ConnectionLimits, max_body_size: int,
        ssl_options: Any = None,
    ) -> None:
        super().initialize(
            app, ssl_options=ssl_options, max_body_size=max_body_size, max_header_size=HEAD_READ_LIMIT,
            idle_connection_timeout=max(limits.header_timeout_s, limits.idle_timeout_s) + 1.0,
        )
        # The sweep below alone times a connection's wait for a head: Tornado's own wait
        # costs a future and a timer per request (~2% of one) and could only fire after it.
        tornado_internals.drop_header_timeout(self)
        self.limits = limits
        self.stats = ConnectionStats()
        self._deadlines: dict[object, _Deadline] = {}   # by Tornado's server connection
        self._lingering = LingeringSockets(self.stats)
        self._listeners: dict[int, socket.socket] = {}
        self._accepting = False
        self._backoff_s = BACKOFF_FIRST_S
        self._loop = tornado.ioloop.IOLoop.current()
        self._sweeper = tornado.ioloop.PeriodicCallback(self._sweep, SWEEP_INTERVAL_S * 1000)
        self._refusal = errors.raw_answer(OverCapacity(
            f"the gateway holds its maximum of {self.limits.max_connections} connections (server.max_connections); "
            "retry shortly"))

    # -- accepting ---------------------------------------------------------------------

    def add_sockets(self, sockets: Any) -> None:
        for sock in sockets:
            sock.setblocking(False)
            self._listeners[sock.fileno()] = sock
            if self._accepting:  # added later: its accepts start now, like the first ones'
                self._loop.add_handler(sock, self._on_acceptable, tornado.ioloop.IOLoop.READ)
        self._start_accepting()
        self._sweeper.start()

    def stop(self) -> None:
        self._stop_accepting()
        self._sweeper.stop()
        for sock in self._listeners.values():
            sock.close()
        self._listeners.clear()

    def _start_accepting(self) -> None:
        if not self._accepting and self._listeners:
            for sock in self._listeners.values():
                self._loop.add_handler(sock, self._on_acceptable, tornado.ioloop.IOLoop.READ)
            self._accepting = True

    def _stop_accepting(self) -> None:
        if self._accepting:
            for sock in self._listeners.values():
                self._loop.remove_handler(sock)
            self._accepting = False

    def _on_acceptable(self, sock: socket.socket, events: int) -> None:
        for _ in range(ACCEPTS_PER_WAKEUP):
            try:
                connection, address = sock.accept()
            except BlockingIOError:
                break
            except ConnectionAbortedError:
                continue
            except OSError as error:
                if error.errno not in _RESOURCE_ERRNOS:
                    raise
                self._back_off(error)
                return
            # A lingering socket is still a descriptor: at the cap, the oldest makes room (its
            # answer has had the longest to arrive) before a new client is refused.
            if (self.stats.open + self.stats.lingering >= self.limits.max_connections
                    and not self._lingering.close_oldest()):
                self._refuse(connection)
                continue
            if self.ssl_options is None:
                # A plain connection's stream lingers at its close (see LingeringStream).
                self.handle_stream(LingeringStream(connection, self._lingering, max_buffer_size=self.max_buffer_size,
                                                    read_chunk_size=self.read_chunk_size), address)
            else:
                # Tornado's own path from an accepted socket to a TLS stream; it calls
                # handle_stream, where the connection is counted.
                tornado_internals.accept_tls(self, connection, address)
        self._backoff_s = BACKOFF_FIRST_S

    def _back_off(self, error: OSError) -> None:
        self.stats.accept_failures += 1
        log.error("cannot accept connections: %s; pausing accepts for %.2f s (%d open)",
                  error.strerror, self._backoff_s, self.stats.open)
        self._stop_accepting()
        self._loop.call_later(self._backoff_s, self._start_accepting)
        self._backoff_s = min(self._backoff_s * 2, BACKOFF_MAX_S)

    def _refuse(self, connection: socket.socket) -> None:
        self.stats.refused_over_capacity += 1
        log.warning("refusing connections: %d open is server.max_connections", self.limits.max_connections)
        try:
            if self.ssl_options is None:  # a TLS client could not read a plain answer: it is just closed
                connection.send(self._refusal, socket.MSG_DONTWAIT)
                connection.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the client is gone already, or its buffer is full: closing is the answer
        finally:
            connection.close()

    # -- connections and their timeouts ---------------------------------------------------

    def handle_stream(self, stream: tornado.iostream.IOStream, address: tuple) -> None:
        self.stats.accepted += 1
        self.stats.open += 1
        super().handle_stream(stream, address)

    def on_close(self, server_conn: object) -> None:
        super().on_close(server_conn)
        self.stats.open -= 1
        self._deadlines.pop(server_conn, None)

    def start_request(self, server_conn: object,
                      request_conn: tornado.httputil.HTTPConnection) -> tornado.httputil.HTTPMessageDelegate:
        # Called when a connection starts waiting for its next request's head.
        now = time.monotonic()
        deadline = self._deadlines.get(server_conn)
        if deadline is None:
            stream = server_conn.stream  # type: ignore[attr-defined]  # HTTP1ServerConnection's
            deadline = self._deadlines[server_conn] = _Deadline(stream, now + self.limits.header_timeout_s)
        else:
            deadline.at = now + self.limits.idle_timeout_s
        set_body_unread(deadline.stream, False)  # a body drained after an early answer ends unannounced
        tornado_internals.keep_after_early_answer(request_conn, _drainable)
        return _GuardedRequest(super().start_request(server_conn, request_conn), request_conn, deadline,
                               self.limits.body_timeout_s, self.stats)

    def _sweep(self) -> None:
        now = time.monotonic()
        for deadline in list(self._deadlines.values()):  # closing ends connections, which leave the dict
            if deadline.at is not None and deadline.at <= now:
                deadline.at = None
                self.stats.timed_out += 1
                deadline.stream.close()  # Tornado then ends the connection and calls on_close


def _drainable(headers: tornado.httputil.HTTPHeaders) -> bool:
    """Whether what is left of a request's body when its answer has gone is read and dropped,
    keeping the connection: no body, or a declared length of at most DRAIN_BYTES. Not a
    chunked body (its length is unknown when the answer goes), nor one whose client expects
    `100 Continue` (it is never sent once the answer is out: such a client may not send the
    body, and its next request would be read as one)."""
    if "Transfer-Encoding" in headers or "Expect" in headers:
        return False
    lengths = headers.get_list("Content-Length")
    if not lengths:
        return True
    return len(lengths) == 1 and _CONTENT_LENGTH.fullmatch(lengths[0]) is not None and int(lengths[0]) <= DRAIN_BYTES


class _GuardedRequest(tornado.httputil.HTTPMessageDelegate):
    """One request's delegate: its head is judged (and an absolute-form target made
    origin-form) before the application sees it."""

    def __init__(self, delegate: tornado.httputil.HTTPMessageDelegate, connection: tornado.httputil.HTTPConnection,
                 deadline: _Deadline, body_timeout_s: float, stats: ConnectionStats) -> None:
        self.delegate = delegate
        self.connection = connection
        self.deadline = deadline
        self.body_timeout_s = body_timeout_s
        self.stats = stats
        self.refused = False

    def headers_received(self, start_line: tornado.httputil.RequestStartLine | tornado.httputil.ResponseStartLine,
                         headers: tornado.httputil.HTTPHeaders) -> Awaitable[None] | None:
        assert isinstance(start_line, tornado.httputil.RequestStartLine)
        self.deadline.at = time.monotonic() + self.body_timeout_s
        set_body_unread(self.deadline.stream, True)  # until finish: a close now lingers
        target = start_line.path
        if len(target) > MAX_REQUEST_TARGET_BYTES:
            self._refuse(RequestHeadTooLarge(
                f"the request target is {len(target)} bytes; the limit is {MAX_REQUEST_TARGET_BYTES}"))
            return None
        header_bytes = sum(len(name) + len(value) + 4 for name, value in headers.get_all())
        if header_bytes > MAX_HEADER_BYTES:
            self._refuse(HeaderFieldsTooLarge(
                f"the request's headers are {header_bytes} bytes; the limit is {MAX_HEADER_BYTES}"))
            return None
        if target[:1] != "/" and "://" in target[:8]:
            start_line = _origin_form(start_line, headers)
        return self.delegate.headers_received(start_line, headers)

    def data_received(self, chunk: bytes) -> Awaitable[None] | None:
        return None if self.refused else self.delegate.data_received(chunk)

    def finish(self) -> None:
        self.deadline.at = None  # the whole request is in
        set_body_unread(self.deadline.stream, False)
        if not self.refused:
            self.delegate.finish()

    def on_connection_close(self) -> None:
        if not self.refused:
            self.delegate.on_connection_close()

    def _refuse(self, error: GatewayError) -> None:
        self.refused = True
        self.stats.bad_heads += 1
        code, fields, body = errors.render(error)
        reason = tornado.httputil.responses[code]
        log.info("refused a request head: %s", reason)
        headers = tornado.httputil.HTTPHeaders({**fields, "Content-Length": str(len(body)), "Connection": "close"})
        self.connection.write_headers(tornado.httputil.ResponseStartLine("HTTP/1.1", code, reason), headers, body)
        # Finished before the body is read: Tornado closes the connection once this is sent.
        self.connection.finish()


def _origin_form(start_line: tornado.httputil.RequestStartLine,
                 headers: tornado.httputil.HTTPHeaders) -> tornado.httputil.RequestStartLine:
    """`POST http://host:port/v1/models/m:predict?x` as `POST /v1/models/m:predict?x`, with
    the target's authority as the Host (RFC 9112 section 3.2.2)."""
    parts = urlsplit(start_line.path)
    if parts.netloc:
        headers["Host"] = parts.netloc
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return start_line._replace(path=path)
