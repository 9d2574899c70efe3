"""The gateway in front of the REAL KServe server with model `plain`, a `kserve.Model`
that describes no tensors (the common case: no get_input_types/get_output_types, as in
KServe's sklearn and xgboost runtimes). No signature is declared in the gateway's config.

It is ready as soon as KServe is; OIP clients (tritonclient HTTP and gRPC) pass through
with their own tensor names and still share batches; an OIP client of the v1 predictor
gets KServe's own convention (`output-0`); and v1 instances for the tensor predictor travel
as its twin, `input-0`."""
from __future__ import annotations

import concurrent.futures

import numpy as np
import orjson
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http

from tests.harness import config_for, http, http_json, running_gateway

N = 24


def plain(kserve_server, protocol: str, api: str) -> dict:
    url = kserve_server.http_url if protocol == "http" else kserve_server.grpc_address
    return {"name": "plain", "backend": "kserve", "protocol": protocol, "url": url, "api": api}


def oip_infer_http(http_url: str, data: np.ndarray) -> tuple[str, np.ndarray]:
    client = triton_http.InferenceServerClient(http_url.removeprefix("http://"))
    tensor = triton_http.InferInput("INPUT0", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    result = client.infer("plain", [tensor])
    output = result.get_response()["outputs"][0]
    return output["name"], result.as_numpy(output["name"])


def oip_infer_grpc(grpc_address: str, data: np.ndarray) -> tuple[str, np.ndarray]:
    with triton_grpc.InferenceServerClient(grpc_address) as client:
        tensor = triton_grpc.InferInput("INPUT0", list(data.shape), "FP32")
        tensor.set_data_from_numpy(data)
        result = client.infer("plain", [tensor])
        name = result.get_response().outputs[0].name
        return name, result.as_numpy(name)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_an_undescribed_v2_model_is_ready_and_oip_clients_pass_through_in_shared_batches(kserve_server, protocol):
    with running_gateway(config_for(plain(kserve_server, protocol, "v2"))) as gw:
        assert http_json("GET", f"{gw.http_url}/v2/health/ready")[0] == 200
        assert http_json("GET", f"{gw.http_url}/v2/models/plain/ready")[0] == 200
        status, metadata = http_json("GET", f"{gw.http_url}/v2/models/plain")
        assert status == 200 and metadata["inputs"] == [] and metadata["outputs"] == []

        before = [c for c in kserve_server.calls() if c.get("model") == "plain"]

        def one(i: int) -> None:
            data = np.array([[i, i + 0.5, -i]], np.float32)
            call = oip_infer_http if i % 2 else oip_infer_grpc
            name, got = call(gw.http_url if i % 2 else gw.grpc_address, data)
            assert name == "output-0"  # KServe's own name, passed through
            np.testing.assert_array_equal(got, data * 2)

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(one, range(N)))
        calls = [c for c in kserve_server.calls() if c.get("model") == "plain"][len(before):]
        assert sum(call["batch_size"] for call in calls) == N
        assert len(calls) < N, "requests were not merged"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_v1_instances_for_an_undescribed_tensor_model_travel_as_input_0(kserve_server, protocol):
    """KServe's and MLServer's name for an unnamed input, the twin of `output-0`: a custom
    model reading `payload.inputs[0]` gets the instances, typed by their values."""
    with running_gateway(config_for(plain(kserve_server, protocol, "v2"))) as gw:
        status, body = http_json("POST", f"{gw.http_url}/v1/models/plain:predict", {"instances": [[1, 2], [3, 4]]})
        assert (status, body["predictions"]) == (200, [[2, 4], [6, 8]])
        status, body = http_json("POST", f"{gw.http_url}/v1/models/plain:predict", {"instances": [[0.5], [1.5]]})
        assert (status, body["predictions"]) == (200, [[1.0], [3.0]])
        # What is not one tensor is still a 400 naming the config key, never a 503.
        status, body = http_json("POST", f"{gw.http_url}/v1/models/plain:predict", {"instances": [[1, 2], [3]]})
        assert status == 400 and "input-0" in body["error"] and "[[models.inputs]]" in body["error"]


