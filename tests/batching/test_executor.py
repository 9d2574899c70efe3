"""Running a batch at the executor: deadlines on the call, errors and wrong answers reach
every member, and bisection isolates the request a predictor rejects."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

from gateway.batching.config import BatchingConfig
from gateway.batching.request import BatchRequest
from gateway.batching.scheduler import BatchScheduler
from tests.batching.support import RecordingExecutor, rows, scheduler_with
from wire.errors import BadPredictorAnswer, DeadlineExceeded, HandlerFailed, ModelNotFound, PredictorRejected
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
    # The slot is given back once every member's deadline has passed.
    executor.release.set()
    result = await asyncio.wait_for(scheduler.submit(BatchRequest.arriving("m", rows(1, 1))), 1.0)
    assert result.outputs[0].data.shape == (1, 2)


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
    assert scheduler.stats("m").isolations >= 1
