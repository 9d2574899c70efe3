"""Variable-length inputs from every front end: requests of different lengths, from clients
of all six front ends, leave in ONE padded batch, and each client gets exactly its own
answer at its own length, in its own protocol; /metrics shows the waste and the cost."""
from __future__ import annotations

import threading
import urllib.request

import grpc
import numpy as np
import orjson

from tests.harness import config_for, held_slot, http, http_json, queued, running_gateway, wait_for
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc
from wire.generated.torchserve import inference_pb2 as ts_pb
from wire.generated.torchserve import inference_pb2_grpc as ts_grpc

MODEL = {"name": "demo", "backend": "simulated", "simulated": {"call_ms": 10},
         "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, -1], "pad": {"dim": 1, "value": 0}}],
         "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, -1], "follows_pad": 1}],
         "batching": {"max_batch_size": 32}}


def row(length: int, start: float) -> list[float]:
    return [start + i for i in range(length)]


def test_clients_of_every_front_end_with_different_lengths_share_one_padded_batch():
    with (running_gateway(config_for(MODEL)) as gw, grpc.insecure_channel(gw.grpc_address) as channel,
          held_slot(gw, "demo") as (release, batches)):
        oip, ts = pb_grpc.GRPCInferenceServiceStub(channel), ts_grpc.InferenceAPIsServiceStub(channel)
        answers: dict[str, list] = {}

        def v1():  # ragged instances
            status, body = http_json("POST", f"{gw.http_url}/v1/models/demo:predict",
                                     {"instances": [row(3, 1), row(1, 10)]})
            answers["v1"] = [status, body["predictions"]]

        def oip_json():
            status, body = http_json("POST", f"{gw.http_url}/v2/models/demo/infer", {"inputs": [
                {"name": "INPUT0", "datatype": "FP32", "shape": [1, 5], "data": row(5, 20)}]})
            answers["oip_json"] = [status, body["outputs"][0]["shape"], body["outputs"][0]["data"]]

        def oip_binary():
            data = np.array([row(2, 30)], np.float32).tobytes()
            header = orjson.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 2],
                                               "parameters": {"binary_data_size": len(data)}}],
                                   "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]})
            request = urllib.request.Request(f"{gw.http_url}/v2/models/demo/infer", data=header + data, method="POST",
                                             headers={"Inference-Header-Content-Length": str(len(header))})
            with urllib.request.urlopen(request, timeout=20) as reply:
                body, length = reply.read(), int(reply.headers["Inference-Header-Content-Length"])
            answers["oip_binary"] = np.frombuffer(body[length:], np.float32).tolist()

        def oip_grpc():
            request = pb.ModelInferRequest(model_name="demo")
            request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 7])
            request.raw_input_contents.append(np.array([row(7, 40)], np.float32).tobytes())
            reply = oip.ModelInfer(request, timeout=20)
            answers["oip_grpc"] = [list(reply.outputs[0].shape), np.frombuffer(reply.raw_output_contents[0], np.float32).tolist()]

        def torchserve_http():
            status, _, body = http("POST", f"{gw.http_url}/predictions/demo", orjson.dumps({"instances": [row(4, 50)]}))
            answers["torchserve_http"] = [status, orjson.loads(body)["predictions"]]

        def torchserve_grpc():
            reply = ts.Predictions(ts_pb.PredictionsRequest(model_name="demo", input={"data": orjson.dumps(row(6, 60))}),
                                   timeout=20)
            answers["torchserve_grpc"] = orjson.loads(reply.prediction)

        blocker = threading.Thread(target=lambda: http_json("POST", f"{gw.http_url}/v1/models/demo:predict",
                                                            {"instances": [[0.0]]}))
        blocker.start()
        # The blocker's batch holds the only slot until released: the others queue behind it.
        wait_for(lambda: len(batches) == 1, "the blocker's batch to reach the gate")
        clients = [threading.Thread(target=f) for f in (v1, oip_json, oip_binary, oip_grpc, torchserve_http, torchserve_grpc)]
        for thread in clients:
            thread.start()
        wait_for(lambda: queued(gw, "demo") == 7, "all six clients' seven rows to be queued behind the blocker")
        release.set()
        for thread in [blocker, *clients]:
            thread.join(timeout=20)
        stats = gw.stats("demo")
        _, _, metrics = http("GET", f"{gw.http_url}/metrics")

    assert answers["v1"] == [200, [[2, 4, 6], [20]]]
    assert answers["oip_json"] == [200, [1, 5], [2 * x for x in row(5, 20)]]
    assert answers["oip_binary"] == [2 * x for x in row(2, 30)]
    assert answers["oip_grpc"] == [[1, 7], [2 * x for x in row(7, 40)]]
    assert answers["torchserve_http"] == [200, [[2 * x for x in row(4, 50)]]]
    assert answers["torchserve_grpc"] == [2 * x for x in row(6, 60)]
    assert batches == [1, 7]  # the blocker, then all six clients' seven rows at once
    assert list(stats.recent_batch_sizes) == [1, 7]
    # padded: the blocker (1 x 1), then 7 rows x 7; real: 1, then 3 + 1 + 5 + 2 + 7 + 4 + 6
    assert (stats.padded_elements, stats.real_elements) == (1 + 49, 1 + 28)
    text = metrics.decode()
    assert 'gateway_padding_waste_ratio{model="demo"} ' + repr(50 / 29) in text
    assert 'gateway_batch_cost_count{model="demo"} 2.0' in text


def test_the_generated_inputs_are_not_in_the_models_metadata():
    model = {**MODEL, "inputs": [*MODEL["inputs"], {"name": "LEN", "datatype": "INT32", "shape": [-1, 1],
                                                   "generate": "length"}]}
    with running_gateway(config_for(model)) as gw:
        status, metadata = http_json("GET", f"{gw.http_url}/v2/models/demo")
    assert status == 200 and [spec["name"] for spec in metadata["inputs"]] == ["INPUT0"]

