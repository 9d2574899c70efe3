"""Drive a running gateway with many concurrent clients of both protocols and check that
every client got exactly its own answer (OUTPUT0 = 2 x its own INPUT0)."""
from __future__ import annotations

import concurrent.futures

import grpc
import numpy as np

from tests.harness import http_json
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc


def unique_row(i: int, width: int = 4) -> list[float]:
    return [float(i * 10 + j) for j in range(width)]


def v1_client(http_url: str, model: str, i: int) -> tuple[list[float], list[float], str]:
    status, body = http_json("POST", f"{http_url}/v1/models/{model}:predict", {"instances": [unique_row(i)]})
    assert status == 200, body
    return unique_row(i), body["predictions"][0], body["batchId"]


def oip_http_client(http_url: str, model: str, i: int) -> tuple[list[float], list[float], str]:
    request = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": unique_row(i)}]}
    status, body = http_json("POST", f"{http_url}/v2/models/{model}/infer", request)
    assert status == 200, body
    return unique_row(i), body["outputs"][0]["data"], body["parameters"]["batch_id"]


def grpc_client(stub: pb_grpc.GRPCInferenceServiceStub, model: str, i: int) -> tuple[list[float], list[float], str]:
    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 4])
    request.raw_input_contents.append(np.array([unique_row(i)], np.float32).tobytes())
    response = stub.ModelInfer(request, timeout=30)
    got = np.frombuffer(response.raw_output_contents[0], np.float32).tolist()
    return unique_row(i), got, response.parameters["batch_id"].string_param


def fire_mixed(http_url: str, grpc_address: str, model: str, count: int, workers: int = 16) -> list[str]:
    """`count` requests, rotating v1 HTTP / OIP HTTP / OIP gRPC, `workers` at a time.

    Asserts every answer is 2 x the client's own row; returns the batch ids seen."""
    with grpc.insecure_channel(grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        kinds = [lambda i: v1_client(http_url, model, i),
                 lambda i: oip_http_client(http_url, model, i),
                 lambda i: grpc_client(stub, model, i)]
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            answers = list(pool.map(lambda i: kinds[i % 3](i), range(count)))
    for sent, got, _ in answers:
        assert got == [2 * x for x in sent], f"a client got {got} for {sent}"
    return [batch_id for _, _, batch_id in answers]
