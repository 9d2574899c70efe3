"""What every HTTP endpoint shares: one request lifecycle and one error path.

`BaseHandler` is the lifecycle (`prepare` opens an inference request's call and checks the
token; the verb method raises a GatewayError for anything wrong; `write_error` is the one
place that renders it, as `{"error": message}` with the status the error class carries;
`on_finish` closes the call). `BodyHandler` adds the streamed body of an inference
endpoint, refused before it is read when the model is unknown or the body too large, and
inflated as it arrives when it is compressed (a large chunk in a thread, off the loop).
The endpoints of each protocol are modules of their own (`v1`, `oip`, `torchserve`,
`operations`); `app` maps URLs to them.

Handlers know the service, `gateway.lifecycle`, `gateway.models` and their codecs, never
a backend protocol.
"""
from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable
from types import TracebackType
from typing import Any

import orjson
import tornado.httputil
import tornado.log
import tornado.web

from gateway import metrics
from gateway.auth import API_KEY_HEADERS
from gateway.lifecycle import Call
from gateway.models.base import ServedModel
from gateway.rest import errors, tornado_internals
from gateway.service import InferenceService
from wire.codecs import content_encoding
from wire.codecs.json_data import SEND_BINARY, json_too_large
from wire.codecs.limits import Limits
from wire.errors import GatewayError, InvalidInput, NotFound, PayloadTooLarge
from wire.request import PRIORITY_HEADER, priority_from_header
from wire.tracing import ClientContext

log = logging.getLogger(__name__)
TIMEOUT_HEADER = "X-Request-Timeout-Ms"
_DECIMAL = re.compile(r"[0-9]{1,15}(\.[0-9]{1,9})?")
_date = (0, "")  # (second, its HTTP date): the Date header of every answer in that second


def _http_date() -> str:
    global _date
    now = int(time.time())
    if _date[0] != now:
        _date = (now, tornado.httputil.format_timestamp(now))
    return _date[1]


