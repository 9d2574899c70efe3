"""Policy `adaptive` (the default): ship as soon as a slot is free, with a learned hold.

Semantics
---------
* A batch ships as soon as a slot is free (the queue asks at the end of the loop's pass
  in which a request arrived). Light traffic pays no batching delay; under load, requests
  pile up while all slots are busy and leave together.
* One refinement, learned per model (see `ReturnTracker`): when the clients just answered
  reliably come straight back and the predictor call is long next to their return delay,
  a free slot waits for them, so they leave with the requests already queued instead of
  a call behind them.
* The hold never exceeds `max_hold_s` (0: never hold), nor `max_latency_s`: the most the
  window policy would make a request wait is also the most this one ever does (see
  `AdaptivePolicy.hold_limit`). A queue already holding a full batch is never held.

Like every policy, this one knows only the time and the queue's state (see `base`).
"""
from __future__ import annotations

from gateway.batching.config import BatchingConfig
from gateway.batching.policies.base import Policy, QueueState


class ReturnTracker:
    """Learns whether the clients of an answered batch come straight back, and how soon.

    Closed-loop clients (each sends its next request when answered) otherwise split into
    two groups that alternate at the predictor, each request waiting for two calls. After
    each delivery of n requests, the tracker counts the arrivals that follow within
    max_hold_s and smooths two figures: the share of answered clients that return, and
    their delay. `hold_until` then proposes holding a free slot until the expected
    returns are in, only when (a) most clients do return, (b) some have not yet, and
    (c) the hold, about 1.5 x the usual return delay, is shorter than a predictor call,
    so it costs the queued requests less than it spares the returning ones. Open-loop
    or sparse traffic never qualifies.
    """
    SMOOTHING = 0.2

    def __init__(self) -> None:
        self.delivered_at = float("-inf")
        self.delivered = 0        # requests in the last delivered batch
        self.returned = 0         # arrivals counted since then
        self.share = 0.0          # smoothed share of answered requests that came back
        self.delay: float | None = None        # smoothed return delay, seconds
        self.predictor_s: float | None = None  # smoothed predictor call time, seconds

    def on_arrival(self, now: float, max_hold_s: float) -> None:
        """Count an arrival as a return if it comes within `max_hold_s` of the last delivery."""
        since = now - self.delivered_at
        if self.returned < self.delivered and since <= max_hold_s:
            self.returned += 1
            self.delay = since if self.delay is None else self.delay + self.SMOOTHING * (since - self.delay)

    def on_delivery(self, now: float, requests: int, predictor_s: float) -> None:
        """A batch of `requests` requests was answered at `now` after a `predictor_s` call."""
        if self.delivered:
            self.share += self.SMOOTHING * (self.returned / self.delivered - self.share)
        self.predictor_s = predictor_s if self.predictor_s is None else (
            self.predictor_s + self.SMOOTHING * (predictor_s - self.predictor_s))
        self.delivered_at, self.delivered, self.returned = now, requests, 0

    def hold_until(self, now: float, max_hold_s: float) -> float | None:
        """When a free slot should ship if it waits for the returns (at most `max_hold_s`
        after the last delivery), or None if waiting does not pay."""
        if self.delay is None or self.predictor_s is None or self.share < 0.5:
            return None
        window = min(max_hold_s, 1.5 * self.delay + 0.0005)
        # Holding w delays the queued requests by w and spares the returning ones a whole
        # predictor call: worth it only while w is shorter than that call.
        if window >= self.predictor_s or self.returned >= round(self.delivered * self.share):
            return None
        until = self.delivered_at + window
        return until if now < until else None


class AdaptivePolicy(Policy):
    # It reads max_hold_ms and max_latency_ms (which also caps the learned hold: it is the
    # window's bound too), both declared on BatchingConfig's fields.

    def __init__(self, config: BatchingConfig) -> None:
        super().__init__(config)
        self.returns = ReturnTracker()

    def hold_limit(self) -> float:
        """The most a hold may delay a batch: `max_hold_s`, capped by `max_latency_s`.

        The cap is deliberate: `max_latency_s` is the configured bound on how long a
        request waits for company, and a hold is such a wait."""
        return min(self.config.max_hold_s, self.config.max_latency_s)

    def wait_until(self, queue: QueueState, now: float) -> float | None:
        """Ship now, unless the learned hold says the answered clients are about to return."""
        if self.config.max_hold_s <= 0 or queue.queued_rows >= self.config.max_batch_size:
            return None
        until = self.returns.hold_until(now, self.hold_limit())
        if until is not None:
            queue.stats.held()
        return until

    def on_arrival(self, now: float) -> None:
        # Returns are counted over the whole max_hold_s, even when max_latency_s holds less.
        self.returns.on_arrival(now, self.config.max_hold_s)

    def on_delivery(self, now: float, requests: int, predictor_s: float) -> None:
        self.returns.on_delivery(now, requests, predictor_s)
