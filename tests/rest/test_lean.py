"""The lean path of the inference routes (gateway/rest/lean.py) answers exactly as their
RequestHandler twins do (`[server] lean_routes = false`): every bad body of the corpus and
every refusal from the head alone gets the same status, the same headers that matter and
the same body from both; a request the lean path does not take (another method, an escaped
path) is the twin's; and after each refusal the connection serves the next request, for
http.client, aiohttp and tritonclient's asyncio client alike."""
from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator
from http.client import HTTPConnection

import aiohttp
import numpy as np
import orjson
import pytest
import tornado.web
import tritonclient.http.aio as triton_aio
from tritonclient.utils import InferenceServerException

from gateway.rest.app import HOT_ROUTES
from gateway.rest.connections import DRAIN_BYTES
from gateway.rest.lean import LeanFrontEnd
from tests.harness import config_for, running_gateway
from tests.kinds.test_tokens import cl100k_file
from tests.test_bad_input_corpus import (
    BINARY_CASES,
    COHERE_CASES,
    HTTP_CASES,
    LIMITS,
    OPENAI_CASES,
    UPLOAD_CASES,
    j,
)

TOKEN = "lean-test-token"
TOKEN_ENV = "LEAN_TEST_TOKEN"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MATTERING = ("Content-Type", "Retry-After", "Connection", "WWW-Authenticate", "Content-Encoding", "Vary")


def test_the_hot_routes_are_the_inference_routes():
    """One table says which routes are lean; these are they."""
    assert [(pattern, type(endpoint).__name__) for pattern, endpoint in HOT_ROUTES] == [
        (r"/v1/models/([^/:]+):predict", "V1Predict"),
        (r"/v2/models/([^/:]+)(?:/versions/([^/]+))?/infer", "Infer"),
        (r"/predictions/([^/:]+)(?:/([^/]+))?", "Predictions"),
        (r"(?:/openai)?/v1/embeddings", "Embeddings"),
        (r"/v1/rerank", "Rerank"),
        (r"/v2/rerank", "Rerank"),
    ]


def _config(lean: bool):
    demo = {"name": "demo", "backend": "simulated", "simulated": {"call_ms": 5}}
    text = {"name": "text", "backend": "simulated", "inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [-1]}]}
    encoder = {"name": "encoder", "backend": "simulated", "simulated": {"task": "embed"},
               "batching": {"max_batch_tokens": 1000}, "embeddings": {"token_ids_file": cl100k_file()}}
    reranker = {"name": "reranker", "backend": "simulated", "simulated": {"task": "rerank"},
                "batching": {"max_batch_tokens": 1000}}
    return config_for(demo, text, encoder, reranker,
                      server={"auth_token_env": TOKEN_ENV, "lean_routes": lean}, **LIMITS)


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple]:
    """Two gateways of one config (a bearer token required): the lean path, and the twins."""
    os.environ[TOKEN_ENV] = TOKEN
    try:
        with running_gateway(_config(True)) as lean, running_gateway(_config(False)) as twin:
            yield lean, twin
    finally:
        del os.environ[TOKEN_ENV]


def test_each_gateway_of_the_pair_serves_on_the_path_it_was_configured_for(pair):
    lean, twin = pair
    assert isinstance(lean.gateway.front_ends.http_server.request_callback, LeanFrontEnd)
    assert isinstance(twin.gateway.front_ends.http_server.request_callback, tornado.web.Application)


