"""A corpus of bad inputs across v1 HTTP, OIP JSON, OIP binary, OIP gRPC and TorchServe's
uploads (raw bodies, multipart and url-encoded forms, gRPC input maps). Each gets a
4xx / INVALID_ARGUMENT (or the documented code) with a message naming the problem, and
never a 200, while good requests keep flowing through the same gateway the whole time;
after each bad HTTP input, its keep-alive connection serves the next request (or the
refusal said `Connection: close`)."""
from __future__ import annotations

import gzip
import struct
import threading
import time
from http.client import HTTPConnection

import grpc
import numpy as np
import orjson
import pytest

from gateway.rest.connections import DRAIN_BYTES
from tests.harness import config_for, http, http_json, running_gateway
from tests.kinds.test_tokens import cl100k_file
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc
from wire.generated.torchserve import inference_pb2 as ts_pb
from wire.generated.torchserve import inference_pb2_grpc as ts_grpc

LIMITS = {"max_body_bytes": 200_000, "max_json_bytes": 120_000, "max_instances": 100, "max_tensor_elements": 10_000}
MANY = LIMITS["max_tensor_elements"]  # BYTES elements of the hostile bodies: as many as a tensor may hold
BIG_JSON = 150_000  # between max_json_bytes and max_body_bytes
TYPED = ("INT32", "UINT8", "BOOL", "FP16")
FP32_1x2 = {"name": "INPUT0", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}


@pytest.fixture(scope="module")
def gw():
    demo = {"name": "demo", "backend": "simulated", "simulated": {"call_ms": 5}}
    text = {"name": "text", "backend": "simulated", "inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [-1]}]}
    encoder = {"name": "encoder", "backend": "simulated", "simulated": {"task": "embed"},
               "batching": {"max_batch_tokens": 1000}, "embeddings": {"token_ids_file": cl100k_file()}}
    reranker = {"name": "reranker", "backend": "simulated", "simulated": {"task": "rerank"},
                "batching": {"max_batch_tokens": 1000}}
    # One model per datatype whose values the corpus gets wrong: the model's check of the
    # datatype comes before the values are decoded, so each is sent to a model that takes it.
    typed = [{"name": datatype.lower(), "backend": "simulated",
              "inputs": [{"name": "INPUT0", "datatype": datatype, "shape": [-1, -1]}]} for datatype in TYPED]
    with running_gateway(config_for(demo, text, encoder, reranker, *typed, **LIMITS)) as running:
        yield running


@pytest.fixture(scope="module")
def good_traffic(gw):
    """Good requests over HTTP and gRPC for as long as the corpus runs."""
    stop = threading.Event()
    outcomes: list[str] = []

    def http_client():
        i = 0
        while not stop.is_set() and i < 5000:
            status, body = http_json("POST", f"{gw.http_url}/v1/models/demo:predict", {"instances": [[i, 1]]})
            outcomes.append("ok" if status == 200 and body["predictions"] == [[2 * i, 2]] else f"http {status} {body}")
            i += 1

    def grpc_client():
        with grpc.insecure_channel(gw.grpc_address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            i = 0
            while not stop.is_set() and i < 5000:
                request = pb.ModelInferRequest(model_name="demo")
                request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1]).contents.fp32_contents.append(i)
                try:
                    response = stub.ModelInfer(request, timeout=10)
                    got = np.frombuffer(response.raw_output_contents[0], np.float32)[0]
                    outcomes.append("ok" if got == 2 * i else f"grpc wrong {got}")
                except grpc.RpcError as error:
                    outcomes.append(f"grpc {error.code()}")
                i += 1

    threads = [threading.Thread(target=http_client), threading.Thread(target=grpc_client)]
    for thread in threads:
        thread.start()
    yield outcomes
    stop.set()
    for thread in threads:
        thread.join(timeout=30)


def j(document) -> bytes:
    return orjson.dumps(document)


def infer_with(**tensor) -> bytes:
    return j({"inputs": [{**FP32_1x2, **tensor}]})


