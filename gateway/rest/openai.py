"""OpenAI's Embeddings API for OpenAI clients (the `openai` package, LangChain, LlamaIndex,
curl): `POST /v1/embeddings`, `GET /v1/models`, and the same under `/openai` (KServe's
prefix, so a client pointed at a KServe InferenceService keeps its base URL).

The body names the model, so the model is found after the body is read. Each text is one
row of the model's batches, through `InferenceService.infer` like every other client:
a list of texts larger than `max_batch_size` is split across batches and reassembled in
its order. Errors carry OpenAI's shape (`wire.codecs.openai.error_document`) with the
status of the gateway error. Only embedding models (`gateway.kinds.embeddings`) are answered, any
other model is a 404 in OpenAI's words; the list names the rerank models too
(`gateway.rest.cohere` serves them), as vLLM's and Infinity's lists do. `GET /v1/models/<m>` is KServe v1's
route too: an embedding model answers there with OpenAI's model object and KServe's status
in one document (`SharedModelHandler`), any other model with KServe's alone.
"""
from __future__ import annotations

import time
from typing import Any

from gateway.rest import v1
from gateway.rest.base import BaseHandler
from gateway.rest.endpoint import Endpoint, Reply
from gateway.rest.intake import Intake
from gateway.service import InferenceService
from wire.codecs import openai
from wire.embeddings import EmbeddingsRequest
from wire.errors import GatewayError
from wire.ratelimits import openai_headers
from wire.rerank import RerankRequest

OWNED_BY = "batching-gateway"
_STARTED = int(time.time())  # `created` of every model: when this process began serving


class _OpenAIErrors(BaseHandler):
    """Errors in OpenAI's shape, which its clients raise as their own exception classes."""

    def error_document(self, message: str, status: int, error: GatewayError | None) -> dict[str, Any]:
        return openai.error_document(message, status)


class Embeddings(Endpoint):
    front_end = "openai_http"
    model_in_path = False
    json_remedy = openai.SEND_FEWER_TEXTS

    def json_only(self, intake: Intake) -> bool:
        return True

    def error_document(self, message: str, status: int, error: GatewayError | None) -> dict[str, Any]:
        return openai.error_document(message, status)

    async def answer(self, intake: Intake, model: str, version: str | None) -> Reply:
        head = openai.read_request(intake.body, intake.limits)
        intake.call.model = head.model
        service = intake.service
        served = service.model(head.model)
        request = service.decode_embeddings(served, head)  # its inputs checked once its rows fit the queue
        answer = await service.infer(served, request, intake.call)  # refused there unless it embeds texts
        body = openai.encode_answer(request.model, answer.for_client(), request.encoding_format, answer.tokens)
        return Reply(body, {"Content-Type": "application/json", "X-Batch-Id": answer.batch_id,
                            **openai_headers(answer.result.quota)})  # its tenant's quotas (wire.ratelimits)


class ModelsHandler(_OpenAIErrors):
    """The models a client may name (`GET /v1/models`: the embedding and rerank models), or one
embedding model (`.../models/<id>`)."""

    async def get(self, model: str | None = None) -> None:
        if model is not None:
            served = self.service.model(model)
            served.kind.require(EmbeddingsRequest)
            self.write_json(openai.model_document(model, _STARTED, OWNED_BY))
            return
        self.set_header("Content-Type", "application/json")
        self.finish(openai.encode_models(listed_models(self.service), _STARTED, OWNED_BY))


def listed_models(service: InferenceService) -> list[str]:
    """The embedding and rerank models: those the OpenAI and Cohere front ends serve."""
    return [name for name, served in service.models.items()
            if served.kind.reads_request(EmbeddingsRequest) or served.kind.reads_request(RerankRequest)]


class SharedModelHandler(v1.V1ModelHandler):
    """`GET /v1/models/<m>`: OpenAI's `models.retrieve` reads `id`, `object`, `created` and
    `owned_by`; KServe v1's clients read `name` and `ready` (and the status, 503 until ready).
    An embedding model has clients of both, so it answers both in one document."""

    async def get(self, model: str) -> None:
        served = self.service.model(model)
        if not served.kind.reads_request(EmbeddingsRequest):
            await super().get(model)
            return
        ready = await served.ready()
        self.write_json({**openai.model_document(model, _STARTED, OWNED_BY), **v1.model_status(model, ready)},
                        200 if ready else 503)
