"""The HTTP front end on the embedded simulated model: KServe v1, OIP JSON, OIP binary
(with the real tritonclient.http), health, metadata and error statuses."""
from __future__ import annotations

import concurrent.futures
import socket

import numpy as np
import orjson
import pytest
import tritonclient.http as triton_http
from tritonclient.utils import InferenceServerException

from tests.harness import config_for, http, http_json, running_gateway


@pytest.fixture(scope="module")
def gw():
    config = config_for({"name": "demo", "backend": "simulated", "simulated": {"call_ms": 20}},
                        max_instances=1000)
    with running_gateway(config) as running:
        yield running


def test_v1_predict_answers_one_prediction_per_instance_with_a_batch_id(gw):
    status, body = http_json("POST", f"{gw.http_url}/v1/models/demo:predict", {"instances": [[1, 2, 3, 4], [5, 6, 7, 8]]})
    assert status == 200
    assert body["predictions"] == [[2, 4, 6, 8], [10, 12, 14, 16]]
    assert isinstance(body["batchId"], str) and body["batchId"]


def test_v1_model_readiness(gw):
    assert http_json("GET", f"{gw.http_url}/v1/models/demo") == (200, {"name": "demo", "ready": True})
    assert http_json("GET", f"{gw.http_url}/v1/models/nope")[0] == 404


def test_concurrent_v1_clients_share_batches_and_each_gets_its_own_rows(gw):
    def one(i):
        return http_json("POST", f"{gw.http_url}/v1/models/demo:predict", {"instances": [[i, i + 0.5]]})

    before = gw.stats("demo").batches
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(one, range(64)))
    for i, (status, body) in enumerate(answers):
        assert status == 200
        assert body["predictions"] == [[2 * i, 2 * i + 1]]
    assert gw.stats("demo").batches - before < 64
    assert len({body["batchId"] for _, body in answers}) < 64


def test_oip_health_and_metadata(gw):
    assert http_json("GET", f"{gw.http_url}/v2/health/live") == (200, {"live": True})
    assert http_json("GET", f"{gw.http_url}/v2/health/ready") == (200, {"ready": True})
    status, server = http_json("GET", f"{gw.http_url}/v2")
    assert status == 200 and "binary_tensor_data" in server["extensions"]
    status, meta = http_json("GET", f"{gw.http_url}/v2/models/demo")
    assert status == 200
    assert meta["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, -1]}]
    assert meta["outputs"] == [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, -1]}]
    assert http_json("GET", f"{gw.http_url}/v2/models/demo/ready")[0] == 200
    assert http_json("GET", f"{gw.http_url}/v2/models/demo/versions/1/ready")[0] == 200
    assert http_json("GET", f"{gw.http_url}/v2/models/demo/versions/9/ready")[0] == 404


def test_oip_json_infer_with_version_path_and_id(gw):
    request = {"id": "req-7", "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2, 2], "data": [[1, 2], [3, 4]]}]}
    status, body = http_json("POST", f"{gw.http_url}/v2/models/demo/versions/1/infer", request)
    assert status == 200
    assert body["id"] == "req-7"
    assert body["outputs"] == [{"name": "OUTPUT0", "datatype": "FP32", "shape": [2, 2], "data": [2, 4, 6, 8]}]
    assert isinstance(body["parameters"]["batch_id"], str)


def test_tritonclient_http_binary_and_json_round_trip(gw):
    client = triton_http.InferenceServerClient(gw.http_url.removeprefix("http://"))
    assert client.is_server_live() and client.is_model_ready("demo")
    data = np.random.default_rng(0).random((3, 5), dtype=np.float32)
    for binary in (True, False):
        tensor = triton_http.InferInput("INPUT0", list(data.shape), "FP32")
        tensor.set_data_from_numpy(data, binary_data=binary)
        output = triton_http.InferRequestedOutput("OUTPUT0", binary_data=binary)
        result = client.infer("demo", [tensor], outputs=[output])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data * 2)
        assert result.get_response()["parameters"]["batch_id"]
    metadata = client.get_model_metadata("demo")
    assert metadata["inputs"][0]["name"] == "INPUT0"
    client.close()


def test_tritonclient_http_sees_gateway_errors(gw):
    client = triton_http.InferenceServerClient(gw.http_url.removeprefix("http://"))
    tensor = triton_http.InferInput("INPUT0", [1, 2], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 2), np.float32))
    with pytest.raises(InferenceServerException, match="not served"):
        client.infer("absent", [tensor])
    # In Triton's words first: its own examples (simple_http_infer_client.py) check them.
    for ask in (lambda: client.get_model_metadata("wrong_model_name"), lambda: client.infer("wrong_model_name", [tensor])):
        with pytest.raises(InferenceServerException) as refused:
            ask()
        assert refused.value.message().startswith("Request for unknown model"), refused.value.message()
    client.close()


