"""A model's queue: slots, the hard cap and splitting, signatures, deadlines, the bounded
queue, cancellation, and the order of shipping and answering (recording executor, no network)."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

from gateway.batching.config import BatchingConfig
from gateway.batching.policies.window import WindowPolicy
from gateway.batching.queue import ModelQueue
from gateway.batching.request import BatchRequest
from gateway.batching.scheduler import BatchScheduler
from tests.batching.support import RecordingExecutor, rows, scheduler_with, stats_of, until_sent
from wire.errors import DeadlineExceeded, Overloaded, PayloadTooLarge


async def test_max_batch_size_is_a_hard_cap_and_large_requests_are_split_in_order():
    executor = RecordingExecutor(delay_s=0.01)
    scheduler = scheduler_with(executor, max_batch_size=4)
    blocker = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(100, 1))))
    await asyncio.sleep(0)
    big = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(0, 10))))
    small = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(50, 3))))
    big_result, small_result, _ = await asyncio.gather(big, small, blocker)
    assert all(len(batch) <= 4 for batch in executor.batches)
    np.testing.assert_array_equal(big_result.outputs[0].data, rows(0, 10)[0].data * 2)
    np.testing.assert_array_equal(small_result.outputs[0].data, rows(50, 3)[0].data * 2)
    assert len(big_result.batch_ids) == 3  # 4 + 4 + 2 rows


async def test_requests_queued_in_one_loop_pass_leave_together():
    # A free slot weighs an arrival at the end of the loop's pass: the first of five
    # clients answered together does not leave alone (it did, inside `add`: [1, 4]).
    executor = RecordingExecutor(delay_s=0)
    scheduler = scheduler_with(executor, max_batch_size=32)
    await asyncio.gather(*(scheduler.submit(BatchRequest.arriving("m", rows(i, 1))) for i in range(5)))
    assert [len(b) for b in executor.batches] == [5]
    await scheduler.submit(BatchRequest.arriving("m", rows(9, 1)))  # a lone request, one pass later
    assert [len(b) for b in executor.batches] == [5, 1]


async def test_max_inflight_bounds_concurrent_batches():
    executor = RecordingExecutor(delay_s=0.02)
    scheduler = scheduler_with(executor, max_batch_size=2, max_inflight=2)
    await asyncio.gather(*(scheduler.submit(BatchRequest.arriving("m", rows(i, 1))) for i in range(20)))
    assert executor.max_concurrent == 2


async def test_requests_of_different_signatures_never_share_a_batch():
    executor = RecordingExecutor(delay_s=0.02)
    scheduler = scheduler_with(executor)
    blocker = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(0, 1))))
    await asyncio.sleep(0)
    narrow = [asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(i, 1, width=2)))) for i in range(3)]
    wide = [asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(i, 1, width=3)))) for i in range(3)]
    await asyncio.gather(blocker, *narrow, *wide)
    assert sorted(b.shape for b in executor.batches[1:]) == [(3, 2), (3, 3)]


async def test_a_request_past_its_deadline_in_the_queue_is_answered_and_never_sent():
    executor = RecordingExecutor(delay_s=0.3)
    scheduler = scheduler_with(executor)
    blocker = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(0, 1))))
    await until_sent(executor)
    with pytest.raises(DeadlineExceeded, match="in the queue"):
        await scheduler.submit(BatchRequest.arriving("m", rows(7, 1), timeout_s=0.05))
    await blocker
    assert len(executor.batches) == 1
    assert scheduler.view("m").queued_rows == 0


async def test_a_full_queue_refuses_at_once():
    executor = RecordingExecutor(delay_s=0.2)
    scheduler = scheduler_with(executor, max_queue=4)
    blocker = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(0, 1))))
    await asyncio.sleep(0)
    queued = [asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(i, 1)))) for i in range(4)]
    await asyncio.sleep(0)
    with pytest.raises(Overloaded):
        await scheduler.submit(BatchRequest.arriving("m", rows(9, 1)))
    await asyncio.gather(blocker, *queued)
    assert stats_of(scheduler, "m").refused == 1


async def test_a_request_larger_than_the_queue_is_refused_as_never_fitting_even_when_idle():
    executor = RecordingExecutor()
    scheduler = scheduler_with(executor, max_queue=4, max_batch_size=2)
    with pytest.raises(PayloadTooLarge, match="at most 4"):
        await scheduler.submit(BatchRequest.arriving("m", rows(0, 5)))
    assert executor.batches == [] and stats_of(scheduler, "m").refused == 0
    result = await scheduler.submit(BatchRequest.arriving("m", rows(0, 4)))  # the largest that fits still does
    assert len(result.outputs[0].data) == 4


async def test_a_cancelled_request_is_removed_and_never_sent():
    executor = RecordingExecutor(delay_s=0.05)
    scheduler = scheduler_with(executor)
    blocker = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(0, 1))))
    await asyncio.sleep(0)
    gone = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(5, 1))))
    stays = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(6, 1))))
    await asyncio.sleep(0)
    assert scheduler.view("m").queued_rows == 2
    gone.cancel()
    await asyncio.sleep(0)
    assert scheduler.view("m").queued_rows == 1
    await asyncio.gather(blocker, stays)
    sent = np.concatenate(executor.batches)
    assert not any((row == rows(5, 1)[0].data[0]).all() for row in sent)


async def test_the_next_batch_ships_before_the_finished_batch_is_delivered():
    order: list[str] = []
    scheduler = BatchScheduler(asyncio.get_running_loop())

    async def executor(inputs):
        order.append(f"start {len(inputs[0].data)}")
        await asyncio.sleep(0.02)
        return [inputs[0]]

    scheduler.add_model("m", executor, BatchingConfig())
    first = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(0, 1))))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(1, 2))))
    first.add_done_callback(lambda _: order.append("first delivered"))
    await asyncio.gather(first, second)
    assert order.index("start 2") < order.index("first delivered")


async def test_retuning_keeps_what_the_policy_learned_while_its_name_stays():
    queue = ModelQueue("m", RecordingExecutor(0), BatchingConfig(), asyncio.get_running_loop(), lambda: "batch")
    adaptive = queue.policy
    tighter = BatchingConfig(max_hold_s=0.002)
    queue.retune(queue.executor, tighter, queue.slots.replicas)
    assert queue.policy is adaptive and adaptive.config is tighter and queue.config is tighter
    queue.retune(queue.executor, BatchingConfig(policy="window"), queue.slots.replicas)
    assert isinstance(queue.policy, WindowPolicy)
