"""The batch scheduler's semantics, against a recording executor (no network)."""
from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from gateway.batching.scheduler import BatchingPolicy, BatchScheduler
from wire.errors import BadPredictorAnswer, DeadlineExceeded, ModelNotFound, Overloaded, PredictorRejected
from wire.tensors import Tensor


class RecordingExecutor:
    """Doubles its input after `delay_s`; remembers every batch it was given."""

    def __init__(self, delay_s: float = 0.01) -> None:
        self.delay_s = delay_s
        self.batches: list[np.ndarray] = []
        self.concurrent = 0
        self.max_concurrent = 0
        self.release: asyncio.Event | None = None

    async def __call__(self, inputs: list[Tensor]) -> list[Tensor]:
        self.batches.append(inputs[0].data.copy())
        self.concurrent += 1
        self.max_concurrent = max(self.max_concurrent, self.concurrent)
        try:
            if self.release is not None:
                await self.release.wait()
            await asyncio.sleep(self.delay_s)
        finally:
            self.concurrent -= 1
        return [Tensor("OUTPUT0", "FP32", inputs[0].data * 2)]


def rows(start: int, count: int, width: int = 2) -> list[Tensor]:
    data = np.arange(start * width, (start + count) * width, dtype=np.float32).reshape(count, width)
    return [Tensor("INPUT0", "FP32", data)]


def scheduler_with(executor, **policy) -> BatchScheduler:
    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("m", executor, BatchingPolicy(**policy))
    return scheduler


async def test_a_lone_request_ships_at_once_under_adaptive():
    executor = RecordingExecutor(delay_s=0)
    scheduler = scheduler_with(executor, policy="adaptive", max_latency_s=5.0)
    result = await asyncio.wait_for(scheduler.submit("m", rows(0, 1)), 1.0)
    np.testing.assert_array_equal(result.outputs[0].data, rows(0, 1)[0].data * 2)
    assert len(executor.batches) == 1


async def test_requests_arriving_while_the_slot_is_busy_leave_together():
    executor = RecordingExecutor(delay_s=0.05)
    scheduler = scheduler_with(executor, max_batch_size=32)
    first = asyncio.ensure_future(scheduler.submit("m", rows(0, 1)))
    await asyncio.sleep(0.01)  # the first batch is now at the executor
    rest = [asyncio.ensure_future(scheduler.submit("m", rows(i, 1))) for i in range(1, 11)]
    results = await asyncio.gather(first, *rest)
    assert [len(b) for b in executor.batches] == [1, 10]
    assert len({r.batch_ids[0] for r in results[1:]}) == 1
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result.outputs[0].data, rows(i, 1)[0].data * 2)


async def test_window_policy_waits_for_max_latency_when_not_full():
    executor = RecordingExecutor(delay_s=0)
    scheduler = scheduler_with(executor, policy="window", max_latency_s=0.2, max_batch_size=32)
    loop = asyncio.get_running_loop()
    started = loop.time()
    results = await asyncio.gather(*(scheduler.submit("m", rows(i, 1)) for i in range(3)))
    assert loop.time() - started >= 0.19
    assert [len(b) for b in executor.batches] == [3]
    assert len({r.batch_ids[0] for r in results}) == 1


async def test_window_policy_ships_a_full_batch_without_waiting():
    executor = RecordingExecutor(delay_s=0)
    scheduler = scheduler_with(executor, policy="window", max_latency_s=10.0, max_batch_size=4)
    await asyncio.wait_for(asyncio.gather(*(scheduler.submit("m", rows(i, 1)) for i in range(4))), 2.0)
    assert [len(b) for b in executor.batches] == [4]


async def test_max_batch_size_is_a_hard_cap_and_large_requests_are_split_in_order():
    executor = RecordingExecutor(delay_s=0.01)
    scheduler = scheduler_with(executor, max_batch_size=4)
    blocker = asyncio.ensure_future(scheduler.submit("m", rows(100, 1)))
    await asyncio.sleep(0)
    big = asyncio.ensure_future(scheduler.submit("m", rows(0, 10)))
    small = asyncio.ensure_future(scheduler.submit("m", rows(50, 3)))
    big_result, small_result, _ = await asyncio.gather(big, small, blocker)
    assert all(len(batch) <= 4 for batch in executor.batches)
    np.testing.assert_array_equal(big_result.outputs[0].data, rows(0, 10)[0].data * 2)
    np.testing.assert_array_equal(small_result.outputs[0].data, rows(50, 3)[0].data * 2)
    assert len(big_result.batch_ids) == 3  # 4 + 4 + 2 rows


