"""Policy `deadline`: the most answers within their deadlines, at any load (`slo_ms`).

Semantics
---------
Every request has a deadline: `slo_ms` after its arrival, or sooner if its client asks
(a gRPC deadline, `X-Request-Timeout-Ms`, the OIP `timeout` parameter). The policy reads
the model's learned latency profile ℓ(b) (`batching.profile`: the predictor time of a
batch of b rows) and, once it has one:

* **Admission.** A request is refused at once (503, saying the predicted time and the
  deadline) when it cannot finish in time: the full batches queued ahead of it (at its
  priority level and higher, when the model has levels), at ℓ(B) each over the in-flight
  slots (B = `max_batch_size`), plus half a batch for the call in progress when every slot
  is busy, plus its own batch, which it shares with the rows left over ahead of it, end
  past its deadline. A request larger than B is split into parts of B rows: all its parts
  but the last are full batches ahead of its last one, so it is judged by when its last
  part ends. A fast refusal lets a client retry elsewhere; a late answer is worth nothing.
* **Levels.** Under strict priorities a lower level also waits for the higher levels' rows
  that will arrive while it waits: with the predictor answering C = slots·B/ℓ(B) rows per
  second and the levels above bringing R (admitted, over about the last second), a lower
  level gets C − R of it, so the wait until its own batch starts (the call in progress and
  the batches ahead) takes C/(C − R) times as long. When
  R ≥ C the level cannot be served at all, and it is refused at admission (a 503 naming
  the rates), not left to wait out its deadline; when the higher levels ease, R decays
  within seconds and the level is admitted again.
* **Recovery.** The profile learns from every call, including one abandoned at its
  members' deadline (it took at least that long), so a predictor that slows down turns
  into fast refusals within a few calls. While everything is refused no call would teach
  it that the predictor has recovered: so, once requests have been refused since the last
  call, nothing is in flight and no call has ended for `PROBE_AFTER_S`, the next request
  of at most one batch is admitted whatever the prediction, as a probe (one per refusal
  spell: its call is what the profile learns from), and nothing is dropped until a call
  has ended.
* **Drop.** A queued request that can no longer finish, even shipped alone now (now +
  ℓ(its rows) past its deadline), is answered 504 at once and never sent: predictor time
  goes to answers that can still arrive in time. "At once" is at its latest start,
  deadline − ℓ(its rows), by a timer set at admission; and again whenever a batch is
  formed, in case the profile has changed since.
* **Trade under overload.** When a batch is formed, a queued request that could still
  finish only in a batch smaller than B (now + ℓ(B) past its deadline) is dropped too, with
  a 504 saying why, if B rows that would all finish in a full batch are waiting (counted
  over the model's queue, whatever their signature). Saving it would shrink the batch:
  with ℓ(b) = a + c·b, b/ℓ(b) rows per second of predictor grows with b, so under
  overload one answer saved costs several. Below capacity, B such rows seldom wait, and
  batches are sized instead (next).
* **Batch size.** The next batch holds at most the rows that still let its leader (its
  oldest member, of the highest priority level queued) finish: the largest b ≤ B with
  now + ℓ(b) ≤ that deadline.
* **Hold.** The adaptive policy's learned hold for returning closed-loop clients stays,
  but never past the moment the next batch's leader must leave to make its deadline with
  a full batch.

Before the first predictor call there is no profile: everything is admitted, nothing is
dropped, batches fill to B. Like every policy, this one knows only the time and the
queue's state (see `base`).
"""
from __future__ import annotations

import math

from gateway.batching.config import BatchingConfig
from gateway.batching.policies.adaptive import AdaptivePolicy
from gateway.batching.policies.base import QueuedPart, QueueState
from gateway.batching.request import BatchRequest
from wire.errors import GatewayError, Unavailable, format_ms

PROBE_AFTER_S = 1.0  # with nothing in flight and no call for this long, a request is admitted as a probe


