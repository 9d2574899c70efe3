"""gateway/batching/stats.py, as a specification: what each event the queue and the
executor tell `ModelStats` counts, the one projection every reader takes of it
(`StatsSnapshot`), and the decaying rate that priority levels are judged by."""
from __future__ import annotations

import dataclasses
import time

import pytest

from gateway.batching.instruments import BATCH_SIZE_BOUNDS, RATE_TIME_CONSTANT_S, DecayingRate, Durations, HistogramSnapshot
from gateway.batching.stats import ModelStats

LEVEL = 2  # a request of priority level 2; level 0 is a model without levels


def counts(stats: ModelStats) -> dict[str, int]:
    """The model-wide request counters."""
    return {"requests": stats.requests, "refused": stats.refused, "refused_late": stats.refused_late,
            "dropped": stats.dropped, "expired": stats.expired}


def level_counts(stats: ModelStats, level: int = LEVEL) -> tuple[int, int, int, int, int]:
    counted = stats.by_level[level]
    return counted.requests, counted.answered, counted.refused, counted.dropped, counted.expired


# -- a request's events ----------------------------------------------------------------------

@pytest.mark.parametrize(("event", "counter", "level_outcome"), [
    (lambda stats, level: stats.arrived(level, 1, 0.0), "requests", (1, 0, 0, 0, 0)),
    (lambda stats, level: stats.refused_overloaded(level), "refused", (0, 0, 1, 0, 0)),
    (lambda stats, level: stats.refused_as_late(level), "refused_late", (0, 0, 1, 0, 0)),
    (lambda stats, level: stats.timed_out(level), "expired", (0, 0, 0, 0, 1)),
    (lambda stats, level: stats.dropped_unsent(level), "dropped", (0, 0, 0, 1, 0)),
])
def test_each_request_event_counts_once_for_the_model_and_once_for_its_level(event, counter, level_outcome):
    stats = ModelStats()
    event(stats, LEVEL)
    assert counts(stats) == {name: int(name == counter) for name in counts(stats)}
    assert level_counts(stats) == level_outcome  # a refusal is a refusal at its level, whatever refused it
    assert list(stats.by_level) == [LEVEL]


@pytest.mark.parametrize("event", ["arrived", "refused_overloaded", "refused_as_late", "timed_out", "dropped_unsent"])
def test_a_model_without_levels_keeps_no_level_counts(event):
    stats = ModelStats()
    getattr(stats, event)(0, *((1, 0.0) if event == "arrived" else ()))
    stats.admitted(0, 5, now=1.0)
    stats.finished(0, True, 0.1)
    assert stats.by_level == {}


def test_a_request_timed_out_before_it_was_queued_is_a_timeout_and_a_failure_at_once():
    # It never gets a future, so it never `finished`: its failure is counted with its timeout.
    stats = ModelStats()
    stats.timed_out_before_queued(LEVEL, 0.25)
    assert stats.expired == 1 and level_counts(stats) == (0, 0, 0, 0, 1)
    assert stats.failed == Durations(1, 0.25) and stats.succeeded == Durations()


def test_a_finished_request_counts_its_time_as_a_success_or_a_failure_and_only_a_success_as_answered():
    stats = ModelStats()
    stats.finished(LEVEL, True, 0.5)
    stats.finished(LEVEL, True, 0.25)
    stats.finished(LEVEL, False, 2.0)  # an error, an expiry or a cancellation
    assert stats.succeeded == Durations(2, 0.75) and stats.failed == Durations(1, 2.0)
    assert level_counts(stats) == (0, 2, 0, 0, 0)
    assert stats.expired == 0  # the timeout itself is its own event (timed_out)


def test_an_admitted_request_feeds_its_levels_recent_rate_of_rows():
    stats = ModelStats()
    stats.admitted(LEVEL, 30, now=10.0)
    stats.admitted(LEVEL, 30, now=10.1)
    assert stats.by_level[LEVEL].admitted_rows.per_second(10.1) > 0
    assert level_counts(stats) == (0, 0, 0, 0, 0)  # admission is no outcome


# -- a batch's events ------------------------------------------------------------------------

def test_a_batch_that_left_counts_its_rows_its_reason_its_waits_and_when():
    stats = ModelStats()
    before = time.time()
    stats.batch_left(3, "full", [0.002, 0.02])
    stats.batch_left(5, "slot_free", [0.2])
    stats.batch_left(1, "full", [])
    assert (stats.batches, stats.instances) == (3, 9)
    assert stats.departures == {"full": 2, "slot_free": 1}
    assert list(stats.recent_batch_sizes) == [3, 5, 1]
    assert (stats.batch_size.count, stats.batch_size.sum) == (3, 9)
    assert (stats.queue_wait_s.count, stats.queue_wait_s.sum) == (3, pytest.approx(0.222))  # one per part
    assert before <= stats.last_batch_unix_s <= time.time()
    assert (stats.padded_elements, stats.real_elements, stats.batch_cost.count) == (0, 0, 0)


