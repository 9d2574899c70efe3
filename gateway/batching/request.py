"""The batcher's request and answer (`BatchRequest`, `BatchResult`); one client's request
while a queue holds it (`QueuedRequest`) and the parts it travels in.

Semantics
---------
* `BatchRequest` is the one shape in which a request reaches a scheduler, whichever front
  end it came through (the service builds it, or the workers' channel carries it): the model, the tensors in the model's batch
  form, each row's real length (padded models), when it arrived and the client's own
  deadline as instants of `time.monotonic()`, its priority, its client context and the
  parameters that travel with its batch. The deadline counts from the request's arrival
  at the gateway, not from its queueing: reading, decompressing and decoding its body
  spend the client's budget. The model's own limits (`timeout_s`, `slo_ms`) also count
  from the arrival (`deadline_within`); a request whose deadline has passed before it
  reaches its queue is answered DeadlineExceeded and never queued.
* A request is answered exactly once, through its future: with its rows of the batch
  results (a `BatchResult`), or with an error. Whatever answers first wins; later answers
  (a batch returning after the deadline, say) are dropped.
* A request of at most `max_batch_size` rows travels as one part; a larger one as several
  (see `gateway.batching.merge`), whose answers are joined in order once all are in. A
  part waits at its request's priority level, or, beyond a long request's share, one lower
  (`admission.parts`).

This module must not know queues, policies or executors, nor where a request came from.
"""
from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from gateway.batching.layouts.base import RowLayout
from gateway.batching.merge import Reassembly, slice_result
from gateway.batching.padding import RowShape
from wire.errors import GatewayError
from wire.ratelimits import QuotaState
from wire.tensors import Tensor
from wire.tracing import NO_CONTEXT, ClientContext

NO_PARAMETERS: Mapping[str, Any] = MappingProxyType({})


@dataclass(slots=True, eq=False)
class BatchRequest:
    """A request in its model's batch form, as a scheduler takes it (see the module)."""
    model: str
    inputs: list[Tensor]
    arrived_s: float = field(default_factory=time.monotonic)  # when the gateway first saw it
    deadline_s: float | None = None   # the client's own deadline (an instant), if it gave one
    priority: int = 0                 # Triton's: 1 is the highest level, 0 the model's default
    client: ClientContext = NO_CONTEXT
    parameters: Mapping[str, Any] = field(default_factory=lambda: NO_PARAMETERS)  # travel with its batch (part of what must agree)
    # Each row's real length along padded dims (ragged v1 instances), or its tokens (texts; pairs: [rows, 2], query and document).
    lengths: np.ndarray | None = None
    form: str = ""  # the batch form it was converted to (its model's, when it was; see replace_model)
    tenant: str = ""  # the name of the tenant whose key it came with ("": none declared)

    @classmethod
    def arriving(cls, model: str, inputs: list[Tensor], *, timeout_s: float | None = None, priority: int = 0,
                 client: ClientContext = NO_CONTEXT, parameters: Mapping[str, Any] = NO_PARAMETERS,
                 lengths: np.ndarray | None = None, tenant: str = "") -> BatchRequest:
        """A request arriving now, whose client gives it `timeout_s` (None: the model's own)."""
        now = time.monotonic()
        return cls(model, inputs, now, None if timeout_s is None else now + timeout_s, priority, client,
                   parameters, lengths, tenant=tenant)

    def deadline_within(self, *timeouts_s: float | None) -> float:
        """The request's deadline (a `time.monotonic()` instant): the client's own, or the
        tightest of `timeouts_s` (the model's limits) counted from its arrival, if earlier."""
        limits = [self.arrived_s + s for s in timeouts_s if s is not None]
        if self.deadline_s is not None:
            limits.append(self.deadline_s)
        return min(limits, default=math.inf)

    @property
    def rows(self) -> int:
        return len(self.inputs[0].data) if self.inputs else 0


@dataclass(slots=True)
class BatchResult:
    outputs: list[Tensor]
    batch_ids: list[str]  # one per batch the request travelled in (more than one if split)
    departed_unix_ns: list[int] = field(default_factory=list)  # when each of them left, likewise
    quota: QuotaState | None = None  # its tenant's rate buckets when it was let in (None: no rate quota)