def _exchange(url: str, method: str, path: str, body: bytes, headers: dict[str, str]) -> tuple:
    """(status, the headers that matter, body) of one request on a connection of its own."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    client = HTTPConnection(host, int(port), timeout=30)
    try:
        client.request(method, path, body, headers)
        answer = client.getresponse()
        payload = answer.read()
        return answer.status, {name: answer.getheader(name) for name in MATTERING}, payload
    finally:
        client.close()


# Refusals from the head alone, and requests the lean path hands to the twin.
# (id, method, path, body, headers)
HEAD_CASES = [
    ("no-key", "POST", "/v1/models/demo:predict", j({"instances": [[1, 2]]}), {"Authorization": ""}),
    ("wrong-key", "POST", "/v1/models/demo:predict", j({"instances": [[1, 2]]}), {"Authorization": "Bearer nope"}),
    ("wrong-scheme", "POST", "/v2/models/demo/infer", b"{}", {"Authorization": f"Basic {TOKEN}"}),
    ("unknown-model-v1", "POST", "/v1/models/absent:predict", j({"instances": [[1, 2]]}), {}),
    ("unknown-model-v2", "POST", "/v2/models/absent/infer", b"{}", {}),
    ("unknown-version", "POST", "/v2/models/demo/versions/9/infer", b"{}", {}),
    ("unknown-model-torchserve", "PUT", "/predictions/absent", b"x", {"Content-Type": "image/png"}),
    ("bad-timeout", "POST", "/v1/models/demo:predict", j({"instances": [[1, 2]]}), {"X-Request-Timeout-Ms": "inf"}),
    ("zero-timeout", "POST", "/v1/models/demo:predict", j({"instances": [[1, 2]]}), {"X-Request-Timeout-Ms": "0"}),
    ("declared-over-body-limit", "POST", "/v2/models/demo/infer", b"x" * 10,
     {"Content-Length": str(LIMITS["max_body_bytes"] + 1)}),
    ("unknown-coding", "POST", "/v1/models/demo:predict", j({"instances": [[1, 2]]}), {"Content-Encoding": "br"}),
    ("broken-gzip", "POST", "/v1/models/demo:predict", b"not gzip", {"Content-Encoding": "gzip"}),
    # The head's checks in their order (gateway/rest/intake.py): the key, the model, the deadline, the size.
    ("no-key-and-unknown-model", "POST", "/v1/models/absent:predict", b"{}", {"Authorization": ""}),
    ("unknown-model-and-bad-timeout", "POST", "/v1/models/absent:predict", b"{}", {"X-Request-Timeout-Ms": "x"}),
    ("bad-timeout-and-over-limit", "POST", "/v1/models/demo:predict", b"{}",
     {"X-Request-Timeout-Ms": "x", "Content-Length": str(LIMITS["max_body_bytes"] + 1)}),
    ("get-on-predict", "GET", "/v1/models/demo:predict", b"", {}),
    ("put-on-infer", "PUT", "/v2/models/demo/infer", b"{}", {}),
    ("good-escaped-model-name", "POST", "/v1/models/de%6Do:predict", j({"instances": [[1, 2]]}), {}),
    ("not-utf8-path", "POST", "/v1/models/%ff:predict", j({"instances": [[1, 2]]}), {}),
    ("good-v1", "POST", "/v1/models/demo:predict", j({"instances": [[1, 2]]}), {}),
]

# Every bad body of the corpus, as (id, method, path, body, headers).
CORPUS = [
    *[(case_id, "POST", path, body, {"Content-Type": "application/json"})
      for case_id, path, body, _, _ in HTTP_CASES + OPENAI_CASES + COHERE_CASES],
    *[(case_id, "POST", f"/v2/models/{model}/infer", body, {"Content-Type": "application/octet-stream", **headers})
      for case_id, model, body, headers, _ in BINARY_CASES],
    *[(case_id, method, path, body, {"Content-Type": content_type})
      for case_id, method, path, body, content_type, _, _ in UPLOAD_CASES],
]


@pytest.mark.parametrize("case_id, method, path, body, headers", CORPUS + HEAD_CASES,
                         ids=[case[0] for case in CORPUS + HEAD_CASES])
def test_the_lean_path_answers_as_its_twin(pair, case_id, method, path, body, headers):
    lean, twin = pair
    sent = {**AUTH, **headers}
    if not sent["Authorization"]:
        del sent["Authorization"]
    lean_answer = _exchange(lean.http_url, method, path, body, sent)
    twin_answer = _exchange(twin.http_url, method, path, body, sent)
    if case_id.startswith("good"):
        assert lean_answer[0] == twin_answer[0] == 200
        assert orjson.loads(lean_answer[2])["predictions"] == orjson.loads(twin_answer[2])["predictions"]
        return
    assert lean_answer[0] >= 400
    assert lean_answer == twin_answer


def test_a_compressed_answer_is_the_same_on_both_paths(pair):
    lean, twin = pair
    body = j({"instances": [[float(i), 1.0] for i in range(100)]})
    headers = {**AUTH, "Accept-Encoding": "gzip"}
    lean_answer = _exchange(lean.http_url, "POST", "/v1/models/demo:predict", body, headers)
    twin_answer = _exchange(twin.http_url, "POST", "/v1/models/demo:predict", body, headers)
    assert lean_answer[0] == twin_answer[0] == 200
    assert lean_answer[1] == twin_answer[1] and lean_answer[1]["Content-Encoding"] == "gzip"


# -- keep-alive after every refusal, for three clients ------------------------------------------------

REFUSALS = [case for case in CORPUS + HEAD_CASES if not case[0].startswith("good")
            and len(case[3]) <= DRAIN_BYTES and "Content-Length" not in case[4]]
GOOD = ("POST", "/v1/models/demo:predict", j({"instances": [[1, 2]]}))


def _accepted(gw) -> float:
    """Connections the gateway's HTTP front end has accepted so far (its /metrics)."""
    host, port = gw.http_url.removeprefix("http://").rsplit(":", 1)
    client = HTTPConnection(host, int(port), timeout=30)
    try:
        client.request("GET", "/metrics", headers=AUTH)
        text = client.getresponse().read().decode()
    finally:
        client.close()
    return next(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                if line.startswith("gateway_http_connections_accepted_total "))