def test_a_padded_batch_counts_its_padded_and_real_elements_and_costs_its_padded_ones():
    stats = ModelStats()
    stats.batch_left(2, "full", [0.0], padding=(40, 25))
    stats.batch_left(2, "full", [0.0], padding=(60, 60))
    assert (stats.padded_elements, stats.real_elements) == (100, 85)
    assert (stats.batch_cost.count, stats.batch_cost.sum) == (2, 100)


def test_recent_batch_sizes_keep_the_latest_thousand():
    stats = ModelStats()
    for rows in range(1, 1201):
        stats.batch_left(rows, "full", [])
    assert list(stats.recent_batch_sizes) == list(range(201, 1201))
    assert stats.batches == 1200


def test_a_bisected_batch_is_an_isolation():
    stats = ModelStats()
    stats.bisected()
    stats.bisected()
    assert stats.isolations == 2


def test_a_call_that_returned_counts_its_latency_whether_or_not_its_answer_was_usable():
    stats = ModelStats()
    stats.call_returned(0.01)  # e.g. the wrong number of rows: answered BadPredictorAnswer
    assert (stats.predictor_s.count, stats.predictor_s.sum) == (1, 0.01)
    assert stats.profile.calls == 0 and stats.by_batch_size == {} and stats.last_call_at == float("-inf")


def test_an_answered_call_teaches_the_profile_and_counts_per_batch_size_and_per_request():
    stats = ModelStats()
    stats.call_answered(rows=4, seconds=0.02, requests=3, now=7.0)
    stats.call_answered(rows=4, seconds=0.04, requests=1, now=8.0)
    stats.call_answered(rows=1, seconds=0.01, requests=1, now=9.0)
    assert stats.by_batch_size == {4: Durations(2, pytest.approx(0.06)), 1: Durations(1, 0.01)}
    assert stats.computed == Durations(5, pytest.approx(3 * 0.02 + 0.04 + 0.01))  # Triton counts compute per request
    assert stats.profile.calls == 3 and stats.profile.predict(1) is not None
    assert stats.last_call_at == 9.0
    assert stats.predictor_s.count == 0  # that is call_returned's


def test_an_overrun_call_teaches_the_profile_that_the_predictor_is_slower_and_nothing_else():
    stats = ModelStats()
    stats.call_answered(rows=2, seconds=0.01, requests=2, now=1.0)
    stats.call_overran(rows=2, seconds=0.5, now=2.0)
    assert stats.profile.predict(2) > 0.5  # it would have taken longer than it ran
    assert stats.last_call_at == 2.0
    assert stats.by_batch_size == {2: Durations(1, 0.01)} and stats.computed.count == 2


# -- the projection ---------------------------------------------------------------------------

def test_the_snapshot_of_a_model_before_any_traffic():
    snapshot = ModelStats().snapshot(0.0)
    assert (snapshot.requests, snapshot.answered, snapshot.batches, snapshot.instances) == (0, 0, 0, 0)
    assert snapshot.batch_size == HistogramSnapshot(BATCH_SIZE_BOUNDS, (0,) * (len(BATCH_SIZE_BOUNDS) + 1), 0.0, 0)
    assert snapshot.profile is None and snapshot.profile_calls == 0
    assert snapshot.departures == {} and snapshot.by_batch_size == {} and snapshot.recent_batch_sizes == ()
    assert snapshot.levels == () and snapshot.padding is None and snapshot.last_batch_unix_s == 0.0


