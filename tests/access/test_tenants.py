"""Tenants at the front door (issue 38, docs/tenants.md): each request presents a tenant's key
(`Authorization: Bearer`, `x-api-key` or `api-key` over HTTP, `authorization` metadata over
gRPC), looked up by its SHA-256 digest; no key, or an unknown one, is 401 / UNAUTHENTICATED
in its protocol's shape; a model outside the tenant's `models` is 403 / PERMISSION_DENIED.
Real clients (openai, tritonclient, curl), unmodified. SIGHUP rotates keys and adds and
removes tenants with nothing lost; no key nor its digest reaches a log, /metrics, a span or
the live page; every malformed [[tenants]] table is a one-line exit 2 of check-config."""
from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import openai
import orjson
import pytest
import tornado.httputil
import tritonclient.grpc as triton_grpc
from tritonclient.utils import InferenceServerException

from gateway import cli
from gateway import config as gateway_config
from gateway.access.front_door import FrontDoor
from gateway.access.keys import KeySource, Tenant, directory
from gateway.lifecycle import Call
from gateway.rest import intake
from tests.harness import http, http_json, running_gateway, wait_for
from tests.http_stub import JsonHandler, serving
from tests.predictors.torchserve_clients import CURL, CURL_ENV
from tests.processes import gateway as gateway_process
from tools.otlp_receiver import grpc_receiver
from wire.errors import Unauthenticated
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc
from wire.tensors import Tensor

KEYS = {"search": "sk-search-7f3a9c21e4b8d605", "indexing": "sk-indexing-1b2c3d4e5f607182",
        "ops": "sk-ops-a1b2c3d4e5f60718", "limited": "sk-limited-5a5a5a5a5a5a5a5a",
        "stranger": "sk-stranger-0000000000000000"}
ENCODER = {"name": "encoder", "backend": "simulated", "simulated": {"task": "embed", "call_ms": 2}}
OTHER_ENCODER = {"name": "other_encoder", "backend": "simulated", "simulated": {"task": "embed", "call_ms": 2}}
DEMO = {"name": "demo", "backend": "simulated", "simulated": {"call_ms": 2}}
PRIVATE = {"name": "private", "backend": "simulated", "simulated": {"call_ms": 2}}


def sha256(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def tenants(key_file: Path) -> list[dict[str, Any]]:
    """search by its environment variable, indexing by a file, ops (/metrics only) and limited
    (one request a second) by digest."""
    return [{"name": "search", "key_env": "SEARCH_API_KEY", "models": ["encoder", "demo"], "priority": 1},
            {"name": "indexing", "key_file": str(key_file), "weight": 3},
            {"name": "ops", "key_sha256": [sha256(KEYS["ops"])], "models": []},
            {"name": "limited", "key_sha256": [sha256(KEYS["limited"])], "requests_per_second": 1}]


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    key_file = tmp_path_factory.mktemp("keys") / "indexing.key"
    key_file.write_text(KEYS["indexing"] + "\n")  # as `echo` writes it: the newline is not the key's
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SEARCH_API_KEY", KEYS["search"])
        document = {"models": [ENCODER, OTHER_ENCODER, DEMO, PRIVATE], "server": {"http_port": 0, "grpc_port": 0},
                    "tenants": tenants(key_file)}
        with running_gateway(gateway_config.parse(document)) as running:
            yield running


def as_tenant(gw, name: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw.http_url}/v1", api_key=KEYS[name], max_retries=0, timeout=30)


def test_the_openai_client_with_a_tenants_key(gw):
    answer = as_tenant(gw, "search").embeddings.create(model="encoder", input=["hello", "world"])
    assert len(answer.data) == 2
    assert len(as_tenant(gw, "indexing").embeddings.create(model="other_encoder", input="x").data) == 1  # all models
    with pytest.raises(openai.AuthenticationError) as refused:
        as_tenant(gw, "stranger").embeddings.create(model="encoder", input="hello")
    assert refused.value.status_code == 401 and refused.value.body["type"] == "authentication_error"
    assert KEYS["stranger"] not in str(refused.value.body)
    with pytest.raises(openai.PermissionDeniedError) as denied:
        as_tenant(gw, "search").embeddings.create(model="other_encoder", input="hello")
    assert denied.value.status_code == 403 and denied.value.body["type"] == "permission_error"
    assert "search" in denied.value.body["message"] and "other_encoder" in denied.value.body["message"]
    with pytest.raises(openai.PermissionDeniedError):
        as_tenant(gw, "ops").embeddings.create(model="encoder", input="hello")  # models = []: none
    # Which models exist is no secret: any known key lists them (a 403, not a 404, is the rule).
    assert {model.id for model in as_tenant(gw, "ops").models.list()} == {"encoder", "other_encoder"}


def test_over_its_quota_the_openai_client_gets_a_rate_limit_error_saying_when_to_retry(gw):
    """A bucket of one request a second: back-to-back requests soon find it empty (bounded:
    twenty at most), 429 with Retry-After in whole seconds, RESOURCE_EXHAUSTED over gRPC."""
    client = as_tenant(gw, "limited")  # max_retries=0: the client does not wait and retry by itself
    refused = None
    for _ in range(20):
        try:
            client.embeddings.create(model="encoder", input="hello")
        except openai.RateLimitError as error:
            refused = error
            break
    assert refused is not None, "twenty requests at once within a quota of one a second"
    assert refused.status_code == 429 and refused.body["type"] == "rate_limit_error"
    assert int(refused.response.headers["retry-after"]) >= 1
    grpc_client = triton_grpc.InferenceServerClient(gw.grpc_address)
    try:
        tensor = triton_grpc.InferInput("INPUT0", [1, 1], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 1), np.float32))
        codes = []
        for _ in range(20):
            try:
                grpc_client.infer("demo", [tensor], headers={"authorization": f"Bearer {KEYS['limited']}"})
            except InferenceServerException as error:
                codes.append(error.status())
                break
        assert codes == ["StatusCode.RESOURCE_EXHAUSTED"]
    finally:
        grpc_client.close()


