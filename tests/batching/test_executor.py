"""Running a batch at the executor: deadlines on the call, errors and wrong answers reach
every member, and bisection isolates the request a predictor rejects."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

from gateway.batching.config import BatchingConfig
from gateway.batching.request import BatchRequest
from gateway.batching.scheduler import BatchScheduler
from tests.batching.support import RecordingExecutor, rows, scheduler_with, stats_of
from wire.errors import (
    BadPredictorAnswer,
    DeadlineExceeded,
    GatewayError,
    HandlerFailed,
    ModelNotFound,
    PredictorRejected,
)
from wire.tensors import Tensor


async def test_a_hung_executor_costs_each_request_at_most_its_deadline():
    executor = RecordingExecutor()
    executor.release = asyncio.Event()  # never set: the predictor hangs
    scheduler = scheduler_with(executor, timeout_s=0.1)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(DeadlineExceeded):
        await scheduler.submit(BatchRequest.arriving("m", rows(0, 1)))
    assert loop.time() - started < 1.0
    # The predictor still computes the abandoned batch: its slot is given back when it answers.
    executor.release.set()
    result = await asyncio.wait_for(scheduler.submit(BatchRequest.arriving("m", rows(1, 1))), 1.0)
    assert result.outputs[0].data.shape == (1, 2)


async def test_an_overrun_batch_keeps_its_slot_while_the_predictor_computes_it_and_teaches_its_real_time():
    """Its member is answered at its deadline; the next batch is not sent to a predictor
    still busy with it (it would wait behind it and overrun in turn)."""
    executor = RecordingExecutor(delay_s=0.0)
    executor.release = asyncio.Event()  # the predictor computes the first batch until the test says
    scheduler = scheduler_with(executor, timeout_s=5.0, max_inflight=1)
    profile = stats_of(scheduler, "m").profile
    with pytest.raises(DeadlineExceeded):  # its client gives it 100 ms
        await scheduler.submit(BatchRequest.arriving("m", rows(0, 1), timeout_s=0.1))
    for _ in range(100):  # the executor learns the overrun at the same deadline, in its own turn
        if profile.calls:
            break
        await asyncio.sleep(0.01)
    assert scheduler.view("m").inflight == 1 and profile.calls == 1  # answered, the overrun learned; still computing
    second = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(1, 1))))
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(executor.batches) == 1  # the second waits for the slot
    executor.release.set()  # the predictor answers the first at last: its real time is learned, the slot freed
    await second
    assert len(executor.batches) == 2 and executor.max_concurrent == 1
    assert profile.calls == 3  # the overrun, the late answer, the second call


async def test_a_call_that_never_answers_gives_its_slot_back_after_as_long_again():
    executor = RecordingExecutor()
    executor.release = asyncio.Event()  # never set
    scheduler = scheduler_with(executor, timeout_s=0.1, max_inflight=1)
    with pytest.raises(DeadlineExceeded):
        await scheduler.submit(BatchRequest.arriving("m", rows(0, 1)))
    assert scheduler.view("m").inflight == 1  # held past the deadline: the predictor may still be computing
    for _ in range(200):  # 0.1 s to the deadline, then 0.1 s more; a hang would fail after 2 s
        # The slot is freed as the call's cancellation is asked for; the call ends at its next turn.
        if scheduler.view("m").inflight == 0 and executor.concurrent == 0:
            break
        await asyncio.sleep(0.01)
    assert scheduler.view("m").inflight == 0 and executor.concurrent == 0  # cancelled at the predictor's client


async def test_a_call_that_fails_after_its_members_deadline_is_not_bisected():
    """Its members were answered at their deadline; the predictor's late rejection finds
    nobody left to isolate, so it costs no bisecting calls."""
    release = asyncio.Event()
    calls = 0

    async def rejects_late(inputs):
        nonlocal calls
        calls += 1
        await release.wait()
        raise PredictorRejected("too late to matter")

    scheduler = scheduler_with(rejects_late, timeout_s=5.0, max_inflight=1, policy="window", max_latency_s=0.05)
    both = [asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(i, 1), timeout_s=0.2)))
            for i in range(2)]
    for outcome in await asyncio.gather(*both, return_exceptions=True):
        assert isinstance(outcome, DeadlineExceeded)
    release.set()
    for _ in range(100):  # the late answer arrives and the slot is given back
        if scheduler.view("m").inflight == 0:
            break
        await asyncio.sleep(0.01)
    assert scheduler.view("m").inflight == 0
    assert calls == 1 and stats_of(scheduler, "m").isolations == 0


async def test_a_transport_timeout_before_the_deadline_is_the_call_s_own_failure():
    async def times_out(inputs):
        raise TimeoutError("the predictor's client gave up")

    scheduler = scheduler_with(times_out, timeout_s=5.0)
    with pytest.raises(GatewayError, match="internal error while running the batch") as raised:
        await scheduler.submit(BatchRequest.arriving("m", rows(0, 1)))
    assert not isinstance(raised.value, DeadlineExceeded)  # not mistaken for the deadline's


async def test_executor_errors_reach_every_member_and_wrong_row_counts_are_caught():
    async def rejects(inputs):
        raise PredictorRejected("no")

    async def short(inputs):
        return [Tensor("OUTPUT0", "FP32", inputs[0].data[:-1])]

    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("rejects", rejects, BatchingConfig())
    scheduler.add_model("short", short, BatchingConfig())
    with pytest.raises(PredictorRejected):
        await scheduler.submit(BatchRequest.arriving("rejects", rows(0, 1)))
    with pytest.raises(BadPredictorAnswer, match="1 rows"):
        await scheduler.submit(BatchRequest.arriving("short", rows(0, 2)))
    with pytest.raises(ModelNotFound):
        await scheduler.submit(BatchRequest.arriving("absent", rows(0, 1)))


@pytest.mark.parametrize("failure", [PredictorRejected, HandlerFailed])
async def test_a_request_the_predictor_rejects_does_not_fail_the_others_in_its_batch(failure):
    """A rejection (400 / INVALID_ARGUMENT) and a handler's exception (TorchServe's 503
    "Prediction failed") are both bisected: either may be one row's fault."""
    calls: list[int] = []

    async def rejects_negative_rows(inputs):
        calls.append(len(inputs[0].data))
        await asyncio.sleep(0.01)
        if (inputs[0].data < 0).any():
            raise failure("negative values are not allowed")
        return [Tensor("OUTPUT0", "FP32", inputs[0].data * 2)]

    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("m", rejects_negative_rows, BatchingConfig(max_batch_size=32))
    blocker = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(0, 1))))
    await asyncio.sleep(0)
    requests = [rows(i, 1) for i in range(1, 9)]
    requests[5] = [Tensor("INPUT0", "FP32", -np.ones((1, 2), np.float32))]
    outcomes = await asyncio.gather(*(scheduler.submit(BatchRequest.arriving("m", r)) for r in requests), return_exceptions=True)
    await blocker
    assert isinstance(outcomes[5], failure)
    for i, outcome in enumerate(outcomes):
        if i != 5:
            np.testing.assert_array_equal(outcome.outputs[0].data, requests[i][0].data * 2)
    assert calls[1] == 8  # the merged batch was tried first
    assert len(calls) <= 2 + 2 * 3  # then bisected: about log2(8) levels
    assert stats_of(scheduler, "m").isolations >= 1
