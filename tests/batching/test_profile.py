"""The learned latency profile (gateway/batching/profile.py): ℓ(b) = intercept + per_row × b,
fitted over recent predictor calls, following a predictor whose speed changes."""
from __future__ import annotations

import random

import pytest

from gateway.batching.profile import HALF_LIFE, LatencyProfile


def test_nothing_is_predicted_before_the_first_call():
    profile = LatencyProfile()
    assert profile.predict(4) is None and profile.coefficients is None


def test_a_linear_predictor_is_recovered_exactly():
    profile = LatencyProfile()
    for rows in [1, 4, 8, 2, 16, 32, 5] * 10:
        profile.observe(rows, 0.020 + 0.00025 * rows)
    intercept, per_row = profile.coefficients
    assert intercept == pytest.approx(0.020) and per_row == pytest.approx(0.00025)
    assert profile.predict(64) == pytest.approx(0.020 + 0.00025 * 64)


def test_noise_averages_out():
    rng = random.Random(7)
    profile = LatencyProfile()
    for _ in range(2000):
        rows = rng.randint(1, 64)
        profile.observe(rows, 0.005 + 0.0001 * rows + rng.gauss(0, 0.0005))
    intercept, per_row = profile.coefficients
    assert intercept == pytest.approx(0.005, abs=0.0005) and per_row == pytest.approx(0.0001, rel=0.1)


def test_one_batch_size_only_gives_a_flat_profile_at_the_recent_mean():
    profile = LatencyProfile()
    for seconds in (0.010, 0.012, 0.011):
        profile.observe(8, seconds)
    intercept, per_row = profile.coefficients
    assert per_row == 0.0 and intercept == pytest.approx(0.011, rel=0.01)


def test_a_predictor_that_slows_down_is_followed_and_the_old_regime_forgotten():
    profile = LatencyProfile()
    sizes = [1, 8, 16, 32]
    for i in range(1000):
        profile.observe(sizes[i % 4], 0.010 + 0.0002 * sizes[i % 4])
    for i in range(int(4 * HALF_LIFE)):  # the predictor now costs three times as much
        profile.observe(sizes[i % 4], 0.030 + 0.0006 * sizes[i % 4])
    assert profile.predict(16) == pytest.approx(0.030 + 0.0006 * 16, rel=0.1)


def test_coefficients_are_never_negative():
    profile = LatencyProfile()
    for rows, seconds in [(1, 0.010), (32, 0.002), (1, 0.011), (32, 0.001)]:  # faster when larger: noise
        profile.observe(rows, seconds)
    intercept, per_row = profile.coefficients
    assert intercept >= 0 and per_row >= 0


def test_a_call_that_overran_its_deadline_makes_the_profile_slow_at_once():
    profile = LatencyProfile()
    for _ in range(500):
        profile.observe(4, 0.020)
    profile.overran(4, 0.180)  # ran 180 ms, still unanswered: the predictor slowed down
    slow = profile.predict(4)
    assert slow > 0.15  # not 500 calls to notice: one
    profile.overran(4, 0.300)  # longer than that: slower still
    assert profile.predict(4) > slow


def test_a_call_abandoned_before_it_was_due_teaches_nothing():
    profile = LatencyProfile()
    for _ in range(50):
        profile.observe(4, 0.020)
    profile.overran(4, 0.005)  # a client's own 5 ms deadline, not a slow predictor
    assert profile.predict(4) == pytest.approx(0.020)


def test_after_a_slow_spell_a_fast_answer_brings_the_profile_back():
    profile = LatencyProfile()
    for _ in range(200):
        profile.observe(4, 0.020)
    profile.overran(4, 0.200)
    assert profile.predict(4) > 0.15
    profile.observe(4, 0.020)  # the predictor recovered
    assert profile.predict(4) < 0.2
    for _ in range(10):
        profile.observe(4, 0.020)
    assert profile.predict(4) < 0.05


def test_ordinary_jitter_never_resets_what_was_learned():
    profile = LatencyProfile()
    for _ in range(300):
        profile.observe(4, 0.020)
    profile.observe(4, 0.080)  # a 4x outlier with no overrun before it: one call among hundreds
    assert profile.predict(4) == pytest.approx(0.020, abs=0.002)
