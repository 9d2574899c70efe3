"""The benchmark's baseline servers (`python -m tools.bench.baselines`), run as their own
process: the minimal Tornado app and grpc.aio servicer answer as the gateway would, and a
request for the `hold` model is held until the server stops (the memory scenario's floor)."""
from __future__ import annotations

import concurrent.futures
import http.client
import json

import grpc
import numpy as np
import pytest

from tools.bench.baselines import HOLD_MODEL
from tools.processes import ServerProcess, python_module_command
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc

V1_BODY = json.dumps({"instances": [[1, 2, 3, 4]]}).encode()


@pytest.fixture
def minimal():
    server = ServerProcess(python_module_command("tools.bench.baselines", "minimal"), name="minimal baseline",
                           ready_timeout=30).start()
    try:
        yield server
    finally:
        server.stop()


def _post(server: ServerProcess, model: str, timeout: float) -> tuple[int, dict]:
    connection = http.client.HTTPConnection(server.http_address, timeout=timeout)
    try:
        connection.request("POST", f"/v1/models/{model}:predict", V1_BODY, {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def _infer(stub: pb_grpc.GRPCInferenceServiceStub, model: str, timeout: float) -> pb.ModelInferResponse:
    request = pb.ModelInferRequest(model_name=model)
    tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 4])
    tensor.contents.fp32_contents.extend([1, 2, 3, 4])
    return stub.ModelInfer(request, timeout=timeout)


def test_the_minimal_servers_answer_twice_their_input(minimal):
    assert _post(minimal, "demo", timeout=10) == (200, {"predictions": [[2.0, 4.0, 6.0, 8.0]], "batchId": "0"})
    with grpc.insecure_channel(minimal.grpc_address) as channel:
        response = _infer(pb_grpc.GRPCInferenceServiceStub(channel), "demo", timeout=10)
    assert np.frombuffer(response.raw_output_contents[0], dtype="<f4").tolist() == [2, 4, 6, 8]


def test_a_request_for_the_hold_model_waits_and_the_server_keeps_answering_others(minimal):
    with pytest.raises(TimeoutError):
        _post(minimal, HOLD_MODEL, timeout=0.5)
    with grpc.insecure_channel(minimal.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as held:
            _infer(stub, HOLD_MODEL, timeout=0.5)
        assert held.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert _infer(stub, "demo", timeout=10).model_name == "demo"
    assert _post(minimal, "demo", timeout=10)[0] == 200


def test_held_requests_are_answered_when_the_server_stops(minimal):
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        held = pool.submit(_post, minimal, HOLD_MODEL, 30)
        with pytest.raises(concurrent.futures.TimeoutError):
            held.result(timeout=0.5)
        minimal.stop()
        status, body = held.result(timeout=30)
    assert status == 200 and body == {"predictions": [[1, 2, 3, 4]]}
