"""Rerank predictors over HTTP: a batch of (query, document) pairs, scored.

- `ScoreBackend`: vLLM's score API. The batch travels as ONE `POST <base path>/score` whose
  `text_1` holds each pair's query and `text_2` its document, two lists of one length, so
  pairs of different queries (different clients) share the call; the scores come back by
  their `index`.
- `CohereRerankBackend`: Cohere's rerank shape at `POST <base path>/rerank` (Infinity,
  vLLM's `/rerank`, any Cohere-compatible server), which takes one query per call. The
  gateway's pair layout holds such a model's batches to one query (`one_query`), so the
  batch is one call with every document, each scored by its `index`.

Either answers the FP32 tensor `score` [rows, 1]. Readiness is the model's presence in
`<base path>/models`. Bodies are `wire.codecs.score`'s (vLLM's) and `wire.codecs.cohere`'s
(Cohere's shape); it knows nothing of the gateway.
"""
from __future__ import annotations

from backends import errors
from backends.base import Backend
from backends.http import HttpPredictor
from wire.codecs import cohere, score
from wire.errors import PredictorRejected
from wire.rerank import DOCUMENT_INPUT, QUERY_INPUT, SCORE_OUTPUT
from wire.tensors import ModelSignature, Tensor, TensorSpec

# What a rerank API is, as tensors: pairs of texts in, one score a pair out.
SIGNATURE = ModelSignature(inputs=(TensorSpec(QUERY_INPUT, "BYTES", (-1, 1)), TensorSpec(DOCUMENT_INPUT, "BYTES", (-1, 1))),
                           outputs=(TensorSpec(SCORE_OUTPUT, "FP32", (-1, 1)),))


class _RerankHttp(Backend):
    def __init__(self, base_url: str, model: str, base_path: str, ca_file: str = "") -> None:
        self.http = HttpPredictor(base_url, model, ca_file=ca_file)
        self.model = model
        self.base_path = base_path
        self._models_path = f"{base_path}/models"

    @staticmethod
    def pairs(inputs: list[Tensor]) -> tuple[list[str], list[str]]:
        """The batch's queries and documents, one pair a row."""
        by_name = {tensor.name: tensor for tensor in inputs}
        try:
            queries, documents = ([row[0].decode("utf-8") for row in by_name[name].data]
                                  for name in (QUERY_INPUT, DOCUMENT_INPUT))
        except (KeyError, UnicodeDecodeError, AttributeError, IndexError, TypeError):
            # The served model checks its clients' pairs; this is the predictor's own refusal.
            raise PredictorRejected(f"a rerank predictor takes UTF-8 pairs: BYTES inputs '{QUERY_INPUT}' and "
                                    f"'{DOCUMENT_INPUT}', one text per row") from None
        if len(queries) != len(documents):
            raise PredictorRejected(f"{len(queries)} queries for {len(documents)} documents")
        return queries, documents

    async def ready(self) -> bool:
        return await self.http.lists_model(self._models_path, self.model)

    async def metadata(self) -> tuple[ModelSignature, list[str]]:
        return SIGNATURE, []

    async def close(self) -> None:
        await self.http.close()


class ScoreBackend(_RerankHttp):
    """vLLM's `POST <base path>/score`: any pairs in one call."""

    async def infer(self, inputs: list[Tensor]) -> list[Tensor]:
        queries, documents = self.pairs(inputs)
        body = score.encode_request(self.model, queries, documents)
        _, payload = await self.http.post(f"{self.base_path}/score", body, {"Content-Type": "application/json"})
        with errors.reading_answer(self.model):
            scores = score.decode_answer(payload, len(queries))
        return [Tensor(SCORE_OUTPUT, "FP32", scores.reshape(-1, 1))]


class CohereRerankBackend(_RerankHttp):
    """Cohere's `POST <base path>/rerank`: one query per call."""

    one_query_per_call = True

    async def infer(self, inputs: list[Tensor]) -> list[Tensor]:
        queries, documents = self.pairs(inputs)
        if len(set(queries)) != 1:
            raise PredictorRejected("a Cohere-shaped rerank predictor takes one query per call; this batch has "
                                    f"{len(set(queries))}")
        body = cohere.encode_rerank_request(self.model, queries[0], documents)
        _, payload = await self.http.post(f"{self.base_path}/rerank", body, {"Content-Type": "application/json"})
        with errors.reading_answer(self.model):
            scores = cohere.decode_rerank_answer(payload, len(documents))
        return [Tensor(SCORE_OUTPUT, "FP32", scores.reshape(-1, 1))]