def test_curl_with_each_header_and_the_open_probes(gw):
    def curl(path: str, *headers: str, body: dict | None = None) -> tuple[int, dict[str, str], bytes]:
        command = [CURL, "-sS", "-i", f"{gw.http_url}{path}"]
        for header in headers:
            command += ["-H", header]
        if body is not None:
            command += ["-H", "Content-Type: application/json", "--data-binary", orjson.dumps(body).decode()]
        output = subprocess.run(command, capture_output=True, check=True, timeout=30, env=CURL_ENV).stdout
        head, _, payload = output.partition(b"\r\n\r\n")
        status_line, *lines = head.decode().split("\r\n")
        fields = {name.lower(): value for name, _, value in (line.partition(": ") for line in lines)}
        return int(status_line.split()[1]), fields, payload

    infer = "/v2/models/demo/infer"
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]}
    for header in (f"Authorization: Bearer {KEYS['indexing']}", f"x-api-key: {KEYS['indexing']}",
                   f"api-key: {KEYS['search']}", f"authorization: bearer {KEYS['search']}"):
        status, _, payload = curl(infer, header, body=body)
        assert status == 200 and orjson.loads(payload)["outputs"][0]["data"] == [2, 4], header
    status, fields, payload = curl(infer, body=body)
    assert status == 401 and fields["www-authenticate"] == "Bearer" and "error" in orjson.loads(payload)
    assert curl(infer, "Authorization: Basic c2VhcmNoOmtleQ==", body=body)[0] == 401  # not a bearer key
    status, _, payload = curl("/v2/models/private/infer", f"x-api-key: {KEYS['search']}", body=body)
    assert status == 403 and "private" in orjson.loads(payload)["error"]
    for probe in ("/v2/health/live", "/v2/health/ready", "/ping"):
        assert curl(probe)[0] == 200, probe  # probes need no secret
    # /metrics and the live page take any key the gateway knows (ops: a key for them alone).
    for page in ("/metrics", "/dashboard/data"):
        assert curl(page)[0] == 401, page
        assert curl(page, f"Authorization: Bearer {KEYS['ops']}")[0] == 200, page


def test_tritonclient_over_grpc_with_the_key_in_metadata(gw):
    client = triton_grpc.InferenceServerClient(gw.grpc_address)
    try:
        def infer(model: str, key: str | None) -> np.ndarray:
            tensor = triton_grpc.InferInput("INPUT0", [1, 2], "FP32")
            tensor.set_data_from_numpy(np.array([[1, 2]], np.float32))
            headers = {"authorization": f"Bearer {key}"} if key is not None else None
            return client.infer(model, [tensor], headers=headers).as_numpy("OUTPUT0")

        np.testing.assert_array_equal(infer("demo", KEYS["search"]), [[2, 4]])
        np.testing.assert_array_equal(infer("private", KEYS["indexing"]), [[2, 4]])
        for model, key, code in (("demo", None, "UNAUTHENTICATED"), ("demo", KEYS["stranger"], "UNAUTHENTICATED"),
                                 ("private", KEYS["search"], "PERMISSION_DENIED")):
            with pytest.raises(InferenceServerException) as refused:
                infer(model, key)
            assert refused.value.status() == f"StatusCode.{code}", (model, code)
        assert client.is_server_live() and client.is_server_ready()  # the probes, without a key
        with pytest.raises(InferenceServerException):
            client.get_model_metadata("demo")  # any other method needs a key
        assert client.get_model_metadata("private", headers={"authorization": f"Bearer {KEYS['search']}"}).name
    finally:
        client.close()


