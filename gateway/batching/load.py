"""The load signal an autoscaler targets: how much of the predictor fleet the demand uses.

Semantics
---------
* **Capacity** (rows per second one replica sustains) = slots x B / ℓ(B), where ℓ is the
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
* ℓ is timed from when a call is written to when its answer has arrived (the transport's
  `wire.tracing.CallClock`): the turns of the gateway's loop before and after, which grow
  with its own load, are left out. What is left in is the time an answer waits in the
  socket until the loop reads it; a gateway short of CPU (deep overload on a crowded
  machine) still understates the capacity by that much.

Plain arithmetic on the figures it is given: it must not know the event loop, the queue,
the replicas or Prometheus.
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
