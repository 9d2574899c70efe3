"""What the scheduler counts about each model: plain counters and fixed-bucket histograms.

Recording is a few integer additions on the scheduler's loop (no locks, no metrics
library on the hot path); `gateway.metrics` turns these into Prometheus families when
/metrics is scraped.
"""
from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter, deque
from dataclasses import dataclass, field

from gateway.batching.profile import LatencyProfile


class Histogram:
    """Cumulative-on-read histogram with fixed upper bounds (Prometheus `le` semantics)."""

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

    def cumulative(self) -> list[tuple[str, int]]:
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
    """Events per second, exponentially weighted with `RATE_TIME_CONSTANT_S`: recent
    traffic counts most, and a rate that stops decays to nothing within a few seconds.
    Corrected for a short history (a steady rate reads as itself from its first second,
    not as growing from zero), which counts no less than a tenth of the time constant."""

    __slots__ = ("_mass", "_at", "_since")

    def __init__(self) -> None:
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
        history = max(now - self._since, RATE_TIME_CONSTANT_S / 10)
        return self._decayed(now) / (RATE_TIME_CONSTANT_S * -math.expm1(-history / RATE_TIME_CONSTANT_S))

    def _decayed(self, now: float) -> float:
        return self._mass * math.exp(-max(now - self._at, 0.0) / RATE_TIME_CONSTANT_S) if self._mass else 0.0


@dataclass(slots=True)
class LevelCounts:
    """What became of the requests of one priority level."""
    requests: int = 0
    answered: int = 0  # answered successfully (every answer is within its deadline: see `expired`)
    refused: int = 0   # at admission (predicted late), a full queue, or evicted for a higher level
    dropped: int = 0   # from the queue, never sent: it could no longer meet its deadline
    expired: int = 0   # its deadline passed while queued or at the predictor
    admitted_rows: DecayingRate = field(default_factory=DecayingRate)  # rows per second let in, recently


@dataclass(slots=True)
class ModelStats:
    """Counters a test or the metrics endpoint can read."""
    batches: int = 0
    instances: int = 0
    requests: int = 0
    refused: int = 0
    refused_late: int = 0  # refused at admission: predicted to miss its deadline
    dropped: int = 0       # dropped from the queue: could no longer meet its deadline
    expired: int = 0
    isolations: int = 0  # merged batches the predictor rejected, bisected to find the culprit
    holds: int = 0       # times a free slot waited for answered clients to return
    last_call_at: float = float("-inf")  # when a predictor call last ended (answered or abandoned), loop time
    departures: Counter[str] = field(default_factory=Counter)  # why batches left (policies.departures())
    by_level: dict[int, LevelCounts] = field(default_factory=dict)  # only for models with priority levels
    recent_batch_sizes: deque[int] = field(default_factory=lambda: deque(maxlen=1000))
    batch_size: Histogram = field(default_factory=lambda: Histogram(BATCH_SIZE_BOUNDS))
    queue_wait_s: Histogram = field(default_factory=lambda: Histogram(SECONDS_BOUNDS))
    predictor_s: Histogram = field(default_factory=lambda: Histogram(SECONDS_BOUNDS))
    # What Triton's statistics extension reports (gateway.statistics).
    succeeded: Durations = field(default_factory=Durations)   # requests, from arrival to answer
    failed: Durations = field(default_factory=Durations)      # errors, expiries, cancellations
    by_batch_size: dict[int, Durations] = field(default_factory=dict)  # predictor calls that succeeded
    computed: Durations = field(default_factory=Durations)  # per request: its batch's predictor time
    profile: LatencyProfile = field(default_factory=LatencyProfile)  # ℓ(b), learned from successful calls
    last_batch_unix_s: float = 0.0
    # Variable-length inputs (see batching.padding): elements along the padded length.
    padded_elements: int = 0  # rows x padded length, summed over batches
    real_elements: int = 0    # rows' real lengths, summed: waste = padded / real
    batch_cost: Histogram = field(default_factory=lambda: Histogram(BATCH_COST_BOUNDS))

    def count_padding(self, padded: int, real: int) -> None:
        """One batch's padded and real elements; its cost is the padded ones."""
        self.padded_elements += padded
        self.real_elements += real
        self.batch_cost.observe(padded)
