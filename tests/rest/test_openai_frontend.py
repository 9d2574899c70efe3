"""OpenAI's Embeddings API (`gateway/rest/openai.py`) for the official `openai` client,
unmodified, and curl, on the simulated encoder: each text one row of the model's batches,
answers in the request's order in both encodings, lists split across batches, texts from
OpenAI and OIP clients in one batch, identical texts sent once, and errors in OpenAI's
shape with the gateway's statuses."""
from __future__ import annotations

import base64
import shutil
import socket
import subprocess
import threading

import grpc
import numpy as np
import openai
import orjson
import pytest

from backends.simulated.encoder import vector
from tests.harness import config_for, held_slot, http, queued, running_gateway, wait_for
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc

ENCODER = {"name": "encoder", "backend": "simulated", "simulated": {"task": "embed", "call_ms": 5},
           "batching": {"max_batch_size": 4, "max_queue": 64}}
DEMO = {"name": "demo", "backend": "simulated"}


@pytest.fixture(scope="module")
def gw():
    with running_gateway(config_for(ENCODER, DEMO)) as running:
        yield running


def client(gw, prefix: str = "/v1") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw.http_url}{prefix}", api_key="unused", max_retries=0, timeout=30)


def expected(*texts: str) -> np.ndarray:
    return np.stack([vector(text.encode()) for text in texts])


