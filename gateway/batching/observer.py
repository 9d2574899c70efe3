"""What the scheduler tells an observer about each batch: the seam a tracer plugs into.

When a batch leaves its queue the scheduler calls `BatchObserver.batch_left` with what it
knows of it (model, batch id, its requests' client contexts, rows, why it left, its
padding) and gets a `BatchObservation` back. The observation is told of each predictor
call the batch makes (a rejected batch is bisected into several, in the same slot) and
gives the trace context that call is to carry to the predictor; then it is told how the
batch ended. The default observes nothing, at the cost of a method call per batch and
per call.

It must not know OpenTelemetry (gateway.telemetry implements this), the front ends or the
predictors.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Protocol

from wire.tracing import ClientContext


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
