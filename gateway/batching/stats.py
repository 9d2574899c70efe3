"""A model's batching statistics: recorded in one place, projected in one place.

* `ModelStats` holds one model's counters and fixed-bucket histograms and is their one
  recorder. The queue (`queue`) and the executor (`executor`) tell it what happened, one
  method per event: a request arrived, was admitted, refused (queue full, or predicted
  late), timed out (before it was queued, or after), dropped unsent, or finished; a batch
  left; a batch was bisected; a predictor call returned, answered, overran, or answered
  late after overrunning. The counting
  (what each event adds to which counter, by priority level too) is here and nowhere else:
  the adaptive policy tells it of its holds the same way.
* `StatsSnapshot` (`ModelStats.snapshot()`) is the one projection of those figures that
  /metrics (`gateway.observe.metrics`), the live page (`gateway.observe.live`) and Triton's statistics
  (`gateway.models.triton`) read: an immutable copy taken on the scheduler's loop, so a reader
  sees one consistent moment and never reaches into the counters.

The policies read the few live figures they decide by (the learned profile, when the last
call ended, each level's recent admissions) from `ModelStats` directly.

Recording is a few integer additions on the scheduler's loop into the `instruments` (no
locks, no metrics library on the hot path); the readers pay for the copy when they are
asked. It must not know the event loop (loop times are handed in; only a batch's
wall-clock departure is read here), the queue, the policies, Prometheus or any front end.
"""
from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gateway.batching.instruments import (
    BATCH_COST_BOUNDS,
    BATCH_SIZE_BOUNDS,
    SECONDS_BOUNDS,
    DecayingRate,
    Durations,
    Histogram,
    HistogramSnapshot,
)
from gateway.batching.profile import LatencyProfile


@dataclass(slots=True)
class LevelCounts:
    """What became of the requests of one priority level."""
    requests: int = 0
    answered: int = 0  # answered successfully (every answer is within its deadline: see `expired`)
    refused: int = 0   # at admission (predicted late), a full queue, or evicted for a higher level
    dropped: int = 0   # from the queue, never sent: it could no longer meet its deadline
    expired: int = 0   # its deadline passed, before it was queued, while queued or at the predictor
    admitted_rows: DecayingRate = field(default_factory=DecayingRate)  # rows per second let in, recently


