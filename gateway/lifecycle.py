"""One inference request from its arrival to its answer: `Call`.

Every front end opens a Call when an inference request arrives (`InferenceService.open`),
before anything about it is checked, and closes it once when the answer or the error goes
out. The Call carries what each concern attached to a request needs, as the front end's
protocol gives it: the front end (the `protocol` label: the API the client spoke), the
model's name, when it arrived, the deadline and priority its transport carried (an HTTP
header, the gRPC deadline and metadata), its request id and trace context, and the tenant
whose key it came with (`gateway.access.front_door`: the name, never the key).
`batch_request` is the one place a request's deadline and priority are settled, with what
the request itself says (an OIP `timeout` or `priority` parameter): the tightest deadline
wins, counted from the arrival; the request's own priority wins over its transport's.
`close(status)` hands it back to whoever opened it, once, whatever became of the
request (answered, refused for its token or its input, shed, timed out, or its client
gone): that is where it is counted and timed, and where its trace span ends.

Statuses are HTTP's whatever the protocol (`wire.errors` pairs each gRPC code with one;
499 when the client left). It knows no transport, no codec, no predictor and no metric.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gateway.batching.request import NO_PARAMETERS, BatchRequest
from wire.tensors import Tensor
from wire.tracing import NO_CONTEXT, ClientContext


@dataclass(slots=True, eq=False)
class Call:
    front_end: str
    model: str
    on_close: Callable[[Call], None] | None = None
    arrived_s: float = field(default_factory=time.monotonic)
    timeout_s: float | None = None   # the tightest deadline its transport gave, from its arrival
    priority: int = 0                # its transport's: 1 is the highest level, 0 the model's default
    client: ClientContext = NO_CONTEXT
    tenant: str = ""                 # the tenant whose key it presented ("": no tenants declared)
    status: int | None = None        # set by close
    span: Any = None                 # its trace span, when the gateway traces (gateway.telemetry)

    def tighten(self, timeout_s: float | None) -> None:
        """A deadline the client gave another way; the tightest one stands."""
        if timeout_s is not None and (self.timeout_s is None or timeout_s < self.timeout_s):
            self.timeout_s = timeout_s

    def batch_request(self, model: str, inputs: list[Tensor], lengths: np.ndarray | None = None, *,
                      client: ClientContext | None = None, parameters: Mapping[str, Any] = NO_PARAMETERS,
                      timeout_s: float | None = None, priority: int | None = None, form: str = "") -> BatchRequest:
        """The request as the scheduler takes it: its deadline the tightest of its
        transport's and its own `timeout_s`, counted from its arrival; its own `priority`
        (an OIP parameter) over its transport's; its tenant's name. `client`: the context to
        carry (the call's own, unless tracing gave it a span of its own)."""
        self.tighten(timeout_s)
        if priority is not None:
            self.priority = priority
        deadline = None if self.timeout_s is None else self.arrived_s + self.timeout_s
        return BatchRequest(model, inputs, self.arrived_s, deadline, self.priority,
                            self.client if client is None else client, parameters, lengths, form, tenant=self.tenant)

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.arrived_s

    def close(self, status: int) -> None:
        """The request's outcome, once: a second close (an error path after an answer) is
        ignored, so nothing is counted twice."""
        if self.status is not None:
            return
        self.status = status
        if self.on_close is not None:
            self.on_close(self)
