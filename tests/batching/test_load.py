"""The load signal (gateway.batching.load): one replica's capacity from the learned profile,
the demand in rows, and the share of the fleet the demand uses."""
from __future__ import annotations

import asyncio
import concurrent.futures
import json
import time
from collections.abc import Callable

import numpy as np
import pytest

from backends.oip_grpc import OipGrpcBackend
from backends.oip_http import OipHttpBackend
from gateway.batching.config import BatchingConfig
from gateway.batching.load import SATURATED_RETURNS_PER_SLOT, LoadSignal, batch_within, replica_capacity
from gateway.batching.scheduler import BatchRequest, BatchScheduler
from gateway.batching.slots import Slots
from tests.harness import config_for, running_gateway, scraped
from tests.processes import simulated_predictor
from tools import loadgen
from wire.tensors import Tensor
from wire.tracing import current_batch

SIGNATURE = {"inputs": [{"name": "INPUT0", "datatype": "FP32"}], "outputs": [{"name": "OUTPUT0", "datatype": "FP32"}]}

TWENTY_MS_PLUS_ONE_PER_ROW = (0.020, 0.001)  # ℓ(b) = 20 ms + 1 ms x b


def test_capacity_is_the_full_batch_over_its_time_times_the_slots():
    # ℓ(32) = 52 ms: 32 rows every 52 ms on one slot.
    assert replica_capacity(TWENTY_MS_PLUS_ONE_PER_ROW, 32, 1, None) == pytest.approx(32 / 0.052)
    assert replica_capacity(TWENTY_MS_PLUS_ONE_PER_ROW, 32, 2, None) == pytest.approx(2 * 32 / 0.052)


def test_capacity_is_unknown_before_the_profile_has_seen_a_call():
    assert replica_capacity(None, 32, 1, None) is None
    assert LoadSignal(None, 100.0, 2).load is None


def test_an_slo_caps_the_batch_at_what_answers_within_it_after_waiting_for_a_slot():
    # One slot: a request may wait a whole batch for the slot, then its own: 2 ℓ(b) <= 100 ms, ℓ(b) <= 50 ms.
    assert batch_within(TWENTY_MS_PLUS_ONE_PER_ROW, 64, 1, 0.100) == 30
    # Two slots: batches leave twice as often, so the wait is half a batch: 1.5 ℓ(b) <= 100 ms.
    assert batch_within(TWENTY_MS_PLUS_ONE_PER_ROW, 64, 2, 0.100) == 46
    assert batch_within(TWENTY_MS_PLUS_ONE_PER_ROW, 16, 1, 0.100) == 16  # the batch limit still holds
    assert batch_within(TWENTY_MS_PLUS_ONE_PER_ROW, 64, 1, 0.010) == 1   # nothing meets it: one row at least
    assert batch_within((0.030, 0.0), 64, 1, 0.100) == 64  # a flat cost: any batch or none
    assert batch_within((0.080, 0.0), 64, 1, 0.100) == 1
    assert replica_capacity(TWENTY_MS_PLUS_ONE_PER_ROW, 64, 1, 0.100) == pytest.approx(30 / 0.050)


def test_the_load_is_the_demand_over_the_fleet_and_a_fleet_with_none_in_rotation_counts_one():
    assert LoadSignal(400.0, 200.0, 1).load == pytest.approx(0.5)
    assert LoadSignal(400.0, 1200.0, 2).load == pytest.approx(1.5)
    assert LoadSignal(400.0, 200.0, 0).load == pytest.approx(0.5)


class Fleet:
    """Replicas as a queue reads them, changed by the test."""

    def __init__(self) -> None:
        self.serving, self.leaving = 1, 0

    def in_rotation(self) -> int:
        return self.serving

    def batches_leaving(self) -> int:
        return self.leaving


