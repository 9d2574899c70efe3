"""The lean path of the inference routes: Tornado's own delegate layer, with no Application
and no RequestHandler.

Why: a `RequestHandler` request builds an `HTTPServerRequest`, routes through every rule of
the `Application`, builds a handler (its header dictionaries, its transforms), runs
`_execute`'s checks and `flush`'s; measured, that cycle was 55-70% of a request's CPU
through the gateway. Tornado's documented composition lets a server hand each request to
an `HTTPServerConnectionDelegate` of one's own: `LeanFrontEnd` is that delegate, and
`_Exchange` serves one request of a hot route with nothing but what the route needs.

What a request meets here is what it meets through the twin, in the same order and from
the same code: the route's `Endpoint` (its answer, its error shape), its `Intake` (the key,
the model, the limits before the body, the body inflated as it comes), `errors.failure` (the
one renderer), `answers` (the Date, compression, the access-log line), its `Call` opened
first and closed once with the status that went out (499 when the client left, whose wait
is then cancelled). The connection layer (`gateway.rest.connections`) is the same for both:
timeouts, the connection cap, keep-alive after an early answer, `Expect: 100-continue` and
chunked bodies are Tornado's HTTP/1.1 connection's and that layer's, not a path's.

Which routes are hot is `gateway.rest.app`'s to say. A request this path does not take
(another route or method, a path with %-escapes or bytes beyond ASCII, whose decoding
Tornado's router owns) is handed, head first, to the Application, unchanged.

It knows Tornado's HTTP delegate interfaces and the routes' endpoints, no handler.
"""
from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Sequence

import tornado.httputil
import tornado.web

from gateway.observe import metrics
from gateway.rest import answers, errors, tornado_internals
from gateway.rest.endpoint import Endpoint, Reply
from gateway.rest.intake import Intake, header
from gateway.service import InferenceService
from wire.codecs.limits import Limits
from wire.errors import GatewayError

HotRoute = tuple["re.Pattern[str]", Endpoint]


class LeanFrontEnd(tornado.httputil.HTTPServerConnectionDelegate):
    """Each request's delegate: the lean path for a hot route, else the Application's."""

    def __init__(self, service: InferenceService, limits: Limits, hot: Sequence[tuple[str, Endpoint]],
                 app: tornado.web.Application) -> None:
        self.service = service
        self.limits = limits
        self.app = app
        # Anchored as Tornado anchors a route's pattern (`PathMatches`: the whole path).
        self.hot: tuple[HotRoute, ...] = tuple((re.compile(pattern + "$"), endpoint) for pattern, endpoint in hot)

    def start_request(self, server_conn: object,
                      request_conn: tornado.httputil.HTTPConnection) -> tornado.httputil.HTTPMessageDelegate:
        return _Exchange(self, server_conn, request_conn)

    def route(self, method: str, target: str) -> tuple[Endpoint, str, str | None, str] | None:
        """(endpoint, model, version, query) of a request the lean path serves, else None."""
        path, _, query = target.partition("?")
        if "%" in path or not path.isascii():
            return None  # its path arguments are Tornado's router's to decode
        for pattern, endpoint in self.hot:
            match = pattern.match(path)
            if match is not None:
                if method not in endpoint.methods:
                    return None  # the twin answers it as Tornado does (405, after the head's checks)
                groups = match.groups()
                return endpoint, groups[0] if groups else "", groups[1] if len(groups) > 1 else None, query
        return None

    def on_close(self, server_conn: object) -> None:
        self.app.on_close(server_conn)


