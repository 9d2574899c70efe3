"""Thousands of requests from many threads over both front ends (v1 HTTP, OIP HTTP, OIP
gRPC), with requests of varying sizes that split: every answer is checked against its input."""
from __future__ import annotations

import concurrent.futures
import random

import grpc
import numpy as np

from tests.harness import config_for, http_json, running_gateway
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc

REQUESTS = 3000


def test_thousands_of_mixed_requests_each_get_their_own_rows():
    config = config_for({"name": "demo", "backend": "simulated", "simulated": {"call_ms": 2},
                         "batching": {"max_batch_size": 16, "max_inflight": 2}})
    with running_gateway(config) as gw, grpc.insecure_channel(gw.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)

        def one(i: int) -> str | None:
            rng = random.Random(i)
            rows = rng.choice([1, 1, 1, 2, 5, 40])  # 40 > max_batch_size: split and reassembled
            data = (np.arange(rows * 3, dtype=np.float32).reshape(rows, 3) + i * 1000)
            kind = i % 3
            if kind == 0:
                status, body = http_json("POST", f"{gw.http_url}/v1/models/demo:predict", {"instances": data.tolist()})
                got = np.asarray(body["predictions"], np.float32) if status == 200 else None
            elif kind == 1:
                request = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": list(data.shape), "data": data.ravel().tolist()}]}
                status, body = http_json("POST", f"{gw.http_url}/v2/models/demo/infer", request)
                got = np.asarray(body["outputs"][0]["data"], np.float32).reshape(data.shape) if status == 200 else None
            else:
                request = pb.ModelInferRequest(model_name="demo")
                request.inputs.add(name="INPUT0", datatype="FP32", shape=list(data.shape))
                request.raw_input_contents.append(data.tobytes())
                response = stub.ModelInfer(request, timeout=30)
                got = np.frombuffer(response.raw_output_contents[0], np.float32).reshape(data.shape)
            if got is None or not np.array_equal(got, data * 2):
                return f"request {i} (kind {kind}, {rows} rows) got a wrong answer"
            return None

        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            problems = [p for p in pool.map(one, range(REQUESTS)) if p]
        assert not problems, problems[:5]
        stats = gw.stats("demo")
        assert stats.requests == REQUESTS
        assert stats.batches < REQUESTS
