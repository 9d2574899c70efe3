"""The workers' channel (gateway/process/workers/channel.py): typed messages both sides speak,
requests with their tensors in the raw layout, their deadlines as age and budget,
results, errors as their own classes, views; one frame per loop turn; a frame whose
tensors run past its end refused."""
from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from gateway.batching.request import BatchRequest, BatchResult
from gateway.process.workers.channel import Cancel, Channel, ChannelClosed, Failure, Reply, Result, Submit, decode, encode
from wire.errors import GatewayError, Overloaded, RateLimited
from wire.ratelimits import Bucket, QuotaState
from wire.tensors import JSON, Tensor, rows_tensor
from wire.tracing import NO_CONTEXT, ClientContext


async def test_a_channel_carries_messages_in_order_one_frame_per_loop_turn_and_says_when_closed(tmp_path):
    received: asyncio.Queue = asyncio.Queue()
    frames = []

    async def serve(reader, writer):
        channel = Channel(reader, writer)
        try:
            while True:
                frame = await channel.receive()
                frames.append(len(frame))
                for message in frame:
                    received.put_nowait(message)
        except ChannelClosed:
            received.put_nowait(None)

    server = await asyncio.start_unix_server(serve, str(tmp_path / "s.sock"))
    reader, writer = await asyncio.open_unix_connection(str(tmp_path / "s.sock"))
    channel = Channel(reader, writer)
    for index in range(100):
        channel.send(Cancel(index))
    messages = [await received.get() for _ in range(100)]
    assert [m.id for m in messages] == list(range(100)) and all(isinstance(m, Cancel) for m in messages)
    assert frames == [100]  # sent in one loop turn: one frame
    channel.close()
    assert await received.get() is None
    server.close()


def round_trip(*messages):
    pieces = encode(list(messages))
    frame = b"".join(bytes(piece) for piece in pieces)
    return list(decode(frame[4:]))  # the frame's body, after its length


def test_a_request_crosses_typed_with_its_tensors_raw_and_its_deadline_as_age_and_budget():
    now = time.monotonic()
    request = BatchRequest(
        "enc", [Tensor("INPUT0", "FP32", np.arange(6, dtype=np.float32).reshape(2, 3)),
                Tensor("TEXT", "BYTES", np.array([[b"a"], [b"\x00bc"]], dtype=object)),
                rows_tensor([[1, 2], {"k": "v"}])],
        arrived_s=now - 0.25, deadline_s=now + 0.5, priority=2, client=ClientContext("r-1", "00-" + "1" * 32 + "-" + "2" * 16 + "-01"),
        parameters={"tenant": "a", "n": 3}, lengths=np.array([3, 1], dtype=np.int64))
    [crossed] = round_trip(Submit(7, request))
    assert isinstance(crossed, Submit) and crossed.id == 7
    got = crossed.request
    assert (got.model, got.priority, got.client, dict(got.parameters)) == ("enc", 2, request.client, {"tenant": "a", "n": 3})
    assert got.inputs[0].data.dtype == np.float32 and got.inputs[0].data.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert got.inputs[1].data.tolist() == [[b"a"], [b"\x00bc"]]
    assert got.inputs[2].datatype == JSON and list(got.inputs[2].data) == [[1, 2], {"k": "v"}]
    assert got.lengths.tolist() == [3, 1]
    # Instants do not cross processes: its age and remaining budget do, against the clock here.
    assert abs((got.deadline_s - got.arrived_s) - 0.75) < 1e-6
    assert time.monotonic() - got.arrived_s >= 0.25
    [no_deadline] = round_trip(Submit(8, BatchRequest("enc", request.inputs[:1])))
    assert no_deadline.request.deadline_s is None and no_deadline.request.client == NO_CONTEXT


def test_results_failures_and_views_cross_typed():
    outputs = [Tensor("OUTPUT0", "INT64", np.array([[1], [2]], dtype=np.int64))]
    result, failure, unknown, view, text = round_trip(
        Result(1, BatchResult(outputs, ["b-1", "b-2"])), Failure(2, Overloaded("queue full")),
        Failure(3, GatewayError("oops")), Reply(4, {"models": []}), Reply(5, b"# metrics\n"))
    assert result.result.batch_ids == ["b-1", "b-2"] and result.result.outputs[0].data.tolist() == [[1], [2]]
    assert type(failure.error) is Overloaded and failure.error.message == "queue full"  # its class: its status
    assert type(unknown.error) is GatewayError
    assert view.value == {"models": []} and text.value == b"# metrics\n"


def test_a_frame_whose_tensors_run_past_its_end_is_refused():
    pieces = encode([Submit(1, BatchRequest("m", [Tensor("X", "FP32", np.zeros((4, 4), np.float32))]))])
    frame = b"".join(bytes(piece) for piece in pieces)
    with pytest.raises(ValueError, match="past its end"):
        round_trip_body = frame[4:-8]
        list(decode(round_trip_body))


def test_a_results_quota_state_and_a_refusals_headers_cross_to_the_worker():
    """What the worker's client is told of its tenant's buckets (OpenAI's x-ratelimit-*) is
    the batcher's, on an answer and on a refusal alike."""
    state = QuotaState(Bucket(30, 12.5, 0.583), None)
    outputs = [Tensor("OUTPUT0", "INT64", np.array([[1]], dtype=np.int64))]
    result, refused = round_trip(Result(1, BatchResult(outputs, ["b-1"], [1], state)),
                                 Failure(2, RateLimited("over", 0.25, state)))
    assert result.result.quota == state
    assert type(refused.error) is RateLimited and refused.error.http_headers == {
        "Retry-After": "1", "retry-after-ms": "250", "x-ratelimit-limit-requests": "30",
        "x-ratelimit-remaining-requests": "12", "x-ratelimit-reset-requests": "583ms"}