class DeadlinePolicy(AdaptivePolicy):
    # slo_ms (BatchingConfig.slo_s, declared there) beside the adaptive policy's keys.
    selected_by = "slo_ms"  # setting the latency objective is what turns this policy on
    drops_doomed = True

    def __init__(self, config: BatchingConfig) -> None:
        super().__init__(config)
        self._full_waits_at: float | None = None  # `_full_batch_waits`, computed once per moment
        self._full_waits = False
        self._refused_at: float | None = None  # the last refusal at admission since a probe (the probe's cue)
        self._probe_at: float | None = None  # when the last probe was admitted

    def refusal(self, queue: QueueState, request: BatchRequest, deadline: float, now: float,
                level: int = 0) -> GatewayError | None:
        profile, size, rows = queue.stats.profile, self.config.max_batch_size, request.rows
        full = profile.predict(size)
        if full is None:
            return None
        if self._probe(queue, rows, now):
            return None
        slots = queue.inflight_limit
        # A lower level also waits behind the higher levels' rows still to come: it gets
        # what they leave of the predictor, so what is ahead of it drains that much slower.
        capacity = slots * size / full  # rows per second, in full batches
        above = queue.rows_per_second_above(level, now) if level else 0.0
        left = 1.0 - above / capacity
        if left <= 0.0:
            self._refused_at = now
            return Unavailable(
                f"model '{queue.name}': priority level {level} cannot be served within its deadline: the levels "
                f"above it bring {above:.0f} rows/s, all of the {capacity:.0f} rows/s the predictor answers; "
                f"refused at once so that it can be retried elsewhere")
        in_progress = full / 2 if queue.inflight >= slots else 0.0
        queued_ahead = queue.rows_ahead(level)  # lower priority levels do not delay it
        # Full batches leave ahead of it; the rows left over share its own (first) batch.
        full_ahead, sharing = divmod(queued_ahead, size)
        parts, last = divmod(rows - 1, size)  # a split request: `parts` full batches, then its last part
        last += 1
        if sharing + (size if parts else rows) > size:
            full_ahead, sharing = full_ahead + 1, 0  # the leftover leaves without it
        own = profile.predict(min(sharing + last, size) if not parts else last) or 0.0
        # Until its own batch starts, the higher levels' new rows take their share of the predictor.
        predicted = (in_progress + (full_ahead + parts) * full / slots) / left + own
        if now + predicted <= deadline:
            return None
        self._refused_at = now
        return Unavailable(
            f"model '{queue.name}': predicted to finish in {format_ms(predicted)} ({queued_ahead} rows "
            f"queued ahead), past its deadline of {format_ms(deadline - now)}; refused at once so that it "
            f"can be retried elsewhere")

    def _probe(self, queue: QueueState, rows: int, now: float) -> bool:
        """Whether to admit this request as the probe of a refusal spell (see Recovery)."""
        last_call = queue.stats.last_call_at
        if (rows <= self.config.max_batch_size and queue.inflight == 0 and self._refused_at is not None
                and self._refused_at >= last_call
                and now - last_call >= PROBE_AFTER_S):
            self._refused_at = None  # one probe; the next refusal starts another spell
            self._probe_at = now
            return True
        return False

    def batch_limit(self, queue: QueueState, now: float) -> int:
        coefficients = queue.stats.profile.coefficients
        leader = queue.leader()
        if coefficients is None or leader is None:
            return self.config.max_batch_size
        intercept, per_row = coefficients
        if per_row <= 0:
            return self.config.max_batch_size
        fitting = math.floor((leader.deadline - now - intercept) / per_row + 1e-9)  # 4.9999999 rows is 5
        return max(1, min(self.config.max_batch_size, fitting))

    def doomed(self, queue: QueueState, part: QueuedPart, now: float) -> str | None:
        if self._probe_at is not None and queue.stats.last_call_at < self._probe_at:
            return None  # a probe is out: what the profile predicts is what it is testing
        profile = queue.stats.profile
        needed = profile.predict(part.size)
        if needed is None:
            return None
        if now + needed > part.deadline:
            return (f"it could no longer be answered within its deadline ({format_ms(max(part.deadline - now, 0))} "
                    f"were left, {format_ms(needed)} needed)")
        full = profile.predict(self.config.max_batch_size)
        if full is not None and now + full > part.deadline and self._full_batch_waits(queue, now, full):
            return (f"under overload, it could only have been answered in time in a batch smaller than "
                    f"{self.config.max_batch_size} rows, while a full batch of requests that can still make their "
                    f"deadlines was waiting")
        return None

    def _full_batch_waits(self, queue: QueueState, now: float, full: float) -> bool:
        """Whether `max_batch_size` rows are queued that would all finish in time in a full
        batch shipped now (computed once per moment: the queue asks of every part)."""
        if self._full_waits_at != now:
            viable = sum(part.size for part in queue.pending if part.live and part.deadline >= now + full)
            self._full_waits_at, self._full_waits = now, viable >= self.config.max_batch_size
        return self._full_waits

    def latest_start(self, queue: QueueState, rows: int, deadline: float) -> float | None:
        # `rows` is one queued part (at most max_batch_size: a larger request is split first).
        needed = queue.stats.profile.predict(min(rows, self.config.max_batch_size))
        return None if needed is None else deadline - needed

    def wait_until(self, queue: QueueState, now: float) -> float | None:
        until = super().wait_until(queue, now)
        full = queue.stats.profile.predict(self.config.max_batch_size)
        leader = queue.leader()
        if until is None or full is None or leader is None:
            return until
        latest_start = leader.deadline - full
        return min(until, latest_start) if latest_start > now else None
