"""Embedding models (gateway/embeddings.py): each text one row measured in tokens, batches
capped by `max_batch_tokens` and grouped by bucket, `usage` exact with the model's
tokenizer, identical texts sent once (unless told otherwise), and the vectors read from
the one FP32 output or the one configured (and never NaN); an OpenAI client's token ids
decoded back to their texts, or passed on as they are where configured; a text over the
token budget a 413 naming `max_batch_tokens`; `GET /v1/models/<m>` OpenAI's model object."""
from __future__ import annotations

import asyncio
import logging
import threading

import numpy as np
import orjson
import pytest

from backends.base import Backend
from backends.settings import PredictorProtocol, PredictorSettings
from backends.simulated.encoder import vector
from gateway.config import EmbeddingsConfig, ModelConfig
from gateway.kinds.embeddings import Embeddings
from gateway.models.base import ServedModel
from gateway.models.forms import served_model
from tests.harness import config_for, held_slot, http, queued, running_gateway, wait_for
from tests.http_stub import JsonHandler, serving
from tests.kinds.test_tokens import cl100k, cl100k_file, wordpiece_file
from wire.codecs import openai as openai_codec
from wire.embeddings import EmbeddingsRequest
from wire.errors import BadPredictorAnswer, InvalidInput
from wire.request import OipRequest
from wire.tensors import Tensor


def encoder(**batching) -> dict:
    return {"name": "encoder", "backend": "simulated", "simulated": {"task": "embed", "call_ms": 1},
            "batching": {"max_batch_size": 32, **batching}}


def embed(gw, texts: list[str]) -> dict:
    status, _, body = http("POST", f"{gw.http_url}/v1/embeddings", {"model": "encoder", "input": texts})
    assert status == 200, body
    return orjson.loads(body)


def queue_behind_a_held_batch(gw, requests: list[list[str]]) -> list[int]:
    """Send each request, in order, once the model's slot is held (each queued before the
    next is sent), release the slot, and return the rows of every batch that left (the
    blocker's first)."""
    with held_slot(gw, "encoder") as (release, batches):
        threads = [threading.Thread(target=embed, args=(gw, ["blocker"]))]
        threads[0].start()
        wait_for(lambda: len(batches) == 1, "the blocker's batch to reach the gate")
        rows = 0
        for texts in requests:
            threads.append(threading.Thread(target=embed, args=(gw, texts)))
            threads[-1].start()
            rows += len(texts)
            wait_for(lambda rows=rows: queued(gw, "encoder") == rows, f"{rows} texts to queue")
        release.set()
        for thread in threads:
            thread.join(timeout=20)
    return batches


def test_a_batch_holds_at_most_max_batch_tokens_counted_as_rows_times_the_longest():
    # Estimated tokens: 40 bytes -> 12 tokens each. 60 tokens hold 5 such rows, not 32.
    with running_gateway(config_for(encoder(max_batch_tokens=60))) as gw:
        batches = queue_behind_a_held_batch(gw, [[f"{i:02d}" + "x" * 38] for i in range(12)])
    assert batches == [1, 5, 5, 2]


def test_summed_a_batch_holds_the_rows_whose_own_tokens_add_up_to_the_budget():
    # One long text (102 tokens) and ten short ones (4 each): padded to the longest, the long
    # one leaves alone; summed, it goes with all ten (102 + 40 = 142 <= 150).
    texts = [["y" * 400]] + [[f"s{i}"] for i in range(10)]
    with running_gateway(config_for(encoder(max_batch_tokens=150))) as gw:
        assert queue_behind_a_held_batch(gw, texts) == [1, 1, 10]
    with running_gateway(config_for(encoder(max_batch_tokens=150, token_cost="sum"))) as gw:
        assert queue_behind_a_held_batch(gw, texts) == [1, 11]


def test_buckets_keep_short_texts_out_of_long_texts_batches():
    texts = [["short"], ["z" * 300], ["tiny"], ["w" * 280]]
    with running_gateway(config_for(encoder(buckets=[16, 128]))) as gw:
        assert queue_behind_a_held_batch(gw, texts) == [1, 2, 2]
        stats = gw.stats("encoder")
    # Padding waste in tokens: each batch is padded to its bucket (16, then 128 and 128).
    assert (stats.padded_elements, stats.real_elements) == (16 + 2 * 16 + 2 * 128, 4 + 4 + 3 + 77 + 72)