class QueuedRequest:
    __slots__ = ("signature", "size", "deadline", "future", "timer", "queued_rows", "answers", "batch_ids",
                 "departures", "sent", "client", "arrived", "parameters", "start_timer", "level", "layout", "restore",
                 "tenant", "demoted_rows")

    def __init__(self, signature: Hashable, size: int, deadline: float, future: asyncio.Future[BatchResult],
                 parts: int, layout: RowLayout, client: ClientContext = NO_CONTEXT, arrived: float = 0.0,
                 parameters: Mapping[str, Any] = NO_PARAMETERS, level: int = 0,
                 restore: Callable[[list[Tensor]], list[Tensor]] | None = None, tenant: str = "") -> None:
        self.client = client
        self.parameters = parameters  # forwarded with its batch (part of its signature)
        self.arrived = arrived  # loop time
        self.signature = signature
        self.size = size
        self.deadline = deadline
        self.future = future
        self.timer: asyncio.Handle | None = None  # its deadline's expiry, cancelled once answered
        self.start_timer: asyncio.Handle | None = None  # its latest start (policy deadline), likewise
        self.level = level  # its priority level: 1 is the highest; 0 when the model has no levels
        self.queued_rows = size  # rows not yet taken into a batch
        self.demoted_rows = 0  # those of them in parts that wait a level lower (beyond long_request_rows)
        self.answers = Reassembly(parts)
        self.batch_ids: list[str] = []  # in the order its parts were answered
        self.departures: list[int] = []  # when each of those batches left (wall clock, ns)
        self.sent = False  # some part of it reached the executor
        # The row layout that cut it: its batches are merged and cut back by that layout, even
        # after a reload gave its model another (see gateway.batching.layouts).
        self.layout = layout
        self.restore = restore  # puts its answer back in the client's row order (None: as sent)
        self.tenant = tenant  # whose it is, for fair batches and the tenant's usage ("": no tenants)

    @property
    def done(self) -> bool:
        return self.future.done()

    def answer_part(self, index: int, outputs: list[Tensor], batch_id: str, departed_unix_ns: int = 0) -> None:
        """Part `index` came back as `outputs` in batch `batch_id`, which left at
        `departed_unix_ns`; answer the request once its last part is in."""
        if self.future.done():
            return
        self.batch_ids.append(batch_id)
        self.departures.append(departed_unix_ns)
        whole = self.answers.add(index, outputs)
        if whole is not None:
            if self.restore is not None:
                whole = self.restore(whole)
            self.future.set_result(BatchResult(whole, self.batch_ids, self.departures))

    def fail(self, error: GatewayError) -> None:
        if not self.future.done():
            self.future.set_exception(error)


class Part:
    """A whole request, or one max_batch_size slice of a larger one, as it waits in a queue."""

    __slots__ = ("request", "index", "inputs", "size", "enqueued_at", "shape", "signature", "level")

    def __init__(self, request: QueuedRequest, index: int, inputs: list[Tensor], size: int, now: float,
                 shape: RowShape | None = None, signature: Hashable | None = None, level: int | None = None) -> None:
        self.request = request
        # The level it waits at: its request's, or one lower for rows beyond a long request's
        # share (see batching.admission.parts).
        self.level = request.level if level is None else level
        self.index = index
        self.inputs = inputs
        self.size = size
        self.enqueued_at = now
        self.shape = shape  # its lengths, when the model pads (see gateway.batching.padding)
        # What must agree for it to share a batch: its request's, or its own (a text part's bucket).
        self.signature: Hashable = request.signature if signature is None else signature

    @property
    def padded(self) -> int:
        """The length it travels at alone (1 when the model pads nothing): a batch costs rows x this."""
        return self.shape.padded if self.shape is not None else 1

    @property
    def elements(self) -> int:
        """Its rows' own lengths added up (its rows, when the model pads nothing)."""
        return int(self.shape.lengths.sum()) if self.shape is not None else self.size

    @property
    def live(self) -> bool:
        return not self.request.future.done()

    @property
    def deadline(self) -> float:
        return self.request.deadline

    @property
    def tenant(self) -> str:
        return self.request.tenant


def answer_parts(outcomes: list[tuple[list[Part], list[Tensor] | GatewayError]], layout: RowLayout, batch_id: str,
                 departed_unix_ns: int) -> None:
    """Answer each part of a returned batch: its own rows of its group's outputs, cut back
    by the layout that cut it, or its group's error."""
    for group, outcome in outcomes:
        if isinstance(outcome, GatewayError):
            for part in group:
                part.request.fail(outcome)
        else:
            for part, part_outputs in zip(group, slice_result(outcome, [p.size for p in group]), strict=True):
                part.request.answer_part(part.index, layout.part_outputs(part, part_outputs), batch_id,
                                         departed_unix_ns)
