"""backends/openai_http.py: an OpenAI-compatible embeddings predictor's client. Against a
small server on loopback that answers as the spec says, to pin the client's side of the
protocol (one call per batch, the base path, `dimensions`, readiness by the model list,
each failure as the gateway's error); the real servers (Infinity, KServe) are in
tests/backends/test_real_embeddings.py."""
from __future__ import annotations

import asyncio
import base64

import numpy as np
import pytest

from backends.openai_http import OpenAIEmbeddingsBackend
from tests.http_stub import JsonHandler, serving
from wire.embeddings import TOKEN_IDS_INPUT, pack_token_ids
from wire.errors import BadPredictorAnswer, PredictorFailed, PredictorRejected
from wire.tensors import Tensor
from wire.tracing import BatchContext, current_batch


class OpenAIServer(JsonHandler):
    """Each text's vector is [its length, its index]; requests and paths are recorded."""
    received: list[tuple[str, dict]] = []
    status = 200
    answer: dict | None = None

    def do_POST(self) -> None:  # noqa: N802
        body = self.read_json()
        type(self).received.append((self.path, body))
        if self.status != 200 or self.answer is not None:
            self.answer_json(self.answer or {"error": {"message": "nope"}}, self.status)
            return
        vectors = [np.array([len(text), i], dtype="<f4") for i, text in enumerate(body["input"])]
        data = [{"object": "embedding", "index": i, "embedding": base64.b64encode(v.tobytes()).decode()}
                for i, v in reversed(list(enumerate(vectors)))]  # any order: read back by index
        self.answer_json({"object": "list", "data": data, "model": body["model"]})

    def do_GET(self) -> None:  # noqa: N802
        type(self).received.append((self.path, {}))
        self.answer_json({"object": "list", "data": [{"id": "bge", "object": "model"}]})


@pytest.fixture
def server():
    handler = type("Server", (OpenAIServer,), {"received": [], "status": 200, "answer": None})
    with serving(handler) as url:
        yield handler, url


def texts(*values: str) -> list[Tensor]:
    data = np.empty((len(values), 1), dtype=object)
    data[:, 0] = [v.encode() for v in values]
    return [Tensor("text", "BYTES", data)]


def run(coroutine):
    return asyncio.run(coroutine)


def test_a_batch_is_one_call_with_its_texts_and_the_vectors_come_back_in_row_order(server):
    handler, url = server

    async def go():
        backend = OpenAIEmbeddingsBackend(url, "bge", base_path="/openai/v1")
        try:
            return await backend.infer(texts("a", "bbb", "cc"))
        finally:
            await backend.close()

    outputs = run(go())
    assert outputs[0].name == "embedding" and outputs[0].datatype == "FP32"
    assert outputs[0].data.tolist() == [[1, 0], [3, 1], [2, 2]]
    path, body = handler.received[0]
    assert path == "/openai/v1/embeddings"
    assert body == {"model": "bge", "input": ["a", "bbb", "cc"], "encoding_format": "base64"}


def test_the_batchs_dimensions_are_sent_along_and_an_empty_base_path_is_the_root(server):
    handler, url = server

    async def go():
        backend = OpenAIEmbeddingsBackend(url, "bge", base_path="")
        token = current_batch.set(BatchContext("b-1", (), parameters={"dimensions": 2}))
        try:
            await backend.infer(texts("a"))
        finally:
            current_batch.reset(token)
            await backend.close()

    run(go())
    path, body = handler.received[0]
    assert path == "/embeddings" and body["dimensions"] == 2


def test_ready_when_the_model_is_listed(server):
    _, url = server

    async def go(model):
        backend = OpenAIEmbeddingsBackend(url, model)
        try:
            return await backend.ready()
        finally:
            await backend.close()

    assert run(go("bge")) and not run(go("other"))
    assert {path for path, _ in server[0].received} == {"/openai/v1/models"}


@pytest.mark.parametrize("status, answer, error", [
    (400, None, PredictorRejected),   # the batch is bisected to find the bad text
    (500, None, PredictorFailed),
    (200, {"data": [{"index": 0, "embedding": [1.0]}]}, BadPredictorAnswer),  # one vector for two texts
    (200, {"object": "list"}, BadPredictorAnswer),
])
def test_each_failure_is_the_gateways_error(server, status, answer, error):
    handler, url = server
    handler.status, handler.answer = status, answer

    async def go():
        backend = OpenAIEmbeddingsBackend(url, "bge")
        try:
            await backend.infer(texts("a", "b"))
        finally:
            await backend.close()

    with pytest.raises(error):
        run(go())


def test_texts_that_are_not_utf8_are_refused_before_any_call(server):
    handler, url = server
    data = np.array([[b"\xff\xfe"]], dtype=object)

    async def go():
        backend = OpenAIEmbeddingsBackend(url, "bge")
        try:
            await backend.infer([Tensor("text", "BYTES", data)])
        finally:
            await backend.close()

    with pytest.raises(PredictorRejected, match="UTF-8 texts"):
        run(go())
    assert handler.received == []


def test_a_predictors_refusal_in_openais_shape_is_told_by_its_message_not_a_dict(server):
    handler, url = server
    handler.status, handler.answer = 400, {"error": {"message": "input is too long", "type": "BadRequestError"}}

    async def go():
        backend = OpenAIEmbeddingsBackend(url, "bge")
        try:
            await backend.infer(texts("a"))
        finally:
            await backend.close()

    with pytest.raises(PredictorRejected) as error:
        run(go())
    assert str(error.value) == "model 'bge': the predictor rejected the batch (400: input is too long)"


def test_a_batch_of_token_ids_goes_as_lists_of_ids(server):
    handler, url = server
    data = np.empty((2, 1), dtype=object)
    data[:, 0] = [pack_token_ids([101, 7, 102]), pack_token_ids([101, 102])]

    async def go():
        backend = OpenAIEmbeddingsBackend(url, "bge")
        try:
            return await backend.infer([Tensor(TOKEN_IDS_INPUT, "BYTES", data)])
        finally:
            await backend.close()

    assert run(go())[0].data[:, 0].tolist() == [3, 2]
    assert handler.received[0][1]["input"] == [[101, 7, 102], [101, 102]]
