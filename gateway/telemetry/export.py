"""How finished spans leave: for each exporter asked for (OTLP over gRPC or HTTP, or the
console), a batch span processor with a bounded queue, so that a slow or absent collector
costs dropped spans, never a held request or exit; and `SpanCounts`, what was exported,
what failed (the collector refused or could not be reached) and what was dropped (the
queue was full), which /metrics reports. The drop count reads the SDK's processor queue
(pinned: opentelemetry-sdk 1.45).

It must not know which spans are made, or of what: no Call, no batch, no request.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.telemetry.settings import TracingSettings


@dataclass(slots=True)
class SpanCounts:
    exported: int = 0
    failed: int = 0
    dropped: int = 0


def counting_processor(settings: TracingSettings, exporter: str, counts: SpanCounts) -> Any:
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