V1 = "/v1/models/demo:predict"
V2 = "/v2/models/demo/infer"
HTTP_CASES = [
    # (id, path, body, status, message)
    # JSON is bounded apart (it costs ~18x its size to parse): refused with 413 naming the binary form.
    ("oip-json-over-json-limit", V2, infer_with(data=[1, 2], padding="x" * BIG_JSON), 413, "max_json_bytes"),
    ("v1-json-over-json-limit", V1, j({"instances": [[1, 2]], "padding": "x" * BIG_JSON}), 413, "max_json_bytes"),
    ("oip-timeout-null", V2, j({"parameters": {"timeout": None}, "inputs": [FP32_1x2]}), 400, "timeout"),
    ("oip-priority-null", V2, j({"parameters": {"priority": None}, "inputs": [FP32_1x2]}), 400, "priority"),
    # Triton's shared-memory extension is not implemented: said so, never a 200 with stale memory.
    ("oip-shm-input", V2, infer_with(parameters={"shared_memory_region": "in0", "shared_memory_byte_size": 8}), 400,
     "shared-memory extension"),
    ("oip-shm-output", V2, j({"inputs": [FP32_1x2], "outputs": [{"name": "OUTPUT0", "parameters": {
        "shared_memory_region": "out0", "shared_memory_byte_size": 8}}]}), 400, "shared-memory extension"),
    ("v1-empty-body", V1, b"", 400, "not valid JSON"),
    ("v1-truncated", V1, b'{"instances": [[1, 2]', 400, "not valid JSON"),
    ("v1-lone-brace", V1, b"{", 400, "not valid JSON"),
    ("v1-null", V1, b"null", 400, "JSON object"),
    ("v1-list", V1, b"[]", 400, "JSON object"),
    ("v1-string", V1, b'"instances"', 400, "JSON object"),
    ("v1-number", V1, b"42", 400, "JSON object"),
    ("v1-instances-object", V1, j({"instances": {}}), 400, "must be a list"),
    ("v1-instances-string", V1, j({"instances": "x"}), 400, "must be a list"),
    ("v1-instances-empty", V1, j({"instances": []}), 400, "empty"),
    ("v1-no-instances", V1, j({}), 400, "no 'instances'"),
    ("v1-ragged", V1, j({"instances": [[1, 2], [3]]}), 400, "ragged"),
    ("v1-strings-for-fp32", V1, j({"instances": [["a", "b"]]}), 400, "does not match"),
    ("v1-bools-for-fp32", V1, j({"instances": [[True]]}), 400, "does not match"),
    ("v1-nulls", V1, j({"instances": [[None]]}), 400, "does not match"),
    ("v1-object-instance", V1, j({"instances": [{"x": 1}]}), 400, "JSON object"),
    ("v1-wrong-rank", V1, j({"instances": [[[1]], [[2]]]}), 400, "expects"),
    ("v1-scalar-rows", V1, j({"instances": [1, 2]}), 400, "expects"),
    ("v1-too-many-instances", V1, j({"instances": [[1]] * 101}), 400, "limit of 100"),
    ("v1-invalid-utf8", V1, b'{"instances": [["\xff"]]}', 400, "not valid JSON"),
    ("v1-too-deep", V1, b"[" * 2000 + b"]" * 2000, 400, "not valid JSON"),
    ("v1-unknown-model", "/v1/models/absent:predict", j({"instances": [[1]]}), 404, "not served"),
    ("v1-invalid-base64", "/v1/models/text:predict", j({"instances": [{"b64": "!!!"}]}), 400, "base64"),
    ("v1-b64-not-string", "/v1/models/text:predict", j({"instances": [{"b64": 5}]}), 400, "b64"),
    ("v1-number-for-bytes", "/v1/models/text:predict", j({"instances": [5]}), 400, "strings"),
    ("v1-body-over-limit", V1, b'{"instances": [' + b"[1]," * 60_000 + b"[1]]}", 413, "exceeds the limit"),
    ("oip-bad-json", V2, b"{bad", 400, "not valid JSON"),
    ("oip-list", V2, b"[]", 400, "JSON object"),
    ("oip-inputs-object", V2, j({"inputs": {}}), 400, "non-empty list"),
    ("oip-inputs-missing", V2, j({"id": "x"}), 400, "non-empty list"),
    ("oip-input-not-object", V2, j({"inputs": [1]}), 400, "JSON object"),
    ("oip-no-name", V2, j({"inputs": [{}]}), 400, "'name'"),
    ("oip-name-number", V2, infer_with(name=5), 400, "'name'"),
    ("oip-no-datatype", V2, j({"inputs": [{"name": "INPUT0", "shape": [1, 2], "data": [1, 2]}]}), 400, "datatype"),
    ("oip-datatype-number", V2, infer_with(datatype=5), 400, "datatype"),
    ("oip-unknown-datatype", V2, infer_with(datatype="FLOAT32"), 400, "unknown datatype"),
    ("oip-internal-datatype", V2, infer_with(datatype="JSON"), 400, "unknown datatype"),
    ("oip-no-shape", V2, j({"inputs": [{"name": "INPUT0", "datatype": "FP32", "data": [1]}]}), 400, "shape"),
    ("oip-shape-string", V2, infer_with(shape="1,2"), 400, "shape"),
    ("oip-shape-empty", V2, infer_with(shape=[]), 400, "batch dimension"),
    ("oip-shape-negative", V2, infer_with(shape=[1, -2]), 400, "negative"),
    ("oip-shape-float", V2, infer_with(shape=[1, 1.5]), 400, "integers"),
    ("oip-shape-bool", V2, infer_with(shape=[True, 2]), 400, "integers"),
    ("oip-shape-huge", V2, infer_with(shape=[10**6, 10**6]), 400, "exceeds"),
    ("oip-shape-absurd", V2, infer_with(shape=[10**12]), 400, "exceeds"),
    ("oip-data-too-short", V2, infer_with(shape=[1, 3]), 400, "needs 3"),
    ("oip-data-too-long", V2, infer_with(data=[1, 2, 3]), 400, "needs 2"),
    ("oip-no-data", V2, j({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 2]}]}), 400, "neither"),
    ("oip-data-scalar", V2, infer_with(data=5), 400, "must be a list"),
    ("oip-strings-for-fp32", V2, infer_with(data=["a", "b"]), 400, "does not match"),
    ("oip-float-for-int32", "/v2/models/int32/infer", infer_with(datatype="INT32", data=[1.5, 2]), 400, "does not match"),
    ("oip-uint8-out-of-range", "/v2/models/uint8/infer", infer_with(datatype="UINT8", data=[300, 1]), 400, "out of range"),
    ("oip-int-for-bool", "/v2/models/bool/infer", infer_with(datatype="BOOL", data=[2, 1]), 400, "does not match"),
    ("oip-ragged-data", V2, infer_with(data=[[1, 2], [3]]), 400, "ragged"),
    ("oip-duplicate-inputs", V2, j({"inputs": [FP32_1x2, FP32_1x2]}), 400, "twice"),
    ("oip-wrong-input-name", V2, infer_with(name="IMAGE"), 400, "takes inputs"),
    ("oip-wrong-datatype", V2, infer_with(datatype="INT32"), 400, "is FP32"),
    ("oip-wrong-rank", V2, infer_with(shape=[2], data=[1, 2]), 400, "has shape"),
    ("oip-extra-input", V2, j({"inputs": [FP32_1x2, {**FP32_1x2, "name": "INPUT1"}]}), 400, "takes inputs"),
    ("oip-mismatched-batch", V2, j({"inputs": [FP32_1x2, {**FP32_1x2, "name": "B", "shape": [2, 1]}]}), 400, "takes inputs"),
    ("oip-id-number", V2, j({"id": 5, "inputs": [FP32_1x2]}), 400, "'id'"),
    ("oip-parameters-list", V2, j({"parameters": [], "inputs": [FP32_1x2]}), 400, "parameters"),
    ("oip-outputs-object", V2, j({"outputs": {}, "inputs": [FP32_1x2]}), 400, "'outputs'"),
    ("oip-output-name-number", V2, j({"outputs": [{"name": 5}], "inputs": [FP32_1x2]}), 400, "'name'"),
    ("oip-unknown-output", V2, j({"outputs": [{"name": "NOPE"}], "inputs": [FP32_1x2]}), 400, "no output named"),
    # Work bounded by the request's own size: each output once, so no amplified answer.
    ("oip-duplicate-outputs", V2, j({"outputs": [{"name": "OUTPUT0"}] * 3, "inputs": [FP32_1x2]}), 400, "more than once"),
    ("oip-shape-65-dims", V2, infer_with(shape=[1] * 65, data=[1]), 400, "dimensions"),
    ("v1-fp32-overflow", V1, j({"instances": [[1e39, 1]]}), 400, "out of range"),
    ("oip-fp32-overflow", V2, infer_with(data=[1e39, 1]), 400, "out of range"),
    ("oip-bytes-list-for-fp32", V2, j({"inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [1, MANY],
                                                   "data": [""] * MANY}]}), 400, "is FP32, got BYTES"),
    ("oip-fp16-overflow", "/v2/models/fp16/infer", infer_with(datatype="FP16", data=[70000.0, 1]), 400, "out of range"),
    ("oip-unknown-version", "/v2/models/demo/versions/7/infer", infer_with(), 404, "no version"),
    ("oip-unknown-model", "/v2/models/absent/infer", infer_with(), 404, "not served"),
    ("oip-body-over-limit", V2, infer_with(shape=[1, 120_000], data=[1] * 120_000), 413, "exceeds the limit"),
    ("no-such-endpoint", "/v2/models/demo/explain", infer_with(), 404, "no endpoint"),
]


