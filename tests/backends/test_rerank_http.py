"""backends/rerank_http.py: the clients of vLLM's score API and of a Cohere-shaped rerank
server. Against a small server on loopback that answers as each spec says, to pin the
client's side (one call per batch at the base path, pairs of several queries in one score
call, one query per rerank call, scores read back by index, readiness by the model list,
an unusable answer as the gateway's error); the real servers are in
tests/predictors/test_real_rerank_predictors.py."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

from backends.rerank_http import CohereRerankBackend, ScoreBackend
from tests.http_stub import JsonHandler, serving
from wire.errors import BadPredictorAnswer, PredictorRejected
from wire.tensors import Tensor


class RerankServer(JsonHandler):
    """A pair's score is len(query) + len(document) / 1000; answers in reverse order."""
    received: list[tuple[str, dict]] = []
    answer: dict | None = None

    def do_POST(self) -> None:  # noqa: N802
        body = self.read_json()
        type(self).received.append((self.path, body))
        if self.answer is not None:
            self.answer_json(self.answer)
        elif self.path.endswith("/score"):
            scores = [len(q) + len(d) / 1000 for q, d in zip(body["text_1"], body["text_2"], strict=True)]
            self.answer_json({"object": "list", "data": [{"index": i, "object": "score", "score": s}
                                                         for i, s in reversed(list(enumerate(scores)))]})
        else:
            scores = [len(body["query"]) + len(d) / 1000 for d in body["documents"]]
            self.answer_json({"results": [{"index": i, "relevance_score": s}
                                          for i, s in sorted(enumerate(scores), key=lambda p: -p[1])]})

    def do_GET(self) -> None:  # noqa: N802
        self.answer_json({"object": "list", "data": [{"id": "reranker", "object": "model"}]})


@pytest.fixture
def server():
    handler = type("Server", (RerankServer,), {"received": [], "answer": None})
    with serving(handler) as url:
        yield handler, url


def pairs(*rows: tuple[str, str]) -> list[Tensor]:
    def column(values: list[str]) -> np.ndarray:
        data = np.empty((len(values), 1), dtype=object)
        data[:, 0] = [v.encode() for v in values]
        return data
    return [Tensor("query", "BYTES", column([q for q, _ in rows])),
            Tensor("document", "BYTES", column([d for _, d in rows]))]


async def infer(backend, inputs):
    try:
        return await backend.infer(inputs)
    finally:
        await backend.close()


def test_a_score_batch_is_one_call_with_pairs_of_any_queries(server):
    handler, url = server
    outputs = asyncio.run(infer(ScoreBackend(url, "reranker", "/v1"), pairs(("ab", "x"), ("abc", "yy"))))
    assert handler.received == [("/v1/score", {"model": "reranker", "text_1": ["ab", "abc"], "text_2": ["x", "yy"]})]
    assert outputs[0].name == "score" and outputs[0].data.shape == (2, 1)
    np.testing.assert_allclose(outputs[0].data[:, 0], [2.001, 3.002], rtol=1e-6)


def test_a_rerank_batch_is_one_call_of_its_one_query_scored_by_index(server):
    handler, url = server
    outputs = asyncio.run(infer(CohereRerankBackend(url, "reranker", ""), pairs(("q", "a"), ("q", "bbb"))))
    assert handler.received == [("/rerank", {"model": "reranker", "query": "q", "documents": ["a", "bbb"],
                                             "top_n": 2, "return_documents": False})]
    np.testing.assert_allclose(outputs[0].data[:, 0], [1.001, 1.003], rtol=1e-6)
    with pytest.raises(PredictorRejected, match="one query per call"):
        asyncio.run(infer(CohereRerankBackend(url, "reranker", ""), pairs(("q", "a"), ("r", "b"))))


@pytest.mark.parametrize("answer, message", [
    ({"data": [{"index": 0, "score": 1.0}]}, "1 scores in 'data' for 2 documents"),
    ({"data": [{"index": 0, "score": 1.0}, {"index": 0, "score": 2.0}]}, "no usable 'index'"),
    ({"data": [{"index": 0, "score": 1.0}, {"index": 1, "score": "high"}]}, "must be a finite number"),
    ({"data": [{"index": 0, "score": 1.0}, {"index": 1, "score": float("nan")}]}, "must be a finite number"),
])
def test_an_unusable_score_answer_is_the_predictors_bad_answer(server, answer, message):
    handler, url = server
    handler.answer = answer
    with pytest.raises(BadPredictorAnswer, match=message):
        asyncio.run(infer(ScoreBackend(url, "reranker", "/v1"), pairs(("q", "a"), ("q", "b"))))


def test_ready_when_the_model_list_names_the_model(server):
    _, url = server

    async def readiness(model: str) -> bool:
        backend = ScoreBackend(url, model, "/v1")
        try:
            return await backend.ready()
        finally:
            await backend.close()

    assert asyncio.run(readiness("reranker")) is True
    assert asyncio.run(readiness("other")) is False
