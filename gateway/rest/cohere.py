"""Cohere's Rerank API for rerank clients (`cohere.Client`, v1; `cohere.ClientV2`, v2; curl;
and the many that speak its shape): `POST /v1/rerank` and `POST /v2/rerank`.

The body names the model, so the model is found after the body is read. Each (query,
document) pair is one row of the model's batches, through `InferenceService.infer` like
every other client: a long document list is split across batches and comes back whole, in
its order; the scores are then sorted and cut to `top_n` (`wire.codecs.cohere`). v2's
`priority` (0 the highest, Cohere's default) is the request's priority level when it is 1 or
more, as the `X-Priority` header's. Errors carry Cohere's shape, `{"message": ...}`, with
the status of the gateway error, which its clients raise as their own classes. Only rerank
models (`gateway.kinds.rerank`) are answered; any other model is a 404. The rerank models are
listed by `GET /v1/models` (`gateway.rest.openai`).
"""
from __future__ import annotations

from typing import Any

from gateway.rest.endpoint import Endpoint, Reply
from gateway.rest.intake import Intake
from wire.codecs import cohere
from wire.errors import GatewayError


class Rerank(Endpoint):
    """Cohere's rerank in the shape of API `version` (1 or 2)."""

    front_end = "cohere_http"
    model_in_path = False
    json_remedy = cohere.SEND_FEWER_DOCUMENTS

    def __init__(self, version: int) -> None:
        self.version = version

    def json_only(self, intake: Intake) -> bool:
        return True

    def error_document(self, message: str, status: int, error: GatewayError | None) -> dict[str, Any]:
        return cohere.error_document(message)

    async def answer(self, intake: Intake, model: str, version: str | None) -> Reply:
        request = cohere.decode_request(intake.body, self.version, intake.limits)
        call = intake.call
        call.model = request.model
        if request.priority:
            call.priority = request.priority
        service = intake.service
        answer = await service.infer(service.model(request.model), request, call)  # refused there unless it reranks
        body = cohere.encode_answer(request, answer.for_client(), answer.tokens)
        return Reply(body, {"Content-Type": "application/json", "X-Batch-Id": answer.batch_id})