@dataclass(slots=True)
class ModelStats:
    """One model's figures, and the events that move them (the module docstring says who
    tells which). Read them through `snapshot()`; write them only through the events."""
    batches: int = 0
    instances: int = 0
    requests: int = 0
    refused: int = 0
    refused_late: int = 0  # refused at admission: predicted to miss its deadline
    dropped: int = 0       # dropped from the queue: could no longer meet its deadline
    expired: int = 0
    isolations: int = 0  # merged batches the predictor rejected, bisected to find the culprit
    holds: int = 0       # times a free slot waited for answered clients to return (`held`, by policies.adaptive)
    # Rows arriving (batching.load), at the model's demand_smoothing_s (the queue sets it).
    demand_rows: DecayingRate = field(default_factory=DecayingRate)
    last_call_at: float = float("-inf")  # when a predictor call last ended (answered or abandoned), loop time
    departures: Counter[str] = field(default_factory=Counter)  # why batches left (policies.departures())
    by_level: dict[int, LevelCounts] = field(default_factory=dict)  # only for models with priority levels
    recent_batch_sizes: deque[int] = field(default_factory=lambda: deque(maxlen=1000))
    batch_size: Histogram = field(default_factory=lambda: Histogram(BATCH_SIZE_BOUNDS))
    queue_wait_s: Histogram = field(default_factory=lambda: Histogram(SECONDS_BOUNDS))
    predictor_s: Histogram = field(default_factory=lambda: Histogram(SECONDS_BOUNDS))
    # What Triton's statistics extension reports (gateway.models.triton).
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

    # -- a request's events (from the queue); `level` is its priority level, 0 without levels --

    def arrived(self, level: int, rows: int, now: float) -> None:
        """A request of `rows` rows reached the queue at loop time `now`. Counted before it
        is judged, so a request refused, too large or already late counts here too: it is
        demand (`load`) all the same."""
        self.requests += 1
        self.demand_rows.add(now, rows)
        self._count(level, "requests")

    def admitted(self, level: int, rows: int, now: float) -> None:
        """A request of `rows` rows was let into the queue at loop time `now`: what the
        lower levels' admission judges the higher levels' traffic by."""
        if level:
            self._level(level).admitted_rows.add(now, rows)

    def refused_overloaded(self, level: int) -> None:
        """A request was refused Overloaded: the queue was full when it arrived, or, queued
        and unsent, it gave its place to a request of a higher level."""
        self.refused += 1
        self._count(level, "refused")

    def refused_as_late(self, level: int) -> None:
        """A request was refused at admission: the policy predicted it would miss its deadline."""
        self.refused_late += 1
        self._count(level, "refused")

    def timed_out(self, level: int) -> None:
        """A queued request's deadline passed, in the queue or at the predictor. Its
        duration is counted when it `finished` (failed)."""
        self.expired += 1
        self._count(level, "expired")

    def timed_out_before_queued(self, level: int, seconds: float) -> None:
        """A request's deadline passed before it was queued (while it was read or decoded),
        `seconds` after it arrived: counted as one that timed out in the queue, which never
        finishes here, so its failure is counted now."""
        self.timed_out(level)
        self.failed.add(seconds)

    def held(self) -> None:
        """A free slot waited for answered clients to return (the adaptive policy's hold)."""
        self.holds += 1

    def dropped_unsent(self, level: int) -> None:
        """A queued request was answered before it was sent: it could no longer meet its deadline."""
        self.dropped += 1
        self._count(level, "dropped")

    def finished(self, level: int, succeeded: bool, seconds: float) -> None:
        """A queued request ended, `seconds` after it arrived: with its result (`succeeded`),
        or with an error, an expiry or its cancellation. Told once per queued request."""
        (self.succeeded if succeeded else self.failed).add(seconds)
        if succeeded:
            self._count(level, "answered")

    # -- a batch's events (from the queue and the executor) ---------------------------------

    def batch_left(self, rows: int, reason: str, queue_waits: Iterable[float],
                   padding: tuple[int, int] | None = None) -> None:
        """A batch of `rows` rows left the queue for `reason` (a departure reason).
        `queue_waits`: how long each of its parts waited; `padding`: its padded and real
        elements, None when it pads nothing (its cost is the padded ones)."""
        self.batches += 1
        self.instances += rows
        self.departures[reason] += 1
        self.recent_batch_sizes.append(rows)
        self.batch_size.observe(rows)
        if padding is not None:
            self.count_padding(*padding)
        self.last_batch_unix_s = time.time()
        for seconds in queue_waits:
            self.queue_wait_s.observe(seconds)

    def count_padding(self, padded: int, real: int) -> None:
        """One batch's padded and real elements; its cost is the padded ones (part of `batch_left`)."""
        self.padded_elements += padded
        self.real_elements += real
        self.batch_cost.observe(padded)

    def bisected(self) -> None:
        """The predictor rejected a merged batch, which is split in two to find the request at fault."""
        self.isolations += 1

    def call_returned(self, seconds: float) -> None:
        """A predictor call returned outputs after `seconds`, well-formed or not: the
        predictor's latency counts every answer it gave."""
        self.predictor_s.observe(seconds)

    def call_answered(self, rows: int, seconds: float, requests: int, now: float) -> None:
        """A call of `rows` rows for `requests` requests ended at loop time `now` with a
        well-formed answer after `seconds`: the profile learns it, the batch size's calls
        count it, and each request is counted that compute time (as Triton counts it)."""
        by_size = self.by_batch_size.get(rows)
        if by_size is None:  # not setdefault: no Durations built on every call
            by_size = self.by_batch_size[rows] = Durations()
        by_size.add(seconds)
        self.profile.observe(rows, seconds)
        self.last_call_at = now
        for _ in range(requests):  # one by one, not seconds * requests: the sum Triton reports stays exact
            self.computed.add(seconds)

    def call_overran(self, rows: int, seconds: float, now: float) -> None:
        """A call of `rows` rows was abandoned unanswered at its members' deadline, after
        `seconds`, at loop time `now`: it would have taken longer, which the profile learns."""
        self.profile.overran(rows, seconds)
        self.last_call_at = now

    def call_answered_late(self, rows: int, seconds: float) -> None:
        """A call that had overrun (its members already answered at their deadline) answered
        after all, after `seconds`: the profile learns its real time."""
        self.profile.observe(rows, seconds)

    def _level(self, level: int) -> LevelCounts:
        return self.by_level.setdefault(level, LevelCounts())

    def _count(self, level: int, outcome: str) -> None:
        """Count a request of priority `level` under `outcome`, a `LevelCounts` field
        (nothing when the model has no levels)."""
        if level:
            counts = self._level(level)
            setattr(counts, outcome, getattr(counts, outcome) + 1)

    # -- the projection ---------------------------------------------------------------------

    def snapshot(self, now: float) -> StatsSnapshot:
        """The figures every reader takes, copied at loop time `now`."""
        copy = _copy_durations
        return StatsSnapshot(
            demand_rows_per_second=self.demand_rows.per_second(now),
            requests=self.requests, answered=self.succeeded.count, refused=self.refused,
            refused_late=self.refused_late, dropped=self.dropped, expired=self.expired,
            batches=self.batches, instances=self.instances, isolations=self.isolations,
            batch_size=self.batch_size.snapshot(), queue_wait_s=self.queue_wait_s.snapshot(),
            predictor_s=self.predictor_s.snapshot(), recent_batch_sizes=tuple(self.recent_batch_sizes),
            departures=dict(self.departures),
            profile=self.profile.coefficients, profile_calls=self.profile.calls,
            by_batch_size={size: copy(durations) for size, durations in sorted(self.by_batch_size.items())},
            succeeded=copy(self.succeeded), failed=copy(self.failed), computed=copy(self.computed),
            last_batch_unix_s=self.last_batch_unix_s,
            levels=tuple(LevelSnapshot(level, counts.requests, counts.answered, counts.refused, counts.dropped,
                                       counts.expired) for level, counts in sorted(self.by_level.items())),
            padding=None if not self.real_elements else PaddingSnapshot(
                self.padded_elements, self.real_elements, self.batch_cost.snapshot()),
        )