class _Exchange(tornado.httputil.HTTPMessageDelegate):
    """One request and its answer on the lean path, or, for a request it does not take, the
    Application's delegate behind it (`forward`)."""

    __slots__ = ("front", "server_conn", "connection", "forward", "endpoint", "intake", "model", "version",
                 "method", "target", "task", "answered")

    def __init__(self, front: LeanFrontEnd, server_conn: object,
                 connection: tornado.httputil.HTTPConnection) -> None:
        self.front = front
        self.server_conn = server_conn
        self.connection = connection
        self.forward: tornado.httputil.HTTPMessageDelegate | None = None
        self.intake: Intake | None = None
        self.task: asyncio.Task | None = None
        self.answered = False

    def headers_received(self, start_line: tornado.httputil.RequestStartLine | tornado.httputil.ResponseStartLine,
                         headers: tornado.httputil.HTTPHeaders) -> Awaitable[None] | None:
        assert isinstance(start_line, tornado.httputil.RequestStartLine)
        front = self.front
        route = front.route(start_line.method, start_line.path)
        if route is None:
            self.forward = front.app.start_request(self.server_conn, self.connection)
            return self.forward.headers_received(start_line, headers)
        endpoint, self.model, self.version, query = route
        self.endpoint = endpoint
        self.method = start_line.method
        self.target = start_line.path
        call = front.service.open(endpoint.front_end, self.model)  # first: every request is counted
        self.intake = Intake(front.service, front.limits, endpoint, headers, query, call)
        # A client that leaves once its body is in is told by this callback; before, by on_connection_close.
        self.connection.set_close_callback(self.on_connection_close)  # type: ignore[attr-defined]  # HTTP1Connection's
        try:
            self.intake.open(self.model, self.version)
        except Exception as error:  # noqa: BLE001  # every failure is answered: errors.failure says how
            self._fail(error)  # from the head alone: the connection layer keeps or closes the connection
        return None

    def data_received(self, chunk: bytes) -> Awaitable[None] | None:
        if self.forward is not None:
            return self.forward.data_received(chunk)
        if self.answered or self.intake is None:
            return None  # refused from its head: what follows is drained by the connection layer
        return self.intake.data_received(chunk)

    def finish(self) -> None:
        if self.forward is not None:
            self.forward.finish()
        elif not self.answered:
            self.task = asyncio.get_running_loop().create_task(self._answer())

    def on_connection_close(self) -> None:
        if self.forward is not None:
            self.forward.on_connection_close()
            return
        if self.answered or self.intake is None:
            return
        # The client went away: its wait is cancelled, so the scheduler drops it from the queue.
        self.intake.release()
        task, self.task = self.task, None  # the cancelled task's traceback must not lead back here
        if task is not None and not task.done():
            task.cancel()  # _answer closes the call
        else:
            self._close(metrics.CLIENT_CLOSED_REQUEST)  # its body was still arriving

    async def _answer(self) -> None:
        assert self.intake is not None
        try:
            reply = await self.endpoint.answer(self.intake, self.model, self.version)
        except asyncio.CancelledError:
            self._close(metrics.CLIENT_CLOSED_REQUEST)
            return
        except Exception as error:  # noqa: BLE001  # every failure is answered: errors.failure says how
            self._fail(error)
            return
        self._send(200, reply)

    def _fail(self, error: Exception) -> None:
        code, fields, body = errors.failure(error, self.endpoint.error_document)
        if not isinstance(error, GatewayError):
            errors.log_unexpected(self.target.partition("?")[0], error)
        self._send(code, Reply(body, fields))

    def _send(self, code: int, reply: Reply) -> None:
        assert self.intake is not None
        body, fields = reply.body, reply.headers
        if code == 200:
            accept = header(self.intake.headers, "Accept-Encoding")
            if accept is not None:
                encoded, encoding_fields = answers.compressed(body, accept)
                assert isinstance(encoded, bytes)
                body, fields = encoded, {**fields, **encoding_fields}
        # Head and body in one prebuilt write, the connection left as Tornado's own answer leaves it.
        tornado_internals.write_whole_answer(self.connection, code, fields, answers.http_date(), body)
        self._close(code)

    def _close(self, code: int) -> None:
        """The call closed with the status that went out, and the access-log line written."""
        if self.answered:
            return
        self.answered = True
        self.task = None
        assert self.intake is not None
        call = self.intake.call
        call.close(code)
        context = getattr(self.connection, "context", None)
        answers.log_access(code, self.method, self.target, getattr(context, "remote_ip", "") or "", call.elapsed_s,
                           call.tenant)