def test_http_client_keeps_its_connection_after_every_refusal(pair):
    lean, _ = pair
    host, port = lean.http_url.removeprefix("http://").rsplit(":", 1)
    client = HTTPConnection(host, int(port), timeout=30)
    try:
        client.request(*GOOD, AUTH)
        assert client.getresponse().read()
        sock = client.sock
        for case_id, method, path, body, headers in REFUSALS:
            sent = {**AUTH, **headers}
            if not sent["Authorization"]:
                del sent["Authorization"]
            client.request(method, path, body, sent)
            refused = client.getresponse()
            refused.read()
            assert refused.status >= 400 and refused.getheader("Connection") != "close", case_id
            client.request(*GOOD, AUTH)
            answer = client.getresponse()
            assert answer.status == 200 and orjson.loads(answer.read())["predictions"] == [[2, 4]], case_id
            assert client.sock is sock, case_id
    finally:
        client.close()


def test_aiohttp_keeps_its_connection_after_every_refusal(pair):
    lean, _ = pair

    async def run() -> None:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as session:
            for case_id, method, path, body, headers in REFUSALS:
                sent = {**AUTH, **headers}
                if not sent["Authorization"]:
                    del sent["Authorization"]
                async with session.request(method, lean.http_url + path, data=body, headers=sent) as refused:
                    await refused.read()
                    assert refused.status >= 400, case_id
                async with session.post(lean.http_url + GOOD[1], data=GOOD[2], headers=AUTH) as answer:
                    assert answer.status == 200, case_id
                    assert (await answer.json())["predictions"] == [[2, 4]]

    before = _accepted(lean)
    asyncio.run(run())
    assert _accepted(lean) - before == 2  # the session's one connection, and this count's own


def test_tritonclient_keeps_its_connection_after_every_refusal(pair):
    """tritonclient's asyncio client (aiohttp underneath) after refusals it provokes itself:
    an unknown model, a bad input, a wrong datatype; each raises, and the next inference is
    served on the same connection."""
    lean, _ = pair

    def inputs(datatype: str = "FP32", shape: tuple[int, ...] = (1, 2)) -> list:
        tensor = triton_aio.InferInput("INPUT0", list(shape), datatype)
        tensor.set_data_from_numpy(np.ones(shape, dtype=np.float32 if datatype == "FP32" else np.int32))
        return [tensor]

    async def run() -> None:
        client = triton_aio.InferenceServerClient(lean.http_url.removeprefix("http://"), conn_limit=1)
        try:
            refusals = [("absent", inputs()), ("demo", inputs("INT32")), ("demo", inputs(shape=(1, 2, 3)))]
            for model, tensors in refusals:
                with pytest.raises(InferenceServerException):
                    await client.infer(model, tensors, headers=AUTH)
                good = await client.infer("demo", inputs(), headers=AUTH)
                assert good.as_numpy("OUTPUT0").tolist() == [[2.0, 2.0]]
        finally:
            with contextlib.suppress(Exception):
                await client.close()

    before = _accepted(lean)
    asyncio.run(run())
    assert _accepted(lean) - before == 2  # the client's one connection, and this count's own


@pytest.mark.parametrize("case_id, status", [("no-key-and-unknown-model", 401), ("unknown-model-and-bad-timeout", 404),
                                             ("bad-timeout-and-over-limit", 400)])
def test_the_heads_checks_come_in_their_order(pair, case_id, status):
    """The key before the model, the model before the deadline, the deadline before the size."""
    _, method, path, body, headers = next(case for case in HEAD_CASES if case[0] == case_id)
    sent = {**AUTH, **headers}
    if not sent["Authorization"]:
        del sent["Authorization"]
    for gw in pair:
        assert _exchange(gw.http_url, method, path, body, sent)[0] == status