@pytest.mark.parametrize("body, status, message", [
    (b"{not json", 400, "not valid JSON"),
    (b"[1,2]", 400, "JSON object"),
    ({"inputs": []}, 400, "non-empty"),
    ({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 3], "data": [1, 2]}]}, 400, "needs 3"),
    ({"inputs": [{"name": "INPUT0", "datatype": "FP99", "shape": [1], "data": [1]}]}, 400, "unknown datatype"),
    ({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": ["x"]}]}, 400, "does not match"),
    ({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1000000, 1000000], "data": [1]}]}, 400, "exceeds"),
    ({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, -2], "data": [1]}]}, 400, "negative"),
    ({"inputs": [{"name": "WRONG", "datatype": "FP32", "shape": [1, 1], "data": [1]}]}, 400, "takes inputs"),
    ({"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 1], "data": [1]}]}, 400, "is FP32"),
    ({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2000, 1], "data": [1] * 2000}]}, 400, "limit"),
])
def test_bad_oip_requests_get_400_with_a_message(gw, body, status, message):
    got_status, got = http_json("POST", f"{gw.http_url}/v2/models/demo/infer", body)
    assert got_status == status
    assert message in got["error"]


def test_binary_extension_with_lying_lengths_is_rejected(gw):
    header = b'{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,2],"parameters":{"binary_data_size":8}}]}'
    for tail, length, message in [(b"\0" * 4, len(header), "past the end"),
                                  (b"\0" * 12, len(header), "not claimed"),
                                  (b"\0" * 8, len(header) + 100, "body is")]:
        status, _, body = http("POST", f"{gw.http_url}/v2/models/demo/infer", header + tail,
                               headers={"Inference-Header-Content-Length": str(length)})
        assert status == 400 and message.encode() in body


@pytest.mark.parametrize("path, body, status, message", [
    ("/v1/models/demo:predict", b"nope", 400, "not valid JSON"),
    ("/v1/models/demo:predict", {"instances": []}, 400, "empty"),
    ("/v1/models/demo:predict", {"inputs": [1]}, 400, "no 'instances'"),
    ("/v1/models/demo:predict", {"instances": [[1, 2], [3]]}, 400, "ragged"),
    ("/v1/models/demo:predict", {"instances": [{"a": 1}]}, 400, "JSON object"),
    ("/v1/models/nope:predict", {"instances": [[1]]}, 404, "not served"),
    ("/v2/models/nope/infer", {"inputs": []}, 404, "not served"),
    ("/v3/whatever", {}, 404, "no endpoint"),
])
def test_bad_requests_get_the_right_status_and_never_200(gw, path, body, status, message):
    got_status, got = http_json("POST", gw.http_url + path, body)
    assert got_status == status
    assert message in got["error"]


@pytest.mark.parametrize("path", ["/v1/models/nope:predict", "/v2/models/nope/infer", "/v2/models/demo/versions/9/infer",
                                  "/predictions/nope", "/predictions/demo/9"])
def test_an_unknown_model_or_version_is_a_404_before_the_body_is_sent(gw, path):
    """The head alone is answered: a client uploading a large file to a wrong name learns at
    once, and the gateway reads none of it."""
    host, port = gw.http_url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST %s HTTP/1.1\r\nHost: gw\r\nContent-Length: 50000000\r\n\r\n" % path.encode())
        head = sock.recv(65536)  # no byte of the body was sent
    assert head.startswith(b"HTTP/1.1 404"), head[:200]
    assert b"not served" in head or b"no version" in head


@pytest.mark.parametrize("value", ["soon", "inf", "1e400", "1_000", "nan", "-5", "0x10"])
def test_request_timeout_header_is_a_plain_number_of_milliseconds(gw, value):
    status, body = http_json("POST", f"{gw.http_url}/v1/models/demo:predict", {"instances": [[1]]},
                             headers={"X-Request-Timeout-Ms": value})
    assert status == 400 and "milliseconds" in body["error"], (value, body)
    assert http_json("POST", f"{gw.http_url}/v1/models/demo:predict", {"instances": [[1]]},
                     headers={"X-Request-Timeout-Ms": "2500.5"})[0] == 200


@pytest.mark.parametrize("path, body", [
    ("/v1/models/demo:predict", {"instances": [[1]]}),
    ("/v2/models/demo/infer", {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1]}]}),
    ("/predictions/demo", b"[1.0]"),
])
def test_every_http_front_end_reads_the_priority_header_the_same_way(gw, path, body):
    status, answer = http_json("POST", f"{gw.http_url}{path}", body, headers={"X-Request-Priority": "high"})
    assert status == 400 and "X-Request-Priority" in str(answer), answer
    assert http_json("POST", f"{gw.http_url}{path}", body, headers={"X-Request-Priority": "1"})[0] == 200


