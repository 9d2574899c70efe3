"""Batching policies: when a model's queue ships its next batch.

Modules
-------
* `base`: the interface (`Policy.wait_until`: ship now, or wait until when?) and what a
  policy may read of the queue (`QueueState`, `QueuedPart`).
* `adaptive`: ship when a slot is free, with a learned hold for returning clients (default).
* `window`: KServe's batcher: ship when full or when the oldest has waited max_latency.
* `deadline`: the most answers within their deadlines (`slo_ms`): refuse at admission what
  cannot make it, drop what no longer can, size batches for the oldest deadline.

A new policy is a new module implementing `Policy`, named in `REGISTRY` below; the queue,
the config and the metrics need no change: the config reads the `[batching]` keys the policy
adds of its own (`Policy.settings`; every key the policies here read is declared once, on
`BatchingConfig`'s fields) and the key that selects it (`Policy.selected_by`), and its
`timer_reason` joins the departure reasons (`departures()`). Policies must not know the event loop, futures or
executors.
"""
from __future__ import annotations

from gateway.batching.config import BatchingConfig
from gateway.batching.policies.adaptive import AdaptivePolicy
from gateway.batching.policies.base import Policy, Setting
from gateway.batching.policies.deadline import DeadlinePolicy
from gateway.batching.policies.window import WindowPolicy

# The value of `policy` in a model's [batching] table -> its implementation.
REGISTRY: dict[str, type[Policy]] = {
    "adaptive": AdaptivePolicy,
    "window": WindowPolicy,
    "deadline": DeadlinePolicy,
}


def names() -> tuple[str, ...]:
    """The values `policy` may take, in the order the config's error message lists them."""
    return tuple(REGISTRY)


def departures() -> tuple[str, ...]:
    """Why a batch leaves the queue: it reached max_batch_size; a slot was free and the
    policy said go; the policy sized it smaller (the deadline policy, for the oldest
    deadline); or a policy's own timer ended (an adaptive hold, a window)."""
    return tuple(dict.fromkeys(("full", "slot_free", "deadline_sized",
                                *(policy.timer_reason for policy in REGISTRY.values()))))


def departure(rows: int, policy_limit: int, max_batch_size: int, timer_reason: str | None) -> str:
    """Why a batch of `rows` rows leaves now, one of `departures()`: it is full; the policy
    sized it below `max_batch_size` (`policy_limit`) and it reached that; else the
    policy's `timer_reason` when its own wake-up shipped it (None: a slot was free)."""
    if rows >= max_batch_size:
        return "full"
    if policy_limit < max_batch_size and rows >= policy_limit:
        return "deadline_sized"
    return timer_reason if timer_reason is not None else "slot_free"


def settings() -> dict[str, Setting]:
    """Every `[batching]` key a policy reads, by key (a key two policies read is one setting)."""
    return {setting.key: setting for policy in REGISTRY.values() for setting in policy.settings}


def selected_by() -> dict[str, str]:
    """Setting key -> the policy its presence chooses."""
    return {policy.selected_by: name for name, policy in REGISTRY.items() if policy.selected_by}


def make_policy(config: BatchingConfig) -> Policy:
    """A fresh policy for one model queue; ValueError if `config.policy` names none."""
    implementation = REGISTRY.get(config.policy)
    if implementation is None:
        raise ValueError(f"unknown batching policy {config.policy!r}")
    return implementation(config)