async def test_max_inflight_bounds_concurrent_batches():
    executor = RecordingExecutor(delay_s=0.02)
    scheduler = scheduler_with(executor, max_batch_size=2, max_inflight=2)
    await asyncio.gather(*(scheduler.submit("m", rows(i, 1)) for i in range(20)))
    assert executor.max_concurrent == 2


async def test_requests_of_different_signatures_never_share_a_batch():
    executor = RecordingExecutor(delay_s=0.02)
    scheduler = scheduler_with(executor)
    blocker = asyncio.ensure_future(scheduler.submit("m", rows(0, 1)))
    await asyncio.sleep(0)
    narrow = [asyncio.ensure_future(scheduler.submit("m", rows(i, 1, width=2))) for i in range(3)]
    wide = [asyncio.ensure_future(scheduler.submit("m", rows(i, 1, width=3))) for i in range(3)]
    await asyncio.gather(blocker, *narrow, *wide)
    assert sorted(b.shape for b in executor.batches[1:]) == [(3, 2), (3, 3)]


async def test_a_request_past_its_deadline_in_the_queue_is_answered_and_never_sent():
    executor = RecordingExecutor(delay_s=0.3)
    scheduler = scheduler_with(executor)
    blocker = asyncio.ensure_future(scheduler.submit("m", rows(0, 1)))
    await asyncio.sleep(0)
    with pytest.raises(DeadlineExceeded, match="in the queue"):
        await scheduler.submit("m", rows(7, 1), timeout_s=0.05)
    await blocker
    assert len(executor.batches) == 1
    assert scheduler.queue_depth("m") == 0


async def test_a_hung_executor_costs_each_request_at_most_its_deadline():
    executor = RecordingExecutor()
    executor.release = asyncio.Event()  # never set: the predictor hangs
    scheduler = scheduler_with(executor, timeout_s=0.1)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(DeadlineExceeded):
        await scheduler.submit("m", rows(0, 1))
    assert loop.time() - started < 1.0
    # The slot is given back once every member's deadline has passed.
    executor.release.set()
    result = await asyncio.wait_for(scheduler.submit("m", rows(1, 1)), 1.0)
    assert result.outputs[0].data.shape == (1, 2)


async def test_a_full_queue_refuses_at_once():
    executor = RecordingExecutor(delay_s=0.2)
    scheduler = scheduler_with(executor, max_queue=4)
    blocker = asyncio.ensure_future(scheduler.submit("m", rows(0, 1)))
    await asyncio.sleep(0)
    queued = [asyncio.ensure_future(scheduler.submit("m", rows(i, 1))) for i in range(4)]
    await asyncio.sleep(0)
    with pytest.raises(Overloaded):
        await scheduler.submit("m", rows(9, 1))
    await asyncio.gather(blocker, *queued)
    assert scheduler.stats("m").refused == 1


async def test_a_cancelled_request_is_removed_and_never_sent():
    executor = RecordingExecutor(delay_s=0.05)
    scheduler = scheduler_with(executor)
    blocker = asyncio.ensure_future(scheduler.submit("m", rows(0, 1)))
    await asyncio.sleep(0)
    gone = asyncio.ensure_future(scheduler.submit("m", rows(5, 1)))
    stays = asyncio.ensure_future(scheduler.submit("m", rows(6, 1)))
    await asyncio.sleep(0)
    assert scheduler.queue_depth("m") == 2
    gone.cancel()
    await asyncio.sleep(0)
    assert scheduler.queue_depth("m") == 1
    await asyncio.gather(blocker, stays)
    sent = np.concatenate(executor.batches)
    assert not any((row == rows(5, 1)[0].data[0]).all() for row in sent)