def test_a_model_name_that_is_not_utf8_is_refused_and_counted_without_a_traceback(gw, caplog):
    status, body = http_json("POST", f"{gw.http_url}/v1/models/%ff%fe:predict", {"instances": [[1]]})
    assert status == 400 and "unicode" in body["error"].lower()
    metrics = http("GET", f"{gw.http_url}/metrics")[2].decode()
    assert 'gateway_requests_total{code="400",model="unknown",protocol="v1"}' in metrics
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")], caplog.text


def test_more_rows_than_the_queue_holds_is_refused_as_never_fitting(gw_small_queue):
    status, body = http_json("POST", f"{gw_small_queue.http_url}/v1/models/demo:predict", {"instances": [[1]] * 9})
    assert status == 413  # not 429: retrying can never make it fit
    assert "max_queue" in body["error"] and "8" in body["error"]
    assert http_json("POST", f"{gw_small_queue.http_url}/v1/models/demo:predict", {"instances": [[1]] * 8})[0] == 200


@pytest.fixture(scope="module")
def gw_small_queue():
    config = config_for({"name": "demo", "backend": "simulated", "simulated": {"call_ms": 1},
                         "batching": {"max_queue": 8, "max_batch_size": 4}})
    with running_gateway(config) as running:
        yield running


def test_a_split_request_is_answered_with_its_own_id_over_rest_and_grpc():
    import grpc

    from wire.generated.inference import grpc_service_pb2 as pb
    from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc

    config = config_for({"name": "demo", "backend": "simulated", "batching": {"max_batch_size": 4}})
    with running_gateway(config) as running:
        status, body = http_json("POST", f"{running.http_url}/v2/models/demo/infer", {"id": "split-rest", "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [10, 1], "data": list(range(10))}]})
        assert status == 200 and body["id"] == "split-rest"
        assert "," in body["parameters"]["batch_id"]  # it travelled in several batches
        with grpc.insecure_channel(running.grpc_address) as channel:
            request = pb.ModelInferRequest(model_name="demo", id="split-grpc")
            request.inputs.add(name="INPUT0", datatype="FP32", shape=[10, 1]).contents.fp32_contents.extend(range(10))
            response = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=10)
        assert response.id == "split-grpc"


def test_json_is_bounded_apart_from_binary_bodies():
    """[limits] max_json_bytes bounds a JSON document (it costs ~18x its size to parse, on the
    event loop); the same tensors in binary form are bounded by max_body_bytes only."""
    config = config_for({"name": "demo", "backend": "simulated", "simulated": {"call_ms": 1}},
                        max_json_bytes=50_000, max_body_bytes=1_000_000, max_tensor_elements=100_000)
    elements = 20_000
    data = np.arange(elements, dtype=np.float32)
    with running_gateway(config) as gw:
        url = f"{gw.http_url}/v2/models/demo/infer"
        as_json = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, elements], "data": data.tolist()}]}
        status, body = http_json("POST", url, as_json)
        assert status == 413 and "max_json_bytes" in body["error"] and "binary" in body["error"]
        header = orjson.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, elements],
                                           "parameters": {"binary_data_size": elements * 4}}]})
        status, _, answer = http("POST", url, header + data.tobytes(),
                                 headers={"Inference-Header-Content-Length": str(len(header))})
        assert status == 200, answer[:300]  # 80 kB of binary tensor, past the JSON limit
        # A TorchServe body too large for JSON is not parsed as JSON: it is an upload.
        status, body = http_json("POST", f"{gw.http_url}/predictions/demo", orjson.dumps(data.tolist()))
        assert status == 400 and "is an upload" in body["message"]
        status, body = http_json("POST", f"{gw.http_url}/v1/models/demo:predict", {"instances": [data.tolist()]})
        assert status == 413 and "max_json_bytes" in body["error"]


@pytest.mark.parametrize("path", ["/v1/models/demo:predict", "/v2/models/demo/infer"])
def test_a_json_body_over_the_json_limit_is_a_413_before_it_is_sent(gw, path):
    """50 MB declared, under max_body_bytes but over max_json_bytes (16 MiB): answered from
    the head alone, nothing read."""
    host, port = gw.http_url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST %s HTTP/1.1\r\nHost: gw\r\nContent-Length: 50000000\r\n\r\n" % path.encode())
        head = sock.recv(65536)
    assert head.startswith(b"HTTP/1.1 413"), head[:200]
    assert b"max_json_bytes" in head
