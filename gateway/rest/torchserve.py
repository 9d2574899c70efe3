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

from gateway.rest.base import BaseHandler, BodyHandler
from gateway.rest.forms import parse_form
from wire.codecs import torchserve
from wire.errors import GatewayError

BATCH_ID_HEADER = "X-Batch-Id"


class PredictionsHandler(BodyHandler):
    front_end = "torchserve_http"

    async def post(self, model: str, version: str | None = None) -> None:
        assert self.call is not None
        request = torchserve.decode_http(self.body, self.header("Content-Type"), self.request.query_arguments,
                                         self.limits, parse_form)
        answer = await self.service.infer(self.served, request, self.call)
        body, content_type = torchserve.encode_answer(answer.predictions(), request.single)
        self.set_header("Content-Type", content_type)
        self.set_header(BATCH_ID_HEADER, answer.batch_id)
        self.finish(body)

    put = post  # `curl -T file` uploads with PUT; TorchServe takes both

    def error_document(self, message: str, error: GatewayError | None = None) -> dict[str, Any]:
        kind = type(error).__name__ if error is not None else "HTTPError"
        return {**super().error_document(message), "code": self.get_status(), "type": kind, "message": message}


class PingHandler(BaseHandler):
    """TorchServe's health check: Healthy (200) when every model is ready, else Unhealthy (500)."""
    requires_auth = False

    async def get(self) -> None:
        healthy = await self.service.ready()
        self.write_json({"status": "Healthy" if healthy else "Unhealthy"}, 200 if healthy else 500)
