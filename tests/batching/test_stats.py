"""What the scheduler counts (gateway/batching/stats.py): the decaying rate that priority
levels are judged by."""
from __future__ import annotations

import pytest

from gateway.batching.stats import RATE_TIME_CONSTANT_S, DecayingRate


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
