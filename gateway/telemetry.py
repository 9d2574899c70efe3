"""OpenTelemetry traces of requests and batches (optional: `pip install '.[otel]'`).

Spans, as OpenTelemetry prescribes for batching (a span has one parent, so a batch that
serves many requests *links* to them):

* **request** (SERVER): one per inference request, from its arrival to its answer; it
  continues the client's `traceparent`. Events: `queued` (admitted to its model's queue)
  and `batched` (its batch left, with the batch id, timed when it left; added when the
  answer comes back, so a worker's request has it too, and a request its batch failed
  does not); attributes: model, front end,
  priority, request id and the HTTP status of the outcome (gRPC codes are paired with one).
  A request the sampler leaves out records nothing and passes its client's context on.
* **batch** (INTERNAL): one per batch with a sampled request, linked to every sampled
  request span it carries and a child of the first (so a trace viewer shows it under a
  request); attributes: model,
  batch id, rows, requests, why it left, padded and real elements, predictor calls (more
  than one: bisected), failed requests.
* **predictor** (CLIENT): one per predictor call, a child of its batch; its context is the
  `traceparent` sent to the predictor, so the predictor's own spans hang under it.

Turning it on: the standard variables alone are enough, as in any instrumented program
(`OTEL_TRACES_EXPORTER`, `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_PROTOCOL`,
`OTEL_TRACES_SAMPLER[_ARG]`, `OTEL_SERVICE_NAME`, `OTEL_BSP_*`, `OTEL_SDK_DISABLED`); a
`[tracing]` key wins over its variable. Spans leave through a batch processor with a
bounded queue: when the collector is slow or down, new spans are dropped and counted
(`gateway_trace_spans_total{outcome="dropped"}`), never held or waited for. Off, nothing
is imported and each request and batch costs a method call.

It knows the request's Call, the batch observer seam and W3C trace context; no front end,
no codec and no predictor protocol.
"""
from __future__ import annotations

import contextlib
import os
import random
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.batching.observer import NO_OBSERVATION, NO_OBSERVER, BatchObservation, BatchObserver
from gateway.batching.request import BatchResult
from gateway.config import OTLP_PROTOCOLS, TRACES_EXPORTERS, ConfigError, TracingConfig
from gateway.lifecycle import Call
from wire.tracing import ClientContext

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
MAX_LINKS = 128  # OpenTelemetry's default span link limit; a larger batch links its first 128 requests


@dataclass(frozen=True, slots=True)
class TracingSettings:
    """What tracing runs with, once `[tracing]` and the environment are resolved."""
    exporters: tuple[str, ...]  # otlp | console, each (OTEL_TRACES_EXPORTER may list several)
    protocol: str         # grpc | http/protobuf (otlp)
    endpoint: str         # "" : the exporter's own default or its variables
    sample_ratio: float | None
    service_name: str
    max_queue_size: int   # 0: OTEL_BSP_MAX_QUEUE_SIZE or the SDK's 2048


def resolve(config: TracingConfig, environ: Mapping[str, str] = os.environ) -> TracingSettings | None:
    """The tracing to run, or None for none. A ConfigError (exit 2) when tracing is asked
    for but the `otel` extra is not installed, or a variable has a value we cannot use."""
    def env(*names: str) -> str:
        return next((environ[name].strip() for name in names if environ.get(name, "").strip()), "")

    # The specification's list form: "otlp,console" runs both; "none" alone turns tracing off.
    listed = config.exporter or env("OTEL_TRACES_EXPORTER").lower()
    exporters = tuple(dict.fromkeys(name.strip() for name in listed.split(",") if name.strip()))
    if config.enabled is False or env("OTEL_SDK_DISABLED").lower() == "true":
        return None
    endpoint = config.endpoint or env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
    if not (config.enabled or (exporters and exporters != ("none",)) or endpoint):
        return None
    exporters = exporters or ("otlp",)
    if exporters == ("none",):
        return None
    unknown = [name for name in exporters if name not in TRACES_EXPORTERS or name == "none"]
    if unknown:
        raise ConfigError("OTEL_TRACES_EXPORTER", f"must list {', '.join(e for e in TRACES_EXPORTERS if e != 'none')} "
                                                  f"(or be none); got {listed!r}")
    protocol = config.protocol or env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL").lower()
    protocol = protocol or "http/protobuf"  # the specification's default
    if protocol not in OTLP_PROTOCOLS:
        raise ConfigError("OTEL_EXPORTER_OTLP_PROTOCOL", f"must be one of {', '.join(OTLP_PROTOCOLS)}; "
                                                         f"got {protocol!r}")
    _check_variables(env, config.max_queue_size)
    try:
        import opentelemetry.sdk.trace  # noqa: F401
        if "otlp" in exporters and protocol == "grpc":
            import opentelemetry.exporter.otlp.proto.grpc.trace_exporter  # noqa: F401
        elif "otlp" in exporters:
            import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401
    except ImportError:
        raise ConfigError("tracing", "tracing is on, but OpenTelemetry is not installed: pip install "
                                     "'batching-gateway[otel]'") from None
    ratio = config.sample_ratio if config.sample_ratio is not None else _parent_based_ratio(env)
    return TracingSettings(exporters, protocol, endpoint, ratio,
                           config.service_name or env("OTEL_SERVICE_NAME") or "batching-gateway",
                           config.max_queue_size)


