"""Policy `window`: KServe's semantics, through the scheduler."""
from __future__ import annotations

import asyncio

from tests.batching.support import RecordingExecutor, rows, scheduler_with


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
