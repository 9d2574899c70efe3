"""An OTLP trace receiver, for the tests and the `tracing` bench scenario: the collector's
own protocol (the opentelemetry-proto messages), over gRPC (TraceService/Export) and over
HTTP (POST /v1/traces, protobuf), keeping every span it is sent (or, `keep=False`, only
counting them). It knows nothing of the gateway."""
from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2


@dataclass
class Received:
    """What a receiver was sent: each span with its resource's attributes."""
    spans: list[tuple[dict[str, str], trace_pb2.Span]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    keep: bool = True
    count: int = 0

    def add(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        with self.lock:
            for resource_spans in request.resource_spans:
                if not self.keep:
                    self.count += sum(len(scope.spans) for scope in resource_spans.scope_spans)
                    continue
                resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    self.spans.extend((resource, span) for span in scope_spans.spans)

    def named(self, prefix: str) -> list[trace_pb2.Span]:
        with self.lock:
            return [span for _, span in self.spans if span.name.startswith(prefix)]


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, received: Received) -> None:
        self.received = received

    def Export(self, request, context):  # noqa: N802 - the protocol's name
        self.received.add(request)
        return trace_service_pb2.ExportTraceServiceResponse()


@contextlib.contextmanager
def grpc_receiver(keep: bool = True) -> Iterator[tuple[str, Received]]:
    """(its address as OTEL_EXPORTER_OTLP_ENDPOINT wants it, what it received)."""
    received = Received(keep=keep)
    server = grpc.server(futures.ThreadPoolExecutor(2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceService(received), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}", received
    finally:
        server.stop(0)


@contextlib.contextmanager
def http_receiver() -> Iterator[tuple[str, Received]]:
    """(its base address, what it received at /v1/traces)."""
    received = Received()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
                self.send_error(404)
                return
            request = trace_service_pb2.ExportTraceServiceRequest()
            request.ParseFromString(body)
            received.add(request)
            answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