def _copy_durations(durations: Durations) -> Durations:
    return Durations(durations.count, durations.seconds)


@dataclass(frozen=True, slots=True)
class LevelSnapshot:
    """What became of one priority level's requests."""
    level: int
    requests: int
    answered: int
    refused: int  # every refusal: predicted late, queue full, or evicted for a higher level
    dropped: int
    expired: int

    @property
    def outcomes(self) -> dict[str, int]:
        """Each outcome's count, by name: answered, refused, dropped, expired."""
        return {"answered": self.answered, "refused": self.refused, "dropped": self.dropped, "expired": self.expired}


@dataclass(frozen=True, slots=True)
class PaddingSnapshot:
    """Variable-length inputs: elements along the padded length, summed over batches."""
    padded_elements: int  # rows x padded length
    real_elements: int    # the rows' own lengths, never 0 here
    cost: HistogramSnapshot  # padded elements per batch

    @property
    def waste(self) -> float:
        """Padded / real elements: 1.0 is none."""
        return self.padded_elements / self.real_elements


@dataclass(frozen=True, slots=True)
class StatsSnapshot:
    """One model's figures at one moment: what /metrics, the live page and Triton's
    statistics read. Counts are cumulative since the model was added; times in seconds."""
    demand_rows_per_second: float  # rows reaching the queue, recently (see batching.load)
    requests: int      # every request that reached the queue
    answered: int      # answered successfully, all within their deadline
    refused: int       # Overloaded: the queue was full, or evicted for a higher level
    refused_late: int  # at admission: predicted to miss their deadline
    dropped: int       # from the queue, unsent: they could no longer meet their deadline
    expired: int       # their deadline passed
    batches: int
    instances: int     # rows batched
    isolations: int    # merged batches bisected
    batch_size: HistogramSnapshot
    queue_wait_s: HistogramSnapshot    # per part
    predictor_s: HistogramSnapshot     # per call that returned outputs
    recent_batch_sizes: tuple[int, ...]  # the latest batches' rows, oldest first
    departures: Mapping[str, int]      # batches by why they left; a reason never seen is absent
    profile: tuple[float, float] | None  # ℓ(b)'s (intercept, per_row), None before the first answered call
    profile_calls: int                   # calls the profile learned from
    by_batch_size: Mapping[int, Durations]  # answered calls per batch size, in ascending size
    succeeded: Durations  # requests answered, from arrival to answer
    failed: Durations     # requests that got an error, expired or were cancelled
    computed: Durations   # per answered request: its batch's predictor time
    last_batch_unix_s: float  # 0.0 before the first batch
    levels: tuple[LevelSnapshot, ...]  # by level, highest (1) first; empty without levels
    padding: PaddingSnapshot | None    # None for a model that padded no batch
