"""Policy `adaptive`: a free slot ships at once; the learned hold lets closed-loop clients
stop alternating in two groups, and nothing else is ever held. Through the scheduler, then
the policy and its ReturnTracker as pure decisions (no event loop)."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest

from gateway.batching.config import BatchingConfig
from gateway.batching.policies.adaptive import AdaptivePolicy, ReturnTracker
from gateway.batching.request import BatchRequest
from gateway.batching.scheduler import BatchScheduler
from gateway.batching.stats import ModelStats
from tests.batching.support import RecordingExecutor, closed_loop_history, learned, rows, scheduler_with, stats_of
from wire.tensors import Tensor


def one_row(value: float) -> list[Tensor]:
    return [Tensor("INPUT0", "FP32", np.full((1, 1), value, np.float32))]


async def run_closed_loop(clients: int, call_s: float, think_s: float, rounds: int, **policy) -> tuple[list[int], int]:
    sizes: list[int] = []

    async def executor(inputs):
        sizes.append(len(inputs[0].data))
        await asyncio.sleep(call_s)
        return [Tensor("OUTPUT0", "FP32", inputs[0].data * 2)]

    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("m", executor, BatchingConfig(**policy))

    async def client(index: int):
        for round_ in range(rounds):
            result = await scheduler.submit(BatchRequest.arriving("m", one_row(index * 1000 + round_)))
            assert result.outputs[0].data[0, 0] == 2 * (index * 1000 + round_)
            # The client's own turnaround before its next request, a little longer for each
            # client: real clients come back over several loop passes, not in the same one.
            await asyncio.sleep(think_s + index * 0.0003)

    await asyncio.gather(*(client(i) for i in range(clients)))
    return sizes, stats_of(scheduler, "m").holds


async def test_closed_loop_clients_come_to_share_every_batch():
    sizes, holds = await run_closed_loop(5, call_s=0.006, think_s=0.001, rounds=60, max_hold_s=0.01)
    settled = sizes[len(sizes) // 2:]
    assert holds > 0
    assert np.mean(settled) >= 4.0, settled  # instead of alternating groups of 1 and 4


async def test_without_the_hold_the_clients_alternate():
    sizes, holds = await run_closed_loop(5, call_s=0.006, think_s=0.001, rounds=60, max_hold_s=0)
    assert holds == 0
    assert np.mean(sizes[len(sizes) // 2:]) < 4.0


async def test_a_lone_client_is_never_held():
    sizes, holds = await run_closed_loop(1, call_s=0.006, think_s=0.001, rounds=30, max_hold_s=0.01)
    assert holds == 0 and set(sizes) == {1}


async def test_a_free_predictor_is_never_waited_for():
    # With calls cheaper than the clients' return delay, holding cannot pay for itself.
    _, holds = await run_closed_loop(5, call_s=0.0, think_s=0.003, rounds=40, max_hold_s=0.01)
    assert holds == 0


async def test_sparse_arrivals_are_never_held():
    # Requests 30 ms apart against 6 ms calls: each arrives 24 ms after the last delivery,
    # far past the 10 ms hold limit, so none looks like an answered client coming back.
    # (Sparse closed-loop clients are no test of this: with equal think times the two
    # groups they split into stay in phase, one arriving just as the other is answered,
    # which is a return by every measure the tracker has.)
    executor = RecordingExecutor(delay_s=0.006)
    scheduler = scheduler_with(executor, policy="adaptive", max_hold_s=0.01)
    pending = []
    for i in range(12):
        pending.append(asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(i, 1)))))
        await asyncio.sleep(0.03)
    await asyncio.gather(*pending)
    assert stats_of(scheduler, "m").holds == 0


async def test_a_lone_request_ships_at_once_under_adaptive():
    executor = RecordingExecutor(delay_s=0)
    scheduler = scheduler_with(executor, policy="adaptive", max_latency_s=5.0)
    result = await asyncio.wait_for(scheduler.submit(BatchRequest.arriving("m", rows(0, 1))), 1.0)
    np.testing.assert_array_equal(result.outputs[0].data, rows(0, 1)[0].data * 2)
    assert len(executor.batches) == 1
    assert stats_of(scheduler, "m").departures["slot_free"] == 1


async def test_requests_arriving_while_the_slot_is_busy_leave_together():
    executor = RecordingExecutor(delay_s=0.05)
    scheduler = scheduler_with(executor, max_batch_size=32)
    first = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(0, 1))))
    await asyncio.sleep(0.01)  # the first batch is now at the executor
    rest = [asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(i, 1)))) for i in range(1, 11)]
    results = await asyncio.gather(first, *rest)
    assert [len(b) for b in executor.batches] == [1, 10]
    assert len({r.batch_ids[0] for r in results[1:]}) == 1
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result.outputs[0].data, rows(i, 1)[0].data * 2)


# -- the decision itself, without an event loop ----------------------------------------------

def tracked(tracker: ReturnTracker, **history) -> float:
    return closed_loop_history(lambda now: tracker.on_arrival(now, 0.01), tracker.on_delivery, **history)


def queue_state(queued_rows: int = 1) -> SimpleNamespace:
    return SimpleNamespace(pending=[], queued_rows=queued_rows, stats=ModelStats())


def test_the_tracker_holds_for_clients_that_reliably_return():
    tracker = ReturnTracker()
    delivered_at = tracked(tracker)
    assert tracker.share >= 0.5
    # 1.5 x the 1 ms return delay, plus half a millisecond of slack
    assert tracker.hold_until(delivered_at, 0.01) == pytest.approx(delivered_at + 0.002, abs=1e-9)
    assert tracker.hold_until(delivered_at + 0.002, 0.01) is None  # the hold is over


def test_the_tracker_does_not_hold_before_it_has_seen_enough_returns():
    tracker = ReturnTracker()
    delivered_at = tracked(tracker, cycles=1)  # share 0.36: not yet "most clients"
    assert tracker.hold_until(delivered_at, 0.01) is None


def test_the_tracker_stops_holding_once_the_expected_clients_are_back():
    tracker = ReturnTracker()
    delivered_at = tracked(tracker)
    for _ in range(4):
        tracker.on_arrival(delivered_at + 0.001, 0.01)
    assert tracker.hold_until(delivered_at + 0.001, 0.01) is None


def test_the_tracker_never_holds_as_long_as_a_predictor_call():
    tracker = ReturnTracker()
    delivered_at = tracked(tracker, call_s=0.0015)  # a 2 ms hold would cost more than the call
    assert tracker.hold_until(delivered_at, 0.01) is None


def test_the_adaptive_policy_holds_a_free_slot_and_counts_it():
    policy = AdaptivePolicy(BatchingConfig(max_hold_s=0.01, max_latency_s=0.5))
    delivered_at = learned(policy)
    queue = queue_state()
    assert policy.wait_until(queue, delivered_at) == pytest.approx(delivered_at + 0.002, abs=1e-9)
    assert queue.stats.holds == 1


def test_max_latency_caps_the_adaptive_hold():
    policy = AdaptivePolicy(BatchingConfig(max_hold_s=0.01, max_latency_s=0.0005))
    assert policy.hold_limit() == 0.0005
    # Returns 1 ms after a delivery are still learned (counted over max_hold_s) ...
    delivered_at = learned(policy)
    assert policy.returns.delay is not None
    # ... but the hold stops at max_latency_s.
    assert policy.wait_until(queue_state(), delivered_at) == pytest.approx(delivered_at + 0.0005, abs=1e-9)


def test_the_adaptive_policy_never_holds_a_full_batch_or_with_the_hold_off():
    full = AdaptivePolicy(BatchingConfig(max_batch_size=4))
    delivered_at = learned(full)
    assert full.wait_until(queue_state(queued_rows=4), delivered_at) is None
    off = AdaptivePolicy(BatchingConfig(max_hold_s=0))
    delivered_at = learned(off)
    queue = queue_state()
    assert off.wait_until(queue, delivered_at) is None
    assert queue.stats.holds == 0