class BaseHandler(tornado.web.RequestHandler):
    """One lifecycle for every endpoint: `prepare` opens an inference request's call
    (`gateway.lifecycle`) and checks the token, the verb method raises a GatewayError for
    anything wrong, `write_error` renders it (and Tornado's own errors) as
    `{"error": message}` with the status the error carries, and `on_finish` closes the call
    with the status that went out. `finish` compresses a successful answer as the client's
    Accept-Encoding allows (`wire.codecs.content_encoding`)."""

    service: InferenceService
    limits: Limits
    requires_auth = True  # health probes opt out
    front_end: str | None = None  # set on inference endpoints: each request is a Call
    call: Call | None = None
    tenant = ""  # whose key the request came with (gateway.auth): for the access log

    def initialize(self, service: InferenceService, limits: Limits) -> None:
        self.service = service
        self.limits = limits
        self._task: asyncio.Task | None = None
        self._client_gone = False

    def clear(self) -> None:
        # Tornado's own clear(), less its Server header, with the Date header formatted once a
        # second instead of on every answer (email.utils' formatting was ~1% of a request).
        tornado_internals.reset_answer(self, _http_date())

    def prepare(self) -> None:
        # The task serving this request: cancelled if the client goes away (on_connection_close).
        self._task = asyncio.current_task()
        if self.front_end is not None:
            # No path_args when Tornado refused the path itself (not UTF-8): counted as "unknown".
            model = self.path_args[0] if getattr(self, "path_args", None) else ""
            self.call = self.service.open(self.front_end, model)
        if self.requires_auth:
            door = self.service.door
            if not door.open:
                authorization = self.header("Authorization")
                self.tenant = door.admit(authorization, None if authorization is not None else self._api_key())
                if self.call is not None:
                    self.call.tenant = self.tenant

    def _api_key(self) -> str | None:
        """A key sent in an API-key header instead of Authorization (`gateway.auth`)."""
        for name in API_KEY_HEADERS:
            value = self.header(name)
            if value is not None:
                return value
        return None

    def write_json(self, document: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(orjson.dumps(document))

    def finish(self, chunk: str | bytes | dict | None = None) -> asyncio.Future[None]:
        # A successful answer is compressed if the client accepts it; an error never is
        # (tritonclient reads error bodies without decompressing them).
        if chunk is not None and self.get_status() == 200:
            accept = self.header("Accept-Encoding")
            if accept is not None:
                chunk = self._encoded(chunk, accept)
        return super().finish(chunk)

    def _encoded(self, chunk: str | bytes | dict, accept: str) -> str | bytes | dict:
        self.set_header("Vary", "Accept-Encoding")
        coding = content_encoding.negotiate(accept)
        if coding is None or isinstance(chunk, dict):
            return chunk
        encoded = content_encoding.encode(coding, chunk.encode() if isinstance(chunk, str) else chunk)
        if encoded is None:
            return chunk  # too small to gain anything
        self.set_header("Content-Encoding", coding)
        return encoded

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        if self._client_gone:
            # Nobody to read an answer: the access log says what happened, as the count does.
            self.set_status(metrics.CLIENT_CLOSED_REQUEST, "Client Closed Request")
            self.finish()
            return
        error = kwargs["exc_info"][1] if "exc_info" in kwargs else None
        if isinstance(error, GatewayError):
            self.set_status(error.http_status)  # before the document: a front end's shape may carry it
            _, headers, body = errors.render(error, self.error_document(error.message, error))
            for header, value in headers.items():
                self.set_header(header, value)
            self.finish(body)
            return
        if isinstance(error, tornado.web.HTTPError) and error.log_message:
            # Tornado's own refusals say what was wrong here (e.g. a path that is not UTF-8).
            message = error.log_message % error.args if error.args else error.log_message
        elif isinstance(error, tornado.web.HTTPError) and error.reason:
            message = error.reason
        elif error is None or isinstance(error, tornado.web.HTTPError):
            # Tornado's own: bad method, malformed request (its reason phrase for the status).
            message = tornado.httputil.responses.get(self.get_status(), "Unknown")
        else:
            message = "internal error"  # never a traceback or an address
        self.set_header("Content-Type", errors.CONTENT_TYPE)
        self.finish(orjson.dumps(self.error_document(message)))

    def error_document(self, message: str, error: GatewayError | None = None) -> dict[str, Any]:
        """The body of an error answer (the status is already set): the gateway's
        `{"error": message}`, or the shape a front end's clients read (TorchServe's, OpenAI's)."""
        return errors.document(message)

    def log_exception(self, typ: type[BaseException] | None, value: BaseException | None,
                      tb: TracebackType | None) -> None:
        if isinstance(value, GatewayError):
            return  # the client's problem, answered as such: not a server fault to log
        if isinstance(value, tornado.web.HTTPError):
            super().log_exception(typ, value, tb)
            return
        log.error("unexpected error serving %s", self.request.path, exc_info=(typ, value, tb))  # type: ignore[arg-type]

    def header(self, name: str) -> str | None:
        """The request's header `name` (repeats joined by commas, as Tornado's `get` joins
        them), or None. Read through get_list: HTTPHeaders.get raises and catches a KeyError
        for each header a request does not carry, and most of these are absent (~3% of an
        HTTP request's CPU)."""
        values = self.request.headers.get_list(name)
        return ",".join(values) if values else None

    def timeout_s(self) -> float | None:
        value = self.header(TIMEOUT_HEADER)
        if value is None:
            return None
        # Plain decimals only: float() would also take "inf", "1e400" (inf) and "1_000".
        if not _DECIMAL.fullmatch(value.strip()):
            raise InvalidInput(f"{TIMEOUT_HEADER} must be a number of milliseconds, got '{value}'")
        milliseconds = float(value)
        if not milliseconds > 0:
            raise InvalidInput(f"{TIMEOUT_HEADER} must be positive")
        return milliseconds / 1000

    def priority(self) -> int:
        """The priority a client asks for in its header, on every protocol (an OIP client
        may use the `priority` parameter instead, which wins)."""
        return priority_from_header(self.header(PRIORITY_HEADER))

    def client_context(self, request_id: str = "") -> ClientContext:
        return ClientContext(request_id or self.header("X-Request-Id") or "", self.header("traceparent") or "")

    def on_finish(self) -> None:
        if self.front_end is not None:
            if self.call is None:  # refused before prepare (Tornado's own 405, a path not UTF-8)
                model = self.path_args[0] if getattr(self, "path_args", None) else ""
                self.call = self.service.open(self.front_end, model)
            self.call.close(metrics.CLIENT_CLOSED_REQUEST if self._client_gone else self.get_status())

    def on_connection_close(self) -> None:
        super().on_connection_close()  # ends a streamed body's pending read
        # The client went away: cancel its wait so the scheduler drops it from the queue.
        self._client_gone = True
        task, self._task = self._task, None  # the cancelled task's traceback must not lead back here
        if task is not None and not task.done():
            task.cancel()


def log_request(handler: tornado.web.RequestHandler) -> None:
    """Tornado's access-log line (INFO, WARNING for a 4xx, ERROR for a 5xx), with the tenant
    whose key the request came with: its name, never the key."""
    status = handler.get_status()
    logger = tornado.log.access_log
    level = logging.INFO if status < 400 else logging.WARNING if status < 500 else logging.ERROR
    if not logger.isEnabledFor(level):
        return
    milliseconds = 1000.0 * handler.request.request_time()
    tenant = getattr(handler, "tenant", "")
    if tenant:
        logger.log(level, "%d %s %.2fms tenant=%s", status, handler._request_summary(), milliseconds, tenant,
                   extra={"tenant": tenant})
    else:
        logger.log(level, "%d %s %.2fms", status, handler._request_summary(), milliseconds)


@tornado.web.stream_request_body
class BodyHandler(BaseHandler):
    """An inference endpoint of one model, `<model>[/<version>]` in its path, whose body is
    streamed: before any of it is read, an unknown model or version is refused with 404, a
    body declared too large with 413, and a Content-Encoding that
    `wire.codecs.content_encoding` does not decode with 415. The verb method finds the
    model in `self.served`."""

    served: ServedModel

    model_in_path = True  # False: the body names the model (OpenAI's API); the verb method finds it

    def prepare(self) -> None:
        self._chunks: list[bytes] = []
        self._received = 0
        self._coding: str | None = None
        self._inflater: content_encoding.Inflater | None = None
        self._inflate_error: GatewayError | None = None
        super().prepare()
        if self.model_in_path:
            model, *version = self.path_args
            self.served = self.service.model(model, (version[0] if version else None) or "")
        assert self.call is not None  # every body endpoint serves inference requests
        self.call.tighten(self.timeout_s())
        self.call.priority = self.priority()  # an OIP request's `priority` parameter, if any, wins
        self.call.client = self.client_context()
        header = self.header("Content-Length")
        declared = int(header) if header is not None and header.isdigit() else 0
        if declared > self.limits.max_body_bytes:
            raise PayloadTooLarge(
                f"request body of {declared} bytes exceeds the limit of {self.limits.max_body_bytes} bytes")
        if declared > self.limits.max_json_bytes and self.header("Content-Encoding") is None and self.json_only():
            raise json_too_large(declared, self.limits, remedy=self.json_remedy)  # not read at all: it could not be parsed
        self._coding = content_encoding.request_coding(self.header("Content-Encoding"))

    json_remedy = SEND_BINARY  # what a client whose JSON is over max_json_bytes is told to do instead

    def json_only(self) -> bool:
        """Whether this request's whole body is one JSON document (bounded by max_json_bytes
        before it is read); an endpoint that also takes other bodies says no."""
        return False

    def on_connection_close(self) -> None:
        super().on_connection_close()
        # Release what the client sent now, not when the garbage collector next finds this handler.
        self._chunks = []

    def data_received(self, chunk: bytes) -> Awaitable[None] | None:
        self._received += len(chunk)
        if self._received > self.limits.max_body_bytes:
            return None
        if self._coding is None:
            self._chunks.append(chunk)
            return None
        # A compressed body is inflated as it arrives, within the same limit (a zip bomb stops
        # at it). A chunk can inflate about a thousandfold: a large one is inflated in a thread
        # (zlib lets go of the GIL), and Tornado reads the next chunk only once it is done.
        if self._inflater is None:
            self._inflater = content_encoding.Inflater(self._coding, self.limits.max_body_bytes)
        if self._inflate_error is not None:
            return None
        if len(chunk) < content_encoding.SMALL_COMPRESSED_BYTES:
            self._inflate(chunk)
            return None
        return asyncio.ensure_future(asyncio.to_thread(self._inflate, chunk))

    def _inflate(self, chunk: bytes) -> None:
        assert self._inflater is not None
        try:
            self._inflater.feed(chunk)
        except GatewayError as error:  # answered by the verb method, when it reads the body
            self._inflate_error = error

    @property
    def body(self) -> bytes:
        if self._received > self.limits.max_body_bytes:
            raise PayloadTooLarge(f"request body exceeds the limit of {self.limits.max_body_bytes} bytes")
        if self._coding is not None:
            if self._inflate_error is not None:
                raise self._inflate_error
            inflater = self._inflater or content_encoding.Inflater(self._coding, self.limits.max_body_bytes)
            self._chunks = [inflater.finish()]
            self._coding = self._inflater = None
        if len(self._chunks) > 1:  # joined once, and the chunks let go: a large body is not held twice
            self._chunks = [b"".join(self._chunks)]
        return self._chunks[0] if self._chunks else b""


class NotFoundHandler(BaseHandler):
    def prepare(self) -> None:
        raise NotFound(f"no endpoint {self.request.method} {self.request.path}")
