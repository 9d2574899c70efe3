"""TorchServe's HTTP inference API for TorchServe users: ``PUT`` and ``POST
/predictions/<m>[/<version>]`` and ``GET /ping``.

Bodies follow ``wire.codecs.torchserve``: the JSON forms (v1 instance semantics), or any
other body (a raw file of any content type, as ``curl -T`` sends it, or a multipart or
url-encoded form, as ``curl -F`` sends it) as one upload row, both through
``InferenceService.infer``, so the request batches with every other client of
the model. The batch id travels in the
``X-Batch-Id`` header (the body keeps TorchServe's shape). Errors carry TorchServe's
``code``/``type``/``message`` and the gateway's own ``error``, with the status of the
gateway error.
"""
from __future__ import annotations

from typing import Any

from gateway.rest.base import BaseHandler
from gateway.rest.endpoint import Endpoint, Reply
from gateway.rest.forms import parse_form
from gateway.rest.intake import Intake
from wire.codecs import torchserve
from wire.errors import GatewayError

BATCH_ID_HEADER = "X-Batch-Id"


class Predictions(Endpoint):
    front_end = "torchserve_http"
    methods = ("POST", "PUT")  # `curl -T file` uploads with PUT; TorchServe takes both

    async def answer(self, intake: Intake, model: str, version: str | None) -> Reply:
        request = torchserve.decode_http(intake.body, intake.header("Content-Type"), intake.query_arguments,
                                         intake.limits, parse_form)
        answer = await intake.service.infer(intake.served, request, intake.call)
        body, content_type = torchserve.encode_answer(answer.for_client(), request.single)
        return Reply(body, {"Content-Type": content_type, BATCH_ID_HEADER: answer.batch_id})

    def error_document(self, message: str, status: int, error: GatewayError | None) -> dict[str, Any]:
        kind = type(error).__name__ if error is not None else "HTTPError"
        return {**super().error_document(message, status, error), "code": status, "type": kind, "message": message}


class PingHandler(BaseHandler):
    """TorchServe's health check: Healthy (200) when every model is ready, else Unhealthy (500)."""
    requires_auth = False

    async def get(self) -> None:
        healthy = await self.service.ready()
        self.write_json({"status": "Healthy" if healthy else "Unhealthy"}, 200 if healthy else 500)
