"""The policy interface: what a model's queue asks before it ships a batch.

The queue owns the mechanics (slots, taking the batch, deadlines); a policy only answers
one question whenever a slot is free and a live request waits: "ship now, or wait until
when?". It may also learn from the traffic through two hooks. A policy must not know the
event loop, timers, futures or executors: it is given the time and the queue's state, so
it can be tested with plain objects.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

from gateway.batching.config import BatchingConfig
from gateway.batching.merge import Mergeable
from gateway.batching.request import BatchRequest
from gateway.batching.stats import ModelStats
from wire.errors import GatewayError


@dataclass(frozen=True, slots=True)
class Setting:
    """A key of a model's `[batching]` table that a policy adds of its own, without touching
    the config: the TOML `key` (in milliseconds: every policy setting is a duration) into
    `BatchingConfig.<field>` (in seconds). `positive`: 0 is refused. The keys the built-in
    policies read are declared once, on BatchingConfig's fields (`gateway.config_keys.key`,
    with their meaning and bounds), never again here."""
    key: str
    field: str
    positive: bool = False


class QueuedPart(Mergeable, Protocol):
    """What a policy may read of a queued part (a request, or a slice of a large one)."""

    @property
    def enqueued_at(self) -> float:
        """When it was queued, on the scheduler's clock."""

    @property
    def deadline(self) -> float:
        """When its request is answered DeadlineExceeded if not answered before."""


class QueueState(Protocol):
    """What a policy may read of a model's queue."""

    @property
    def name(self) -> str:
        """The model's name, for the messages of refusals."""

    @property
    def inflight(self) -> int:
        """Batches at the executor now."""

    @property
    def inflight_limit(self) -> int:
        """Batches the model may have at the executor now (`max_inflight`, or its learned value)."""

    def leader(self) -> QueuedPart | None:
        """The live part the next batch forms around (the oldest of the highest priority level)."""

    def rows_ahead(self, level: int) -> int:
        """Queued rows a request of priority `level` would wait behind (its level and higher)."""

    def rows_per_second_above(self, level: int, now: float) -> float:
        """Rows per second recently admitted at priority levels higher than `level`: what
        takes the predictor before a request of `level`, besides the rows queued now."""

    @property
    def pending(self) -> Sequence[QueuedPart]:
        """Queued parts, oldest first; parts no longer live may linger until skipped."""

    @property
    def queued_rows(self) -> int:
        """Rows of live requests not yet taken into a batch."""

    @property
    def stats(self) -> ModelStats:
        """The model's counters (a policy counts its own decisions there)."""


class Policy(ABC):
    """Decides when a model's queue ships its next batch. One instance per model queue,
    so a policy may keep what it learns about that model's traffic.

    A policy declares what it adds to the config and what it counts: `settings` (the
    `[batching]` keys of its own, which no field of BatchingConfig declares, that
    `gateway.config` reads for it), `selected_by` (a setting whose presence chooses this
    policy, and without which it cannot run) and `timer_reason` (what a batch shipped at a
    `wait_until` time is counted as, one of the departure reasons)."""

    settings: ClassVar[tuple[Setting, ...]] = ()
    selected_by: ClassVar[str | None] = None

    def __init__(self, config: BatchingConfig) -> None:
        self.config = config  # replaced in place when the model is re-tuned under the same policy

    @abstractmethod
    def wait_until(self, queue: QueueState, now: float) -> float | None:
        """Asked when a slot is free and the oldest queued part is live.

        None: ship a batch now. A time: ship nothing before it; the queue asks again then,
        or sooner (when a request arrives or a batch returns)."""

    # Deadline-aware policies also decide who is admitted, how large a batch is and what is
    # dropped; the defaults admit everything, fill batches to max_batch_size, drop nothing.
    drops_doomed = False  # the queue asks `doomed` of its parts only when this is set
    timer_reason = "hold_expired"  # what a batch shipped at a `wait_until` time is counted as

    def refusal(self, queue: QueueState, request: BatchRequest, deadline: float, now: float,
                level: int = 0) -> GatewayError | None:
        """None to queue `request` (its rows, priority, client and parameters as it came) at
        priority `level`, due at `deadline` (on the queue's clock); else the error that
        refuses it at once."""
        return None

    def batch_limit(self, queue: QueueState, now: float) -> int:
        """The most rows the next batch may hold."""
        return self.config.max_batch_size

    def doomed(self, queue: QueueState, part: QueuedPart, now: float) -> str | None:
        """None to keep a queued part; else why it is dropped, unsent (the 504's message)."""
        return None

    def latest_start(self, queue: QueueState, rows: int, deadline: float) -> float | None:
        """When a request of `rows` rows due at `deadline` must have reached the predictor
        to be answered in time; if it has not by then, it is dropped. None: never dropped."""
        return None

    def on_arrival(self, now: float) -> None:  # noqa: B027 - a hook most policies ignore
        """A request was queued at `now`."""

    def on_delivery(self, now: float, requests: int, predictor_s: float) -> None:  # noqa: B027 - as above
        """A batch of `requests` requests came back at `now` after `predictor_s` seconds at
        the executor (its slot is free again; its clients are about to be answered)."""
