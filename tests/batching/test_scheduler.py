"""The scheduler's public API from other threads and other event loops."""
from __future__ import annotations

import asyncio
import threading

import numpy as np

from gateway.batching.config import BatchingConfig
from gateway.batching.scheduler import BatchScheduler
from tests.batching.support import RecordingExecutor, rows


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
        loop.call_soon_threadsafe(scheduler.add_model, "m", RecordingExecutor(0), BatchingConfig())
        result = asyncio.run(scheduler.submit("m", rows(3, 2)))
        np.testing.assert_array_equal(result.outputs[0].data, rows(3, 2)[0].data * 2)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