def test_a_list_of_texts_travels_by_bucket_with_other_clients_texts_and_comes_back_in_its_order():
    short, long = "s" * 20, "l" * 400  # 7 and 102 tokens: buckets 16 and 128
    with running_gateway(config_for(encoder(buckets=[16, 128]))) as gw:
        answers: dict[str, dict] = {}
        with held_slot(gw, "encoder") as (release, batches):
            blocker = threading.Thread(target=embed, args=(gw, ["blocker"]))
            blocker.start()
            wait_for(lambda: len(batches) == 1, "the blocker's batch to reach the gate")
            mixed = [long + "1", short + "1", long + "2", short + "2"]
            threads = [threading.Thread(target=lambda: answers.setdefault("mixed", embed(gw, mixed))),
                       threading.Thread(target=lambda: answers.setdefault("short", embed(gw, [short + "3"])))]
            threads[0].start()
            wait_for(lambda: queued(gw, "encoder") == 4, "the list to queue")
            threads[1].start()
            wait_for(lambda: queued(gw, "encoder") == 5, "the single text to queue")
            release.set()
            for thread in [blocker, *threads]:
                thread.join(timeout=20)
    # The list's two short texts left with the other client's short one; its long ones apart.
    assert batches == [1, 3, 2]
    vectors = [item["embedding"] for item in answers["mixed"]["data"]]
    assert [item["index"] for item in answers["mixed"]["data"]] == [0, 1, 2, 3]
    np.testing.assert_allclose(vectors, [vector(text.encode()) for text in mixed], rtol=1e-6)


def test_usage_is_exact_with_the_models_tokenizer(tmp_path):
    model = {**encoder(), "embeddings": {"tokenizer": wordpiece_file(tmp_path)}}
    with running_gateway(config_for(model)) as gw:
        answer = embed(gw, ["The cat sat", "dogs runs"])
    assert answer["usage"] == {"prompt_tokens": 5 + 6, "total_tokens": 11}


def test_repeated_texts_are_sent_once_unless_deduplication_is_off():
    for deduplicate, sent in ((True, 2), (False, 4)):
        model = {**encoder(), "embeddings": {"deduplicate": deduplicate}}
        with running_gateway(config_for(model)) as gw:
            predictor = gw.gateway.service.models["encoder"].backend.model
            answer = embed(gw, ["same", "other", "same", "same"])
            assert predictor.log.instances == sent
        vectors = [item["embedding"] for item in answer["data"]]
        assert vectors[0] == vectors[2] == vectors[3] != vectors[1]


# -- the served model alone ---------------------------------------------------------------------

class Answering(Backend):
    """A predictor that answers the given outputs for any batch."""

    def __init__(self, outputs: list[Tensor]) -> None:
        self.outputs = outputs

    async def infer(self, inputs: list[Tensor]) -> list[Tensor]:
        return self.outputs

    async def ready(self) -> bool:
        return True


def served(outputs: list[Tensor], **settings) -> ServedModel:
    predictor = PredictorSettings(PredictorProtocol.OIP_GRPC, server="triton", model="m")
    return served_model(ModelConfig("m", predictor, kind=EmbeddingsConfig(**settings)), Answering(outputs))


VECTORS = Tensor("EMBEDDING", "FP32", np.ones((2, 3), np.float32))
IDS = Tensor("TOKENS", "INT64", np.ones((2, 3), np.int64))


def test_the_vectors_are_the_only_fp32_output_or_the_one_named():
    assert served([IDS, VECTORS]).kind.vectors([IDS, VECTORS]).shape == (2, 3)
    other = Tensor("POOLED", "FP32", np.zeros((2, 3), np.float32))
    assert not served([], output="POOLED").kind.vectors([VECTORS, other]).any()
    with pytest.raises(BadPredictorAnswer, match="cannot tell which output"):
        served([]).kind.vectors([VECTORS, other])
    with pytest.raises(BadPredictorAnswer, match="no output 'POOLED'"):
        served([], output="POOLED").kind.vectors([VECTORS])
    with pytest.raises(BadPredictorAnswer, match="not one vector per row"):
        served([]).kind.vectors([Tensor("E", "FP32", np.ones((2, 3, 4), np.float32))])