def test_a_grpc_streams_messages_are_its_tenants(gw):
    """ModelStreamInfer presents its key once; each message is the tenant's, checked against
    its models in band (the stream stays open); without a key the stream is refused."""
    def message(model: str, name: str) -> pb.ModelInferRequest:
        request = pb.ModelInferRequest(model_name=model, id=name)
        request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1]).contents.fp32_contents.append(3)
        return request

    with grpc.insecure_channel(gw.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        sent = [message("demo", "first"), message("private", "second"), message("demo", "third")]
        answers = list(stub.ModelStreamInfer(iter(sent), timeout=30,
                                             metadata=(("authorization", f"Bearer {KEYS['search']}"),)))
        assert [(a.infer_response.id, a.error_message == "") for a in answers] == \
            [("first", True), ("second", False), ("third", True)]
        assert "may not call model 'private'" in answers[1].error_message
        with pytest.raises(grpc.RpcError) as refused:
            list(stub.ModelStreamInfer(iter(sent), timeout=30))
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_bad_keys_are_refused_each_in_its_protocols_shape_while_good_requests_flow(gw):
    """The corpus of bad keys: each a 401 (the header too large for the connection layer, a
    431), never a 200, while a tenant's good requests keep being answered."""
    stop, outcomes = threading.Event(), []

    def good() -> None:
        for i in range(2000):  # bounded
            if stop.is_set():
                return
            status, body = http_json("POST", f"{gw.http_url}/v1/models/demo:predict", {"instances": [[i]]},
                                     headers={"Authorization": f"Bearer {KEYS['search']}"})
            outcomes.append(status == 200 and body["predictions"] == [[2 * i]])

    bad: list[tuple[dict[str, str], int]] = [
        ({}, 401), ({"Authorization": "Bearer"}, 401), ({"Authorization": "Bearer   "}, 401),
        ({"Authorization": KEYS["search"]}, 401),  # no scheme
        ({"Authorization": f"Token {KEYS['search']}"}, 401), ({"x-api-key": ""}, 401),
        ({"Authorization": f"Bearer {KEYS['search'][:-1]}"}, 401),  # one character short
        ({"Authorization": f"Bearer {KEYS['search']}x"}, 401),
        ({"Authorization": f"Bearer {KEYS['search'].upper()}"}, 401),  # keys are case-sensitive
        ({"Authorization": "Bearer " + "é" * 40}, 401),  # not ASCII (latin-1 on the wire)
        ({"Authorization": f"Bearer {sha256(KEYS['search'])}"}, 401),  # its digest is not the key
        ({"Authorization": "Bearer " + "k" * 70_000}, 431),  # past the header block's bound
    ]
    thread = threading.Thread(target=good)
    thread.start()
    try:
        for headers, expected in bad:
            status, body = http_json("POST", f"{gw.http_url}/v1/models/demo:predict", {"instances": [[1]]},
                                     headers=headers)
            assert status == expected, headers
            if expected == 401:
                assert "error" in body and KEYS["search"] not in body["error"]
    finally:
        stop.set()
        thread.join(timeout=60)
    assert outcomes and all(outcomes)


UNICODE_KEYS = {"by-variable": "ключ-é-🔑-7f3a9c21e4b8", "by-file": "clé-fichier-ß-1b2c3d4e",
                "by-digest": "鍵-日本語-5a5a5a5a5a5a"}


def grpc_infer_over_curl(address: str, header: bytes) -> bytes:
    """One ModelInfer call sent by curl over HTTP/2 with `header` as the client wrote its
    bytes (gRPC's own clients send no metadata value past ASCII; other clients may); its
    head and trailers as curl prints them."""
    request = pb.ModelInferRequest(model_name="demo")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 2]).contents.fp32_contents.extend([1, 2])
    payload = request.SerializeToString()
    frame = b"\x00" + len(payload).to_bytes(4, "big") + payload
    return subprocess.run(
        [CURL, "-sS", "-i", "--http2-prior-knowledge", "-H", "content-type: application/grpc", "-H", "te: trailers",
         "-H", header, "--data-binary", "@-", f"http://{address}/inference.GRPCInferenceService/ModelInfer"],
        input=frame, capture_output=True, check=True, timeout=30, env=CURL_ENV).stdout


def test_a_key_past_ascii_is_the_utf8_its_client_sends_over_http_and_grpc(tmp_path, monkeypatch):
    """Keys with characters past ASCII, declared by a variable, a file and a digest, match
    the UTF-8 bytes a client sends: over HTTP (which Tornado reads as latin-1), in
    `authorization` metadata from a client that sends it (curl over HTTP/2) and in
    `authorization-bin` from gRPC's own clients (whose metadata values are ASCII). The same
    characters sent as latin-1 are another key. Before: 401 over HTTP for every one of them."""
    key_file = tmp_path / "unicode.key"
    key_file.write_text(UNICODE_KEYS["by-file"] + "\n", encoding="utf-8")
    monkeypatch.setenv("UNICODE_API_KEY", UNICODE_KEYS["by-variable"])
    digest = hashlib.sha256(UNICODE_KEYS["by-digest"].encode()).hexdigest()
    document = {"models": [DEMO], "server": {"http_port": 0, "grpc_port": 0},
                "tenants": [{"name": "by-variable", "key_env": "UNICODE_API_KEY"},
                            {"name": "by-file", "key_file": str(key_file)},
                            {"name": "by-digest", "key_sha256": [digest]}]}
    with running_gateway(gateway_config.parse(document)) as gw:
        def curl(path: str, header: bytes, body: bytes | None = None) -> int:
            command: list[str | bytes] = [CURL, "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-H", header,
                                          f"{gw.http_url}{path}"]
            if body is not None:
                command += ["-H", "Content-Type: application/json", "--data-binary", body]
            return int(subprocess.run(command, capture_output=True, check=True, timeout=30, env=CURL_ENV).stdout)

        body = orjson.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]})
        with grpc.insecure_channel(gw.grpc_address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            for name, key in UNICODE_KEYS.items():
                sent = key.encode("utf-8")
                assert curl("/v2/models/demo/infer", b"Authorization: Bearer " + sent, body) == 200, name
                assert curl("/v1/models/demo:predict", b"x-api-key: " + sent, b'{"instances": [[1, 2]]}') == 200
                assert curl("/metrics", b"Authorization: Bearer " + sent) == 200, name  # the Application's path
                assert curl("/v2/models/demo/infer", b"Authorization: Bearer " + sent[:-1] + b"X", body) == 401
                latin = key.encode("latin-1", "replace")  # where latin-1 has the characters, another key
                assert curl("/v2/models/demo/infer", b"Authorization: Bearer " + latin, body) == 401, name
                answer = grpc_infer_over_curl(gw.grpc_address, b"authorization: Bearer " + sent)
                assert b"grpc-status: 0" in answer and b"grpc-status: 16" not in answer, (name, answer)
                request = pb.ModelInferRequest(model_name="demo")
                request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 2]).contents.fp32_contents.extend([1, 2])
                answered = stub.ModelInfer(request, timeout=30, metadata=(("authorization-bin", b"Bearer " + sent),))
                assert answered.model_name == "demo", name
                with pytest.raises(grpc.RpcError) as refused:
                    stub.ModelInfer(request, timeout=30, metadata=(("authorization-bin", b"Bearer " + sent + b"X"),))
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            refused_answer = grpc_infer_over_curl(gw.grpc_address, "authorization: Bearer ключ-другой".encode())
            assert b"grpc-status: 16" in refused_answer, refused_answer


