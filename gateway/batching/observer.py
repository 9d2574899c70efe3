"""What the scheduler tells an observer about each batch: the seam a tracer plugs into.

When a batch leaves its queue the scheduler calls `BatchObserver.batch_left` with what it
knows of it (model, batch id, its requests' client contexts, rows, why it left, its
padding) and gets a `BatchObservation` back. The observation is told of each predictor
call the batch makes (a rejected batch is bisected into several, in the same slot) and
gives the trace context that call is to carry to the predictor; then it is told how the
batch ended. The default observes nothing, at the cost of a method call per batch and
per call.

`log_batch` is the batch's debug log line, which any observer may add to.

It must not know OpenTelemetry (gateway.telemetry implements this), the front ends or the
predictors.
"""
from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

from wire.errors import GatewayError
from wire.tracing import ClientContext

if TYPE_CHECKING:
    from gateway.batching.request import Part
    from wire.tensors import Tensor

log = logging.getLogger("gateway.batching.scheduler")  # the logger name operators already filter on


class BatchObservation(Protocol):
    def predictor_call(self, rows: int) -> contextlib.AbstractContextManager[str]:
        """Around one predictor call of `rows` rows; yields the W3C traceparent the call
        carries ("": the predictor gets the first member's trace, as without a tracer).
        An exception leaving it is the call's failure."""

    def ended(self, failed_requests: int) -> None:
        """The batch is over, and `failed_requests` of its requests got an error."""


class BatchObserver(Protocol):
    def batch_left(self, model: str, batch_id: str, members: Sequence[ClientContext], rows: int, reason: str,
                   padded_elements: int, real_elements: int) -> BatchObservation:
        """A batch of `rows` rows for `model` left its queue for `reason` (a departure
        reason); `members`: its requests' client contexts, one per request."""


class _Unobserved:
    def predictor_call(self, rows: int) -> contextlib.AbstractContextManager[str]:
        return _no_trace()

    def ended(self, failed_requests: int) -> None:
        pass

    def batch_left(self, model: str, batch_id: str, members: Sequence[ClientContext], rows: int, reason: str,
                   padded_elements: int, real_elements: int) -> BatchObservation:
        return self


@contextlib.contextmanager
def _no_trace() -> Iterator[str]:
    yield ""


NO_OBSERVER: BatchObserver = _Unobserved()
NO_OBSERVATION: BatchObservation = _Unobserved()


def log_batch(model: str, batch_id: str, rows: int, parts: Sequence[Part],
              outcomes: Sequence[tuple[list[Part], list[Tensor] | GatewayError]]) -> None:
    """The debug line of one batch that returned: its model, size, requests and outcome."""
    failed = [type(o).__name__ for _, o in outcomes if isinstance(o, GatewayError)]
    log.debug("batch %s model=%s rows=%d requests=%d outcome=%s", batch_id, model, rows, len(parts),
              ",".join(failed) or "ok",
              extra={"batch_id": batch_id, "model": model, "rows": rows,
                     "request_ids": [p.request.client.request_id for p in parts if p.request.client.request_id][:32],
                     "outcome": failed or "ok"})