async def test_the_scheduler_reads_the_demand_the_profile_and_the_replicas_of_a_model():
    replicas = Fleet()

    async def executor(inputs: list[Tensor]) -> list[Tensor]:
        await asyncio.sleep(0.002)
        return inputs

    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("m", executor, BatchingConfig(max_batch_size=8, max_inflight=2), replicas=replicas)
    before = scheduler.view("m").load
    assert (before.capacity_rows_per_second, before.demand_rows_per_second, before.replicas) == (None, 0.0, 1)
    rows = np.ones((4, 1), dtype=np.float32)
    await asyncio.gather(*(scheduler.submit(BatchRequest("m", [Tensor("x", "FP32", rows)])) for _ in range(20)))
    signal = scheduler.view("m").load
    assert signal.demand_rows_per_second > 0 and signal.capacity_rows_per_second is not None
    view = scheduler.view("m")
    assert view.inflight_limit == 2 and view.slots_per_replica == 2
    replicas.serving = 3  # two replicas joined: three times the slots, a third of the load
    assert scheduler.view("m").inflight_limit == 6 and scheduler.view("m").load.replicas == 3
    replicas.serving, replicas.leaving = 2, 1  # one left with a batch still at it: counted apart
    assert scheduler.view("m").inflight_limit == 5 and scheduler.view("m").load.replicas == 2
    await scheduler.close()


async def test_the_demand_follows_the_arrivals_within_a_few_of_its_time_constants():
    async def executor(inputs: list[Tensor]) -> list[Tensor]:
        return inputs

    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("m", executor, BatchingConfig(demand_smoothing_s=0.1))
    rows = np.ones((4, 1), dtype=np.float32)
    await asyncio.gather(*(scheduler.submit(BatchRequest("m", [Tensor("x", "FP32", rows)])) for _ in range(50)))
    busy = scheduler.view("m").load.demand_rows_per_second
    await asyncio.sleep(0.5)  # five time constants with nothing arriving: under 1% is left
    assert scheduler.view("m").load.demand_rows_per_second < busy * 0.01
    await scheduler.close()


class FakeLoop:
    """The loop as the slots use it: a clock the test moves, and callbacks run when the test
    ends a turn."""

    def __init__(self) -> None:
        self.now = 100.0
        self.soon: list[Callable[[], None]] = []

    def time(self) -> float:
        return self.now

    def call_soon(self, callback: Callable[[], None]) -> _Handle:
        self.soon.append(callback)
        return _Handle()

    def end_turn(self) -> None:
        soon, self.soon = self.soon, []
        for callback in soon:
            callback()


class _Handle:
    def cancel(self) -> None:
        pass


def saturate(slots: Slots, loop: FakeLoop, returns: int, call_s: float, rows: int, backlogged: bool = True) -> None:
    """`returns` batches of `rows` returning from slots that never idle: each of the two
    slots' calls takes `call_s`, the second started half a call after the first; the freed
    slot takes the next batch in the turn it returned in (as the queue does)."""
    for _ in range(returns):
        loop.now += call_s / 2
        slots.given_back(loop.now, rows)
        slots.take(backlogged)
        loop.end_turn()


def test_while_the_slots_never_idle_the_capacity_is_the_throughput_they_returned_and_the_load_offered_over_it():
    """Deep in overload the time per call inflates with the gateway's busy loop (the profile
    read 363 rows/s against 444): slots that never idle, every batch leaving rows waiting,
    return the fleet's capacity itself, which the signal reads instead."""
    loop = FakeLoop()
    slots = Slots(BatchingConfig(max_inflight=2, max_batch_size=16), Fleet(), loop)  # type: ignore[arg-type]
    slots.take(True)
    slots.take(True)  # both slots busy, rows waiting
    throughput = 2 * 16 / 0.050  # two slots, 16 rows every 50 ms each: 640 rows/s
    saturate(slots, loop, SATURATED_RETURNS_PER_SLOT * 2, 0.050, 16)  # the first return starts the spell's clock
    assert slots.measured_capacity() is None  # not long enough yet: the profile's figure stands
    saturate(slots, loop, 1, 0.050, 16)
    assert slots.measured_capacity() == pytest.approx(throughput)
    offered = 1.5 * throughput
    assert LoadSignal(slots.measured_capacity(), offered, 1).load == pytest.approx(1.5)
    saturate(slots, loop, 400, 0.100, 16)  # the predictor slowed to half: four time constants on, so does the figure
    assert slots.measured_capacity() == pytest.approx(throughput / 2, rel=0.01)


