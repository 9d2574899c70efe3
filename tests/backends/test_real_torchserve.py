"""The gateway in front of the REAL TorchServe 0.12: over HTTP (KServe envelope), over its
own gRPC Predictions API (KServe envelope), and over its Open Inference Protocol gRPC
(kservev2 envelope: another service name, typed contents only, outputs flattened and FP64,
restored by the gateway). TorchServe's handler logs every call with its batch size, so the
tests see concurrent clients merged into fewer TorchServe calls."""
from __future__ import annotations

import concurrent.futures

import grpc
import numpy as np
import orjson
import pytest

from tests.backends.clients import fire_mixed, unique_row
from tests.harness import config_for, http, http_json, running_gateway
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc
from wire.generated.torchserve import inference_pb2 as ts_pb
from wire.generated.torchserve import inference_pb2_grpc as ts_grpc

N = 60
SIGNATURE = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]}],
             "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, 4]}]}
# (protocol, api, the server fixture, the envelope its handler logs)
ROUTES = {
    "http-v1": ("http", "v1", "torchserve_server", "kserve"),
    "grpc-v1": ("grpc", "v1", "torchserve_server", "kserve"),
    "grpc-v2": ("grpc", "v2", "torchserve_oip_server", "kservev2"),
}


def model_config(route: str, server, **extra) -> dict:
    protocol, api, _, _ = ROUTES[route]
    url = server.http_url if protocol == "http" else server.grpc_address
    return {"name": "double", "backend": "torchserve", "protocol": protocol, "url": url, "api": api,
            **SIGNATURE, **extra}


@pytest.fixture(params=list(ROUTES))
def route(request):
    """(route name, the running TorchServe for it): only the servers a test needs start."""
    return request.param, request.getfixturevalue(ROUTES[request.param][2])


def test_concurrent_clients_of_every_protocol_become_fewer_torchserve_calls(route):
    name, server = route
    with running_gateway(config_for(model_config(name, server))) as gw:
        before = len(server.calls())
        batch_ids = fire_mixed(gw.http_url, gw.grpc_address, "double", N)
        calls = server.calls()[before:]
        assert sum(call["batch_size"] for call in calls) == N  # every row reached TorchServe once
        assert len(calls) < N, "requests were not merged"
        assert {call["envelope"] for call in calls} == {ROUTES[name][3]}
        assert len(calls) == gw.stats("double").batches == len(set(batch_ids))


def test_oip_grpc_answers_have_the_batch_shape_and_the_declared_datatype(route):
    # TorchServe itself answers [rows * 4] FP64 named INPUT0 (kservev2); whatever the route,
    # the gateway's clients get OUTPUT0 FP32 [rows, 4].
    name, server = route
    with running_gateway(config_for(model_config(name, server))) as gw, \
            grpc.insecure_channel(gw.grpc_address) as channel:
        data = np.arange(12, dtype=np.float32).reshape(3, 4)
        request = pb.ModelInferRequest(model_name="double")
        request.inputs.add(name="INPUT0", datatype="FP32", shape=[3, 4])
        request.raw_input_contents.append(data.tobytes())
        response = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)
        (output,) = response.outputs
        assert (output.name, output.datatype, list(output.shape)) == ("OUTPUT0", "FP32", [3, 4])
        got = np.frombuffer(response.raw_output_contents[0], np.float32).reshape(3, 4)
        np.testing.assert_array_equal(got, data * 2)
        status, body = http_json("POST", f"{gw.http_url}/v2/models/double/infer", {"inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [2, 4], "data": list(range(8))}]})
        assert status == 200
        assert body["outputs"][0] | {"parameters": None} == {
            "name": "OUTPUT0", "datatype": "FP32", "shape": [2, 4], "data": [2 * x for x in range(8)],
            "parameters": None}


def test_torchserve_style_clients_through_the_gateway_to_torchserve_grpc(torchserve_server):
    """TorchServe users (HTTP /predictions and gRPC Predictions) against the gateway, the
    gateway against TorchServe's own gRPC API: merged, each with its own answer."""
    model = model_config("grpc-v1", torchserve_server)
    with running_gateway(config_for(model)) as gw, grpc.insecure_channel(gw.grpc_address) as channel:
        stub = ts_grpc.InferenceAPIsServiceStub(channel)

        def one(i: int) -> tuple[list[float], list[float]]:
            row = unique_row(i)
            if i % 2:
                status, _, body = http("POST", f"{gw.http_url}/predictions/double", orjson.dumps(row))
                assert status == 200, body
                return row, orjson.loads(body)
            request = ts_pb.PredictionsRequest(model_name="double", input={"data": orjson.dumps({"instances": [row]})})
            return row, orjson.loads(stub.Predictions(request, timeout=30).prediction)["predictions"][0]

        before = len(torchserve_server.calls())
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(one, range(40)))
        for sent, got in answers:
            assert got == [2 * x for x in sent]
        calls = torchserve_server.calls()[before:]
        assert sum(call["batch_size"] for call in calls) == 40
        assert len(calls) < 40


def test_a_batch_torchserve_fails_is_an_error_never_a_200(torchserve_server):
    # No signature: the instance travels to TorchServe as it is, and its handler fails.
    model = {"name": "double", "backend": "torchserve", "protocol": "grpc", "url": torchserve_server.grpc_address}
    with running_gateway(config_for(model)) as gw:
        status, body = http_json("POST", f"{gw.http_url}/v1/models/double:predict", {"instances": ["not a number"]})
        assert status == 502
        assert "the predictor's handler failed" in body["error"]
        status, body = http_json("POST", f"{gw.http_url}/v1/models/double:predict", {"instances": [[1, 2, 3, 4]]})
        assert (status, body["predictions"]) == (200, [[2.0, 4.0, 6.0, 8.0]])


def test_a_model_torchserve_does_not_serve_is_unavailable(torchserve_server):
    # TorchServe's /ping and gRPC Ping know no model: the gateway is ready, the batch is refused.
    for model in ({"name": "other", "backend": "torchserve", "protocol": "grpc", "url": torchserve_server.grpc_address},
                  {"name": "other", "backend": "torchserve", "protocol": "http", "url": torchserve_server.http_url}):
        with running_gateway(config_for(model)) as gw:
            status, body = http_json("POST", f"{gw.http_url}/v1/models/other:predict", {"instances": [[1, 2, 3, 4]]})
            assert status == 503, body
            assert "does not serve it" in body["error"]
