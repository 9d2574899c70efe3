"""KServe v1 over HTTP: `POST /v1/models/<m>:predict` and `GET /v1/models/<m>`.

Bodies follow `wire.codecs.v1`; a request's instances go through
`InferenceService.infer`, so they batch with every other client of the model.
"""
from __future__ import annotations

from typing import Any

from gateway.rest.base import BaseHandler
from gateway.rest.endpoint import JSON_HEADERS, Endpoint, Reply
from gateway.rest.intake import Intake
from wire.codecs import v1


class V1Predict(Endpoint):
    front_end = "v1"

    def json_only(self, intake: Intake) -> bool:
        return True

    async def answer(self, intake: Intake, model: str, version: str | None) -> Reply:
        instances = v1.decode_request(intake.body, intake.limits)
        answer = await intake.service.infer(intake.served, instances, intake.call)
        return Reply(v1.encode_response(answer.for_client(), answer.batch_id), JSON_HEADERS)


class V1ModelHandler(BaseHandler):
    async def get(self, model: str) -> None:
        ready = await self.service.model(model).ready()
        self.write_json(model_status(model, ready), 200 if ready else 503)


def model_status(model: str, ready: bool) -> dict[str, Any]:
    """KServe v1's answer to `GET /v1/models/<m>`."""
    return {"name": model, "ready": ready}
