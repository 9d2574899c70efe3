"""What every `RequestHandler` of the HTTP front end shares: one request lifecycle and one
error path.

`BaseHandler` is the lifecycle (`prepare` checks the key; the verb method raises a
GatewayError for anything wrong; `write_error` is the one place that renders it, through
`rest/errors.py`, as the route's error document with the status the error class carries).
The routes that are not inference (metadata, health, `/metrics`, the live page) are
handlers of it. `EndpointHandler` is the `RequestHandler` twin of an inference route
(`gateway.rest.endpoint`): its call opened and closed, its head judged and its body
streamed by the same `Intake` as the lean path's (`gateway.rest.lean`), which serves these
routes by default; the twin serves them when `[server] lean_routes = false`, and every
request the lean path hands back (another method, an escaped path).

Handlers know the service, `gateway.lifecycle`, `gateway.models` and their codecs, never
a backend protocol.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from types import TracebackType
from typing import Any

import orjson
import tornado.httputil
import tornado.log
import tornado.web

from gateway.lifecycle import Call
from gateway.observe import metrics
from gateway.rest import answers, errors, tornado_internals
from gateway.rest.endpoint import Endpoint
from gateway.rest.intake import Intake, admit, header
from gateway.service import InferenceService
from wire.codecs.limits import Limits
from wire.errors import GatewayError, NotFound

log = logging.getLogger(__name__)


class BaseHandler(tornado.web.RequestHandler):
    """One lifecycle for every handler: `prepare` checks the key, the verb method raises a
    GatewayError for anything wrong, `write_error` renders it (and Tornado's own errors) as
    the route's error document with the status the error carries. `finish` compresses a
    successful answer as the client's Accept-Encoding allows (`gateway.rest.answers`)."""

    service: InferenceService
    limits: Limits
    requires_auth = True  # health probes opt out
    tenant = ""  # whose key the request came with (gateway.access.front_door): for the access log

    def initialize(self, service: InferenceService, limits: Limits) -> None:
        self.service = service
        self.limits = limits
        self._client_gone = False

    def clear(self) -> None:
        # Tornado's own clear(), less its Server header, with the Date header formatted once a
        # second instead of on every answer.
        tornado_internals.reset_answer(self, answers.http_date())

    def prepare(self) -> Awaitable[None] | None:
        if self.requires_auth and not self.service.door.open:
            self.tenant = admit(self.service.door, self.request.headers)
        return None

    def write_json(self, document: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(orjson.dumps(document))

    def finish(self, chunk: str | bytes | dict | None = None) -> asyncio.Future[None]:
        # A successful answer is compressed if the client accepts it; an error never is
        # (tritonclient reads error bodies without decompressing them).
        if chunk is not None and self.get_status() == 200:
            accept = header(self.request.headers, "Accept-Encoding")
            if accept is not None:
                chunk, encoding_headers = answers.compressed(chunk, accept)
                for name, value in encoding_headers.items():
                    self.set_header(name, value)
        return super().finish(chunk)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        if self._client_gone:
            # Nobody to read an answer: the access log says what happened, as the count does.
            self.set_status(metrics.CLIENT_CLOSED_REQUEST, "Client Closed Request")
            self.finish()
            return
        error = kwargs["exc_info"][1] if "exc_info" in kwargs else None
        if error is not None and not isinstance(error, tornado.web.HTTPError):
            code, headers, body = errors.failure(error, self.error_document)
            self.set_status(code)
            for name, value in headers.items():
                self.set_header(name, value)
            self.finish(body)
            return
        if error is not None and error.log_message:
            # Tornado's own refusals say what was wrong here (e.g. a path that is not UTF-8).
            message = error.log_message % error.args if error.args else error.log_message
        elif error is not None and error.reason:
            message = error.reason
        else:
            # Tornado's own: bad method, malformed request (its reason phrase for the status).
            message = tornado.httputil.responses.get(self.get_status(), "Unknown")
        self.set_header("Content-Type", errors.CONTENT_TYPE)
        self.finish(orjson.dumps(self.error_document(message, self.get_status(), None)))

    def error_document(self, message: str, status: int, error: GatewayError | None) -> dict[str, Any]:
        """The body of an error answer of `status`: the gateway's `{"error": message}`, or the
        shape a route's clients read (OpenAI's)."""
        return errors.document(message)

    def log_exception(self, typ: type[BaseException] | None, value: BaseException | None,
                      tb: TracebackType | None) -> None:
        if isinstance(value, GatewayError):
            return  # the client's problem, answered as such: not a server fault to log
        if isinstance(value, tornado.web.HTTPError):
            super().log_exception(typ, value, tb)
            return
        errors.log_unexpected(self.request.path, value)


@tornado.web.stream_request_body
class EndpointHandler(BaseHandler):
    """The `RequestHandler` twin of an inference route (`Endpoint`): `prepare` opens the
    request's call and has its `Intake` judge the head, the body streams into the intake,
    the verb method has the endpoint answer, `on_finish` closes the call with the status
    that went out, and a client that leaves has its request cancelled."""

    endpoint: Endpoint
    call: Call | None = None
    intake: Intake | None = None

    def initialize(self, service: InferenceService, limits: Limits,  # type: ignore[override]
                   endpoint: Endpoint) -> None:
        super().initialize(service, limits)
        self.endpoint = endpoint
        self._task: asyncio.Task | None = None

    def prepare(self) -> None:
        # The task serving this request: cancelled if the client goes away (on_connection_close).
        self._task = asyncio.current_task()
        model, version = self._path_model()
        self.call = self.service.open(self.endpoint.front_end, model)
        self.intake = Intake(self.service, self.limits, self.endpoint, self.request.headers, self.request.query,
                             self.call)
        self.intake.open(model, version)
        self.tenant = self.call.tenant

    def _path_model(self) -> tuple[str, str | None]:
        # No path_args when Tornado refused the path itself (not UTF-8): counted as "unknown".
        args = getattr(self, "path_args", None) or []
        if not self.endpoint.model_in_path or not args:
            return "", None
        return args[0], args[1] if len(args) > 1 else None

    def data_received(self, chunk: bytes) -> Awaitable[None] | None:
        return self.intake.data_received(chunk) if self.intake is not None else None

    async def post(self, *args: str | None) -> None:
        if self.request.method not in self.endpoint.methods:
            raise tornado.web.HTTPError(405)
        assert self.intake is not None
        model, version = self._path_model()
        reply = await self.endpoint.answer(self.intake, model, version)
        for name, value in reply.headers.items():
            self.set_header(name, value)
        self.finish(reply.body)

    put = post

    def error_document(self, message: str, status: int, error: GatewayError | None) -> dict[str, Any]:
        return self.endpoint.error_document(message, status, error)

    def on_finish(self) -> None:
        if self.call is None:  # refused before prepare (Tornado's own 405, a path not UTF-8)
            self.call = self.service.open(self.endpoint.front_end, self._path_model()[0])
        self.call.close(metrics.CLIENT_CLOSED_REQUEST if self._client_gone else self.get_status())

    def on_connection_close(self) -> None:
        super().on_connection_close()  # ends a streamed body's pending read
        # The client went away: cancel its wait so the scheduler drops it from the queue.
        self._client_gone = True
        task, self._task = self._task, None  # the cancelled task's traceback must not lead back here
        if task is not None and not task.done():
            task.cancel()
        if self.intake is not None:
            self.intake.release()


def log_request(handler: tornado.web.RequestHandler) -> None:
    """The access-log line of a request a `RequestHandler` served (`answers.log_access`)."""
    request = handler.request
    answers.log_access(handler.get_status(), request.method or "", request.uri or "", request.remote_ip or "",
                       request.request_time(), getattr(handler, "tenant", ""))


class NotFoundHandler(BaseHandler):
    def prepare(self) -> None:
        raise NotFound(f"no endpoint {self.request.method} {self.request.path}")
