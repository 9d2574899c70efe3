"""The load signal an autoscaler targets: how much of the predictor fleet the demand uses.

Semantics
---------
* **Capacity** (rows per second one replica sustains), measured: while the slots never
  idle and every batch leaves rows waiting behind it (the queue never empties into a
  batch), the rows the slots return per second are what the fleet sustains, whatever the
  time per call says (`SaturatedThroughput`); divided by the replicas in rotation. The spell
  counts once it has seen `SATURATED_RETURNS_PER_SLOT` returns per slot (fewer leave the
  slots' staggered starts in the figure), and its rows and seconds decay with the demand's
  time constant, so a predictor that slows down shows within seconds. A slot that stays
  free past the loop's turn in which it returned, a batch that empties the queue, or a
  change in the number of slots ends the spell.
* **Capacity**, otherwise (not saturated, or not long enough) = slots x B / ℓ(B), where ℓ is the
  model's learned latency profile (`profile`), slots the batches one replica may have in
  flight (`max_inflight`, or what "auto" has learned) and B the largest batch the model's
  limits allow: `max_batch_size`, and, when `slo_ms` is set, no larger than what answers
  within it. A request that arrives just after a batch left waits for a slot (up to
  ℓ(B) / slots) and then for its own batch (ℓ(B)), so B is the largest b with
  ℓ(b) x (1 + 1/slots) <= slo; at least 1.
* **Demand** (rows per second) counts every row that reaches the model's queue, admitted
  or refused: refused rows are load the fleet did not carry, and a signal that left them
  out would read lower the more the fleet is overloaded. It is exponentially weighted with
  a time constant (`demand_smoothing_ms`, 5 s by default): long enough that Poisson noise
  at a few hundred rows per second moves it by a few percent, short enough that a step in
  the arrivals shows within seconds (the queue has not filled yet), well inside an
  autoscaler's polling period.
* **Load** = demand / (capacity x replicas in rotation). 1.0 is a fleet that is exactly
  busy; an autoscaler targets less (e.g. 0.7) to keep headroom for bursts and for the
  time a new replica takes to start. With no replica in rotation it is counted against
  one replica: the fleet needs at least that much.

When it is unreliable
---------------------
* Before the profile has seen a call there is no capacity and no load (None).
* Capacity at B is extrapolated from the batch sizes the profile has seen: under light
  load batches are small, and a predictor whose cost is not linear in the rows is
  misjudged until the load brings larger batches.
* With more than one slot per replica, ℓ is learned at whatever concurrency the calls had.
  A predictor that runs one call at a time looks `slots` times faster under light load
  (its calls do not overlap) than under full load; the capacity is right once the calls
  overlap, and overstated (the load understated) before. One slot per replica (the
  default) has no such error.
* Token-capped batches (`max_batch_tokens`, embeddings) may hold fewer rows than
  `max_batch_size`: capacity in rows is then overstated for long texts.
* Measured while saturated, the capacity is what this gateway gets out of the fleet: a
  gateway short of CPU that writes its calls late is counted in it (that is the point: the
  time per call inflates on a busy loop, the rows returned do not lie). A batch that fails
  counts its rows too: a predictor that fails every call at once, saturated, reads fast.
* ℓ is timed from when a call is written to when its answer has arrived (the transport's
  `wire.tracing.CallClock`): the turns of the gateway's loop before and after, which grow
  with its own load, are left out. What is left in is the time an answer waits in the
  socket until the loop reads it; a gateway short of CPU (deep overload on a crowded
  machine) still understates the capacity by that much.

Plain arithmetic on the figures it is given (the slots tell `SaturatedThroughput` what they
saw, with the loop's time): it must not know the event loop, the queue, the replicas or
Prometheus.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LoadSignal:
    """One model's load on its predictor fleet at one moment."""
    capacity_rows_per_second: float | None  # one replica's; None before the profile has seen a call
    demand_rows_per_second: float
    replicas: int  # in rotation

    @property
    def load(self) -> float | None:
        """Demand / (capacity x replicas); None while the capacity is unknown."""
        capacity = self.capacity_rows_per_second
        if capacity is None:
            return None
        fleet = capacity * max(self.replicas, 1)
        return self.demand_rows_per_second / fleet if fleet > 0 else math.inf


def batch_within(coefficients: tuple[float, float], max_batch_size: int, slots: int, slo_s: float | None) -> int:
    """B: the largest batch the limits allow and, with an SLO, that answers within it."""
    if slo_s is None:
        return max_batch_size
    intercept, per_row = coefficients
    budget = slo_s / (1.0 + 1.0 / slots)  # what one batch may take: the wait for a slot comes first
    if per_row <= 0.0:
        return max_batch_size if intercept <= budget else 1
    return max(1, min(max_batch_size, math.floor((budget - intercept) / per_row)))


def replica_capacity(coefficients: tuple[float, float] | None, max_batch_size: int, slots: int,
                     slo_s: float | None) -> float | None:
    """Rows per second one replica sustains, from ℓ(b) = intercept + per_row x b (None unknown)."""
    if coefficients is None:
        return None
    batch = batch_within(coefficients, max_batch_size, slots, slo_s)
    intercept, per_row = coefficients
    seconds = intercept + per_row * batch
    return slots * batch / seconds if seconds > 0.0 else math.inf


SATURATED_RETURNS_PER_SLOT = 8  # returns a saturated spell needs per slot before it is the capacity


class SaturatedThroughput:
    """The rows per second the slots returned over a spell in which they never idled and
    every batch left rows waiting: the capacity, measured (see Semantics). The slots tell it
    each return and each break; times are the caller's clock, in seconds."""

    def __init__(self, time_constant_s: float) -> None:
        self.time_constant_s = time_constant_s
        self._last: float | None = None  # the spell's latest return; None outside a spell
        self._limit = 0  # the slots the spell was measured with
        self._rows = 0.0     # rows returned over the spell, decayed
        self._seconds = 0.0  # the spell's length, decayed alike
        self._returns = 0

    @property
    def open(self) -> bool:
        """A spell is being measured."""
        return self._last is not None

    def returned(self, now: float, rows: int, limit: int) -> None:
        """A batch of `rows` returned at `now`, every one of the `limit` slots busy until
        then. The first return of a spell only starts its clock: the rows that return after
        it are those computed within it."""
        last = self._last
        if last is None or limit != self._limit:
            self._last, self._limit, self._rows, self._seconds, self._returns = now, limit, 0.0, 0.0, 0
            return
        elapsed = max(now - last, 0.0)
        decay = math.exp(-elapsed / self.time_constant_s)
        self._rows = self._rows * decay + rows
        self._seconds = self._seconds * decay + elapsed
        self._returns += 1
        self._last = now

    def broke(self) -> None:
        """A slot idled, or a batch emptied the queue: the spell ends, its figure with it."""
        self._last = None

    def per_second(self, limit: int) -> float | None:
        """The slots' rows per second over the spell, None unless one with `limit` slots is
        under way and long enough."""
        if (self._last is None or limit != self._limit or self._seconds <= 0.0
                or self._returns < SATURATED_RETURNS_PER_SLOT * limit):
            return None
        return self._rows / self._seconds
