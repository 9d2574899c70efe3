"""Admission: whether a request may join its model's queue now, at which priority level,
and with which deadline on the queue's clock.

Semantics
---------
* A request whose inputs are none, or differ in rows, or hold none, is InvalidInput (`rows`).
* A request's level is its own priority, else its tenant's, else the model's default
  (0 when the model has no levels), and never above its tenant's; a priority beyond the
  model's levels is InvalidInput.
* With levels, a request's parts that begin beyond its first `long_request_rows` rows wait
  one level lower (`parts`; from the lowest level, at a level of their own behind it): the
  queue is FIFO within a level, and a single client's 4,096-text list held a 1-text client
  of its level for up to 477 ms. They still fill the room the higher levels leave in a
  batch, and the request is counted, refused and made room for at its own level.
* More rows than `max_queue` is PayloadTooLarge, not Overloaded: no wait would ever let
  it in, so a retrying client must not loop. The rule is `fits_queue`, which a served model
  also asks with the rows a request declares before it spends anything on them (an
  embeddings request's token ids before they are decoded): refused there, the request
  never reaches the queue and is not counted in its stats.
* The deadline counts from the request's arrival at the gateway, not from its queueing: a
  request whose deadline passed while its body was read and decoded is DeadlineExceeded.
* The policy may refuse a request it predicts to finish late (`policies`).
* Beyond `max_queue` rows, queued requests of lower levels, or of tenants further over
  their share, give way (`backlog.make_room`); only an admitted request may make room,
  and with none to give way the request is Overloaded.

Every refusal is counted in the model's stats before it is raised. This module must not
know timers, slots, executors or front ends: the queue calls it on each arrival.
"""
from __future__ import annotations

import time
from typing import Protocol

from gateway.batching.backlog import Backlog
from gateway.batching.config import BatchingConfig
from gateway.batching.layouts.base import Cut
from gateway.batching.policies.base import Policy, QueueState
from gateway.batching.request import BatchRequest, Part, QueuedRequest
from gateway.batching.tenant_quotas import Tenants
from wire.errors import DeadlineExceeded, InvalidInput, Overloaded, PayloadTooLarge, format_ms
from wire.tensors import Tensor


class ArrivalQueue(QueueState, Protocol):
    """What admission reads of the queue a request arrives at (`queue.ModelQueue`), beyond
    what its policy reads: its settings, tenants, policy and backlog."""

    @property
    def config(self) -> BatchingConfig:
        """The model's batching settings."""

    @property
    def tenants(self) -> Tenants:
        """The scheduler's tenants: their levels, and who gives way when the queue is full."""

    @property
    def policy(self) -> Policy:
        """The queue's policy, which may refuse a request it predicts late."""

    @property
    def backlog(self) -> Backlog:
        """What the queue holds waiting."""


def rows(inputs: list[Tensor]) -> int:
    """A request's rows; InvalidInput unless every input has the same, non-zero, number."""
    if not inputs:
        raise InvalidInput("the request has no inputs")
    size = len(inputs[0].data)
    if size == 0 or any(len(t.data) != size for t in inputs):
        raise InvalidInput("every input must have the same, non-zero, batch dimension")
    return size


def level(queue: ArrivalQueue, priority: int, tenant: str) -> int:
    """The priority level of a request (0 when the model has no levels): its own, else
    its tenant's, else the model's default; never above its tenant's."""
    levels = queue.config.priority_levels
    if not levels:
        return 0
    if priority > levels:
        raise InvalidInput(f"priority {priority} is beyond model '{queue.name}'s {levels} levels "
                           f"(batching.priority_levels); 1 is the highest, 0 the default")
    floor = min(queue.tenants.policy(tenant).priority, levels) if tenant else 0
    return max(priority or floor or queue.config.default_priority_level, floor)


def parts(config: BatchingConfig, request: QueuedRequest, cut: Cut, now: float) -> list[Part]:
    """`request`'s parts as they wait, each at its level (see Semantics): its own, or, for
    a part that begins beyond the first `long_request_rows` of its rows, one lower."""
    share = config.long_request_rows if request.level else 0
    waiting, first_row = [], 0
    for index, (piece, shape, signature) in enumerate(zip(cut.pieces, cut.shapes, cut.signatures, strict=True)):
        size = len(piece[0].data)
        level = request.level + 1 if share and first_row >= share else request.level
        waiting.append(Part(request, index, piece, size, now, shape, signature, level))
        first_row += size
    return waiting


def fits_queue(model: str, config: BatchingConfig, size: int) -> None:
    """Raises PayloadTooLarge if `size` rows could never join `model`'s queue (`max_queue`)."""
    if size > config.max_queue:
        # Not Overloaded: no wait would ever let it in, so a retrying client must not loop.
        raise PayloadTooLarge(
            f"the request has {size} instances but model '{model}' queues at most {config.max_queue} "
            f"(batching.max_queue): split it into smaller requests"
        )


def judge(queue: ArrivalQueue, request: BatchRequest, size: int, level: int, now: float) -> tuple[float, float]:
    """Judge whether `size` rows of `level` may join the queue now: their deadline on the
    loop's clock and the budget it was counted from; raises the refusal (counted) otherwise."""
    config = queue.config
    fits_queue(queue.name, config, size)
    # The deadline counts from the request's arrival at the gateway (a monotonic instant,
    # moved onto this loop's clock), not from now.
    monotonic_now = time.monotonic()
    deadline_mono = request.deadline_within(config.timeout_s, config.slo_s)
    budget = deadline_mono - request.arrived_s
    if deadline_mono <= monotonic_now:
        queue.stats.timed_out_before_queued(level, monotonic_now - request.arrived_s)
        raise DeadlineExceeded(
            f"model '{queue.name}': deadline of {budget:g} s passed before the request was queued "
            f"({format_ms(monotonic_now - request.arrived_s)} after it arrived, reading and decoding it)")
    deadline = now + (deadline_mono - monotonic_now)
    refusal = queue.policy.refusal(queue, request, deadline, now, level)
    if refusal is not None:
        queue.stats.refused_as_late(level)
        raise refusal
    # Only an admitted request may make room: lower levels never give way for nothing.
    needed = queue.queued_rows + size - config.max_queue
    if needed > 0 and not queue.backlog.make_room(size, needed, level, request.tenant, queue.tenants, queue.name,
                                                 lambda victim: queue.stats.refused_overloaded(victim.level)):
        queue.stats.refused_overloaded(level)
        raise Overloaded(
            f"model '{queue.name}' has {queue.queued_rows} instances queued (limit {config.max_queue}, batching.max_queue); "
            "try again later"
        )
    return deadline, budget
