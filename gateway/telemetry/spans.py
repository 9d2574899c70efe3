"""The spans of requests and batches (see the package): `Telemetry`, what the service and
the scheduler hold (`NO_TELEMETRY` when tracing is off, a method call each), and its
OpenTelemetry implementation, `start`ed from the resolved settings: a request's span opened
when it is queued and ended when its Call closes, a batch's span linked to its requests',
a predictor call's span whose context is the `traceparent` the predictor gets. W3C trace
context is parsed here (on the scheduler's loop, for every member of a batch), not by the
SDK's propagator.

It must not know how spans leave (`export.py`) or how the settings were read
(`settings.py`), nor a front end, a codec or a predictor protocol: a Call, the batch
observer seam (`gateway.batching.observer`) and client context are all it is handed.
"""
from __future__ import annotations

import contextlib
import random
import re
import time
from collections.abc import Iterator, Sequence
from typing import Any

from gateway.batching.observer import NO_OBSERVATION, NO_OBSERVER, BatchObservation, BatchObserver
from gateway.batching.request import BatchResult
from gateway.lifecycle import Call
from gateway.telemetry.export import SpanCounts, counting_processor
from gateway.telemetry.settings import TracingSettings
from wire.tracing import ClientContext

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
MAX_LINKS = 128  # OpenTelemetry's default span link limit; a larger batch links its first 128 requests


class Telemetry:
    """No tracing: what the service and the scheduler hold when tracing is off."""

    enabled = False
    batches: BatchObserver = NO_OBSERVER

    def request_started(self, call: Call) -> ClientContext:
        """The request of `call` is admitted to its queue; the client context it carries
        (to its batch, and from there to the predictor)."""
        return call.client

    def request_batched(self, call: Call, result: BatchResult) -> None:
        """`call`'s request came back from its batches (`result`): when each left is an
        event of its span, wherever the batch ran (this process, or the workers' batcher)."""

    def request_closed(self, call: Call) -> None:
        """`call` is closed (its status set)."""

    def span_counts(self) -> dict[str, int]:
        """Spans by outcome: exported, failed (the collector refused or could not be
        reached) and dropped (the export queue was full)."""
        return {}

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Export what is queued, then stop, within `timeout_s` (what is left of the stop's
        grace): a collector that is down or never answers must not hold the exit."""


NO_TELEMETRY = Telemetry()


def start(settings: TracingSettings | None) -> Telemetry:
    """The telemetry for these settings: off, or OpenTelemetry's tracer with its exporter."""
    return NO_TELEMETRY if settings is None else _OpenTelemetry(settings)


class _OpenTelemetry(Telemetry):
    enabled = True

    def __init__(self, settings: TracingSettings) -> None:
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider, sampling

        # With a ratio, `_sampled` decides before a span is made (the SDK's sampler would
        # make every span first); what it lets through, the SDK keeps. Without one (a
        # sampler only the SDK knows), OTEL_TRACES_SAMPLER, read by the SDK, decides.
        sampler = sampling.ParentBased(sampling.ALWAYS_ON) if settings.sample_ratio is not None else None
        self._ratio = settings.sample_ratio
        self._provider = TracerProvider(resource=Resource.create({SERVICE_NAME: settings.service_name}),
                                        sampler=sampler)
        self._counts = SpanCounts()
        self._processors = [counting_processor(settings, exporter, self._counts) for exporter in settings.exporters]
        for processor in self._processors:
            self._provider.add_span_processor(processor)
        self.tracer = self._provider.get_tracer("batching-gateway")
        self.batches = _BatchTracer(self)

    def request_started(self, call: Call) -> ClientContext:
        from opentelemetry import trace

        if not self._sampled(call.client.traceparent):
            return call.client  # not sampled: nothing to record, its context travels on unchanged
        span = self.tracer.start_span(f"{call.front_end} {call.model}", context=_context_from(call.client.traceparent),
                                      kind=trace.SpanKind.SERVER, start_time=time.time_ns() - int(call.elapsed_s * 1e9))
        if not span.is_recording():
            return call.client  # not sampled: nothing to record, its context travels on unchanged
        span.set_attributes(_request_attributes(call))
        span.add_event("queued")
        call.span = span
        context = span.get_span_context()
        return ClientContext(call.client.request_id, _traceparent(context))

    def request_batched(self, call: Call, result: BatchResult) -> None:
        if call.span is None:
            return
        for batch_id, departed in zip(result.batch_ids, result.departed_unix_ns, strict=False):
            call.span.add_event("batched", {"gateway.batch.id": batch_id}, timestamp=departed or None)

    def request_closed(self, call: Call) -> None:
        from opentelemetry import trace

        span = call.span
        if span is None:
            if call.status is None or call.status < 400 or not self._sampled(call.client.traceparent):
                return  # not sampled (an answered request that was would have its span)
            # Refused before its queue (its token, its input, its model): a span all the same.
            span = self.tracer.start_span(f"{call.front_end} {call.model}", context=_context_from(call.client.traceparent),
                                          kind=trace.SpanKind.SERVER,
                                          start_time=time.time_ns() - int(call.elapsed_s * 1e9),
                                          attributes=_request_attributes(call))
        status = call.status or 0
        span.set_attribute("http.response.status_code", status)
        if status >= 500:
            span.set_status(trace.StatusCode.ERROR, f"status {status}")
        span.end()

    def _sampled(self, traceparent: str) -> bool:
        """Whether a request's span is sampled, decided before any span is made (at a small
        ratio most are not, and making an unsampled span cost 7% of a request's CPU): a
        parent decides for its child, as ParentBased does; a new trace is kept at the
        ratio, as TraceIdRatioBased keeps a random trace id. For a sampler only the SDK
        knows (`_ratio` None), the SDK decides."""
        if self._ratio is None:
            return True
        context = _span_context(traceparent)
        if context is not None:
            return bool(context.trace_flags.sampled)
        return random.random() < self._ratio

    def span_counts(self) -> dict[str, int]:
        return {"exported": self._counts.exported, "failed": self._counts.failed, "dropped": self._counts.dropped}

    def shutdown(self, timeout_s: float = 30.0) -> None:
        ends = time.monotonic() + timeout_s
        for processor in self._processors:  # the provider's own shutdown would wait 30 s for each
            processor.shutdown_within(ends - time.monotonic())
        self._provider.shutdown()


