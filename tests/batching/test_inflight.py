"""`max_inflight = "auto"` (gateway/batching/inflight.py): a hill-climb on the mean latency
of answered requests. First the tuner alone, fed epochs whose latency is a function of the
level; then through the scheduler, in front of executors with a known number of slots."""
from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

import pytest

from gateway.batching import inflight
from gateway.batching.config import BatchingConfig
from gateway.batching.inflight import InflightTuner
from gateway.batching.request import BatchRequest
from gateway.batching.scheduler import BatchScheduler
from tests.batching.support import rows
from wire.tensors import Tensor


class Clock:
    now = 0.0


def epoch(tuner: InflightTuner, clock: Clock, latency: float) -> None:
    """One epoch's worth of answers, each `latency` after its arrival, at the current level."""
    start = clock.now
    for _ in range(inflight.EPOCH_REQUESTS):
        tuner.on_answered(start, start + latency)
    clock.now = start + latency
    for _ in range(max(inflight.EPOCH_BATCHES, inflight.EPOCH_ROUNDS * tuner.level)):
        tuner.on_batch_returned(clock.now)


def run(tuner: InflightTuner, latency_at: Callable[[int], float], epochs: int, clock: Clock | None = None) -> list[int]:
    """The level of each of `epochs` epochs."""
    clock = clock or Clock()
    levels = []
    for _ in range(epochs):
        levels.append(tuner.level)
        epoch(tuner, clock, latency_at(tuner.level))
    return levels


def slots(k: int, call: float = 0.010) -> Callable[[int], float]:
    """Closed-loop latency in front of a predictor with `k` real slots: it falls as 1/level
    up to k, then stays flat (the extra batches only wait at the predictor)."""
    return lambda level: call * 4 / min(level, k)


def test_it_starts_at_one_batch_in_flight():
    assert InflightTuner(ceiling=8).level == 1


def test_it_climbs_to_the_slots_a_predictor_has():
    tuner = InflightTuner(ceiling=8)
    levels = run(tuner, slots(4), epochs=40)
    assert max(levels) >= 4
    assert levels[-10:].count(4) >= 9  # settled at 4: 5 did not cut the latency


def test_it_stays_at_one_when_a_second_batch_in_flight_costs():
    """A few closed-loop clients in front of a one-call-at-a-time predictor: two in flight
    halve the batches and raise the latency (0.78x the throughput, measured on PyTriton)."""
    tuner = InflightTuner(ceiling=8)
    levels = run(tuner, lambda level: 0.010 if level == 1 else 0.0128, epochs=200)
    assert set(levels) == {1, 2}
    assert levels.count(2) <= 12  # probes back off: 6% of the epochs or fewer


def test_one_lucky_epoch_does_not_move_it():
    probe_epochs = itertools.count()
    lucky_then_not = lambda level: 0.010 if level == 1 else (0.008, 0.012)[next(probe_epochs) % 2]  # noqa: E731
    tuner = InflightTuner(ceiling=8)
    run(tuner, lucky_then_not, epochs=100)
    assert tuner.probes > 0 and tuner.moves == 0


def test_a_tie_keeps_fewer_batches_in_flight():
    tuner = InflightTuner(ceiling=8)
    levels = run(tuner, lambda level: 0.010 * (1 - 0.01 * (level - 1)), epochs=100)  # 1% better: within MARGIN
    assert levels[-1] == 1 and max(levels) == 2


def test_it_backs_off_from_a_predictor_that_slows_down_under_concurrency():
    tuner, clock = InflightTuner(ceiling=8), Clock()
    run(tuner, slots(4), epochs=30, clock=clock)
    assert tuner.level == 4
    thrashing = lambda level: 0.010 * level * level  # noqa: E731 - each call slows with the others
    levels = run(tuner, thrashing, epochs=25, clock=clock)
    assert levels[-5:] == [1] * 5
    assert levels.index(1) <= 8  # a change of conditions is probed at once, not after the backed-off interval