def test_texts_travel_in_the_named_input_and_an_oip_request_must_send_them_there():
    model = served([], input="TEXT")
    batch = model.batch_inputs(EmbeddingsRequest("m", ["ab", "abcdefghi"]))
    assert batch.tensors[0].name == "TEXT" and batch.tensors[0].data.shape == (2, 1)
    assert batch.lengths.tolist() == [3, 5]
    texts = np.array([[b"ab"]], dtype=object)
    assert model.batch_inputs(OipRequest([Tensor("TEXT", "BYTES", texts)])).lengths.tolist() == [3]
    with pytest.raises(InvalidInput, match="send them as the BYTES input 'TEXT'"):
        model.batch_inputs(OipRequest([Tensor("OTHER", "BYTES", texts)]))
    with pytest.raises(InvalidInput, match="a text is not UTF-8"):
        model.batch_inputs(OipRequest([Tensor("TEXT", "BYTES", np.array([[b"\xff"]], dtype=object))]))
    with pytest.raises(InvalidInput, match="one text per row"):
        model.batch_inputs(OipRequest([Tensor("TEXT", "BYTES", np.array([[b"a", b"b"]], dtype=object))]))


def test_the_predictor_sees_each_distinct_text_once_and_every_row_is_answered():
    sent: list[list[bytes]] = []

    class Echo(Answering):
        async def infer(self, inputs: list[Tensor]) -> list[Tensor]:
            sent.append(list(inputs[0].data[:, 0]))
            return [Tensor("E", "FP32", np.array([[len(t)] for t in inputs[0].data[:, 0]], np.float32))]

    predictor = PredictorSettings(PredictorProtocol.SIMULATED, server="simulated", model="m")
    model = served_model(ModelConfig("m", predictor, kind=EmbeddingsConfig()), Echo([]))
    texts = np.array([[b"a"], [b"bbb"], [b"a"], [b"cc"], [b"bbb"]], dtype=object)
    outputs = asyncio.run(model.executor([Tensor("text", "BYTES", texts)]))
    assert sent == [[b"a", b"bbb", b"cc"]]
    assert outputs[0].data[:, 0].tolist() == [1, 3, 1, 2, 3]


def test_a_kserve_v1_client_sends_texts_as_instances_and_gets_one_vector_each():
    with running_gateway(config_for(encoder())) as gw:
        status, _, body = http("POST", f"{gw.http_url}/v1/models/encoder:predict",
                               {"instances": ["the cat", ["a dog"]]})
        assert status == 200, body
        predictions = orjson.loads(body)["predictions"]
        assert np.allclose(predictions, [item["embedding"] for item in embed(gw, ["the cat", "a dog"])["data"]])
        for bad in ([[1.0, 2.0]], [{"text": "a"}], [["a", "b"]]):
            status, _, body = http("POST", f"{gw.http_url}/v1/models/encoder:predict", {"instances": bad})
            assert status == 400 and b"each instance is a string" in body, body


# -- token ids (LangChain's default): decoded back to texts, or passed on as they are ----------

def test_token_ids_are_decoded_back_to_their_texts_and_answered_as_the_texts():
    texts = ["the cat sat", "Ünïcödé 日本語 🦜", "def f(x):\n    return x"]
    ids = [cl100k().encode_ordinary(text) for text in texts]
    model = {**encoder(), "embeddings": {"token_ids": "cl100k_base", "token_ids_file": cl100k_file()}}
    with running_gateway(config_for(model)) as gw:
        as_texts = embed(gw, texts)
        as_ids = embed(gw, ids)  # type: ignore[arg-type]  # a list of token-id lists
        one = embed(gw, ids[1])  # type: ignore[arg-type]  # a flat list: one text's ids
    assert as_ids["data"] == as_texts["data"] and as_ids["usage"] == as_texts["usage"]
    assert one["data"][0]["embedding"] == as_texts["data"][1]["embedding"]
    np.testing.assert_allclose([item["embedding"] for item in as_ids["data"]],
                               [vector(text.encode()) for text in texts], rtol=1e-6)


