"""Triton's bidirectional ModelStreamInfer on the gateway, driven by the real tritonclient's
streaming API (start_stream / async_stream_infer / stop_stream)."""
from __future__ import annotations

import queue
import threading
import time

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc

from tests.harness import config_for, held_slot, http_json, queued, running_gateway, wait_for
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc


@pytest.fixture(scope="module")
def gw():
    config = config_for({"name": "demo", "backend": "simulated", "simulated": {"call_ms": 20}})
    with running_gateway(config) as running:
        yield running


def stream_inputs(value: float, datatype: str = "FP32") -> list[triton_grpc.InferInput]:
    tensor = triton_grpc.InferInput("INPUT0", [1, 2], datatype)
    tensor.set_data_from_numpy(np.array([[value, value + 1]], np.float32 if datatype == "FP32" else np.int32))
    return [tensor]


def run_stream(gw, sends: list[tuple[str, float, str]]) -> list[tuple[str | None, object]]:
    """Send (id, value, datatype) requests on one stream; return (id or None, result or error)
    in the order the stream answered."""
    answers: queue.Queue = queue.Queue()
    with triton_grpc.InferenceServerClient(gw.grpc_address) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        for request_id, value, datatype in sends:
            client.async_stream_infer("demo", stream_inputs(value, datatype), request_id=request_id)
        got = [answers.get(timeout=30) for _ in sends]
        client.stop_stream()
    return [(result.get_response().id if result is not None else None, result if error is None else error)
            for result, error in got]


def test_answers_come_back_in_order_each_with_its_id(gw):
    sends = [(f"r{i}", float(i), "FP32") for i in range(20)]
    answers = run_stream(gw, sends)
    assert [request_id for request_id, _ in answers] == [request_id for request_id, _, _ in sends]
    for (_, value, _), (_, result) in zip(sends, answers, strict=True):
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [[2 * value, 2 * value + 2]])


def test_an_error_comes_in_band_and_the_stream_stays_open(gw):
    sends = [("ok-1", 1.0, "FP32"), ("bad", 2.0, "INT32"), ("ok-2", 3.0, "FP32")]
    answers = run_stream(gw, sends)
    assert answers[0][0] == "ok-1" and answers[2][0] == "ok-2"
    error = answers[1][1]
    assert isinstance(error, triton_grpc.InferenceServerException)
    assert "INPUT0" in error.message() and "FP32" in error.message()