@pytest.mark.parametrize("case_id, path, body, status, message", HTTP_CASES, ids=[c[0] for c in HTTP_CASES])
def test_bad_http_input(gw, good_traffic, case_id, path, body, status, message):
    got_status, _, payload = http("POST", gw.http_url + path, body, headers={"Content-Type": "application/json"})
    assert got_status == status, payload
    error = orjson.loads(payload)["error"]
    assert message in error
    assert "Traceback" not in error


@pytest.mark.parametrize("case_id, path, body, status, message", HTTP_CASES, ids=[c[0] for c in HTTP_CASES])
def test_after_a_bad_http_input_its_connection_serves_the_next_request(gw, good_traffic, case_id, path, body, status,
                                                                        message):
    """A keep-alive client sends its next request on the same connection: it is served there,
    unless the refusal came before a body over DRAIN_BYTES and said `Connection: close`."""
    host, port = gw.http_url.removeprefix("http://").rsplit(":", 1)
    client = HTTPConnection(host, int(port), timeout=30)
    try:
        client.request("POST", path, body, {"Content-Type": "application/json"})
        refused = client.getresponse()
        refused.read()
        assert refused.status == status
        closing, sock = refused.getheader("Connection") == "close", client.sock
        client.request("POST", V1, j({"instances": [[1, 2]]}))  # on a new connection if closing
        answer = client.getresponse()
        assert answer.status == 200 and orjson.loads(answer.read())["predictions"] == [[2, 4]]
        assert (closing, client.sock is sock) == ((True, False) if len(body) > DRAIN_BYTES else (False, True))
    finally:
        client.close()


