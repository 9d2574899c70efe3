"""Policy `window`: KServe's semantics, through the scheduler and as a pure decision."""
from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from types import SimpleNamespace

from gateway.batching.config import BatchingConfig
from gateway.batching.policies.window import WindowPolicy
from gateway.batching.request import BatchRequest
from gateway.batching.stats import ModelStats
from tests.batching.support import RecordingExecutor, rows, scheduler_with, stats_of


async def test_window_policy_waits_for_max_latency_when_not_full():
    executor = RecordingExecutor(delay_s=0)
    scheduler = scheduler_with(executor, policy="window", max_latency_s=0.2, max_batch_size=32)
    loop = asyncio.get_running_loop()
    started = loop.time()
    results = await asyncio.gather(*(scheduler.submit(BatchRequest.arriving("m", rows(i, 1))) for i in range(3)))
    assert loop.time() - started >= 0.19
    assert [len(b) for b in executor.batches] == [3]
    assert len({r.batch_ids[0] for r in results}) == 1
    assert stats_of(scheduler, "m").departures["window_expired"] == 1


async def test_window_policy_ships_a_full_batch_without_waiting():
    executor = RecordingExecutor(delay_s=0)
    scheduler = scheduler_with(executor, policy="window", max_latency_s=10.0, max_batch_size=4)
    await asyncio.wait_for(asyncio.gather(*(scheduler.submit(BatchRequest.arriving("m", rows(i, 1))) for i in range(4))), 2.0)
    assert [len(b) for b in executor.batches] == [4]
    assert stats_of(scheduler, "m").departures["full"] == 1


# -- the decision itself, without an event loop ----------------------------------------------

@dataclass
class Queued:
    size: int
    enqueued_at: float = 0.0
    signature: str = "a"
    live: bool = True
    deadline: float = math.inf
    padded: int = 1


def decide(pending: list[Queued], now: float, **config) -> float | None:
    queue = SimpleNamespace(pending=pending, queued_rows=sum(p.size for p in pending if p.live), stats=ModelStats())
    return WindowPolicy(BatchingConfig(policy="window", **config)).wait_until(queue, now)


def test_the_window_waits_until_the_oldest_has_waited_max_latency():
    pending = [Queued(1, enqueued_at=10.0), Queued(1, enqueued_at=10.1)]
    assert decide(pending, 10.15, max_latency_s=0.2, max_batch_size=4) == 10.2
    assert decide(pending, 10.2, max_latency_s=0.2, max_batch_size=4) is None


def test_the_window_closes_when_the_oldest_signature_group_is_full():
    assert decide([Queued(3), Queued(1)], 0.0, max_latency_s=1.0, max_batch_size=4) is None
    # Full counts every live row of the group, even a part that would not fit beside the others.
    assert decide([Queued(3), Queued(2)], 0.0, max_latency_s=1.0, max_batch_size=4) is None


def test_with_a_cost_cap_the_window_closes_when_the_group_is_full_in_padded_elements():
    long_rows = [Queued(1, padded=256), Queued(1, padded=128)]  # 2 rows x 256 = 512 elements
    assert decide(long_rows, 0.0, max_latency_s=1.0, max_batch_size=32, max_batch_cost=512) is None
    assert decide(long_rows, 0.0, max_latency_s=1.0, max_batch_size=32, max_batch_cost=1024) == 1.0


def test_other_signatures_and_answered_requests_do_not_fill_the_window():
    pending = [Queued(2), Queued(2, signature="b"), Queued(2, live=False), Queued(1)]
    assert decide(pending, 0.0, max_latency_s=1.0, max_batch_size=4) == 1.0