async def test_executor_errors_reach_every_member_and_wrong_row_counts_are_caught():
    async def rejects(inputs):
        raise PredictorRejected("no")

    async def short(inputs):
        return [Tensor("OUTPUT0", "FP32", inputs[0].data[:-1])]

    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("rejects", rejects, BatchingPolicy())
    scheduler.add_model("short", short, BatchingPolicy())
    with pytest.raises(PredictorRejected):
        await scheduler.submit("rejects", rows(0, 1))
    with pytest.raises(BadPredictorAnswer, match="1 rows"):
        await scheduler.submit("short", rows(0, 2))
    with pytest.raises(ModelNotFound):
        await scheduler.submit("absent", rows(0, 1))


async def test_the_next_batch_ships_before_the_finished_batch_is_delivered():
    order: list[str] = []
    scheduler = BatchScheduler(asyncio.get_running_loop())

    async def executor(inputs):
        order.append(f"start {len(inputs[0].data)}")
        await asyncio.sleep(0.02)
        return [inputs[0]]

    scheduler.add_model("m", executor, BatchingPolicy())
    first = asyncio.ensure_future(scheduler.submit("m", rows(0, 1)))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(scheduler.submit("m", rows(1, 2)))
    first.add_done_callback(lambda _: order.append("first delivered"))
    await asyncio.gather(first, second)
    assert order.index("start 2") < order.index("first delivered")


def test_submit_is_safe_from_many_threads_at_once():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        executor = RecordingExecutor(delay_s=0.002)
        scheduler = BatchScheduler(loop)
        loop.call_soon_threadsafe(scheduler.add_model, "m", executor, BatchingPolicy(max_batch_size=16))
        errors: list[str] = []

        def client(worker: int) -> None:
            for i in range(50):
                start = worker * 1000 + i
                future = scheduler.submit_threadsafe("m", rows(start, 1 + i % 3))
                got = future.result(timeout=10).outputs[0].data
                if not np.array_equal(got, rows(start, 1 + i % 3)[0].data * 2):
                    errors.append(f"worker {worker} request {i} got another client's rows")

        threads = [threading.Thread(target=client, args=(w,)) for w in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not errors
        assert sum(len(b) for b in executor.batches) == sum(16 * (1 + i % 3) for i in range(50))
        assert len(executor.batches) < 16 * 50  # requests were merged
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)


def test_submit_can_be_awaited_from_another_event_loop():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        scheduler = BatchScheduler(loop)
        loop.call_soon_threadsafe(scheduler.add_model, "m", RecordingExecutor(0), BatchingPolicy())
        result = asyncio.run(scheduler.submit("m", rows(3, 2)))
        np.testing.assert_array_equal(result.outputs[0].data, rows(3, 2)[0].data * 2)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)


async def test_a_request_the_predictor_rejects_does_not_fail_the_others_in_its_batch():
    calls: list[int] = []

    async def rejects_negative_rows(inputs):
        calls.append(len(inputs[0].data))
        await asyncio.sleep(0.01)
        if (inputs[0].data < 0).any():
            raise PredictorRejected("negative values are not allowed")
        return [Tensor("OUTPUT0", "FP32", inputs[0].data * 2)]

    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("m", rejects_negative_rows, BatchingPolicy(max_batch_size=32))
    blocker = asyncio.ensure_future(scheduler.submit("m", rows(0, 1)))
    await asyncio.sleep(0)
    requests = [rows(i, 1) for i in range(1, 9)]
    requests[5] = [Tensor("INPUT0", "FP32", -np.ones((1, 2), np.float32))]
    outcomes = await asyncio.gather(*(scheduler.submit("m", r) for r in requests), return_exceptions=True)
    await blocker
    assert isinstance(outcomes[5], PredictorRejected)
    for i, outcome in enumerate(outcomes):
        if i != 5:
            np.testing.assert_array_equal(outcome.outputs[0].data, requests[i][0].data * 2)
    assert calls[1] == 8  # the merged batch was tried first
    assert len(calls) <= 2 + 2 * 3  # then bisected: about log2(8) levels
    assert scheduler.stats("m").isolations >= 1