def test_an_oip_client_of_an_undescribed_v1_model_gets_kserves_output_0(kserve_server):
    with running_gateway(config_for(plain(kserve_server, "http", "v1"))) as gw:
        assert http_json("GET", f"{gw.http_url}/v2/health/ready")[0] == 200
        status, body = http_json("POST", f"{gw.http_url}/v1/models/plain:predict", {"instances": [[1, 2], [3, 4]]})
        assert status == 200 and body["predictions"] == [[2, 4], [6, 8]]
        data = np.array([[1.5, 2.0, 3.0]], np.float32)
        for infer, address in [(oip_infer_http, gw.http_url), (oip_infer_grpc, gw.grpc_address)]:
            name, got = infer(address, data)
            assert name == "output-0"
            assert got.dtype == np.float64  # JSON numbers, typed as KServe types them (from_np_dtype)
            np.testing.assert_array_equal(got, data.astype(np.float64) * 2)
        # Integers stay integers, as KServe would answer them.
        status, body = http_json("POST", f"{gw.http_url}/v2/models/plain/infer", {"inputs": [
            {"name": "x", "datatype": "INT64", "shape": [2, 2], "data": [1, 2, 3, 4]}]})
        assert status == 200
        assert body["outputs"] == [{"name": "output-0", "datatype": "INT64", "shape": [2, 2], "data": [2, 4, 6, 8]}]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_request_parameters_travel_with_the_batch_and_split_batches(kserve_server, protocol):
    """Parameters reach the predictor (all but the gateway's own and triton_*), and requests
    whose parameters differ never share a batch."""
    with running_gateway(config_for(plain(kserve_server, protocol, "v2"))) as gw:
        before = len(kserve_server.calls())

        def one(i: int) -> str:
            parameters = {"mode": "a" if i % 2 else "b", "scale": 2, "timeout": 30_000_000, "priority": 1,
                          "triton_enable_empty_final_response": True}
            status, body = http_json("POST", f"{gw.http_url}/v2/models/plain/infer", {
                "id": f"req-{i}", "parameters": parameters,
                "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1], "data": [i]}]})
            assert status == 200 and body["id"] == f"req-{i}"
            return body["parameters"]["batch_id"]

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(one, range(N)))
        calls = [c for c in kserve_server.calls()[before:] if c["model"] == "plain"]
        assert sum(c["batch_size"] for c in calls) == N
        assert {c["parameters"].get("mode") for c in calls} == {"a", "b"}
        for call in calls:  # one mode per batch, and only what the predictor should see
            assert set(call["parameters"]) == {"mode", "scale"}, call
            assert call["parameters"]["scale"] == 2


def test_bad_timeout_and_priority_parameters_are_400(kserve_server):
    with running_gateway(config_for(plain(kserve_server, "http", "v2"))) as gw:
        for parameters, problem in [({"timeout": -5}, "timeout"), ({"timeout": "soon"}, "timeout"),
                                    ({"priority": -1}, "priority"), ({"nested": {"a": 1}}, "nested")]:
            status, body = http_json("POST", f"{gw.http_url}/v2/models/plain/infer", {
                "parameters": parameters, "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1], "data": [1]}]})
            assert status == 400 and problem in body["error"], body


def test_the_timeout_parameter_becomes_the_deadline(kserve_server):
    config = config_for({**plain(kserve_server, "http", "v2"), "batching": {"policy": "window", "max_latency_ms": 2000}})
    with running_gateway(config) as gw:
        status, body = http_json("POST", f"{gw.http_url}/v2/models/plain/infer", {
            "parameters": {"timeout": 50_000},  # 50 ms, Triton's microseconds; the window holds 2 s
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1], "data": [1]}]})
        assert status == 504 and "deadline" in body["error"]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_torchserve_uploads_reach_an_undescribed_oip_model_as_bytes_of_input_0_in_shared_batches(kserve_server,
                                                                                                 protocol):
    """Each upload is one BYTES element of `input-0` (shape [rows, 1]); `plain` doubles what
    it gets (numpy repeats bytes), and each client gets its own row back."""
    with running_gateway(config_for(plain(kserve_server, protocol, "v2"))) as gw:
        before = [c for c in kserve_server.calls() if c.get("model") == "plain"]

        def one(i: int) -> tuple[int, object]:
            status, _, body = http("PUT", f"{gw.http_url}/predictions/plain", f"row {i};".encode(),
                                   headers={"Content-Type": "text/plain"})
            return status, orjson.loads(body)

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(one, range(N)))
        assert answers == [(200, [f"row {i};row {i};"]) for i in range(N)]
        calls = [c for c in kserve_server.calls() if c.get("model") == "plain"][len(before):]
        assert sum(call["batch_size"] for call in calls) == N
        assert len(calls) < N, "uploads were not merged"
        if protocol == "grpc":  # bytes that are not text travel exactly (JSON answers them as KServe v1's b64)
            status, _, body = http("PUT", f"{gw.http_url}/predictions/plain", b"\x89PNG\xff\x00",
                                   headers={"Content-Type": "image/png"})
            assert (status, orjson.loads(body)) == (200, [{"b64": "iVBOR/8AiVBOR/8A"}])