class _BatchTracer:
    def __init__(self, telemetry: _OpenTelemetry) -> None:
        self._telemetry = telemetry

    def batch_left(self, model: str, batch_id: str, members: Sequence[ClientContext], rows: int, reason: str,
                   padded_elements: int, real_elements: int) -> BatchObservation:
        from opentelemetry import trace

        # Only sampled requests carry their own span's context (see request_started): a batch
        # none of whose requests is sampled is not traced either.
        contexts = [c for c in (_span_context(m.traceparent) for m in members) if c is not None and c.trace_flags.sampled]
        if not contexts:
            return NO_OBSERVATION
        parent = contexts[0]
        attributes: dict[str, Any] = {
            "gateway.model": model, "gateway.batch.id": batch_id, "gateway.batch.rows": rows,
            "gateway.batch.requests": len(members), "gateway.batch.departure": reason}
        if padded_elements:
            attributes.update({"gateway.batch.padded_elements": padded_elements,
                               "gateway.batch.real_elements": real_elements})
        span = self._telemetry.tracer.start_span(
            f"batch {model}", kind=trace.SpanKind.INTERNAL, attributes=attributes,
            context=trace.set_span_in_context(trace.NonRecordingSpan(parent)),
            links=[trace.Link(c) for c in contexts[:MAX_LINKS]])
        return _BatchSpan(self._telemetry, span, model)


class _BatchSpan:
    def __init__(self, telemetry: _OpenTelemetry, span: Any, model: str) -> None:
        self._telemetry = telemetry
        self._span = span
        self._model = model
        self._calls = 0

    @contextlib.contextmanager
    def predictor_call(self, rows: int) -> Iterator[str]:
        from opentelemetry import trace

        self._calls += 1
        with self._telemetry.tracer.start_as_current_span(
                f"predictor {self._model}", context=trace.set_span_in_context(self._span),
                kind=trace.SpanKind.CLIENT, attributes={"gateway.batch.rows": rows},
                record_exception=False, set_status_on_exception=True) as span:
            yield _traceparent(span.get_span_context())

    def ended(self, failed_requests: int) -> None:
        from opentelemetry import trace

        self._span.set_attribute("gateway.batch.predictor_calls", self._calls)
        self._span.set_attribute("gateway.batch.bisected", self._calls > 1)
        self._span.set_attribute("gateway.batch.failed_requests", failed_requests)
        if failed_requests:
            self._span.set_status(trace.StatusCode.ERROR, f"{failed_requests} of its requests failed")
        self._span.end()


def _request_attributes(call: Call) -> dict[str, Any]:
    attributes: dict[str, Any] = {"gateway.model": call.model, "gateway.front_end": call.front_end}
    if call.priority:
        attributes["gateway.priority"] = call.priority
    if call.tenant:
        attributes["gateway.tenant"] = call.tenant  # its name: never its key
    if call.client.request_id:
        attributes["gateway.request_id"] = call.client.request_id
    return attributes


def _traceparent(context: Any) -> str:
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def _span_context(traceparent: str) -> Any:
    """A W3C traceparent as a remote SpanContext (None if it is not valid). Parsed here, not
    by the SDK's propagator: a batch asks it of every member, on the scheduler's loop."""
    from opentelemetry import trace

    match = _TRACEPARENT.match(traceparent) if traceparent else None
    if match is None:
        return None
    trace_id, span_id = int(match.group(1), 16), int(match.group(2), 16)
    if not trace_id or not span_id:
        return None
    return trace.SpanContext(trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(int(match.group(3), 16)))


def _context_from(traceparent: str) -> Any:
    """The parent context of a span continuing `traceparent` (None: a new trace)."""
    from opentelemetry import trace

    context = _span_context(traceparent)
    return None if context is None else trace.set_span_in_context(trace.NonRecordingSpan(context))