def test_token_ids_without_the_encoding_file_or_outside_it_are_refused_saying_why(tmp_path, monkeypatch, caplog):
    """Without the file, the client is told what is missing and the gateway's log where it
    was looked for. Before: the 400 named the gateway's cache path."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # an empty cache: nothing is downloaded
    with caplog.at_level(logging.WARNING, logger="gateway.kinds.embeddings"), running_gateway(config_for(encoder())) as gw:
        for _ in range(3):
            status, _, body = http("POST", f"{gw.http_url}/v1/embeddings", {"model": "encoder", "input": [[9906]]})
            assert status == 400 and b"cannot read token ids: the gateway has no usable cl100k_base file" in body, body
            assert b"nothing is downloaded" in body and b"send 'input' as texts" in body
            assert str(tmp_path).encode() not in body and b"/" not in orjson.loads(body)["error"]["message"].encode()
    logged = [r.getMessage() for r in caplog.records if "refuses token ids" in r.getMessage()]
    assert len(logged) == 1 and f"no cl100k_base file at {tmp_path}/" in logged[0], logged  # once, with the path
    model = {**encoder(), "embeddings": {"token_ids_file": cl100k_file()}}
    with running_gateway(config_for(model)) as gw:
        status, _, body = http("POST", f"{gw.http_url}/v1/embeddings",
                               {"model": "encoder", "input": [[9906], [9906, 100261]]})
        assert status == 400 and b"'input[1]' of model 'encoder': token id 100261 is not in cl100k_base" in body
        np.testing.assert_allclose(embed(gw, [[9906]])["data"][0]["embedding"], vector(b"Hello"), rtol=1e-6)


def test_token_ids_beyond_max_queue_are_refused_before_a_single_id_is_checked_or_decoded(monkeypatch):
    """65,536 rows of ids were checked and decoded (0.6-1.1 s on the loop) before the queue
    refused them: the rows a request declares are held against `max_queue` first."""
    checked: list[str] = []
    decoded: list[int] = []
    check, decode = openai_codec._token_ids, Embeddings._decode

    def checking(row: list[int], where: str) -> list[int]:
        checked.append(where)
        return check(row, where)

    def decoding(self: Embeddings, rows: list[list[int]]) -> list[str]:
        decoded.append(len(rows))
        return decode(self, rows)

    monkeypatch.setattr(openai_codec, "_token_ids", checking)
    monkeypatch.setattr(Embeddings, "_decode", decoding)
    model = {**encoder(max_queue=8), "embeddings": {"token_ids": "cl100k_base", "token_ids_file": cl100k_file()}}
    with running_gateway(config_for(model)) as gw:
        status, _, body = http("POST", f"{gw.http_url}/v1/embeddings", {"model": "encoder", "input": [[9906]] * 9})
        assert status == 413 and b"9 instances but model 'encoder' queues at most 8" in body, body
        assert (checked, decoded) == ([], [])
        status, _, body = http("POST", f"{gw.http_url}/v1/embeddings", {"model": "encoder", "input": ["a"] * 9})
        assert status == 413 and b"queues at most 8" in body, body  # texts alike: refused before they are measured
        assert len(embed(gw, [[9906]] * 8)["data"]) == 8  # within the queue's room: checked and decoded, as before
        assert (len(checked), decoded) == (8, [8])


class OpenAIPredictor(JsonHandler):
    """An OpenAI-compatible predictor that takes texts or token-id lists, as KServe's does:
    each row's vector is [its length, 1]; the bodies it got are recorded."""
    received: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802
        body = self.read_json()
        type(self).received.append(body)
        data = [{"object": "embedding", "index": i, "embedding": [float(len(row)), 1.0]}
                for i, row in enumerate(body["input"])]
        self.answer_json({"object": "list", "data": data, "model": body["model"]})

    def do_GET(self) -> None:  # noqa: N802
        self.answer_json({"object": "list", "data": [{"id": "bge", "object": "model"}]})