def test_it_never_passes_the_ceiling():
    tuner = InflightTuner(ceiling=2)
    assert max(run(tuner, slots(8), epochs=50)) == 2


def test_a_ceiling_of_one_never_probes():
    tuner = InflightTuner(ceiling=1)
    assert set(run(tuner, slots(8), epochs=20)) == {1}
    assert tuner.probes == 0


def test_a_lower_ceiling_keeps_what_was_learned_below_it():
    tuner = InflightTuner(ceiling=8)
    run(tuner, slots(4), epochs=30)
    tuner.set_ceiling(3)
    assert tuner.level == 3
    with pytest.raises(ValueError):
        tuner.set_ceiling(0)


def test_an_epoch_counts_only_requests_that_arrived_during_it():
    tuner = InflightTuner(ceiling=8, now=10.0)
    for _ in range(inflight.EPOCH_REQUESTS * 2):
        tuner.on_answered(arrived=9.0, now=11.0)  # queued before the epoch began: another level's
    for _ in range(inflight.EPOCH_BATCHES * 2):
        tuner.on_batch_returned(11.0)
    assert tuner.level == 1 and tuner.probes == 0  # no epoch has ended


# -- through the scheduler -------------------------------------------------------------------


class SlottedPredictor:
    """Doubles its input. `slots` calls compute at once, each `call_s` long; `thrashing`
    makes each call as much slower as there are calls in progress."""

    def __init__(self, slots: int, call_s: float = 0.004) -> None:
        self.slots, self.call_s, self.thrashing = slots, call_s, False
        self._semaphore = asyncio.Semaphore(slots)
        self.concurrent = 0

    async def __call__(self, inputs: list[Tensor]) -> list[Tensor]:
        self.concurrent += 1
        try:
            if self.thrashing:
                await asyncio.sleep(self.call_s * self.concurrent * self.concurrent)
            else:
                async with self._semaphore:
                    await asyncio.sleep(self.call_s)
        finally:
            self.concurrent -= 1
        return [Tensor("OUTPUT0", "FP32", inputs[0].data * 2)]


async def closed_loop(scheduler: BatchScheduler, clients: int, until: Callable[[], bool], budget_s: float) -> None:
    """`clients` clients, each sending its next single-row request when answered, checking
    every answer, until `until()` holds (or `budget_s` passes: the test then fails)."""
    async def client(index: int) -> None:
        while not until():
            result = await scheduler.submit(BatchRequest.arriving("m", rows(index, 1)))
            assert result.outputs[0].data.tolist() == (rows(index, 1)[0].data * 2).tolist()

    await asyncio.wait_for(asyncio.gather(*(client(i) for i in range(clients))), budget_s)


async def test_auto_finds_more_than_two_slots_and_leaves_them_when_the_predictor_thrashes():
    scheduler = BatchScheduler(asyncio.get_running_loop())
    predictor = SlottedPredictor(slots=4)
    scheduler.add_model("m", predictor, BatchingConfig(max_batch_size=8, auto_inflight=True, max_hold_s=0))
    # 4 is tried only from 3, and 3 is kept only if it won: so more than 2 was found.
    await closed_loop(scheduler, 64, until=lambda: scheduler.view("m").inflight_limit >= 4, budget_s=60)
    predictor.thrashing = True
    await closed_loop(scheduler, 64, until=lambda: scheduler.view("m").inflight_limit == 1, budget_s=60)
    await scheduler.close()


async def test_auto_starts_at_one_and_a_fixed_value_is_kept():
    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("auto", SlottedPredictor(1), BatchingConfig(auto_inflight=True, inflight_ceiling=4))
    scheduler.add_model("fixed", SlottedPredictor(1), BatchingConfig(max_inflight=3))
    assert scheduler.view("auto").inflight_limit == 1
    assert scheduler.view("fixed").inflight_limit == 3
    scheduler.add_model("fixed", SlottedPredictor(1), BatchingConfig(auto_inflight=True))  # re-tuned to auto
    assert scheduler.view("fixed").inflight_limit == 1
    await scheduler.close()
