"""Cohere's Rerank API for rerank clients (`cohere.Client`, v1; `cohere.ClientV2`, v2; curl;
and the many that speak its shape): `POST /v1/rerank` and `POST /v2/rerank`.

The body names the model, so the model is found after the body is read. Each (query,
document) pair is one row of the model's batches, through `InferenceService.infer` like
every other client: a long document list is split across batches and comes back whole, in
its order; the scores are then sorted and cut to `top_n` (`wire.codecs.cohere`). v2's
`priority` (0 the highest, Cohere's default) is the request's priority level when it is 1 or
more, as the `X-Priority` header's. Errors carry Cohere's shape, `{"message": ...}`, with
the status of the gateway error, which its clients raise as their own classes. Only rerank
models (`gateway.rerank`) are answered; any other model is a 404. The rerank models are
listed by `GET /v1/models` (`gateway.rest.openai`).
"""
from __future__ import annotations

from typing import Any

from gateway.rest.base import BodyHandler
from wire.codecs import cohere
from wire.errors import GatewayError


class RerankHandler(BodyHandler):
    front_end = "cohere_http"
    model_in_path = False
    json_remedy = cohere.SEND_FEWER_DOCUMENTS

    def initialize(self, version: int, **context: Any) -> None:  # type: ignore[override]
        super().initialize(**context)
        self.version = version

    def json_only(self) -> bool:
        return True

    def error_document(self, message: str, error: GatewayError | None = None) -> dict[str, Any]:
        return cohere.error_document(message)

    async def post(self) -> None:
        request = cohere.decode_request(self.body, self.version, self.limits)
        assert self.call is not None
        self.call.model = request.model
        if request.priority:
            self.call.priority = request.priority
        served = self.service.model(request.model)
        answer = await self.service.infer(served, request, self.call)  # refused there unless it reranks
        body = cohere.encode_answer(request, answer.scores(), answer.tokens)
        self.set_header("Content-Type", "application/json")
        self.set_header("X-Batch-Id", answer.batch_id)
        self.finish(body)
