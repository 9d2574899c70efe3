"""gateway/observe/live.py: the live page's snapshot says what the scheduler's stats (and its
tenants' usage) say, in the shape its docstring gives, for a scheduler driven directly (no HTTP)."""
from __future__ import annotations

import asyncio

import orjson
import pytest

from gateway.batching.config import BatchingConfig, TenantPolicy
from gateway.batching.instruments import SECONDS_BOUNDS
from gateway.batching.policies import departures
from gateway.batching.request import BatchRequest
from gateway.batching.scheduler import BatchScheduler
from gateway.observe import live
from tests.batching.support import RecordingExecutor, rows, stats_of
from wire.errors import RateLimited


def model(snapshot: dict, name: str = "m") -> dict:
    (found,) = [entry for entry in snapshot["models"] if entry["name"] == name]
    return found


async def test_a_model_before_any_traffic():
    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("m", RecordingExecutor(), BatchingConfig(max_batch_size=8))
    snapshot = await live.snapshot(scheduler, now_unix_s=123.5)
    assert snapshot["server_time_unix_s"] == 123.5
    assert snapshot["departure_reasons"] == list(departures())
    entry = model(snapshot)
    assert entry["queue"] == {"rows": 0, "requests": 0}
    assert entry["inflight"] == {"batches": 0, "limit": 1, "auto": False, "ceiling": None}
    assert entry["profile"] == {"intercept_ms": None, "per_row_ms": None, "calls": 0, "predicted": []}
    assert entry["observed"] == [] and entry["levels"] == [] and entry["batch_size"]["recent"] == []
    assert entry["goodput"] is None and entry["padding"] is None and entry["slo_ms"] is None
    assert entry["last_batch_unix_s"] is None
    assert set(entry["departures"]) == set(departures()) and not any(entry["departures"].values())
    orjson.dumps(snapshot)  # what the handler does with it


async def test_counts_histogram_departures_and_profile_are_the_stats():
    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("m", RecordingExecutor(delay_s=0.002), BatchingConfig(max_batch_size=4, max_hold_s=0))
    await asyncio.gather(*(scheduler.submit(BatchRequest.arriving("m", rows(i, 1 + i % 3))) for i in range(30)))
    stats = stats_of(scheduler, "m")
    entry = model(await live.snapshot(scheduler))
    assert entry["counts"] == {"requests": 30, "answered": 30, "refused": 0, "refused_late": 0, "dropped": 0,
                               "expired": 0, "batches": stats.batches, "instances": stats.instances}
    assert stats.instances == sum(1 + i % 3 for i in range(30))
    histogram = entry["batch_size"]
    assert histogram["bounds"] == list(stats.batch_size.bounds) and histogram["counts"] == stats.batch_size.counts
    assert histogram["count"] == stats.batches and histogram["sum"] == stats.instances
    assert histogram["recent"] == list(stats.recent_batch_sizes)
    assert entry["departures"] == {reason: stats.departures[reason] for reason in departures()}
    assert sum(entry["departures"].values()) == stats.batches
    assert [(point["batch_size"], point["calls"]) for point in entry["observed"]] == \
        [(size, durations.count) for size, durations in sorted(stats.by_batch_size.items())]
    for point in entry["observed"]:
        durations = stats.by_batch_size[point["batch_size"]]
        assert point["mean_ms"] == pytest.approx(durations.seconds / durations.count * 1000)
    intercept, per_row = stats.profile.coefficients
    profile = entry["profile"]
    assert profile["intercept_ms"] == pytest.approx(intercept * 1000)
    assert profile["per_row_ms"] == pytest.approx(per_row * 1000)
    assert profile["calls"] == stats.profile.calls
    assert [size for size, _ in profile["predicted"]] == [1, 2, 3, 4]
    for size, ms in profile["predicted"]:
        assert ms == pytest.approx(stats.profile.predict(size) * 1000)
    assert entry["last_batch_unix_s"] == stats.last_batch_unix_s


async def test_queued_rows_and_requests_and_batches_in_flight():
    executor = RecordingExecutor()
    executor.release = asyncio.Event()
    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("m", executor, BatchingConfig(max_batch_size=2, max_hold_s=0))
    first = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(0, 2))))  # in flight, held by the executor
    await asyncio.sleep(0.01)
    waiting = [asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(10, 1)))),
               asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(20, 5))))]  # split in three parts: one request
    await asyncio.sleep(0.01)
    entry = model(await live.snapshot(scheduler))
    assert entry["queue"] == {"rows": 6, "requests": 2}
    assert entry["inflight"]["batches"] == 1 and entry["inflight"]["limit"] == 1
    executor.release.set()
    await asyncio.gather(first, *waiting)
    assert model(await live.snapshot(scheduler))["queue"] == {"rows": 0, "requests": 0}