def test_the_openai_client_gets_each_texts_vector_in_order(gw):
    texts = ["the cat sat", "on the mat", "a much longer text that costs more tokens than the others"]
    answer = client(gw).embeddings.create(model="encoder", input=texts)  # asks for base64 by default
    assert [item.index for item in answer.data] == [0, 1, 2]
    np.testing.assert_allclose([item.embedding for item in answer.data], expected(*texts), rtol=1e-6)
    assert answer.model == "encoder"
    assert answer.usage.prompt_tokens == sum(-(-len(t) // 4) + 2 for t in texts)  # the documented estimate


def test_floats_too_and_a_single_string_and_kserves_prefix(gw):
    answer = client(gw, "/openai/v1").embeddings.create(model="encoder", input="hello", encoding_format="float")
    np.testing.assert_allclose(answer.data[0].embedding, expected("hello")[0], rtol=1e-6)


def test_curl_gets_the_same_answer(gw):
    curl = shutil.which("curl")
    assert curl is not None, "curl is one of the clients the tests run (Debian's curl)"
    body = orjson.dumps({"model": "encoder", "input": ["hello", "world"], "encoding_format": "base64"})
    done = subprocess.run([curl, "-sS", f"{gw.http_url}/v1/embeddings", "-H", "Content-Type: application/json",
                           "-d", body.decode()], capture_output=True, timeout=30, check=True)
    data = orjson.loads(done.stdout)["data"]
    vectors = [np.frombuffer(base64.b64decode(item["embedding"]), "<f4") for item in data]
    np.testing.assert_allclose(vectors, expected("hello", "world"), rtol=1e-6)


def test_a_list_larger_than_the_batch_is_split_and_reassembled_in_its_order(gw):
    texts = [f"text number {i}" for i in range(10)]  # max_batch_size 4: three batches
    status, headers, body = http("POST", f"{gw.http_url}/v1/embeddings", {"model": "encoder", "input": texts})
    assert status == 200
    data = orjson.loads(body)["data"]
    assert [item["index"] for item in data] == list(range(10))
    np.testing.assert_allclose([item["embedding"] for item in data], expected(*texts), rtol=1e-6)
    assert len(headers["X-Batch-Id"].split(",")) == 3


def test_only_embedding_models_are_listed_and_answered(gw):
    assert [model.id for model in client(gw).models.list()] == ["encoder"]
    assert client(gw, "/openai/v1").models.retrieve("encoder").id == "encoder"
    assert client(gw).models.retrieve("encoder").id == "encoder"  # /v1/models/<m>: KServe v1's route too
    with pytest.raises(openai.NotFoundError, match="not an embedding model"):
        client(gw).embeddings.create(model="demo", input="x")
    with pytest.raises(openai.NotFoundError, match="not an embedding model"):
        client(gw, "/openai/v1").models.retrieve("demo")


@pytest.mark.parametrize("kwargs, error, message", [
    ({"model": "nope", "input": "x"}, openai.NotFoundError, "unknown model: 'nope'"),
    ({"model": "encoder", "input": ""}, openai.BadRequestError, "empty string"),
    ({"model": "encoder", "input": [[1, 2 ** 32]]}, openai.BadRequestError, "is out of range"),
    ({"model": "encoder", "input": "x", "dimensions": 8}, openai.BadRequestError, "'dimensions' is passed only"),
    ({"model": "encoder", "input": ["x"] * 65}, openai.APIStatusError, "queues at most 64"),  # 413
])
def test_bad_requests_raise_the_openai_error_of_their_status(gw, kwargs, error, message):
    with pytest.raises(error, match=message) as raised:
        client(gw).embeddings.create(**kwargs, encoding_format="float")
    assert raised.value.body["message"] and raised.value.body["type"]  # OpenAI's error shape


def test_errors_are_openai_shaped_for_malformed_bodies_too(gw):
    status, _, body = http("POST", f"{gw.http_url}/v1/embeddings", b"{not json",
                           headers={"Content-Type": "application/json"})
    assert status == 400
    assert orjson.loads(body)["error"]["type"] == "invalid_request_error"
    status, _, body = http("GET", f"{gw.http_url}/v1/embeddings")  # a method Tornado refuses itself
    assert status == 405 and "message" in orjson.loads(body)["error"]


def test_an_oip_client_sending_bytes_texts_joins_the_openai_clients_batch_and_repeats_are_sent_once(gw):
    encoder = gw.gateway.service.models["encoder"].backend.model
    with grpc.insecure_channel(gw.grpc_address) as channel, held_slot(gw, "encoder") as (release, batches):
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        results: dict[str, object] = {}

        def blocker():
            results["blocker"] = client(gw).embeddings.create(model="encoder", input="first")

        def openai_client():
            results["openai"] = client(gw).embeddings.create(model="encoder", input=["alpha", "beta"])

        def oip_client():
            request = pb.ModelInferRequest(model_name="encoder")
            request.inputs.add(name="text", datatype="BYTES", shape=[2, 1])
            request.inputs[0].contents.bytes_contents.extend([b"beta", b"gamma"])
            results["oip"] = stub.ModelInfer(request, timeout=10)

        first = threading.Thread(target=blocker)
        first.start()
        wait_for(lambda: len(batches) == 1, "the blocker's batch to reach the gate")
        sent_before = encoder.log.instances
        others = [threading.Thread(target=openai_client), threading.Thread(target=oip_client)]
        for thread in others:
            thread.start()
        wait_for(lambda: queued(gw, "encoder") == 4, "both clients' four texts to queue behind the blocker")
        release.set()
        for thread in [first, *others]:
            thread.join(timeout=20)

        np.testing.assert_allclose([item.embedding for item in results["openai"].data], expected("alpha", "beta"),
                                   rtol=1e-6)
        answer = results["oip"]
        np.testing.assert_allclose(np.frombuffer(answer.raw_output_contents[0], np.float32).reshape(2, -1),
                                   expected("beta", "gamma"), rtol=1e-6)
        assert batches == [1, 4]  # one batch of both clients' four texts...
        assert encoder.log.instances - sent_before == 1 + 3  # ...of which "beta" went to the predictor once


def test_a_full_queue_is_a_429_that_names_the_limit(gw):
    with held_slot(gw, "encoder") as (release, batches):
        first = threading.Thread(target=lambda: http("POST", f"{gw.http_url}/v1/embeddings",
                                                      {"model": "encoder", "input": "blocker"}))
        first.start()
        wait_for(lambda: len(batches) == 1, "the blocker's batch to reach the gate")
        filler = threading.Thread(target=lambda: http("POST", f"{gw.http_url}/v1/embeddings",
                                                       {"model": "encoder", "input": ["x"] * 64}))
        filler.start()
        wait_for(lambda: queued(gw, "encoder") == 64, "64 texts to fill the queue")
        with pytest.raises(openai.RateLimitError, match=r"64 instances queued \(limit 64, batching.max_queue\)") as raised:
            client(gw).embeddings.create(model="encoder", input="one too many")
        assert raised.value.status_code == 429
        release.set()
        for thread in (first, filler):
            thread.join(timeout=20)


def test_a_client_that_leaves_while_its_texts_wait_is_dropped_before_its_batch_is_sent(gw):
    encoder = gw.gateway.service.models["encoder"].backend.model
    with held_slot(gw, "encoder") as (release, batches):
        blocker = threading.Thread(target=lambda: client(gw).embeddings.create(model="encoder", input="blocker"))
        blocker.start()
        wait_for(lambda: len(batches) == 1, "the blocker's batch to reach the gate")
        sent_before = encoder.log.instances
        body = orjson.dumps({"model": "encoder", "input": ["left", "behind", "here"]})
        request = (f"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        with socket.create_connection(("127.0.0.1", gw.gateway.http_port)) as raw:
            raw.sendall(request)
            wait_for(lambda: queued(gw, "encoder") == 3, "the leaving client's texts to be queued")
        wait_for(lambda: queued(gw, "encoder") == 0, "the gone client's texts to leave the queue")
        release.set()
        blocker.join(timeout=30)
    assert batches == [1] and encoder.log.instances == sent_before + 1  # the blocker alone reached the predictor


def test_with_a_token_the_openai_clients_api_key_is_it(monkeypatch):
    # OpenAI's clients send their api_key as "Authorization: Bearer <key>": the gateway's token.
    monkeypatch.setenv("GATEWAY_TOKEN", "s3cret-token")
    with running_gateway(config_for(ENCODER, server={"auth_token_env": "GATEWAY_TOKEN"})) as gw:
        answer = openai.OpenAI(base_url=f"{gw.http_url}/v1", api_key="s3cret-token", max_retries=0).embeddings.create(
            model="encoder", input="hello")
        np.testing.assert_allclose(answer.data[0].embedding, expected("hello")[0], rtol=1e-6)
        with pytest.raises(openai.AuthenticationError) as refused:
            client(gw).embeddings.create(model="encoder", input="hello")  # api_key "unused"
        assert refused.value.status_code == 401 and refused.value.body["type"] == "authentication_error"