def binary_body(header: dict, tail: bytes) -> tuple[bytes, dict[str, str]]:
    head = j(header)
    return head + tail, {"Inference-Header-Content-Length": str(len(head))}


def binary_input(size: int, **extra) -> dict:
    return {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 2],
                        "parameters": {"binary_data_size": size}, **extra}]}


BYTES_INPUT = {"inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [2], "parameters": {"binary_data_size": 12}}]}
def empty_bytes(count: int, size: int | None = None) -> dict:
    """A BYTES tensor of `count` elements in one row, of `size` bytes (4 each: empty ones)."""
    return {"inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [1, count],
                        "parameters": {"binary_data_size": 4 * count if size is None else size}}]}


def gzipped(body: bytes, headers: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    return gzip.compress(body), {**headers, "Content-Encoding": "gzip"}


BINARY_CASES = [
    ("size-past-end", "demo", *binary_body(binary_input(8), b"\0" * 4), "past the end"),
    ("unclaimed-bytes", "demo", *binary_body(binary_input(8), b"\0" * 12), "not claimed"),
    ("size-not-element-multiple", "demo", *binary_body(binary_input(7), b"\0" * 7), "needs 8"),
    ("size-negative", "demo", *binary_body(binary_input(-1), b""), "non-negative"),
    ("size-string", "demo", *binary_body(binary_input("8"), b"\0" * 8), "non-negative"),
    ("bytes-length-lies", "text", *binary_body(BYTES_INPUT, struct.pack("<I", 99) + b"abcdefgh"), "past the end"),
    ("bytes-leftover", "text", *binary_body(BYTES_INPUT, struct.pack("<I", 1) + b"a" + struct.pack("<I", 1) + b"bxx"), "left over"),
    # Hostile BYTES (issue 36, scaled to LIMITS; tests/test_huge_bytes_tensor.py sends the 64 MB
    # one): empty elements for an FP32 model, refused by the model's check before any element
    # is decoded, gzip'd too; and a count its bytes cannot hold, refused from the header.
    ("bytes-for-fp32-model", "demo", *binary_body(empty_bytes(MANY), b"\0" * 4 * MANY), "is FP32, got BYTES"),
    ("bytes-for-fp32-model-gzip", "demo", *gzipped(*binary_body(empty_bytes(MANY), b"\0" * 4 * MANY)),
     "is FP32, got BYTES"),
    ("bytes-count-cannot-fit", "text", *binary_body(empty_bytes(MANY, 16), b"\0" * 16), "hold at most 4"),
    ("header-longer-than-body", "demo", b'{"inputs": []}', {"Inference-Header-Content-Length": "500"}, "body is"),
    ("header-negative", "demo", b'{"inputs": []}', {"Inference-Header-Content-Length": "-5"}, "body is"),
    ("header-not-a-number", "demo", b'{"inputs": []}', {"Inference-Header-Content-Length": "abc"}, "integer"),
]


@pytest.mark.parametrize("case_id, model, body, headers, message", BINARY_CASES, ids=[c[0] for c in BINARY_CASES])
def test_bad_binary_input(gw, good_traffic, case_id, model, body, headers, message):
    status, _, payload = http("POST", f"{gw.http_url}/v2/models/{model}/infer", body,
                              headers={"Content-Type": "application/octet-stream", **headers})
    assert status == 400, payload
    assert message in orjson.loads(payload)["error"]


def form(*parts: bytes, boundary: str = "b") -> bytes:
    """A multipart/form-data body of fields a, b, c... with these values."""
    fields = [f'--{boundary}\r\nContent-Disposition: form-data; name="f{i}"\r\n\r\n'.encode() + part + b"\r\n"
              for i, part in enumerate(parts)]
    return b"".join(fields) + f"--{boundary}--\r\n".encode()


MULTIPART = "multipart/form-data; boundary=b"
TS_TEXT = "/predictions/text"
# TorchServe's uploads (wire.codecs.torchserve): raw bodies and forms, parsed by Tornado's
# bounded parser. (id, method, path, body, content type, status, message)
UPLOAD_CASES = [
    ("ts-no-final-boundary", "POST", TS_TEXT, form(b"v")[:-9], MULTIPART, 400, "no final boundary"),
    ("ts-no-boundary", "POST", TS_TEXT, form(b"v"), "multipart/form-data", 400, "boundary not found"),
    ("ts-empty-boundary", "POST", TS_TEXT, form(b"v"), "multipart/form-data; boundary=", 400, "boundary not found"),
    ("ts-part-without-name", "POST", TS_TEXT, b"--b\r\nContent-Disposition: form-data\r\n\r\nv\r\n--b--\r\n",
     MULTIPART, 400, "missing name"),
    ("ts-part-without-headers", "POST", TS_TEXT, b"--b\r\nv\r\n--b--\r\n", MULTIPART, 400, "missing headers"),
    ("ts-part-header-huge", "POST", TS_TEXT,
     b'--b\r\nContent-Disposition: form-data; name="a"\r\nX: ' + b"p" * 20_000 + b"\r\n\r\nv\r\n--b--\r\n",
     MULTIPART, 400, "header too large"),
    ("ts-too-many-parts", "POST", TS_TEXT, form(*[b"x"] * 65), MULTIPART, 400, "too many parts"),
    ("ts-no-fields", "POST", TS_TEXT, b"--b--\r\n", MULTIPART, 400, "no fields"),
    ("ts-urlencoded-too-many", "POST", TS_TEXT, b"&".join(b"k%d=1" % i for i in range(65)),
     "application/x-www-form-urlencoded", 400, "malformed"),
    ("ts-empty-put", "PUT", TS_TEXT, b"", "image/png", 400, "no body"),
    ("ts-over-body-limit", "PUT", TS_TEXT, b"\xff" * 200_001, "image/png", 413, "exceeds the limit"),
    ("ts-two-parts-one-input", "POST", TS_TEXT, form(b"a", b"b"), MULTIPART, 400, "named like"),
    ("ts-upload-to-fp32-model", "PUT", "/predictions/demo", b"\x89PNG", "image/png", 400, 'datatype = "BYTES"'),
    ("ts-declared-json-not-json", "POST", TS_TEXT, b"\x89PNG", "application/json", 400, "not valid JSON"),
    # A form part declared JSON is parsed like a JSON body, so it is bounded like one.
    ("ts-json-part-over-json-limit", "POST", TS_TEXT,
     b'--b\r\nContent-Disposition: form-data; name="a"; filename="a.json"\r\nContent-Type: application/json\r\n\r\n'
     + b"[" + b"1," * (BIG_JSON // 2) + b"1]\r\n--b--\r\n", MULTIPART, 413, "part 'a' holds"),
]


@pytest.mark.parametrize("case_id, method, path, body, content_type, status, message", UPLOAD_CASES,
                         ids=[c[0] for c in UPLOAD_CASES])
def test_bad_torchserve_upload(gw, good_traffic, case_id, method, path, body, content_type, status, message):
    got_status, _, payload = http(method, gw.http_url + path, body, headers={"Content-Type": content_type})
    answer = orjson.loads(payload)
    assert (got_status, answer["code"]) == (status, status), answer
    assert message in answer["message"]


TS_SERVICE = "/org.pytorch.serve.grpc.inference.InferenceAPIsService/Predictions"
TS_GRPC_CASES = [
    ("ts-grpc-empty-map", {}, "input map is empty"),
    ("ts-grpc-too-many-entries", {f"k{i}": b"x" for i in range(65)}, "at most 64"),
    ("ts-grpc-raw-to-fp32", {"data": b"\x89PNG"}, "is an upload"),
]


@pytest.mark.parametrize("case_id, entries, message", TS_GRPC_CASES, ids=[c[0] for c in TS_GRPC_CASES])
def test_bad_torchserve_grpc_upload(gw, good_traffic, case_id, entries, message):
    with grpc.insecure_channel(gw.grpc_address) as channel, pytest.raises(grpc.RpcError) as caught:
        ts_grpc.InferenceAPIsServiceStub(channel).Predictions(
            ts_pb.PredictionsRequest(model_name="demo", input=entries), timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in (caught.value.details() or "")


def grpc_request(*inputs, raw: list[bytes] | None = None, model: str = "demo") -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model)
    for name, datatype, shape, fp32 in inputs:
        tensor = request.inputs.add(name=name, datatype=datatype, shape=shape)
        if fp32 is not None:
            tensor.contents.fp32_contents.extend(fp32)
    request.raw_input_contents.extend(raw or [])
    return request


def with_int_contents() -> pb.ModelInferRequest:
    request = grpc_request(("INPUT0", "FP32", [1, 1], None))
    request.inputs[0].contents.int_contents.append(1)
    return request


def with_outputs(*names: str) -> pb.ModelInferRequest:
    request = grpc_request(("INPUT0", "FP32", [1, 1], [1]))
    for name in names:
        request.outputs.add(name=name)
    return request


INVALID = grpc.StatusCode.INVALID_ARGUMENT
def with_shared_memory(on: str) -> pb.ModelInferRequest:
    request = grpc_request(("INPUT0", "FP32", [1, 1], None if on == "input" else [1]))
    target = request.inputs[0] if on == "input" else request.outputs.add(name="OUTPUT0")
    target.parameters["shared_memory_region"].string_param = "region0"
    target.parameters["shared_memory_byte_size"].int64_param = 4
    return request


def text_request(*texts: bytes, shape: list[int] | None = None) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="encoder")
    request.inputs.add(name="text", datatype="BYTES", shape=shape or [len(texts), 1])
    request.inputs[0].contents.bytes_contents.extend(texts)
    return request


GRPC_CASES = [
    ("text-not-utf8", text_request(b"ok", b"\xff\xfe"), INVALID, "a text is not UTF-8"),
    ("two-texts-per-row", text_request(b"a", b"b", shape=[1, 2]), INVALID, "has shape [-1, 1]"),
    ("text-as-fp32", grpc_request(("text", "FP32", [1, 1], [1]), model="encoder"), INVALID, "is BYTES, got FP32"),
    ("shm-input", with_shared_memory("input"), grpc.StatusCode.INVALID_ARGUMENT, "shared-memory extension"),
    ("shm-output", with_shared_memory("output"), grpc.StatusCode.INVALID_ARGUMENT, "shared-memory extension"),
    ("no-inputs", grpc_request(), INVALID, "no inputs"),
    ("typed-count-mismatch", grpc_request(("INPUT0", "FP32", [1, 3], [1])), INVALID, "needs 3"),
    ("raw-wrong-size", grpc_request(("INPUT0", "FP32", [1, 2], None), raw=[b"\0" * 7]), INVALID, "7 bytes"),
    ("fp16-typed", grpc_request(("INPUT0", "FP16", [1, 1], None)), INVALID, "raw_input_contents"),
    ("unknown-datatype", grpc_request(("INPUT0", "FLOAT", [1, 1], [1])), INVALID, "unknown datatype"),
    ("raw-bytes-for-fp32-model", grpc_request(("INPUT0", "BYTES", [1, MANY], None), raw=[b"\0" * 4 * MANY]), INVALID,
     "is FP32, got BYTES"),
    ("raw-bytes-count-cannot-fit", grpc_request(("INPUT0", "BYTES", [1, MANY], None), raw=[b"\0" * 16]), INVALID,
     "hold at most 4"),
    ("raw-count-mismatch", grpc_request(("INPUT0", "FP32", [1, 1], None), raw=[b"\0" * 4, b"\0" * 4]), INVALID, "one per tensor"),
    ("typed-and-raw", grpc_request(("INPUT0", "FP32", [1, 1], [1]), raw=[b"\0" * 4]), INVALID, "both"),
    ("wrong-contents-field", with_int_contents(), INVALID, "int_contents"),
    ("negative-shape", grpc_request(("INPUT0", "FP32", [1, -1], None), raw=[b""]), INVALID, "negative"),
    ("absurd-shape", grpc_request(("INPUT0", "FP32", [10**12], None), raw=[b""]), INVALID, "exceeds"),
    ("empty-shape", grpc_request(("INPUT0", "FP32", [], [1])), INVALID, "batch dimension"),
    ("duplicate-names", grpc_request(("INPUT0", "FP32", [1, 1], [1]), ("INPUT0", "FP32", [1, 1], [1])), INVALID, "twice"),
    ("empty-name", grpc_request(("", "FP32", [1, 1], [1])), INVALID, "no name"),
    ("duplicate-outputs", with_outputs("OUTPUT0", "OUTPUT0"), INVALID, "more than once"),
    ("shape-65-dims", grpc_request(("INPUT0", "FP32", [1] * 65, [1])), INVALID, "dimensions"),
    ("wrong-input-name", grpc_request(("X", "FP32", [1, 1], [1])), INVALID, "takes inputs"),
    ("unknown-model", grpc_request(("INPUT0", "FP32", [1, 1], [1]), model="absent"), grpc.StatusCode.NOT_FOUND, "not served"),
    ("over-message-limit", grpc_request(("INPUT0", "FP32", [1, 60_000], None), raw=[b"\0" * 240_000]),
     grpc.StatusCode.RESOURCE_EXHAUSTED, ""),
]


@pytest.mark.parametrize("case_id, request_message, code, message", GRPC_CASES, ids=[c[0] for c in GRPC_CASES])
def test_bad_grpc_input(gw, good_traffic, case_id, request_message, code, message):
    with grpc.insecure_channel(gw.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.ModelInfer(request_message, timeout=10)
    assert caught.value.code() == code
    assert message in (caught.value.details() or "")


def test_a_message_that_is_not_protobuf_is_invalid_argument(gw, good_traffic):
    with grpc.insecure_channel(gw.grpc_address) as channel:
        infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")  # raw bytes both ways
        with pytest.raises(grpc.RpcError) as caught:
            infer(b"\xff\xff\xff\xff not protobuf", timeout=10)
    assert caught.value.code() == INVALID
    assert "not a valid ModelInferRequest" in (caught.value.details() or "")


EMBEDDINGS = "/v1/embeddings"
OPENAI_CASES = [
    ("openai-not-json", EMBEDDINGS, b'{"model": "encoder", "input": ', 400, "not valid JSON"),
    ("openai-not-an-object", EMBEDDINGS, j(["encoder", "x"]), 400, "must be a JSON object"),
    ("openai-no-model", EMBEDDINGS, j({"input": "x"}), 400, "'model' is required"),
    ("openai-model-not-a-string", EMBEDDINGS, j({"model": 7, "input": "x"}), 400, "'model' is required"),
    ("openai-unknown-model", EMBEDDINGS, j({"model": "absent", "input": "x"}), 404, "not served"),
    ("openai-not-an-embedding-model", EMBEDDINGS, j({"model": "demo", "input": "x"}), 404, "not an embedding model"),
    ("openai-no-input", EMBEDDINGS, j({"model": "encoder"}), 400, "'input' must be"),
    ("openai-input-null", EMBEDDINGS, j({"model": "encoder", "input": None}), 400, "'input' must be"),
    ("openai-input-empty-list", EMBEDDINGS, j({"model": "encoder", "input": []}), 400, "'input' must be"),
    ("openai-input-empty-string", EMBEDDINGS, j({"model": "encoder", "input": ["a", ""]}), 400, "empty string"),
    ("openai-input-object", EMBEDDINGS, j({"model": "encoder", "input": {"a": 1}}), 400, "'input' must be"),
    ("openai-input-mixed", EMBEDDINGS, j({"model": "encoder", "input": ["a", 3]}), 400, "mixes strings"),
    ("openai-input-nested-strings", EMBEDDINGS, j({"model": "encoder", "input": [["a"]]}), 400, "token ids"),
    ("openai-token-id-not-in-the-encoding", EMBEDDINGS, j({"model": "encoder", "input": [[9906, 100261]]}), 400,
     "token id 100261 is not in cl100k_base"),
    ("openai-token-ids-cut-inside-a-character", EMBEDDINGS, j({"model": "encoder", "input": [[9468, 99]]}), 400,
     "not UTF-8 text"),  # the first two of 🦜's three ids
    ("openai-token-id-past-64-bits", EMBEDDINGS, b'{"model": "encoder", "input": [[1, 18446744073709551616]]}', 400,
     "= 18446744073709551616 is out of range"),
    ("openai-token-id-past-32-bits", EMBEDDINGS, j({"model": "encoder", "input": [4294967296]}), 400, "out of range"),
    ("openai-token-id-a-float", EMBEDDINGS, j({"model": "encoder", "input": [[1, 2.5]]}), 400, "is 2.5"),
    ("openai-negative-token-id", EMBEDDINGS, j({"model": "encoder", "input": [[1, -2]]}), 400, "non-negative"),
    ("openai-too-many-texts", EMBEDDINGS, j({"model": "encoder", "input": ["a"] * 101}), 400, "at most 100"),
    ("openai-text-over-the-token-budget", EMBEDDINGS, j({"model": "encoder", "input": "x" * 4000}), 413,
     "(batching.max_batch_tokens = 1000)"),
    ("openai-bad-encoding", EMBEDDINGS, j({"model": "encoder", "input": "x", "encoding_format": "hex"}), 400,
     "'encoding_format' must be one of"),
    ("openai-encoding-zero", EMBEDDINGS, j({"model": "encoder", "input": "x", "encoding_format": 0}), 400,
     "must be one of float, base64, got 0"),
    ("openai-encoding-false", EMBEDDINGS, j({"model": "encoder", "input": "x", "encoding_format": False}), 400,
     "must be one of float, base64, got false"),
    ("openai-encoding-empty", EMBEDDINGS, j({"model": "encoder", "input": "x", "encoding_format": ""}), 400,
     "must be one of float, base64, got \"\""),
    ("openai-bad-dimensions", EMBEDDINGS, j({"model": "encoder", "input": "x", "dimensions": -1}), 400,
     "'dimensions' must be"),
    ("openai-dimensions-unsupported", EMBEDDINGS, j({"model": "encoder", "input": "x", "dimensions": 8}), 400,
     "'dimensions' is passed only"),
    ("openai-unknown-argument", EMBEDDINGS, j({"model": "encoder", "input": "x", "stream": True}), 400,
     "unrecognized request argument"),
    ("openai-body-over-json-limit", EMBEDDINGS, j({"model": "encoder", "input": "x" * BIG_JSON}), 413,
     "send the texts in several requests"),
]


@pytest.mark.parametrize("case_id, path, body, status, message", OPENAI_CASES, ids=[c[0] for c in OPENAI_CASES])
def test_bad_openai_input(gw, good_traffic, case_id, path, body, status, message):
    got_status, _, payload = http("POST", gw.http_url + path, body, headers={"Content-Type": "application/json"})
    assert got_status == status, payload
    error = orjson.loads(payload)["error"]
    assert message in error["message"] and error["type"]  # OpenAI's shape
    assert "Traceback" not in error["message"]


RERANK_V1, RERANK_V2 = "/v1/rerank", "/v2/rerank"
PAIR = {"model": "reranker", "query": "q", "documents": ["a"]}
COHERE_CASES = [
    ("cohere-not-json", RERANK_V2, b'{"model": "reranker", "query": ', 400, "not valid JSON"),
    ("cohere-not-an-object", RERANK_V2, j(["reranker", "q"]), 400, "must be a JSON object"),
    ("cohere-no-model", RERANK_V2, j({"query": "q", "documents": ["a"]}), 400, "'model' is required"),
    ("cohere-unknown-model", RERANK_V2, j({**PAIR, "model": "absent"}), 404, "not served"),
    ("cohere-not-a-rerank-model", RERANK_V1, j({**PAIR, "model": "encoder"}), 404, "not a rerank model"),
    ("cohere-no-query", RERANK_V2, j({"model": "reranker", "documents": ["a"]}), 400, "'query' is required"),
    ("cohere-query-not-a-string", RERANK_V2, j({**PAIR, "query": ["q"]}), 400, "'query' is required"),
    ("cohere-no-documents", RERANK_V2, j({"model": "reranker", "query": "q"}), 400, "'documents' is required"),
    ("cohere-documents-empty", RERANK_V2, j({**PAIR, "documents": []}), 400, "'documents' is empty"),
    ("cohere-documents-a-string", RERANK_V2, j({**PAIR, "documents": "a"}), 400, "'documents' is required"),
    ("cohere-document-empty", RERANK_V1, j({**PAIR, "documents": ["a", ""]}), 400, "'documents[1]' is empty"),
    ("cohere-document-a-number", RERANK_V2, j({**PAIR, "documents": [3]}), 400, "must be a string or an object"),
    ("cohere-document-object-without-text", RERANK_V1, j({**PAIR, "documents": [{"title": "t"}]}), 400,
     "without a 'text' string"),
    ("cohere-rank-fields-absent", RERANK_V1, j({**PAIR, "documents": [{"a": "x"}], "rank_fields": ["b"]}), 400,
     "has none of the 'rank_fields'"),
    ("cohere-rank-fields-not-a-list", RERANK_V1, j({**PAIR, "rank_fields": "text"}), 400, "'rank_fields' must be"),
    ("cohere-top-n-zero", RERANK_V2, j({**PAIR, "top_n": 0}), 400, "'top_n' must be a positive integer"),
    ("cohere-top-n-a-string", RERANK_V2, j({**PAIR, "top_n": "3"}), 400, "'top_n' must be a positive integer"),
    ("cohere-top-n-true", RERANK_V2, j({**PAIR, "top_n": True}), 400, "'top_n' must be a positive integer"),
    ("cohere-max-tokens-negative", RERANK_V2, j({**PAIR, "max_tokens_per_doc": -1}), 400, "'max_tokens_per_doc'"),
    ("cohere-return-documents-a-string", RERANK_V1, j({**PAIR, "return_documents": "yes"}), 400,
     "'return_documents' must be true or false"),
    ("cohere-priority-negative", RERANK_V2, j({**PAIR, "priority": -1}), 400, "'priority' must be"),
    ("cohere-max-chunks", RERANK_V1, j({**PAIR, "max_chunks_per_doc": 10}), 400, "not chunked"),
    ("cohere-relevant-spans", RERANK_V2, j({**PAIR, "relevant_spans": {"enabled": True}}), 400, "not supported"),
    ("cohere-v1-field-on-v2", RERANK_V2, j({**PAIR, "rank_fields": ["text"]}), 400, "unknown field(s) for /v2"),
    ("cohere-too-many-documents", RERANK_V2, j({**PAIR, "documents": ["a"] * 101}), 400, "at most 100"),
    ("cohere-pair-over-the-token-budget", RERANK_V2, j({**PAIR, "documents": ["x" * 4000]}), 413,
     "(batching.max_batch_tokens = 1000)"),
    ("cohere-body-over-json-limit", RERANK_V2, j({**PAIR, "query": "x" * BIG_JSON}), 413,
     "send fewer documents in each request"),
]


@pytest.mark.parametrize("case_id, path, body, status, message", COHERE_CASES, ids=[c[0] for c in COHERE_CASES])
def test_bad_cohere_input(gw, good_traffic, case_id, path, body, status, message):
    got_status, _, payload = http("POST", gw.http_url + path, body, headers={"Content-Type": "application/json"})
    assert got_status == status, payload
    error = orjson.loads(payload)
    assert list(error) == ["message"] and message in error["message"]  # Cohere's shape
    assert "Traceback" not in error["message"]


def test_corpus_size():
    assert len(HTTP_CASES) + len(BINARY_CASES) + len(GRPC_CASES) + len(UPLOAD_CASES) + len(TS_GRPC_CASES) \
        + len(OPENAI_CASES) + len(COHERE_CASES) >= 120


def test_good_requests_all_succeeded_while_the_corpus_ran(good_traffic):
    time.sleep(0.2)  # let the background clients complete a few more round trips
    assert len(good_traffic) > 20
    failures = [outcome for outcome in good_traffic if outcome != "ok"]
    assert not failures, failures[:5]



def test_an_error_repeats_client_chosen_names_within_a_bound(gw, good_traffic):
    """Two 60 KB keys in a gRPC Predictions input map: INVALID_ARGUMENT with a bounded
    message, not RESOURCE_EXHAUSTED from the client's 8 KiB limit on trailing metadata."""
    with grpc.insecure_channel(gw.grpc_address) as channel:
        request = ts_pb.PredictionsRequest(model_name="text", input={"k" * 60_000: b"a", "j" * 60_000: b"b"})
        with pytest.raises(grpc.RpcError) as refused:
            ts_grpc.InferenceAPIsServiceStub(channel).Predictions(request, timeout=30)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()[:200]
    assert len(refused.value.details()) < 4096
    with grpc.insecure_channel(gw.grpc_address) as channel:  # an unknown model's name, 150 KB long
        request = pb.ModelInferRequest(model_name="m" * 150_000)
        request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1]).contents.fp32_contents.append(1.0)
        with pytest.raises(grpc.RpcError) as refused:
            pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND
    assert refused.value.details().startswith("Request for unknown model: 'mmm") and len(refused.value.details()) < 512
