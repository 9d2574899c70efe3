"""Batching policies: when a model's queue ships its next batch.

Modules
-------
* `base`: the interface (`Policy.wait_until`: ship now, or wait until when?) and what a
  policy may read of the queue (`QueueState`, `QueuedPart`).
* `adaptive`: ship when a slot is free, with a learned hold for returning clients (default).
* `window`: KServe's batcher: ship when full or when the oldest has waited max_latency.
* `deadline`: the most answers within their deadlines (`slo_ms`): refuse at admission what
  cannot make it, drop what no longer can, size batches for the oldest deadline.

A new policy is a new module implementing `Policy`, named in `REGISTRY` below; the queue
needs no change. Policies must not know the event loop, futures or executors.
"""
from __future__ import annotations

from gateway.batching.config import BatchingConfig
from gateway.batching.policies.adaptive import AdaptivePolicy
from gateway.batching.policies.base import Policy
from gateway.batching.policies.deadline import DeadlinePolicy
from gateway.batching.policies.window import WindowPolicy

# The value of `policy` in a model's [batching] table -> its implementation.
REGISTRY: dict[str, type[Policy]] = {
    "adaptive": AdaptivePolicy,
    "window": WindowPolicy,
    "deadline": DeadlinePolicy,
}
POLICIES: tuple[str, ...] = tuple(REGISTRY)


def make_policy(config: BatchingConfig) -> Policy:
    """A fresh policy for one model queue; ValueError if `config.policy` names none."""
    implementation = REGISTRY.get(config.policy)
    if implementation is None:
        raise ValueError(f"unknown batching policy {config.policy!r}")
    return implementation(config)
