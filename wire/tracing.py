"""Request ids and W3C trace context, carried from clients to predictors.

A client may send a request id (OIP `id`, or the `x-request-id` header / metadata) and a
W3C `traceparent`. A batch serves many clients, so each predictor call carries:
- `x-request-id`: the member's id when the batch serves one identified request, else the
  batch id;
- `x-batch-request-ids`: the member requests' ids (the first 32), comma-separated;
- `traceparent`: the predictor call's own span when the gateway traces (gateway.telemetry);
  else the first traced member's trace continued with a new span id (the batch's), or a
  new trace when no member sent one.
The scheduler sets `current_batch` around each predictor call (a ContextVar, so it
follows the call into the backend without widening the backend interface); backends ask
`predictor_headers()` for the headers or gRPC metadata to send. The same context carries
the call's `CallClock` back: a transport that can stamps when the call left and when its
answer had arrived, so the scheduler learns the predictor's time without its own loop's.
"""
from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
MAX_IDS = 32


@dataclass(frozen=True, slots=True)
class ClientContext:
    """What a client said about its request's identity."""
    request_id: str = ""
    traceparent: str = ""


NO_CONTEXT = ClientContext()


@dataclass(slots=True)
class CallClock:
    """When one predictor call left (its request handed to the socket) and when its answer
    had arrived whole, in `time.monotonic()` seconds, stamped by a backend's transport (0:
    not stamped). Between the two is the predictor's time (and the network's): none of the
    turns of the gateway's loop before the call is written or after its answer is read,
    which grow with the gateway's own load and must not be learned as the predictor's."""
    sent: float = 0.0
    answered: float = 0.0

    def leaving(self) -> None:
        self.sent, self.answered = time.monotonic(), 0.0

    def arrived(self) -> None:
        if self.sent:
            self.answered = time.monotonic()

    @property
    def seconds(self) -> float | None:
        """The call's time at the predictor, or None when the transport stamped no answer."""
        return self.answered - self.sent if self.answered else None


@dataclass(frozen=True, slots=True)
class BatchContext:
    """What a backend knows of the batch it sends: its id, its members' ids and traces, and
    the request parameters its members share (requests with different ones never merge);
    and the clock its transport stamps."""
    batch_id: str
    members: tuple[ClientContext, ...]
    parameters: Mapping[str, Any] = field(default_factory=dict)
    traceparent: str = ""  # the predictor call's own span, when traced
    clock: CallClock = field(default_factory=CallClock, compare=False)  # the transport stamps it, the scheduler reads it


current_batch: ContextVar[BatchContext | None] = ContextVar("current_batch", default=None)


def continue_trace(parent: str) -> str:
    """A traceparent for a new span: child of `parent` if it is valid W3C, else a new trace."""
    match = _TRACEPARENT.match(parent.strip().lower()) if parent else None
    trace_id, flags = (match.group(1), match.group(3)) if match and match.group(1) != "0" * 32 else (os.urandom(16).hex(), "01")
    return f"00-{trace_id}-{os.urandom(8).hex()}-{flags}"


def predictor_headers() -> dict[str, str]:
    batch = current_batch.get()
    if batch is None:
        return {}
    ids = [m.request_id for m in batch.members if m.request_id]
    parent = next((m.traceparent for m in batch.members if m.traceparent), "")
    headers = {
        "x-request-id": ids[0] if len(batch.members) == 1 and ids else batch.batch_id,
        "traceparent": batch.traceparent or continue_trace(parent),
    }
    if ids:
        headers["x-batch-request-ids"] = ",".join(ids[:MAX_IDS])
    return headers