def test_the_token_and_keys_that_are_not_utf8_are_compared_as_the_bytes_sent(monkeypatch):
    """The head as Tornado reads it (latin-1): `[server] auth_token_env`'s token past ASCII
    matches its UTF-8, and a variable holding bytes that are not UTF-8 (which os.environ
    keeps as surrogates) matches those bytes. Before: the token was refused, and the
    variable's key could not even be hashed."""
    def head(value: bytes) -> tornado.httputil.HTTPHeaders:
        return tornado.httputil.HTTPHeaders.parse((b"Authorization: Bearer " + value + b"\r\n").decode("latin-1"))

    token = "jéton-🔑-0123456789"
    assert intake.admit(FrontDoor(token=token), head(token.encode())) == ""
    with pytest.raises(Unauthenticated):
        intake.admit(FrontDoor(token=token), head(token.encode("latin-1", "replace")))
    monkeypatch.setenv("RAW_API_KEY", os.fsdecode(b"k\xff\xfe-raw"))  # as os.environ reads such bytes
    door = FrontDoor(tenants=directory([(Tenant("raw"), KeySource(env="RAW_API_KEY"))]))
    assert intake.admit(door, head(b"k\xff\xfe-raw")) == "raw"


def test_a_calls_tenant_is_its_batch_requests():
    call = Call("oip_http", "demo", tenant="search")
    request = call.batch_request("demo", [Tensor("INPUT0", "FP32", np.ones((1, 1), np.float32))])
    assert request.tenant == "search"
    assert Call("oip_http", "demo").batch_request("demo", []).tenant == ""


# -- check-config: every malformed [[tenants]] table, one line, exit 2, naming the key ----------

BASE = '[[models]]\nname = "embed"\nbackend = "simulated"\n'
GOOD_DIGEST = sha256("a key")


def tenant(*lines: str) -> str:
    return "[[tenants]]\n" + "\n".join(lines) + "\n"


MALFORMED = [
    ("two key sources", tenant('name = "a"', 'key_env = "TENANT_KEY_A"', f'key_sha256 = ["{GOOD_DIGEST}"]'),
     "tenants[0].key_sha256"),
    ("no key", tenant('name = "a"'), "tenants[0]: needs its key"),
    ("an unknown key", tenant('name = "a"', 'key_env = "TENANT_KEY_A"', "burst = 5"), "tenants[0].burst"),
    ("a bad digest", tenant('name = "a"', 'key_sha256 = ["not-hex"]'), "tenants[0].key_sha256[0]"),
    ("a digest too short", tenant('name = "a"', f'key_sha256 = ["{GOOD_DIGEST[:-2]}"]'), "tenants[0].key_sha256[0]"),
    ("no digests", tenant('name = "a"', "key_sha256 = []"), "tenants[0].key_sha256"),
    ("a negative quota", tenant('name = "a"', 'key_env = "TENANT_KEY_A"', "requests_per_second = -5"),
     "tenants[0].requests_per_second"),
    ("a zero token quota", tenant('name = "a"', 'key_env = "TENANT_KEY_A"', "tokens_per_minute = 0"),
     "tenants[0].tokens_per_minute"),
    ("a rate of one request in ages", tenant('name = "a"', 'key_env = "TENANT_KEY_A"', "requests_per_second = 1e-300"),
     "tenants[0].requests_per_second: must be >= 0.001"),
    ("a token quota below one token", tenant('name = "a"', 'key_env = "TENANT_KEY_A"', "tokens_per_minute = 0.5"),
     "tenants[0].tokens_per_minute: must be >= 1"),
    ("a zero weight", tenant('name = "a"', 'key_env = "TENANT_KEY_A"', "weight = 0"), "tenants[0].weight"),
    ("an infinite weight", tenant('name = "a"', 'key_env = "TENANT_KEY_A"', "weight = inf"), "tenants[0].weight"),
    ("a zero max_concurrent", tenant('name = "a"', 'key_env = "TENANT_KEY_A"', "max_concurrent = 0"),
     "tenants[0].max_concurrent"),
    ("a fractional max_concurrent", tenant('name = "a"', 'key_env = "TENANT_KEY_A"', "max_concurrent = 1.5"),
     "tenants[0].max_concurrent"),
    ("priority zero", tenant('name = "a"', 'key_env = "TENANT_KEY_A"', "priority = 0"), "tenants[0].priority"),
    ("a fractional priority", tenant('name = "a"', 'key_env = "TENANT_KEY_A"', "priority = 1.5"),
     "tenants[0].priority"),
    ("duplicate names", tenant('name = "a"', 'key_env = "TENANT_KEY_A"') + tenant('name = "a"', 'key_env = "TENANT_KEY_B"'),
     "tenants[1].name"),
    ("one digest given twice", tenant('name = "a"', f'key_sha256 = ["{GOOD_DIGEST}"]')
     + tenant('name = "b"', f'key_sha256 = ["{GOOD_DIGEST.upper()}"]'), "tenants[1].key_sha256"),
    ("one key by env and by digest", tenant('name = "a"', 'key_env = "TENANT_KEY_A"')
     + tenant('name = "b"', f'key_sha256 = ["{sha256("secret-a")}"]'), "tenants[1].key_sha256"),
    ("one key by env and by file", tenant('name = "a"', 'key_env = "TENANT_KEY_A"')
     + tenant('name = "b"', 'key_file = "{same_key_file}"'), "tenants[1].key_file"),
    ("an unset variable", tenant('name = "a"', 'key_env = "TENANT_KEY_UNSET"'), "tenants[0].key_env"),
    ("a missing file", tenant('name = "a"', 'key_file = "/nonexistent/key"'), "tenants[0].key_file"),
    ("an empty file", tenant('name = "a"', 'key_file = "{empty_file}"'), "tenants[0].key_file"),
    ("a model not served", tenant('name = "a"', 'key_env = "TENANT_KEY_A"', 'models = ["nope"]'), "tenants[0].models"),
    ("a name that cannot label a metric", tenant('name = "a b"', 'key_env = "TENANT_KEY_A"'), "tenants[0].name"),
    ("not an array of tables", 'tenants = "everyone"\n', "tenants"),
    ("the token's tenant named again", '[server]\nauth_token_env = "TENANT_KEY_B"\n'
     + tenant('name = "default"', 'key_env = "TENANT_KEY_A"'), "tenants[0].name"),
    ("the token given to a tenant too", '[server]\nauth_token_env = "TENANT_KEY_A"\n'
     + tenant('name = "a"', 'key_env = "TENANT_KEY_A"'), "server.auth_token_env"),
]