def test_streamed_requests_share_batches_with_http_clients(gw):
    with (triton_grpc.InferenceServerClient(gw.grpc_address) as client,
          held_slot(gw, "demo") as (release, batches)):
        answers: queue.Queue = queue.Queue()
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        http_ids = []

        def infer(i: int) -> tuple[int, dict]:
            return http_json("POST", f"{gw.http_url}/v2/models/demo/infer", {"inputs": [
                {"name": "INPUT0", "datatype": "FP32", "shape": [1, 2], "data": [i, i]}]})

        def http_client(i: int) -> None:
            status, body = infer(i)
            assert status == 200
            http_ids.append(body["parameters"]["batch_id"])

        # A blocker's batch holds the only slot, so both groups are queued together when it is freed.
        blocker = threading.Thread(target=infer, args=(-1,))
        blocker.start()
        wait_for(lambda: len(batches) == 1, "the blocker's batch to reach the gate")
        threads = [threading.Thread(target=http_client, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for i in range(8):
            client.async_stream_infer("demo", stream_inputs(float(i)), request_id=str(i))
        wait_for(lambda: queued(gw, "demo") == 16, "the 8 HTTP and 8 streamed requests to be queued")
        release.set()
        streamed = [answers.get(timeout=30) for _ in range(8)]
        for thread in [blocker, *threads]:
            thread.join(timeout=30)
        client.stop_stream()
    assert [error for _, error in streamed] == [None] * 8
    stream_ids = {result.get_response().parameters["batch_id"].string_param for result, _ in streamed}
    assert stream_ids & set(http_ids), "no batch held both a streamed and an HTTP request"
    assert batches == [1, 16]  # the blocker, then all sixteen at once


def test_a_cancelled_stream_drops_its_queued_requests(tmp_path):
    # One slow batch at a time: most of the 30 requests are still queued when the client goes.
    config = config_for({"name": "demo", "backend": "simulated", "simulated": {"call_ms": 300},
                         "batching": {"max_batch_size": 1}})
    with running_gateway(config) as gw, grpc.insecure_channel(gw.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        cancelled = threading.Event()

        def requests():
            for i in range(30):
                request = pb.ModelInferRequest(model_name="demo", id=str(i))
                request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1]).contents.fp32_contents.append(i)
                yield request
            cancelled.wait(30)  # keep the stream open until it is cancelled

        call = stub.ModelStreamInfer(requests())
        first = next(call)
        assert first.infer_response.id == "0"
        call.cancel()
        cancelled.set()
        deadline = time.monotonic() + 10
        while gw.gateway.scheduler.view("demo").queued_rows and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gw.gateway.scheduler.view("demo").queued_rows == 0
        assert gw.stats("demo").batches < 30  # the dropped ones never reached the predictor


def test_a_client_that_writes_without_reading_is_pushed_back_and_its_answers_counted_honestly(caplog):
    """Answers a stream's client does not take stop the gateway reading that stream (at most
    STREAM_WINDOW requests read and unanswered, then HTTP/2 flow control), so such a client
    cannot fill the gateway's memory; what it never took is counted 499, not 200, and its
    cancel logs no error."""
    from gateway.grpc.oip import STREAM_WINDOW

    sent, elements = 300, 25_000  # 100 kB a request: the client would write 30 MB
    config = config_for({"name": "demo", "backend": "simulated", "simulated": {"call_ms": 1}})
    with running_gateway(config) as gw, grpc.insecure_channel(gw.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        pulled = threading.Semaphore(0)
        stop = threading.Event()

        def requests():
            for i in range(sent):
                if stop.is_set():
                    return
                request = pb.ModelInferRequest(model_name="demo", id=str(i))
                request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, elements])
                request.raw_input_contents.append(np.full(elements, i, np.float32).tobytes())
                pulled.release()
                yield request
            stop.wait(30)

        stream = stub.ModelStreamInfer(requests())  # never read
        deadline = time.monotonic() + 10
        submitted = -1
        while time.monotonic() < deadline:  # until the gateway stops taking requests in
            time.sleep(0.5)
            now = gw.stats("demo").requests
            if now == submitted:
                break
            submitted = now
        assert 0 < submitted < sent / 2, submitted  # pushed back long before the 300th
        stream.cancel()
        stop.set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            samples = gw.call(gw.gateway.service.metrics.exposition()).decode()
            delivered = _counted(samples, "200")
            undelivered = _counted(samples, "499")
            if delivered + undelivered == submitted:
                break
            time.sleep(0.1)
        assert delivered + undelivered == submitted, (delivered, undelivered, submitted)
        assert undelivered >= STREAM_WINDOW // 2  # read, answered, never taken: not 200s
    errors = [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]
    assert not errors, [r.getMessage() for r in errors]


def _counted(exposition: str, code: str) -> int:
    prefix = f'gateway_requests_total{{code="{code}",model="demo",protocol="oip_grpc_stream"}} '
    return next((int(float(line[len(prefix):])) for line in exposition.splitlines() if line.startswith(prefix)), 0)


def test_a_drain_answers_what_each_stream_read_then_ends_it_unavailable_without_an_error_logged(caplog):
    """SIGTERM's drain stops reading the open streams: a request already read is answered,
    then every stream, idle or not, ends UNAVAILABLE (grpc's own stop would cancel them,
    logging an ERROR traceback for each)."""
    config = config_for({"name": "demo", "backend": "simulated", "simulated": {"call_ms": 300}})
    with running_gateway(config) as gw, grpc.insecure_channel(gw.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        release = threading.Event()

        def requests(count: int):
            for i in range(count):
                request = pb.ModelInferRequest(model_name="demo", id=str(i))
                request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1]).contents.fp32_contents.append(i)
                yield request
            release.wait(30)  # the client never half-closes: only the gateway ends these streams

        idle = [stub.ModelStreamInfer(requests(0)) for _ in range(3)]
        busy = stub.ModelStreamInfer(requests(1))
        deadline = time.monotonic() + 10
        while gw.stats("demo").requests < 1 and time.monotonic() < deadline:
            time.sleep(0.01)  # the busy stream's request is read (its 300 ms call under way)
        gw.call(gw.gateway.stop(grace_s=5.0))
        answers = list(_until_closed(busy))
        assert [answer.infer_response.id for answer in answers] == ["0"] and not answers[0].error_message
        assert busy.code() == grpc.StatusCode.UNAVAILABLE and "shutting down" in busy.details()
        for stream in idle:
            assert list(_until_closed(stream)) == [] and stream.code() == grpc.StatusCode.UNAVAILABLE
        release.set()
    errors = [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]
    assert not errors, [r.getMessage() for r in errors]


def _until_closed(stream) -> list:
    """A stream's answers until the gateway ends it (its status is then on the stream)."""
    answers = []
    try:
        for answer in stream:
            answers.append(answer)
    except grpc.RpcError:
        pass
    return answers
