"""The scheduler's public API from other threads and other event loops."""
from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from gateway.batching.config import BatchingConfig
from gateway.batching.request import BatchRequest
from gateway.batching.scheduler import BatchScheduler
from tests.batching.support import RecordingExecutor, rows, scheduler_with
from wire.errors import ModelNotFound, Unavailable


def test_submit_is_safe_from_many_threads_at_once():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        executor = RecordingExecutor(delay_s=0.002)
        scheduler = BatchScheduler(loop)
        loop.call_soon_threadsafe(scheduler.add_model, "m", executor, BatchingConfig(max_batch_size=16))
        errors: list[str] = []

        def client(worker: int) -> None:
            for i in range(50):
                start = worker * 1000 + i
                future = scheduler.submit_threadsafe(BatchRequest.arriving("m", rows(start, 1 + i % 3)))
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
        loop.call_soon_threadsafe(scheduler.add_model, "m", RecordingExecutor(0), BatchingConfig())
        result = asyncio.run(scheduler.submit(BatchRequest.arriving("m", rows(3, 2))))
        np.testing.assert_array_equal(result.outputs[0].data, rows(3, 2)[0].data * 2)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)


async def test_an_unknown_policy_is_refused():
    scheduler = BatchScheduler(asyncio.get_running_loop())
    with pytest.raises(ValueError, match="unknown batching policy 'eager'"):
        scheduler.add_model("m", RecordingExecutor(), BatchingConfig(policy="eager"))
    assert scheduler.model_names() == []


async def test_adding_a_model_again_re_tunes_it():
    executor = RecordingExecutor(delay_s=0)
    scheduler = scheduler_with(executor)
    await scheduler.submit(BatchRequest.arriving("m", rows(0, 1)))
    scheduler.add_model("m", executor, BatchingConfig(policy="window", max_latency_s=0.1))
    loop = asyncio.get_running_loop()
    started = loop.time()
    await scheduler.submit(BatchRequest.arriving("m", rows(1, 1)))
    assert loop.time() - started >= 0.09  # the window now holds a lone request
    assert scheduler.model_names() == ["m"]


async def test_a_removed_model_finishes_its_batch_then_is_unknown():
    scheduler = scheduler_with(RecordingExecutor(delay_s=0.02))
    inflight = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(0, 1))))
    await asyncio.sleep(0)
    await scheduler.remove_model("m", grace_s=5.0)
    np.testing.assert_array_equal((await inflight).outputs[0].data, rows(0, 1)[0].data * 2)
    with pytest.raises(ModelNotFound):
        await scheduler.submit(BatchRequest.arriving("m", rows(0, 1)))


async def test_closing_answers_what_is_left_unavailable_once_the_grace_is_over():
    executor = RecordingExecutor()
    executor.release = asyncio.Event()  # never set: the batch stays at the executor
    scheduler = scheduler_with(executor)
    inflight = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(0, 1))))
    await asyncio.sleep(0)
    queued = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(1, 1))))
    await asyncio.sleep(0)
    await asyncio.wait_for(scheduler.close(grace_s=0.05), 2.0)
    for request in (inflight, queued):
        with pytest.raises(Unavailable, match="shutting down"):
            await request
    with pytest.raises(Unavailable, match="shutting down"):
        await scheduler.submit(BatchRequest.arriving("m", rows(2, 1)))
    assert len(executor.batches) == 1


async def test_a_replaced_model_finishes_what_its_old_form_holds_and_takes_late_requests_of_that_form():
    """replace_model: new requests go to the new executor; queued ones finish on the old; one
    converted in the old form before the change was known (a worker's) joins the old queue,
    and once that queue is gone it is refused Unavailable, to be retried, never misread."""
    old_form, new_form = RecordingExecutor(), RecordingExecutor()
    old_form.release = asyncio.Event()
    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("m", old_form, BatchingConfig(), form="instances")
    held = asyncio.ensure_future(scheduler.submit(BatchRequest("m", rows(0, 1), form="instances")))
    await asyncio.sleep(0.01)  # at the old executor
    queued = asyncio.ensure_future(scheduler.submit(BatchRequest("m", rows(1, 1), form="instances")))
    await asyncio.sleep(0)
    scheduler.replace_model("m", new_form, BatchingConfig(), grace_s=5.0, form="tensors")
    late = asyncio.ensure_future(scheduler.submit(BatchRequest("m", rows(2, 1), form="instances")))
    fresh = await scheduler.submit(BatchRequest("m", rows(3, 1), form="tensors"))
    assert fresh.outputs[0].data.tolist() == [[12.0, 14.0]] and len(new_form.batches) == 1
    old_form.release.set()
    await asyncio.gather(held, queued, late)
    assert sorted(row[0] for batch in old_form.batches for row in batch) == [0.0, 2.0, 4.0]  # rows 0, 1, 2: the old form's
    await asyncio.sleep(0.05)  # the old queue, now empty, is retired
    with pytest.raises(Unavailable, match="changed its batch form"):
        await scheduler.submit(BatchRequest("m", rows(4, 1), form="instances"))
