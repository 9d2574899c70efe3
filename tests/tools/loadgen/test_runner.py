"""tools.loadgen.runner against a real local server: -n and -z bounds, statuses, transport
errors, the open loop, and Live counters (with both HTTP engines where it matters)."""
from __future__ import annotations

import asyncio
import socket

import pytest

from tests.tools.loadgen.support import ENGINES, HANG_GUARD_S, run
from tools.loadgen import Config
from tools.loadgen.api import run as run_load
from tools.loadgen.runner import Live

# -- closed loop ---------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
async def test_n_is_honoured_exactly(local_server, engine):
    result = await run(target=f"{local_server.url}/ok", requests=137, concurrency=8, engine=engine)
    assert local_server.seen.count == 137
    assert result.sent == 137 and result.finished == 137 and result.answered == 137
    assert result.statuses == {"200": 137} and result.ok == 137 and result.errors == {}
    assert result.unfinished == 0 and result.bytes_received == 137 * len(b'{"ok": true}')


async def test_n_smaller_than_c(local_server):
    result = await run(target=f"{local_server.url}/ok", requests=3, concurrency=50)
    assert local_server.seen.count == 3 and result.ok == 3


@pytest.mark.parametrize("engine", ENGINES)
async def test_z_bounds_the_run(local_server, engine):
    # /slow answers in 50 ms: 4 workers for 0.5 s can send at most 4 x (0.5 / 0.05 + 1) requests.
    result = await run(target=f"{local_server.url}/slow", duration=0.5, concurrency=4, engine=engine)
    assert result.elapsed_s == 0.5
    assert 1 <= result.sent <= 44
    assert result.sent == result.finished + result.unfinished
    assert result.unfinished <= 4
    assert result.statuses == {"200": result.answered}


@pytest.mark.parametrize("engine", ENGINES)
async def test_status_distribution_counts_error_statuses(local_server, engine):
    result = await run(target=f"{local_server.url}/flaky", requests=30, concurrency=1, engine=engine)
    assert result.statuses == {"200": 20, "500": 10}
    assert result.ok == 20
    assert result.errors == {'HTTP 500: {"error": "every third request fails"}': 10}

    missing = await run(target=f"{local_server.url}/no-such-path", requests=12, concurrency=3, engine=engine)
    assert missing.statuses == {"404": 12} and missing.ok == 0
    assert sum(missing.errors.values()) == 12 and all(k.startswith("HTTP 404") for k in missing.errors)
    assert missing.answered == 12  # answered, with a latency, though not ok


@pytest.mark.parametrize("engine", ENGINES)
async def test_transport_errors_are_counted_without_latencies(engine):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = await run(target=f"http://127.0.0.1:{port}/", requests=5, concurrency=2, engine=engine)
    assert result.sent == 5 and result.transport_errors == 5 and result.answered == 0
    assert result.statuses == {} and sum(result.errors.values()) == 5
    assert result.summary()["average_ms"] is None and result.percentiles_ms()["50"] is None
    assert "Error distribution" in result.format_report()


async def test_refusals_for_load_keep_their_latencies_apart(local_server):
    busy = await run(target=f"{local_server.url}/busy", requests=6, concurrency=2)
    flaky = await run(target=f"{local_server.url}/flaky", requests=6, concurrency=2)
    assert busy.statuses == {"503": 6} and len(busy.refusal_latencies) == 6 and not busy.ok_latencies
    assert flaky.statuses["500"] == 2 and not flaky.refusal_latencies  # a failure, not a refusal for load


# -- open loop -----------------------------------------------------------------------------------


@pytest.mark.parametrize("arrivals", ["poisson", "uniform"])
async def test_open_loop_sends_about_rate_times_duration(local_server, arrivals):
    result = await run(target=f"{local_server.url}/ok", rate=100, duration=1.0, arrivals=arrivals, seed=7)
    # 100/s for 1 s: about 100 arrivals (Poisson: within +-5 sigma).
    assert 50 <= result.sent + result.dropped <= 150
    assert local_server.seen.count == result.sent
    assert result.sent == result.finished + result.unfinished


async def test_bursty_arrivals_come_in_the_on_half_of_each_second_at_twice_the_rate(local_server):
    started = asyncio.get_running_loop().time()
    result = await run(target=f"{local_server.url}/ok", rate=100, duration=2.0, arrivals="bursty", seed=3)
    assert 100 <= result.sent <= 300  # 100/s on average: 200 expected
    phases = [(t - started) % 1.0 for t in local_server.seen.times]
    # None in the off halves (a margin of 50 ms on each side for the trip to the server).
    assert not [p for p in phases if 0.55 <= p <= 0.95]


async def test_open_loop_is_bounded_by_n_and_drops_when_too_many_are_in_flight(local_server):
    exact = await run(target=f"{local_server.url}/ok", rate=200, requests=25, arrivals="uniform")
    assert exact.sent == 25 and exact.ok == 25 and exact.dropped == 0
    # 50 arrivals at 500/s on a 50 ms endpoint with at most 2 in flight: most cannot be sent.
    crowded = await run(target=f"{local_server.url}/slow", rate=500, requests=50, concurrency=2, arrivals="uniform")
    assert crowded.dropped > 0
    assert crowded.sent + crowded.dropped == 50
    assert local_server.seen.paths["/slow"] == crowded.sent
    assert "Dropped" in crowded.format_report()


# -- watching and stopping a run -----------------------------------------------------------------


async def test_live_counters_and_stopping_a_run_early(local_server):
    live = Live()
    task = asyncio.get_running_loop().create_task(
        run_load(Config(target=f"{local_server.url}/slow", requests=1000, concurrency=3), live))
    while live.finished < 6:
        await asyncio.sleep(0.01)
    assert live.inflight <= 3
    live.stop()
    result = await asyncio.wait_for(task, HANG_GUARD_S)
    assert 6 <= result.finished < 1000
    assert result.sent == result.finished + result.unfinished and result.unfinished <= 3
