"""Requests from both front ends for the same model land in the SAME batch."""
from __future__ import annotations

import threading

import grpc
import numpy as np

from tests.harness import config_for, held_slot, http_json, queued, running_gateway, wait_for
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc


def test_a_v1_http_request_and_an_oip_grpc_request_share_one_batch():
    # One slot, held: while a first request's batch waits at the gate, the two clients
    # queue behind it and must leave together in the next batch.
    config = config_for({"name": "demo", "backend": "simulated", "simulated": {"call_ms": 10}})
    with (running_gateway(config) as gw, grpc.insecure_channel(gw.grpc_address) as channel,
          held_slot(gw, "demo") as (release, batches)):
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        results: dict[str, object] = {}

        def blocker():
            results["blocker"] = http_json("POST", f"{gw.http_url}/v1/models/demo:predict", {"instances": [[0, 0]]})

        def v1_client():
            results["v1"] = http_json("POST", f"{gw.http_url}/v1/models/demo:predict", {"instances": [[1, 2]]})

        def grpc_client():
            request = pb.ModelInferRequest(model_name="demo")
            request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 2])
            request.raw_input_contents.append(np.array([[3, 4]], np.float32).tobytes())
            results["grpc"] = stub.ModelInfer(request, timeout=10)

        first = threading.Thread(target=blocker)
        first.start()
        wait_for(lambda: len(batches) == 1, "the blocker's batch to reach the gate")
        clients = [threading.Thread(target=v1_client), threading.Thread(target=grpc_client)]
        for thread in clients:
            thread.start()
        wait_for(lambda: queued(gw, "demo") == 2, "both clients to be queued behind the blocker")
        release.set()
        for thread in [first, *clients]:
            thread.join(timeout=20)

        status, v1_body = results["v1"]
        assert status == 200 and v1_body["predictions"] == [[2, 4]]
        grpc_response = results["grpc"]
        np.testing.assert_array_equal(np.frombuffer(grpc_response.raw_output_contents[0], np.float32), [6, 8])
        assert v1_body["batchId"] == grpc_response.parameters["batch_id"].string_param
        assert results["blocker"][1]["batchId"] != v1_body["batchId"]
        assert batches == [1, 2]
        assert list(gw.stats("demo").recent_batch_sizes) == [1, 2]
