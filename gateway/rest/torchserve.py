"""TorchServe-style HTTP endpoints for TorchServe users: ``POST /predictions/<m>[/<version>]``
and ``GET /ping``.

Bodies and answers follow ``wire.codecs.torchserve``; the request goes through
``InferenceService.infer_instances`` (v1 instance semantics), so it batches with every
other client of the model. The batch id travels in the ``X-Batch-Id`` header (the body
keeps TorchServe's shape). Errors carry TorchServe's ``code``/``type``/``message`` and the
gateway's own ``error``, with the status of the gateway error.
"""
from __future__ import annotations

from typing import Any

from gateway.rest.handlers import BaseHandler, BodyHandler
from wire.codecs import torchserve
from wire.errors import GatewayError

BATCH_ID_HEADER = "X-Batch-Id"


class PredictionsHandler(BodyHandler):
    front_end = "torchserve_http"

    async def post(self, model: str, version: str | None = None) -> None:
        served = self.service.model(model, version or "")  # unknown model or version: 404 whatever the body
        instances, single = torchserve.decode_body(self.body, self.limits)
        predictions, batch_id = await self.service.infer_instances(
            served, instances, self.timeout_s(), self.client_context(), self.priority())
        self.set_header("Content-Type", "application/json")
        self.set_header(BATCH_ID_HEADER, batch_id)
        self.finish(torchserve.encode_answer(predictions, single))

    def error_document(self, error: GatewayError) -> dict[str, Any]:
        return {"code": error.http_status, "type": type(error).__name__, "message": error.message,
                "error": error.message}


class PingHandler(BaseHandler):
    """TorchServe's health check: Healthy (200) when every model is ready, else Unhealthy (500)."""
    requires_auth = False

    async def get(self) -> None:
        healthy = await self.service.ready()
        self.write_json({"status": "Healthy" if healthy else "Unhealthy"}, 200 if healthy else 500)
