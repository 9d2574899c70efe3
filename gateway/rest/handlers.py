"""Tornado handlers: decode with the wire format's codec, call the service, encode.

Handlers know the service and the codecs, never a backend protocol. Every failure is a
GatewayError rendered as `{"error": message}` with the status the error class carries.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
import tornado.web

from gateway import metrics
from gateway.auth import check_bearer
from gateway.service import InferenceService
from wire.codecs import oip_json, v1
from wire.codecs.limits import Limits
from wire.errors import GatewayError, InvalidInput, PayloadTooLarge, Unauthenticated
from wire.tracing import ClientContext

log = logging.getLogger(__name__)
TIMEOUT_HEADER = "X-Request-Timeout-Ms"


class BaseHandler(tornado.web.RequestHandler):
    service: InferenceService
    limits: Limits
    requires_auth = True  # health probes opt out
    protocol: str | None = None  # set on inference endpoints: counted in gateway_requests

    def initialize(self, service: InferenceService, limits: Limits, auth_token: str = "") -> None:
        self.service = service
        self.limits = limits
        self.auth_token = auth_token
        self._task: asyncio.Task | None = None
        self._client_gone = False

    def set_default_headers(self) -> None:
        self.clear_header("Server")

    def prepare(self) -> None:
        if self.requires_auth:
            try:
                check_bearer(self.auth_token, self.request.headers.get("Authorization"))
            except Unauthenticated as error:
                self.set_header("WWW-Authenticate", "Bearer")
                self.fail(error)

    def write_json(self, document: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(orjson.dumps(document))

    def fail(self, error: GatewayError) -> None:
        self.write_json({"error": error.message}, error.http_status)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        # Tornado's own errors (bad method, malformed request line): JSON, no traceback.
        self.set_header("Content-Type", "application/json")
        self.finish(orjson.dumps({"error": self._reason}))

    def timeout_s(self) -> float | None:
        value = self.request.headers.get(TIMEOUT_HEADER)
        if value is None:
            return None
        try:
            milliseconds = float(value)
        except ValueError:
            raise InvalidInput(f"{TIMEOUT_HEADER} must be a number of milliseconds, got '{value}'") from None
        if not milliseconds > 0:
            raise InvalidInput(f"{TIMEOUT_HEADER} must be positive")
        return milliseconds / 1000

    def client_context(self, request_id: str = "") -> ClientContext:
        headers = self.request.headers
        return ClientContext(request_id or headers.get("X-Request-Id", ""), headers.get("traceparent", ""))

    async def run(self, work) -> None:
        """Run the request's work; answer its GatewayError; drop it if the client went away."""
        self._task = asyncio.current_task()
        try:
            await work()
        except GatewayError as error:
            self.fail(error)
        except asyncio.CancelledError:
            if not self._client_gone:
                raise
        except Exception:
            log.exception("unexpected error serving %s", self.request.path)
            self.write_json({"error": "internal error"}, 500)

    def on_finish(self) -> None:
        if self.protocol is not None and self.path_args:
            model = self.path_args[0] if self.path_args[0] in self.service.models else "unknown"
            self.service.metrics.count_request(model, self.protocol, str(self.get_status()))

    def on_connection_close(self) -> None:
        # The client went away: cancel its wait so the scheduler drops it from the queue.
        self._client_gone = True
        if self._task is not None and not self._task.done():
            self._task.cancel()


@tornado.web.stream_request_body
class BodyHandler(BaseHandler):
    """A POST endpoint whose body is refused with 413 before it is read if it is too large."""

    def prepare(self) -> None:
        self._chunks: list[bytes] = []
        self._received = 0
        super().prepare()
        if self._finished:
            return
        declared = self.request.headers.get("Content-Length")
        if declared is not None and declared.isdigit() and int(declared) > self.limits.max_body_bytes:
            self.fail(PayloadTooLarge(
                f"request body of {declared} bytes exceeds the limit of {self.limits.max_body_bytes} bytes"))

    def data_received(self, chunk: bytes) -> None:
        self._received += len(chunk)
        if self._received <= self.limits.max_body_bytes:
            self._chunks.append(chunk)

    @property
    def body(self) -> bytes:
        if self._received > self.limits.max_body_bytes:
            raise PayloadTooLarge(f"request body exceeds the limit of {self.limits.max_body_bytes} bytes")
        return self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)


class V1PredictHandler(BodyHandler):
    protocol = "v1"

    async def post(self, model: str) -> None:
        async def work() -> None:
            self.service.model(model)  # an unknown model is a 404 whatever the body
            instances = v1.decode_request(self.body, self.limits)
            predictions, batch_id = await self.service.infer_instances(
                model, instances, self.timeout_s(), self.client_context())
            self.set_header("Content-Type", "application/json")
            self.finish(v1.encode_response(predictions, batch_id))
        await self.run(work)


class V1ModelHandler(BaseHandler):
    async def get(self, model: str) -> None:
        async def work() -> None:
            ready = await self.service.model(model).ready()
            self.write_json({"name": model, "ready": ready}, 200 if ready else 503)
        await self.run(work)


class LiveHandler(BaseHandler):
    requires_auth = False

    def get(self) -> None:
        self.write_json({"live": True})


class ReadyHandler(BaseHandler):
    requires_auth = False

    async def get(self) -> None:
        ready = await self.service.ready()
        self.write_json({"ready": ready}, 200 if ready else 503)


class ServerMetadataHandler(BaseHandler):
    def get(self) -> None:
        self.write_json(self.service.server_metadata())


class ModelMetadataHandler(BaseHandler):
    async def get(self, model: str, version: str | None = None) -> None:
        async def work() -> None:
            self.write_json(self.service.model(model, version or "").describe())
        await self.run(work)


class ModelReadyHandler(BaseHandler):
    async def get(self, model: str, version: str | None = None) -> None:
        async def work() -> None:
            ready = await self.service.model(model, version or "").ready()
            self.write_json({"name": model, "ready": ready}, 200 if ready else 503)
        await self.run(work)


class InferHandler(BodyHandler):
    protocol = "oip_http"

    async def post(self, model: str, version: str | None = None) -> None:
        async def work() -> None:
            self.service.model(model, version or "")
            length = oip_json.json_length(self.request.headers.get(oip_json.HEADER_LENGTH))
            request = oip_json.decode_request(self.body, length, self.limits)
            requested = [o.name for o in request.outputs] or None
            outcome = await self.service.infer_tensors(
                model, version or "", request.inputs, requested, self.timeout_s(),
                self.client_context(request.id))
            body, length = oip_json.encode_response(
                model, version or "", request, outcome.outputs, {"batch_id": outcome.batch_id})
            for header, value in oip_json.body_headers(length).items():
                self.set_header(header, value)
            self.finish(body)
        await self.run(work)


class MetricsHandler(BaseHandler):
    def get(self) -> None:
        self.set_header("Content-Type", metrics.CONTENT_TYPE)
        self.finish(self.service.metrics.exposition())


class NotFoundHandler(BaseHandler):
    def prepare(self) -> None:
        self.write_json({"error": f"no endpoint {self.request.method} {self.request.path}"}, 404)
