"""The Open Inference Protocol over HTTP (KServe v2, Triton): health, server and model
metadata, Triton's model configuration and statistics extensions, and `POST
/v2/models/<m>[/versions/<v>]/infer` in JSON or with the binary tensor extension
(`wire.codecs.oip_json`), through `InferenceService.infer`.
"""
from __future__ import annotations

from gateway.rest.base import BaseHandler
from gateway.rest.endpoint import Endpoint, Reply
from gateway.rest.intake import Intake
from wire.codecs import oip_json


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
        self.write_json(self.service.model(model, version or "").describe())


class ModelConfigHandler(BaseHandler):
    """Triton's model configuration extension (what perf_analyzer reads first)."""

    async def get(self, model: str, version: str | None = None) -> None:
        self.write_json(await self.service.model_config(self.service.model(model, version or "")))


class ModelStatisticsHandler(BaseHandler):
    """Triton's statistics extension: one model, or every model."""

    async def get(self, model: str | None = None, version: str | None = None) -> None:
        self.write_json(await self.service.statistics(model or "", version or ""))


class ModelReadyHandler(BaseHandler):
    async def get(self, model: str, version: str | None = None) -> None:
        ready = await self.service.model(model, version or "").ready()
        self.write_json({"name": model, "ready": ready}, 200 if ready else 503)


class Infer(Endpoint):
    front_end = "oip_http"

    def json_only(self, intake: Intake) -> bool:
        return intake.header(oip_json.HEADER_LENGTH) is None  # the binary extension's body is mostly not JSON

    async def answer(self, intake: Intake, model: str, version: str | None) -> Reply:
        length = oip_json.json_length(intake.header(oip_json.HEADER_LENGTH))
        service = intake.service
        request = await service.decode(intake.served, oip_json.read_request(intake.body, length, intake.limits))
        intake.call.client = intake.client_context(request.id)
        answer = await service.infer(intake.served, request, intake.call)
        body, length = oip_json.encode_response(
            model, version or "", request, answer.for_client(), {"batch_id": answer.batch_id})
        return Reply(body, oip_json.body_headers(length))