def test_a_slot_left_free_or_a_batch_that_empties_the_queue_ends_the_measure():
    loop = FakeLoop()
    slots = Slots(BatchingConfig(max_inflight=1), Fleet(), loop)  # type: ignore[arg-type]
    slots.take(True)
    saturate(slots, loop, 3 * SATURATED_RETURNS_PER_SLOT, 0.050, 8)
    assert slots.measured_capacity() == pytest.approx(8 / 0.025)
    loop.now += 0.025
    slots.given_back(loop.now, 8)
    loop.end_turn()  # nothing took the slot in its turn: it idles, and the rows returned are the demand's
    assert slots.measured_capacity() is None
    slots.take(True)
    saturate(slots, loop, 3 * SATURATED_RETURNS_PER_SLOT, 0.050, 8, backlogged=False)
    assert slots.measured_capacity() is None  # the queue emptied into each batch: not saturated


async def test_the_view_reads_the_measured_capacity_when_the_slots_stay_saturated():
    """The executor stamps 1 ms per call (the profile's figure: 8,000 rows/s), but each call
    holds its slot at least 20 ms: at most 400 rows/s come back, and that is the capacity
    the view reads while the queue stays full (no assumption on speed: a call cannot take
    less than its sleep)."""
    views = []
    calls = 0

    async def executor(inputs: list[Tensor]) -> list[Tensor]:
        nonlocal calls
        calls += 1
        if calls == 3 * SATURATED_RETURNS_PER_SLOT:  # well inside a queue that stays full
            views.append(scheduler.view("m"))
        batch = current_batch.get()
        assert batch is not None
        await asyncio.sleep(0.020)
        batch.clock.sent = time.monotonic() - 0.001
        batch.clock.answered = time.monotonic()  # the transport's stamp: 1 ms at the predictor
        return inputs

    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("m", executor, BatchingConfig(max_batch_size=8, max_queue=1000))
    rows = np.ones((1, 1), dtype=np.float32)
    await asyncio.gather(*(scheduler.submit(BatchRequest("m", [Tensor("x", "FP32", rows)])) for _ in range(400)))
    await scheduler.close()
    (view,) = views
    profile_capacity = replica_capacity(view.stats.profile, 8, 1, None)
    assert profile_capacity is not None and profile_capacity > 2000  # what the stamped time per call says
    assert view.load.capacity_rows_per_second is not None and view.load.capacity_rows_per_second <= 8 / 0.020 * 1.01
    assert view.load.load == pytest.approx(view.load.demand_rows_per_second / view.load.capacity_rows_per_second)


BLOCKED_S = 0.2  # the loop held by other work on each side of a call: far beyond the predictor's 1 ms


@pytest.mark.parametrize("transport", ["http", "grpc"])
async def test_the_profile_learns_the_predictors_time_not_the_turns_of_a_busy_loop_around_it(transport):
    """Deep in overload the gateway's loop is busy (thousands of clients waiting): the
    scheduler's task starts the call late and resumes late after its answer. That time is
    the gateway's, not the predictor's: the profile, and the capacity read from it, learn
    the call from when it left to when its answer arrived (wire.tracing.CallClock)."""
    predictor = simulated_predictor("--call-ms", "1")
    backend = (OipHttpBackend(f"http://127.0.0.1:{predictor.fields['http']}", "demo") if transport == "http"
               else OipGrpcBackend(f"127.0.0.1:{predictor.fields['grpc']}", "demo"))

    async def on_a_busy_loop(inputs: list[Tensor]) -> list[Tensor]:
        time.sleep(BLOCKED_S)  # the loop runs other work before the call is written ...
        outputs = await backend.infer(inputs)
        time.sleep(BLOCKED_S)  # ... and after its answer has arrived, before the scheduler resumes
        return outputs

    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("m", on_a_busy_loop, BatchingConfig(max_batch_size=8))
    try:
        for value in range(3):
            result = await scheduler.submit(BatchRequest("m", [Tensor("INPUT0", "FP32", np.full((1, 1), value,
                                                                                             dtype=np.float32))]))
            assert result.outputs[0].data.tolist() == [[2.0 * value]]
        intercept, per_row = scheduler.view("m").stats.profile
        assert intercept + per_row < BLOCKED_S, "the loop's own delay was learned as the predictor's time"
    finally:
        await scheduler.close()
        await backend.close()
        predictor.stop()