def test_the_snapshot_gives_every_figure_the_readers_need():
    stats = ModelStats()
    for level in (3, 1):
        stats.arrived(level, 1, 0.0)
    stats.arrived(0, 1, 0.0)
    stats.refused_overloaded(3)
    stats.refused_as_late(1)
    stats.dropped_unsent(1)
    stats.timed_out(3)
    stats.finished(1, True, 0.5)
    stats.finished(3, False, 1.5)
    stats.batch_left(4, "full", [0.01, 0.03], padding=(80, 50))
    stats.call_returned(0.02)
    stats.call_answered(rows=4, seconds=0.02, requests=2, now=3.0)
    stats.bisected()
    snapshot = stats.snapshot(0.0)
    assert (snapshot.requests, snapshot.answered, snapshot.refused, snapshot.refused_late, snapshot.dropped,
            snapshot.expired, snapshot.batches, snapshot.instances, snapshot.isolations) == (3, 1, 1, 1, 1, 1, 1, 4, 1)
    assert snapshot.succeeded == Durations(1, 0.5) and snapshot.failed == Durations(1, 1.5)
    assert snapshot.computed == Durations(2, 0.04)
    assert snapshot.departures == {"full": 1} and snapshot.recent_batch_sizes == (4,)
    assert (snapshot.queue_wait_s.count, snapshot.predictor_s.count, snapshot.batch_size.sum) == (2, 1, 4)
    assert snapshot.profile == stats.profile.coefficients and snapshot.profile_calls == 1
    assert snapshot.by_batch_size == {4: Durations(1, 0.02)}
    assert snapshot.last_batch_unix_s == stats.last_batch_unix_s
    # Levels in order, highest first, each outcome by name.
    assert [(level.level, level.requests, level.outcomes) for level in snapshot.levels] == [
        (1, 1, {"answered": 1, "refused": 1, "dropped": 1, "expired": 0}),
        (3, 1, {"answered": 0, "refused": 1, "dropped": 0, "expired": 1}),
    ]
    assert snapshot.padding is not None
    assert (snapshot.padding.padded_elements, snapshot.padding.real_elements, snapshot.padding.waste) == (80, 50, 1.6)
    assert (snapshot.padding.cost.count, snapshot.padding.cost.sum) == (1, 80)


def test_the_snapshot_lists_batch_sizes_in_ascending_order_whatever_order_they_came_in():
    stats = ModelStats()
    for rows in (8, 1, 4):
        stats.call_answered(rows=rows, seconds=0.01, requests=1, now=0.0)
    assert list(stats.snapshot(0.0).by_batch_size) == [1, 4, 8]


def test_the_snapshot_is_a_frozen_copy_that_later_events_leave_alone():
    stats = ModelStats()
    stats.batch_left(2, "full", [0.1])
    stats.call_answered(rows=2, seconds=0.01, requests=1, now=0.0)
    stats.finished(LEVEL, True, 0.1)
    snapshot = stats.snapshot(0.0)
    stats.batch_left(3, "slot_free", [0.1])
    stats.call_answered(rows=2, seconds=0.01, requests=1, now=0.0)
    stats.finished(LEVEL, True, 0.1)
    assert (snapshot.batches, snapshot.batch_size.count, snapshot.recent_batch_sizes) == (1, 1, (2,))
    assert snapshot.departures == {"full": 1} and snapshot.by_batch_size == {2: Durations(1, 0.01)}
    assert snapshot.succeeded == Durations(1, 0.1) and snapshot.levels[0].answered == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        snapshot.batches = 0  # type: ignore[misc]


def test_a_histogram_snapshot_counts_per_bucket_and_reads_cumulatively_as_prometheus_does():
    stats = ModelStats()
    for rows in (1, 2, 3, 600):
        stats.batch_left(rows, "full", [])
    histogram = stats.snapshot(0.0).batch_size
    assert histogram.counts[:3] == (1, 1, 1) and histogram.counts[-1] == 1  # le 1, le 2, le 4; +Inf
    cumulative = histogram.cumulative()
    assert cumulative[:3] == [("1", 1), ("2", 2), ("4", 3)]
    assert cumulative[-2:] == [("512", 3), ("+Inf", 4)]
    assert (histogram.count, histogram.sum) == (4, 606)


# -- the rate priority levels are judged by ----------------------------------------------------

def steady(rate: DecayingRate, per_second: float, start: float, seconds: float, step: float = 0.01) -> float:
    now = start
    while now < start + seconds:
        rate.add(now, per_second * step)
        now += step
    return now


def test_a_steady_rate_reads_as_itself_from_its_first_tenth_of_a_second_on():
    rate = DecayingRate()
    assert rate.per_second(0.0) == 0.0
    now = steady(rate, 200.0, start=0.0, seconds=0.2)
    assert rate.per_second(now) == pytest.approx(200.0, rel=0.06)
    now = steady(rate, 200.0, start=now, seconds=5.0)
    assert rate.per_second(now) == pytest.approx(200.0, rel=0.02)


def test_a_rate_that_stops_decays_within_a_few_time_constants_and_follows_a_change():
    rate = DecayingRate()
    now = steady(rate, 200.0, start=0.0, seconds=5.0)
    assert rate.per_second(now + 3 * RATE_TIME_CONSTANT_S) < 200.0 * 0.06
    now = steady(rate, 50.0, start=now + 3 * RATE_TIME_CONSTANT_S, seconds=3.0)
    assert rate.per_second(now) == pytest.approx(50.0, rel=0.1)
