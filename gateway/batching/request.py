"""One client's request while the scheduler holds it, the parts it travels in, and its answer.

Semantics
---------
* A request is answered exactly once, through its future: with its rows of the batch
  results (a `BatchResult`), or with an error. Whatever answers first wins; later answers
  (a batch returning after the deadline, say) are dropped.
* A request of at most `max_batch_size` rows travels as one part; a larger one as several
  (see `gateway.batching.merge`), whose answers are joined in order once all are in.

This module must not know queues, policies or executors.
"""
from __future__ import annotations

import asyncio
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from gateway.batching.merge import Reassembly
from gateway.batching.padding import RowShape
from wire.errors import GatewayError
from wire.tensors import Tensor
from wire.tracing import NO_CONTEXT, ClientContext

NO_PARAMETERS: Mapping[str, Any] = MappingProxyType({})


@dataclass(slots=True)
class BatchResult:
    outputs: list[Tensor]
    batch_ids: list[str]  # one per batch the request travelled in (more than one if split)


class Request:
    __slots__ = ("signature", "size", "deadline", "future", "timer", "queued_rows",
                 "answers", "batch_ids", "sent", "client", "arrived", "parameters", "start_timer", "level")

    def __init__(self, signature: Hashable, size: int, deadline: float, future: asyncio.Future[BatchResult],
                 parts: int, client: ClientContext = NO_CONTEXT, arrived: float = 0.0,
                 parameters: Mapping[str, Any] = NO_PARAMETERS, level: int = 0) -> None:
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
        self.answers = Reassembly(parts)
        self.batch_ids: list[str] = []  # in the order its parts were answered
        self.sent = False  # some part of it reached the executor

    @property
    def done(self) -> bool:
        return self.future.done()

    def answer_part(self, index: int, outputs: list[Tensor], batch_id: str) -> None:
        """Part `index` came back as `outputs` in batch `batch_id`; answer the request once
        its last part is in."""
        if self.future.done():
            return
        self.batch_ids.append(batch_id)
        whole = self.answers.add(index, outputs)
        if whole is not None:
            self.future.set_result(BatchResult(whole, self.batch_ids))

    def fail(self, error: GatewayError) -> None:
        if not self.future.done():
            self.future.set_exception(error)


class Part:
    """A whole request, or one max_batch_size slice of a larger one, as it waits in a queue."""

    __slots__ = ("request", "index", "inputs", "size", "enqueued_at", "shape")

    def __init__(self, request: Request, index: int, inputs: list[Tensor], size: int, now: float,
                 shape: RowShape | None = None) -> None:
        self.request = request
        self.index = index
        self.inputs = inputs
        self.size = size
        self.enqueued_at = now
        self.shape = shape  # its lengths, when the model pads (see gateway.batching.padding)

    @property
    def padded(self) -> int:
        """The length it travels at alone (1 when the model pads nothing): a batch costs rows x this."""
        return self.shape.padded if self.shape is not None else 1

    @property
    def signature(self) -> Hashable:
        return self.request.signature

    @property
    def live(self) -> bool:
        return not self.request.future.done()

    @property
    def deadline(self) -> float:
        return self.request.deadline

    @property
    def level(self) -> int:
        return self.request.level