# The samplers the specification names for OTEL_TRACES_SAMPLER, and what each batch span
# processor and exporter variable may hold: an unusable value is a config error here (exit
# 2, and in check-config), where the SDK would raise a traceback or warn and go on with
# its default.
SAMPLERS = ("always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off",
            "parentbased_traceidratio", "parentbased_jaeger_remote", "jaeger_remote", "xray")
BSP_MINIMUMS = {"OTEL_BSP_SCHEDULE_DELAY": 0, "OTEL_BSP_EXPORT_TIMEOUT": 0, "OTEL_BSP_MAX_QUEUE_SIZE": 1,
                "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": 1}
COMPRESSIONS = ("gzip", "deflate", "none")


def _parent_based_ratio(env: Callable[..., str]) -> float | None:
    """The ratio of OTEL_TRACES_SAMPLER when it is parent-based (the default,
    parentbased_always_on, is 1.0); None for a sampler the SDK must read itself."""
    sampler = env("OTEL_TRACES_SAMPLER").lower() or "parentbased_always_on"
    if sampler not in SAMPLERS:
        raise ConfigError("OTEL_TRACES_SAMPLER", f"must be one of {', '.join(SAMPLERS)}; got {sampler!r}")
    ratio = 1.0
    if sampler.endswith("traceidratio"):  # its argument is checked for the SDK's sampler too
        argument = env("OTEL_TRACES_SAMPLER_ARG") or "1.0"
        try:
            ratio = float(argument)
        except ValueError:
            raise ConfigError("OTEL_TRACES_SAMPLER_ARG", f"must be a number from 0 to 1, got {argument!r}") from None
        if not 0.0 <= ratio <= 1.0:  # NaN too
            raise ConfigError("OTEL_TRACES_SAMPLER_ARG", f"must be a number from 0 to 1, got {argument!r}")
    if sampler == "parentbased_always_on":
        return 1.0
    if sampler == "parentbased_always_off":
        return 0.0
    if sampler == "parentbased_traceidratio":
        return ratio
    return None


def _check_variables(env: Callable[..., str], max_queue_size: int) -> None:
    """The batch span processor's and the exporter's variables, as the SDK would read them."""
    values = {}
    for name, minimum in BSP_MINIMUMS.items():
        value = env(name)
        if value and (not value.isdigit() or int(value) < minimum):
            raise ConfigError(name, f"must be an integer >= {minimum} (milliseconds or spans), got {value!r}")
        values[name] = int(value) if value else None
    queue = values["OTEL_BSP_MAX_QUEUE_SIZE"] or 2048
    batch = values["OTEL_BSP_MAX_EXPORT_BATCH_SIZE"] or 512
    if not max_queue_size and batch > queue:  # [tracing] max_queue_size sets both itself
        raise ConfigError("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", f"must be <= OTEL_BSP_MAX_QUEUE_SIZE ({queue}), got {batch}")
    compression = env("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION").lower()
    if compression and compression not in COMPRESSIONS:
        raise ConfigError("OTEL_EXPORTER_OTLP_COMPRESSION", f"must be one of {', '.join(COMPRESSIONS)}; "
                                                            f"got {compression!r}")


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
        self._counts = _Counts()
        self._processors = [_processor(settings, exporter, self._counts) for exporter in settings.exporters]
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


@dataclass(slots=True)
class _Counts:
    exported: int = 0
    failed: int = 0
    dropped: int = 0


def _processor(settings: TracingSettings, exporter: str, counts: _Counts) -> Any:
    """A batch span processor whose exporter counts what it delivered, and which counts
    what it drops: the SDK's drops the oldest queued span when its queue is full."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class CountingExporter(SpanExporter):
        def __init__(self, inner: SpanExporter) -> None:
            self.inner = inner

        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            try:
                result = self.inner.export(spans)
            except Exception:  # noqa: BLE001 - an exporter that raises has failed, like one that says so
                result = SpanExportResult.FAILURE
            if result is SpanExportResult.SUCCESS:
                counts.exported += len(spans)
            else:
                counts.failed += len(spans)
            return result

        def shutdown(self) -> None:
            self.inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return bool(self.inner.force_flush(timeout_millis))

    class CountingProcessor(BatchSpanProcessor):
        def shutdown_within(self, timeout_s: float) -> None:
            """Export what is queued within `timeout_s`, then close the exporter, which ends
            an export still waiting on the collector and its retries."""
            self._batch_processor.shutdown(timeout_millis=int(max(timeout_s, 0.0) * 1000))

        def on_end(self, span: Any) -> None:
            # The SDK's processor keeps its queue in a bounded deque (pinned: opentelemetry-sdk 1.45).
            queue = getattr(getattr(self, "_batch_processor", None), "_queue", None)
            if (span.context is not None and span.context.trace_flags.sampled and queue is not None
                    and queue.maxlen is not None and len(queue) >= queue.maxlen):
                counts.dropped += 1
            super().on_end(span)

    queue = settings.max_queue_size or None
    return CountingProcessor(CountingExporter(_exporter(settings, exporter)), max_queue_size=queue,
                             max_export_batch_size=min(queue, 512) if queue else None)  # the SDK wants batch <= queue


def _exporter(settings: TracingSettings, exporter: str) -> Any:
    if exporter == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter
        return ConsoleSpanExporter()
    if settings.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
        return GrpcExporter(endpoint=settings.endpoint or None)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
    endpoint = settings.endpoint
    if endpoint and not endpoint.rstrip("/").endswith("/v1/traces"):
        endpoint = endpoint.rstrip("/") + "/v1/traces"  # a base address, as OTEL_EXPORTER_OTLP_ENDPOINT is
    return HttpExporter(endpoint=endpoint or None)
