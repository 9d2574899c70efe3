"""Policy `window`: KServe's batcher.

Semantics
---------
* A batch ships when the oldest request's signature group holds `max_batch_size` rows
  (or, with `max_batch_cost`, that many padded elements), or when the oldest request has
  waited `max_latency_s`, whichever comes first.
* Light traffic therefore pays up to `max_latency_s` per request; under load batches
  leave full.

Like every policy, this one knows only the time and the queue's state (see `base`).
"""
from __future__ import annotations

from gateway.batching.padding import cost
from gateway.batching.policies.base import Policy, QueueState


class WindowPolicy(Policy):
    # It reads max_latency_ms, declared on BatchingConfig's field (max_latency_s).
    timer_reason = "window_expired"

    def wait_until(self, queue: QueueState, now: float) -> float | None:
        """Ship when full, or once the oldest request has waited max_latency_s."""
        oldest = queue.pending[0]
        closes_at = oldest.enqueued_at + self.config.max_latency_s
        if now >= closes_at:
            return None
        # "Full" counts every live row of the oldest's signature, even parts that would
        # not fit beside the others: the window closes, and the batch taken stays capped.
        signature, rows, padded, max_cost = oldest.signature, 0, 0, self.config.max_batch_cost
        for part in queue.pending:
            if part.signature == signature and part.live:
                rows += part.size
                if max_cost:
                    padded = max(padded, part.padded)
                if rows >= self.config.max_batch_size or (max_cost and cost(rows, padded) >= max_cost):
                    return None
        return closes_at