# -- against the simulated predictor, at known steady loads ----------------------------------

CALL_MS, PER_ROW_MS, BATCH, ROWS = 40.0, 1.0, 16, 4
REPLICA_CAPACITY = BATCH / ((CALL_MS + PER_ROW_MS * BATCH) / 1000)  # 16 rows per 56 ms: about 286 rows/s


@pytest.mark.parametrize("replicas", [1, 2])
@pytest.mark.parametrize("share", [0.5, 1.5])
def test_at_a_steady_open_loop_load_the_signal_reads_the_share_of_the_fleet_it_uses(replicas, share):
    """Half the fleet's capacity reads 0.5, one and a half reads 1.5 (refused rows count: they
    are demand too), within 15%, with one replica and with two. Saturated, the truth is also
    measured: the rows arriving over the rows the fleet computed."""
    predictors = [simulated_predictor("--call-ms", str(CALL_MS), "--per-instance-ms", str(PER_ROW_MS))
                  for _ in range(replicas)]
    try:
        model = {"name": "demo", "backend": "kserve", "api": "v1", **SIGNATURE,
                 "url": [f"http://127.0.0.1:{p.fields['http']}" for p in predictors],
                 "batching": {"max_batch_size": BATCH, "max_queue": 64, "timeout_s": 2}}
        with running_gateway(config_for(model)) as gw:
            rate = share * replicas * REPLICA_CAPACITY / ROWS  # requests per second
            body = json.dumps({"instances": [[1.0]] * ROWS}).encode()
            config = loadgen.Config(target=f"{gw.http_url}/v1/models/demo:predict", body=body, method="POST",
                                    rate=rate, concurrency=64, duration=10.0, timeout=5.0, seed=7)
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                running = pool.submit(asyncio.run, loadgen.run(config))
                time.sleep(3.0)  # the profile has seen full (or growing) batches; the demand is steady
                first = (time.monotonic(), gw.stats("demo").requests, gw.stats("demo").instances)
                readings = []
                for _ in range(3):
                    time.sleep(1.5)
                    readings.append({name: scraped(gw.http_url, name, "demo") for name in (
                        "gateway_predictor_load", "gateway_demand_rows_per_second", "gateway_predictor_replicas")})
                last = (time.monotonic(), gw.stats("demo").requests, gw.stats("demo").instances)
                result = running.result(timeout=30)
            assert result.sent > 0
            seconds = last[0] - first[0]
            arrived = (last[1] - first[1]) * ROWS / seconds  # rows per second, as they came
            served = (last[2] - first[2]) / seconds          # rows per second the fleet computed
            demand = sum(r["gateway_demand_rows_per_second"] for r in readings) / len(readings)
            load = sum(r["gateway_predictor_load"] for r in readings) / len(readings)
            assert {r["gateway_predictor_replicas"] for r in readings} == {replicas}
            assert demand == pytest.approx(arrived, rel=0.10)
            assert load == pytest.approx(share, rel=0.15)
            if share > 1:  # saturated: what the fleet computed is its capacity, measured
                assert load == pytest.approx(arrived / served, rel=0.15)
            else:          # not: the capacity is the predictor's cost's
                assert load == pytest.approx(arrived / (replicas * REPLICA_CAPACITY), rel=0.15)
    finally:
        for predictor in predictors:
            predictor.stop()
