"""The instruments a model's and a tenant's figures are made of: fixed-bucket histograms
(`Histogram`, Prometheus `le` semantics, and `HistogramSnapshot`, one at a moment) with the
bounds they are read against, counted durations (`Durations`) and decaying rates
(`DecayingRate`: events per second, recent traffic counting most).

Recording is a few integer additions or one exponential, on the scheduler's loop (no locks,
no metrics library on the hot path). It must not know the event loop (loop times are handed
in), what is being measured, Prometheus or any reader.
"""
from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass


class Histogram:
    """Fixed upper bounds (Prometheus `le` semantics), counted per bucket."""

    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last bucket is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def snapshot(self) -> HistogramSnapshot:
        return HistogramSnapshot(self.bounds, tuple(self.counts), self.sum, self.count)


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    """A histogram at one moment."""
    bounds: tuple[float, ...]
    counts: tuple[int, ...]  # per bucket, not cumulative; one more than the bounds: the last is +Inf
    sum: float
    count: int

    def cumulative(self) -> list[tuple[str, int]]:
        """(upper bound, observations at or below it) per bucket, as Prometheus exports them."""
        running, out = 0, []
        for bound, count in zip((*map(str, self.bounds), "+Inf"), self.counts, strict=True):
            running += count
            out.append((bound, running))
        return out


BATCH_SIZE_BOUNDS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
BATCH_COST_BOUNDS = tuple(2 ** n for n in range(4, 21, 2))  # padded elements: 16 .. 1Mi
SECONDS_BOUNDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(slots=True)
class Durations:
    """How many of something, and how long they took in all."""
    count: int = 0
    seconds: float = 0.0

    def add(self, seconds: float) -> None:
        self.count += 1
        self.seconds += seconds


RATE_TIME_CONSTANT_S = 1.0  # a rate says what about the last second brought


class DecayingRate:
    """Events per second, exponentially weighted with a time constant (`RATE_TIME_CONSTANT_S`
    unless told): recent traffic counts most, and a rate that stops decays to nothing within
    a few time constants. Corrected for a short history (a steady rate reads as itself from
    its first moments, not as growing from zero), which counts no less than a tenth of the
    time constant."""

    __slots__ = ("_mass", "_at", "_since", "time_constant_s")

    def __init__(self, time_constant_s: float = RATE_TIME_CONSTANT_S) -> None:
        self.time_constant_s = time_constant_s
        self._mass = 0.0
        self._at = 0.0
        self._since: float | None = None  # the first event

    def add(self, now: float, amount: float) -> None:
        self._mass = self._decayed(now) + amount
        self._at = now
        if self._since is None:
            self._since = now

    def per_second(self, now: float) -> float:
        if self._since is None:
            return 0.0
        tau = self.time_constant_s
        history = max(now - self._since, tau / 10)
        return self._decayed(now) / (tau * -math.expm1(-history / tau))

    def _decayed(self, now: float) -> float:
        return self._mass * math.exp(-max(now - self._at, 0.0) / self.time_constant_s) if self._mass else 0.0
