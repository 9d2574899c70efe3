"""gateway/lifecycle.py: a request's Call keeps the tightest deadline it is given, settles
its deadline (from its arrival) and priority once into the scheduler's request, and is
closed (counted and timed) exactly once, whatever paths reach its end. Through a gateway:
a deadline that passes while the request's body arrives or is decoded is answered at once,
and the request never reaches the predictor."""
from __future__ import annotations

import http.client
import time

import grpc
import numpy as np
import orjson
import pytest

from gateway.lifecycle import Call
from tests.harness import config_for, http_json, running_gateway
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc


def test_the_tightest_deadline_stands():
    call = Call("v1", "demo")
    call.tighten(None)
    assert call.timeout_s is None
    call.tighten(2.0)
    call.tighten(5.0)
    call.tighten(None)
    assert call.timeout_s == 2.0
    call.tighten(0.5)
    assert call.timeout_s == 0.5


def test_a_call_is_closed_once_with_its_first_outcome():
    closed: list[tuple[int | None, float]] = []
    call = Call("oip_grpc", "demo", lambda c: closed.append((c.status, c.elapsed_s)))
    time.sleep(0.01)
    call.close(400)
    call.close(200)  # a second path to the end (an error after an answer) changes nothing
    assert call.status == 400
    assert len(closed) == 1 and closed[0][0] == 400 and closed[0][1] >= 0.01


def test_a_batch_request_counts_the_tightest_deadline_from_the_calls_arrival():
    call = Call("oip_http", "demo", arrived_s=100.0)
    call.tighten(0.3)  # the transport's (a header, the gRPC deadline)
    request = call.batch_request("demo", [], timeout_s=0.2)  # the request's own (OIP `timeout`) is tighter
    assert request.arrived_s == 100.0 and request.deadline_s == 100.2
    assert call.batch_request("demo", [], timeout_s=5.0).deadline_s == 100.2  # a looser one changes nothing
    assert Call("v1", "demo", arrived_s=7.0).batch_request("demo", []).deadline_s is None  # none given: the model's
    # The model's own limits count from the arrival too, and only tighten.
    assert request.deadline_within(10.0) == 100.2 and request.deadline_within(0.05, None) == 100.05


def test_the_requests_own_priority_wins_over_its_transports():
    call = Call("oip_grpc", "demo")
    call.priority = 2  # x-request-priority metadata
    assert call.batch_request("demo", []).priority == 2
    assert call.batch_request("demo", [], priority=1).priority == 1  # the OIP `priority` parameter


# -- the deadline runs while the body arrives and is decoded ----------------------------------------

@pytest.fixture(scope="module")
def gw():
    config = config_for({"name": "demo", "backend": "simulated", "simulated": {"call_ms": 5},
                         "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, -1]}],
                         "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, -1]}]})
    with running_gateway(config) as running:
        yield running


def sent_slowly(gw, path: str, body: bytes, headers: dict[str, str], over_s: float) -> tuple[int, bytes]:
    """POST `body` in four pieces spread over `over_s` seconds (a slow upload)."""
    connection = http.client.HTTPConnection("127.0.0.1", gw.gateway.http_port, timeout=30)
    try:
        connection.putrequest("POST", path)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            connection.putheader(name, value)
        connection.endheaders()
        quarter = len(body) // 4 + 1
        for start in range(0, len(body), quarter):
            time.sleep(over_s / 4)
            connection.send(body[start:start + quarter])
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_a_request_whose_deadline_passes_while_its_body_arrives_is_answered_504_and_never_queued(gw):
    before = gw.stats("demo").instances
    body = orjson.dumps({"instances": [[float(i) for i in range(64)] for _ in range(4)]})
    status, answer = sent_slowly(gw, "/v1/models/demo:predict", body,
                                 {"Content-Type": "application/json", "X-Request-Timeout-Ms": "300"}, over_s=0.6)
    assert status == 504, answer
    assert "before the request was queued" in orjson.loads(answer)["error"]
    assert gw.stats("demo").instances == before  # the predictor never saw it
    status, _ = http_json("POST", f"{gw.http_url}/v1/models/demo:predict", {"instances": [[1.0]]},
                          headers={"X-Request-Timeout-Ms": "300"})
    assert status == 200  # the same deadline, with the body sent at once


def test_a_grpc_request_whose_deadline_passes_while_it_is_decoded_is_answered_deadline_exceeded_and_never_queued(gw):
    before = gw.stats("demo").instances
    rows = np.arange(256 * 1024, dtype=np.float32).reshape(1024, 256)  # 1 MiB to decode
    request = pb.ModelInferRequest(model_name="demo", raw_input_contents=[rows.tobytes()])
    request.inputs.add(name="INPUT0", datatype="FP32", shape=list(rows.shape))
    request.parameters["timeout"].int64_param = 1  # one microsecond: spent before it can be queued
    with grpc.insecure_channel(gw.grpc_address) as channel, pytest.raises(grpc.RpcError) as refused:
        pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)
    assert refused.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "before the request was queued" in refused.value.details()
    assert gw.stats("demo").instances == before  # the predictor never saw it
