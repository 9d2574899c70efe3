"""Request ids and W3C traceparent reach the predictor, over HTTP and gRPC."""
from __future__ import annotations

import concurrent.futures
import threading

import grpc
import numpy as np

from tests.harness import config_for, http_json, queued, running_gateway, wait_for
from tests.http_stub import JsonHandler, serving
from wire import tracing
from wire.codecs import oip_grpc
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc

TRACE = "0af7651916cd43dd8448eb211c80319c"
PARENT = f"00-{TRACE}-b7ad6b7169203331-01"
SIGNATURE = {"inputs": [{"name": "INPUT0", "datatype": "FP32"}], "outputs": [{"name": "OUTPUT0", "datatype": "FP32"}]}


def test_continue_trace_keeps_the_trace_and_makes_a_new_span():
    child = tracing.continue_trace(PARENT)
    version, trace, span, flags = child.split("-")
    assert (version, trace, flags) == ("00", TRACE, "01") and span != "b7ad6b7169203331" and len(span) == 16
    for bad in ("", "garbage", f"00-{'0' * 32}-b7ad6b7169203331-01"):
        version, trace, span, flags = tracing.continue_trace(bad).split("-")
        assert trace != TRACE and len(trace) == 32 and flags == "01"


def capturing_v1_predictor(seen: list[dict]):
    class Capture(JsonHandler):
        def do_POST(self):
            body = self.read_json()
            seen.append({k.lower(): v for k, v in self.headers.items()})
            self.answer_json({"predictions": [[2 * x for x in row] for row in body["instances"]]})

    return serving(Capture)


def test_http_predictor_gets_request_id_and_trace():
    seen: list[dict] = []
    with capturing_v1_predictor(seen) as url:
        model = {"name": "demo", "backend": "kserve", "api": "v1", "url": url, **SIGNATURE}
        with running_gateway(config_for(model), wait_ready=False) as gw:
            status, body = http_json("POST", f"{gw.http_url}/v1/models/demo:predict", {"instances": [[1]]},
                                     headers={"X-Request-Id": "req-1", "traceparent": PARENT})
            assert status == 200
            status, plain = http_json("POST", f"{gw.http_url}/v1/models/demo:predict", {"instances": [[2]]})
            assert status == 200
    traced, untraced = seen
    assert traced["x-request-id"] == "req-1" and traced["x-batch-request-ids"] == "req-1"
    assert traced["traceparent"].split("-")[1] == TRACE
    assert untraced["x-request-id"] == plain["batchId"]  # no client id: the batch id
    assert untraced["traceparent"].split("-")[1] != TRACE


class CapturingOip(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self):
        self.metadata: list[dict] = []
        self.release = threading.Event()

    def ModelInfer(self, request, context):
        self.metadata.append(dict(context.invocation_metadata()))
        self.release.wait(60)  # a bound only: the test releases it, after at most two 20 s waits
        inputs = oip_grpc.decode_request(request).inputs
        return oip_grpc.encode_response(request.model_name, "", request.id,
                                        [type(inputs[0])("OUTPUT0", "FP32", inputs[0].data * 2)], {})


def test_grpc_predictor_gets_the_ids_of_every_request_in_the_batch():
    servicer = CapturingOip()
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(4))
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        model = {"name": "demo", "backend": "triton", "protocol": "grpc", "url": f"127.0.0.1:{port}", **SIGNATURE}
        with running_gateway(config_for(model), wait_ready=False) as gw, grpc.insecure_channel(gw.grpc_address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)

            def call(request_id: str):
                request = pb.ModelInferRequest(model_name="demo", id=request_id)
                request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1]).contents.fp32_contents.append(1)
                return stub.ModelInfer(request, timeout=90, metadata=(("traceparent", PARENT),))

            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                try:
                    first = pool.submit(call, "a")
                    wait_for(lambda: servicer.metadata, "the first batch to be held at the predictor")
                    later = [pool.submit(call, name) for name in ("b", "c", "d")]
                    # All three queued behind it (max_inflight 1), so they leave as one batch.
                    wait_for(lambda: queued(gw, "demo") == 3, "b, c and d to queue behind the held batch")
                finally:
                    servicer.release.set()
                responses = [future.result() for future in (first, *later)]
            assert all(np.frombuffer(r.raw_output_contents[0], np.float32)[0] == 2 for r in responses)
    finally:
        server.stop(0)
    single, merged = servicer.metadata
    assert single["x-request-id"] == "a"
    assert merged["x-request-id"] == responses[1].parameters["batch_id"].string_param
    assert sorted(merged["x-batch-request-ids"].split(",")) == ["b", "c", "d"]
    assert merged["traceparent"].split("-")[1] == TRACE