def test_a_model_configured_to_take_token_ids_as_they_are_sends_them_on_in_batches_of_their_own():
    handler = type("Predictor", (OpenAIPredictor,), {"received": []})
    with serving(handler) as url:
        model = {"name": "encoder", "backend": "kserve", "api": "openai", "url": url, "backend_model": "bge",
                 "base_path": "", "embeddings": {"token_ids": "as_is"}}
        with running_gateway(config_for(model)) as gw:
            answer = embed(gw, [[101, 7, 102], [101, 102]])  # type: ignore[list-item]
            assert embed(gw, ["abcd"])["data"][0]["embedding"] == [4.0, 1.0]
    assert [item["embedding"] for item in answer["data"]] == [[3.0, 1.0], [2.0, 1.0]]
    assert answer["usage"]["prompt_tokens"] == 5  # the ids are the predictor's own tokens
    # One call for the ids (in the batch's order: shortest first), one for the text.
    assert [body["input"] for body in handler.received] == [[[101, 102], [101, 7, 102]], ["abcd"]]


# -- the token budget, the predictor's vectors, the model object ---------------------------------

@pytest.mark.parametrize("buckets", [None, [16, 64]])
def test_a_text_over_max_batch_tokens_is_a_413_naming_it_with_or_without_buckets(buckets):
    batching = {"max_batch_tokens": 60, **({"buckets": buckets} if buckets else {})}
    with running_gateway(config_for(encoder(**batching))) as gw:
        for texts in (["x" * 400], ["short", "y" * 400]):  # 102 estimated tokens
            status, _, body = http("POST", f"{gw.http_url}/v1/embeddings", {"model": "encoder", "input": texts})
            assert status == 413, body
            assert b"a text of 102 tokens is longer than a whole batch may hold (batching.max_batch_tokens = 60)" \
                in body, body
        status, _, body = http("POST", f"{gw.http_url}/v2/models/encoder/infer", {"inputs": [
            {"name": "text", "datatype": "BYTES", "shape": [1, 1], "data": ["z" * 400]}]})
        assert status == 413 and b"batching.max_batch_tokens = 60" in body, body
        assert len(embed(gw, ["short"])["data"]) == 1


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_vector_with_nan_or_infinity_is_the_predictors_bad_answer_never_a_json_null(bad):
    vectors = Tensor("EMBEDDING", "FP32", np.array([[1, 2, 3], [4, bad, 6]], np.float32))
    with pytest.raises(BadPredictorAnswer, match=r"model 'm': its predictor \(triton\) answered a vector with NaN "
                                                 r"or infinite values \(row 1 of the request\)"):
        served([]).kind.vectors([vectors])


def test_get_v1_models_id_is_openais_model_object_for_an_embedding_model_and_kserves_status_too():
    import openai

    with running_gateway(config_for(encoder(), {"name": "demo"})) as gw:
        with openai.OpenAI(base_url=f"{gw.http_url}/v1", api_key="unused", max_retries=0,
                           http_client=openai.DefaultHttpxClient(trust_env=False)) as client:
            model = client.models.retrieve("encoder")
            assert (model.id, model.object, model.owned_by) == ("encoder", "model", "batching-gateway")
        status, _, body = http("GET", f"{gw.http_url}/v1/models/encoder")
        document = orjson.loads(body)
        assert status == 200 and (document["name"], document["ready"], document["id"]) == ("encoder", True, "encoder")
        status, _, body = http("GET", f"{gw.http_url}/v1/models/demo")  # not an embedding model: KServe v1's alone
        assert status == 200 and orjson.loads(body) == {"name": "demo", "ready": True}


def test_a_predictors_refusal_names_the_model_as_its_client_does_by_its_message():
    handler = type("Predictor", (OpenAIPredictor,), {"received": []})

    def refuse(self) -> None:
        self.read_json()
        self.answer_json({"error": {"message": "input is too long", "type": "BadRequestError"}}, 400)

    handler.do_POST = refuse  # type: ignore[method-assign]
    with serving(handler) as url:
        model = {"name": "encoder", "backend": "kserve", "api": "openai", "url": url, "backend_model": "bge",
                 "base_path": ""}
        with running_gateway(config_for(model)) as gw:
            status, _, body = http("POST", f"{gw.http_url}/v1/embeddings", {"model": "encoder", "input": "x"})
    assert status == 400, body
    assert orjson.loads(body)["error"]["message"] == \
        "model 'encoder': the predictor rejected the batch (400: input is too long)"