async def test_slo_priority_levels_auto_inflight_and_padding():
    scheduler = BatchScheduler(asyncio.get_running_loop())
    config = BatchingConfig(policy="deadline", slo_s=0.5, priority_levels=2, default_priority_level=2,
                            auto_inflight=True, inflight_ceiling=4)
    scheduler.add_model("m", RecordingExecutor(delay_s=0.001), config)
    await asyncio.gather(scheduler.submit(BatchRequest.arriving("m", rows(0, 1), priority=1)),
                         scheduler.submit(BatchRequest.arriving("m", rows(1, 1))),
                         scheduler.submit(BatchRequest.arriving("m", rows(2, 1))))
    stats_of(scheduler, "m").count_padding(30, 20)  # as a padded model's batch would
    entry = model(await live.snapshot(scheduler))
    assert entry["slo_ms"] == pytest.approx(500) and entry["policy"] == "deadline"
    assert entry["goodput"] == {"slo_ms": pytest.approx(500), "answered_within_slo": 3}
    assert entry["inflight"]["auto"] is True and entry["inflight"]["ceiling"] == 4
    assert entry["inflight"]["limit"] == scheduler.view("m").inflight_limit
    assert entry["levels"] == [
        {"level": 1, "requests": 1, "answered": 1, "refused": 0, "dropped": 0, "expired": 0},
        {"level": 2, "requests": 2, "answered": 2, "refused": 0, "dropped": 0, "expired": 0}]
    assert entry["padding"] == {"padded_elements": 30, "real_elements": 20, "waste": 1.5}


async def test_a_large_max_batch_size_sends_a_bounded_line():
    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("m", RecordingExecutor(delay_s=0), BatchingConfig(max_batch_size=1000))
    await scheduler.submit(BatchRequest.arriving("m", rows(0, 3)))
    predicted = model(await live.snapshot(scheduler))["profile"]["predicted"]
    sizes = [size for size, _ in predicted]
    assert len(sizes) <= live.PROFILE_POINTS + 1 and sizes[0] == 1 and sizes[-1] == 1000 and sizes == sorted(sizes)


async def test_models_are_listed_by_name():
    scheduler = BatchScheduler(asyncio.get_running_loop())
    for name in ("zeta", "alpha", "mid"):
        scheduler.add_model(name, RecordingExecutor(), BatchingConfig())
    assert [entry["name"] for entry in (await live.snapshot(scheduler))["models"]] == ["alpha", "mid", "zeta"]


async def test_no_tenant_declared_no_tenants_table():
    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("m", RecordingExecutor(delay_s=0), BatchingConfig())
    await scheduler.submit(BatchRequest.arriving("m", rows(0, 2)))
    assert (await live.snapshot(scheduler))["tenants"] == []


async def test_the_tenants_table_is_their_usage_declared_tenants_first():
    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("m", RecordingExecutor(delay_s=0), BatchingConfig(max_hold_s=0))
    scheduler.set_tenants([TenantPolicy("search", priority=1, max_concurrent=8),
                           TenantPolicy("indexing", weight=3, requests_per_second=2)])
    await asyncio.gather(*(scheduler.submit(BatchRequest.arriving("m", rows(i, 3), tenant="search"))
                           for i in range(4)))
    refused = 0
    for i in range(3):  # a bucket of two requests: the third is refused
        try:
            await scheduler.submit(BatchRequest.arriving("m", rows(i, 1), tenant="indexing"))
        except RateLimited:
            refused += 1
    assert refused == 1
    search, indexing = (await live.snapshot(scheduler))["tenants"]
    assert search == {
        "name": "search", "declared": True, "priority": 1, "weight": 1.0,
        "quotas": {"requests_per_second": None, "tokens_per_minute": None, "max_concurrent": 8},
        "in_flight": 0, "requests": 4, "statuses": {"200": 4}, "rows": 12, "tokens": 12,
        "queue_wait": search["queue_wait"], "refusals": {}}
    waited = search["queue_wait"]
    assert waited["count"] == 4 and sum(waited["counts"]) == 4 and len(waited["counts"]) == len(waited["bounds_ms"]) + 1
    assert waited["bounds_ms"] == [bound * 1000 for bound in SECONDS_BOUNDS] and waited["sum_ms"] >= 0
    assert indexing["statuses"] == {"200": 2, "429": 1} and indexing["requests"] == 3
    assert indexing["refusals"] == {"requests_per_second": 1} and indexing["rows"] == 2
    assert indexing["weight"] == 3 and indexing["quotas"]["requests_per_second"] == 2
    scheduler.set_tenants([TenantPolicy("indexing")])  # search removed by a reload: its counts remain, last
    assert [(t["name"], t["declared"]) for t in (await live.snapshot(scheduler))["tenants"]] == \
        [("indexing", True), ("search", False)]
    orjson.dumps(await live.snapshot(scheduler))