@pytest.mark.parametrize("case, table, named", MALFORMED, ids=[case for case, _, _ in MALFORMED])
def test_check_config_refuses_a_malformed_tenants_table_naming_the_key(tmp_path, monkeypatch, capsys,
                                                                       case, table, named):
    monkeypatch.setenv("TENANT_KEY_A", "secret-a")
    monkeypatch.setenv("TENANT_KEY_B", "secret-b")
    monkeypatch.delenv("TENANT_KEY_UNSET", raising=False)
    (tmp_path / "same.key").write_text("secret-a\n")
    (tmp_path / "empty.key").write_text("\n")
    path = tmp_path / "gateway.toml"
    path.write_text(BASE + table.replace("{same_key_file}", str(tmp_path / "same.key"))
                    .replace("{empty_file}", str(tmp_path / "empty.key")))
    assert cli.main(["check-config", str(path)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith("batching-gateway: config error: ") and named in error, error
    for secret in ("secret-a", "secret-b", sha256("secret-a"), sha256("secret-b")):
        assert secret not in error.lower()


# A key as an operator might paste it, in every field of a table but its own.
PASTED = "sk-live-Q2hhbmdlTWU/7f3a9c21+e4b8=="
MISPLACED = [
    ("name", tenant(f'name = "{PASTED}"', 'key_env = "TENANT_KEY_A"'), "tenants[0].name: must be 1 to 64"),
    ("name twice", tenant('name = "sk-live-7f3a9c21e4b8"', 'key_env = "TENANT_KEY_A"')
     + tenant('name = "sk-live-7f3a9c21e4b8"', 'key_env = "TENANT_KEY_B"'), "tenants[1].name: the same name as "
                                                                            "tenants[0]'s"),
    ("key_env", tenant('name = "a"', f'key_env = "{PASTED}"'),
     "tenants[0].key_env: (tenant 'a') the environment variable it names is unset or empty"),
    ("key_env as a list", tenant('name = "a"', f'key_env = ["{PASTED}"]'),
     "tenants[0].key_env: must be a non-empty string, got an array"),
    ("key_file", tenant('name = "a"', f'key_file = "{PASTED}"'),
     "tenants[0].key_file: (tenant 'a') cannot read the file it names: FileNotFoundError"),
    ("key_file a directory", tenant('name = "a"', 'key_file = "{directory}"'),
     "tenants[0].key_file: (tenant 'a') the file it names is not a regular file"),
    ("models", tenant('name = "a"', 'key_env = "TENANT_KEY_A"', f'models = ["embed", "{PASTED}"]'),
     "tenants[0].models[1]: is not the name of one of the [[models]]"),
    ("key_sha256", tenant('name = "a"', f'key_sha256 = ["{PASTED}"]'), "tenants[0].key_sha256[0]: is not a SHA-256"),
    ("weight", tenant('name = "a"', 'key_env = "TENANT_KEY_A"', f'weight = "{PASTED}"'),
     "tenants[0].weight: must be a number, got a string"),
    ("priority", tenant('name = "a"', 'key_env = "TENANT_KEY_A"', f'priority = "{PASTED}"'),
     "tenants[0].priority: must be an integer, got a string"),
    ("requests_per_second", tenant('name = "a"', 'key_env = "TENANT_KEY_A"', f'requests_per_second = "{PASTED}"'),
     "tenants[0].requests_per_second: must be a number, got a string"),
    ("tokens_per_minute", tenant('name = "a"', 'key_env = "TENANT_KEY_A"', f'tokens_per_minute = "{PASTED}"'),
     "tenants[0].tokens_per_minute: must be a number, got a string"),
    ("max_concurrent", tenant('name = "a"', 'key_env = "TENANT_KEY_A"', f'max_concurrent = "{PASTED}"'),
     "tenants[0].max_concurrent: must be an integer, got a string"),
    ("a key of its own", tenant('name = "a"', 'key_env = "TENANT_KEY_A"', f'"{PASTED}" = true'),
     "tenants[0]: a key that is not one of its keys"),
    ("a digit key as a number", tenant('name = "a"', 'key_env = "TENANT_KEY_A"', "weight = -73900412"),
     "tenants[0].weight: must be a positive, finite number"),
    ("the token's variable", '[server]\nauth_token_env = "sk-live-Q2hhbmdlTWU"\n' + tenant('name = "a"', 'key_env = "TENANT_KEY_A"'),
     "server.auth_token_env: the environment variable it names is unset or empty"),
]


@pytest.mark.parametrize("case, table, said", MISPLACED, ids=[case for case, _, _ in MISPLACED])
def test_a_key_written_into_the_wrong_field_is_never_repeated_by_the_config_error(tmp_path, monkeypatch, capsys,
                                                                                  case, table, said):
    """The error names the field and the tenant, never the value. Before: key_env, key_file,
    models, a duplicate name and every number of the table repeated it."""
    monkeypatch.setenv("TENANT_KEY_A", "secret-a")
    monkeypatch.setenv("TENANT_KEY_B", "secret-b")
    path = tmp_path / "gateway.toml"
    path.write_text(BASE + table.replace("{directory}", str(tmp_path)))
    assert cli.main(["check-config", str(path)]) == 2
    error = capsys.readouterr().err
    assert said in error, error
    for secret in (PASTED, "Q2hhbmdlTWU", "7f3a9c21", "73900412", str(tmp_path)):
        assert secret not in error, error


def test_check_config_as_a_command_exits_2_in_one_line(tmp_path):
    path = tmp_path / "gateway.toml"
    path.write_text(BASE + tenant('name = "a"', 'key_env = "X"', 'key_file = "/k"'))
    done = subprocess.run([sys.executable, "-m", "gateway", "check-config", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "tenants[0].key_file" in done.stderr


def test_check_config_names_the_tenants_of_a_good_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TENANT_KEY_A", "secret-a")
    path = tmp_path / "gateway.toml"
    path.write_text(BASE + tenant('name = "a"', 'key_env = "TENANT_KEY_A"', 'models = ["embed"]', "priority = 1",
                                  "weight = 2.5", "requests_per_second = 50", "tokens_per_minute = 600000",
                                  "max_concurrent = 64")
                    + tenant('name = "b"', f'key_sha256 = ["{GOOD_DIGEST}", "{sha256("next key")}"]'))
    assert cli.main(["check-config", str(path)]) == 0
    assert capsys.readouterr().out.strip().endswith("ok (1 model(s): embed; 2 tenant(s): a, b)")


def test_a_gateway_started_open_refuses_a_reload_that_declares_the_first_tenant(monkeypatch):
    """Whether keys are checked is settled at the start (gRPC's interceptor is installed then):
    the reload is refused whole, and the gateway goes on serving as it was."""
    monkeypatch.setenv("TENANT_KEY_A", "secret-a")
    document: dict[str, Any] = {"models": [DEMO], "server": {"http_port": 0, "grpc_port": 0}}
    with running_gateway(gateway_config.parse(document)) as gw:
        with_tenants = gateway_config.parse({**document, "tenants": [{"name": "a", "key_env": "TENANT_KEY_A"}]})
        with pytest.raises(gateway_config.ConfigError, match="restart it to require keys"):
            gw.call(gw.gateway.service.reconfigure(with_tenants, 1.0))
        assert http_json("POST", f"{gw.http_url}/v1/models/demo:predict", {"instances": [[1]]})[0] == 200


def test_with_the_token_too_it_is_the_key_of_a_tenant_named_default(monkeypatch):
    monkeypatch.setenv("GATEWAY_TOKEN", "the-old-shared-token")
    monkeypatch.setenv("TENANT_KEY_A", "secret-a")
    parsed = gateway_config.parse({"models": [{"name": "embed"}], "server": {"auth_token_env": "GATEWAY_TOKEN"},
                                   "tenants": [{"name": "a", "key_env": "TENANT_KEY_A", "models": []}]})
    assert [(t.name, t.models) for t in parsed.tenants] == [("a", ()), ("default", None)]
    assert [p.name for p in parsed.tenant_policies] == ["a", "default"]


# -- SIGHUP: keys rotate, tenants come and go, nothing is lost ----------------------------------

@contextlib.contextmanager
def held_v1_predictor() -> Iterator[tuple[str, list[int], threading.Event]]:
    """A KServe v1 predictor holding every call until released."""
    seen: list[int] = []
    release = threading.Event()

    class Handler(JsonHandler):
        def do_POST(self) -> None:  # noqa: N802
            rows = self.read_json()["instances"]
            seen.append(len(rows))
            release.wait(60)  # a bound only: the test releases it
            self.answer_json({"predictions": [[2 * x for x in row] for row in rows]})

        def do_GET(self) -> None:  # noqa: N802
            self.answer_json({"ready": True})

    try:
        with serving(Handler) as url:
            yield url, seen, release
    finally:
        release.set()


def test_sighup_rotates_keys_and_adds_and_removes_tenants_with_nothing_lost(tmp_path):
    old, new, rotated_file, newcomer = "sk-old-0f1e2d3c4b5a6978", "sk-new-8796a5b4c3d2e1f0", \
        "sk-file-2-5566778899aabbcc", "sk-newcomer-1234567890abcdef"
    key_file = tmp_path / "indexing.key"
    key_file.write_text(KEYS["indexing"])

    with held_v1_predictor() as (held_url, seen, release):
        held = (f'[[models]]\nname = "held"\nbackend = "kserve"\napi = "v1"\nurl = "{held_url}"\n'
                '[[models.inputs]]\nname = "INPUT0"\ndatatype = "FP32"\n'
                '[[models.outputs]]\nname = "OUTPUT0"\ndatatype = "FP32"\n')
        models = held + '[[models]]\nname = "demo"\nbackend = "simulated"\n[models.simulated]\ncall_ms = 20\n'

        def config(search: list[str], extra: str = "") -> str:
            return (models + tenant('name = "steady"', 'key_env = "STEADY_API_KEY"')
                    + tenant('name = "search"', f"key_sha256 = {[sha256(k) for k in search]!r}".replace("'", '"'))
                    + tenant('name = "indexing"', f'key_file = "{key_file}"') + extra)

        path = tmp_path / "gateway.toml"
        path.write_text(config([old]))
        process = gateway_process(path, log_level="INFO", env={"STEADY_API_KEY": "sk-steady-99aa88bb77cc66dd"})
        url = "http://" + process.fields["http"]

        def predict(key: str, model: str = "demo") -> int:
            return http_json("POST", f"{url}/v1/models/{model}:predict", {"instances": [[1]]},
                             headers={"Authorization": f"Bearer {key}"})[0]

        statuses: list[int] = []
        stop = threading.Event()

        def steady() -> None:
            for _ in range(500):  # bounded
                if stop.is_set():
                    return
                statuses.append(predict("sk-steady-99aa88bb77cc66dd"))

        clients = [threading.Thread(target=steady) for _ in range(4)]
        try:
            for client in clients:
                client.start()
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                try:
                    # A request of the old key, admitted and held at the predictor, outlives its key.
                    in_flight = pool.submit(predict, old, "held")
                    wait_for(lambda: len(seen) == 1, "the old key's request at the predictor")
                    assert predict(new) == 401 and predict(newcomer) == 401
                    # Rotation, step 1: both keys; and a tenant joins.
                    path.write_text(config([old, new], tenant('name = "newcomer"', 'key_env = "STEADY_API_KEY_2"')))
                    process.signal(signal.SIGHUP)
                    wait_for(lambda: "(tenant 'newcomer') the environment variable it names is unset" in process.log_text(),
                             "a reload naming a variable the gateway lacks to be refused")
                    assert predict(new) == 401  # refused whole: nothing of it applied
                    path.write_text(config([old, new], tenant('name = "newcomer"',
                                                              f'key_sha256 = ["{sha256(newcomer)}"]')))
                    process.signal(signal.SIGHUP)
                    wait_for(lambda: predict(new) == 200, "the new key")
                    assert predict(old) == 200 and predict(newcomer) == 200
                    # Step 2: the old key is gone; the newcomer leaves; indexing's file holds another key.
                    key_file.write_text(rotated_file + "\n")
                    path.write_text(config([new]))
                    process.signal(signal.SIGHUP)
                    wait_for(lambda: predict(old) == 401, "the old key refused")
                    assert predict(newcomer) == 401 and predict(new) == 200
                    assert predict(rotated_file) == 200 and predict(KEYS["indexing"]) == 401
                finally:
                    release.set()
                assert in_flight.result(30) == 200  # admitted before its key went: it finishes
            stop.set()
            for client in clients:
                client.join(timeout=60)
            assert statuses and set(statuses) == {200}  # nothing lost across the reloads
            assert process.stop() == 0
        finally:
            stop.set()
            process.kill()
        log = process.log_text()
        for secret in (old, new, rotated_file, newcomer, KEYS["indexing"], "sk-steady-99aa88bb77cc66dd"):
            assert secret not in log and sha256(secret) not in log


# -- no key, no digest, anywhere a client or an operator can read -------------------------------

def test_no_key_nor_its_digest_reaches_logs_metrics_spans_or_the_live_page(tmp_path):
    keys = {name: f"sk-{name}-{hashlib.md5(name.encode()).hexdigest()}" for name in ("search", "indexing", "ops")}
    wrong = "sk-wrong-00112233445566778899"
    key_file = tmp_path / "indexing.key"
    key_file.write_text(keys["indexing"])
    path = tmp_path / "gateway.toml"
    path.write_text("".join(
        f'[[models]]\nname = "{name}"\nbackend = "simulated"\n[models.simulated]\ncall_ms = 1\n'
        for name in ("demo", "private"))
        + tenant('name = "search"', 'key_env = "SEARCH_API_KEY"', 'models = ["demo"]')
        + tenant('name = "indexing"', f'key_file = "{key_file}"')
        + tenant('name = "ops"', f'key_sha256 = ["{sha256(keys["ops"])}"]', "models = []"))
    with grpc_receiver() as (endpoint, received):
        env = {"SEARCH_API_KEY": keys["search"], "OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
               "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
        process = gateway_process(path, log_level="DEBUG", env=env)
        try:
            url, grpc_address = "http://" + process.fields["http"], process.fields["grpc"]
            body = {"instances": [[1]]}
            for key in (*keys.values(), wrong, ""):
                for model in ("demo", "private"):
                    for header in ("Authorization", "x-api-key"):
                        value = f"Bearer {key}" if header == "Authorization" else key
                        http("POST", f"{url}/v1/models/{model}:predict", body, headers={header: value})
                client = triton_grpc.InferenceServerClient(grpc_address)
                try:
                    tensor = triton_grpc.InferInput("INPUT0", [1, 1], "FP32")
                    tensor.set_data_from_numpy(np.ones((1, 1), np.float32))
                    for model in ("demo", "private"):
                        with contextlib.suppress(InferenceServerException):
                            client.infer(model, [tensor], headers={"authorization": f"Bearer {key}"})
                finally:
                    client.close()
            ops = {"Authorization": f"Bearer {keys['ops']}"}
            metrics = http("GET", f"{url}/metrics", headers=ops)[2].decode()
            live = http("GET", f"{url}/dashboard/data", headers=ops)[2].decode()
            page = http("GET", f"{url}/dashboard", headers=ops)[2].decode()
            # What is grepped holds the tenants' usage, by name: the gateway_tenant_* families, the page's table.
            assert 'gateway_tenant_requests_total{code="200",tenant="search"}' in metrics
            # ops may call no model: its requests end at the front door (403), never counted, so it has no row.
            assert [tenant["name"] for tenant in orjson.loads(live)["tenants"]] == ["search", "indexing"]
            process.signal(signal.SIGHUP)  # a reload reads every key again
            wait_for(lambda: "reload:" in process.log_text(), "the reload")
        finally:
            assert process.stop() == 0
        wait_for(lambda: len(received.named("")) >= 2, "the request spans at the receiver")
    log = process.log_text()
    spans = "".join(str(span) for span in received.named(""))
    assert "gateway.tenant" in spans and '"search"' in spans  # the tenant's name is on its spans ...
    assert "tenant=search" in log  # ... and on its access-log lines (its 403)
    for key in (*keys.values(), wrong):
        digest = hashlib.sha256(key.encode()).digest()
        for secret in (key, digest.hex(), digest.hex().upper(), base64.b64encode(digest).decode()):
            for where, text in (("log", log), ("metrics", metrics), ("live", live), ("page", page),
                                ("spans", spans)):
                assert secret not in text, (where, key)


def test_under_workers_each_process_reads_the_keys_itself(tmp_path):
    """`--workers 2`: the workers get the config without keys (a pickled file) and read each
    key from its own source, as the batcher does."""
    key_file = tmp_path / "indexing.key"
    key_file.write_text(KEYS["indexing"] + "\n")
    path = tmp_path / "gateway.toml"
    path.write_text("".join(f'[[models]]\nname = "{name}"\nbackend = "simulated"\n' for name in ("demo", "private"))
                    + tenant('name = "search"', 'key_env = "SEARCH_API_KEY"', 'models = ["demo"]')
                    + tenant('name = "indexing"', f'key_file = "{key_file}"'))
    process = gateway_process(path, workers=2, env={"SEARCH_API_KEY": KEYS["search"]})
    try:
        url = "http://" + process.fields["http"]

        def predict(model: str, key: str | None) -> int:
            headers = {"x-api-key": key} if key is not None else {}
            return http_json("POST", f"{url}/v1/models/{model}:predict", {"instances": [[1]]}, headers=headers)[0]

        # A new connection each: the kernel spreads them over both processes.
        outcomes = [(predict("demo", KEYS["search"]), predict("private", KEYS["indexing"]),
                     predict("private", KEYS["search"]), predict("demo", None)) for _ in range(20)]
        assert set(outcomes) == {(200, 200, 403, 401)}
    finally:
        assert process.stop() == 0


def test_under_workers_a_quota_holds_for_the_gateway_as_a_whole(tmp_path):
    """`--workers 2`: a tenant's buckets are the batcher's, one set for both workers. 60
    requests, each on a new connection (the kernel spreads them over both processes), of a
    tenant allowed 10 rows a minute: 10 are answered (and what a sixth of a row a second
    refills meanwhile), not 10 by each worker."""
    path = tmp_path / "gateway.toml"
    path.write_text('[[models]]\nname = "demo"\nbackend = "simulated"\n'
                    + tenant('name = "capped"', f'key_sha256 = ["{sha256(KEYS["search"])}"]', "tokens_per_minute = 10"))
    process = gateway_process(path, workers=2)
    try:
        url = "http://" + process.fields["http"]
        started = time.monotonic()
        statuses = [http_json("POST", f"{url}/v1/models/demo:predict", {"instances": [[1]]},
                              headers={"x-api-key": KEYS["search"]})[0] for _ in range(60)]
        refilled = (time.monotonic() - started) * 10 / 60
        assert set(statuses) == {200, 429}
        assert 10 <= statuses.count(200) <= 10 + refilled + 1, statuses
    finally:
        assert process.stop() == 0
