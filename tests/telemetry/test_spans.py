"""OpenTelemetry traces (gateway/telemetry/spans.py and export.py; how tracing is turned on
is tests/telemetry/test_settings.py): a span per request continuing its client's trace, a span per
batch linked to every request it carries, a client span per predictor call whose context
is what the predictor receives; exported over OTLP gRPC and HTTP to a receiver speaking
the collector's protocol; sampling follows the parent; a collector that is down costs
dropped, counted spans, never an answer."""
from __future__ import annotations

import concurrent.futures
import contextlib
import signal
import socket
import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from gateway.config import parse as parse_config
from gateway.process.server import MIN_EXPORT_S
from tests.harness import http_json, running_gateway, scraped, wait_for
from tests.http_stub import JsonHandler, serving
from tests.processes import gateway as gateway_process
from tools.otlp_receiver import grpc_receiver, http_receiver
from tools.processes import free_port
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc

SIGNATURE = {"inputs": [{"name": "INPUT0", "datatype": "FP32"}], "outputs": [{"name": "OUTPUT0", "datatype": "FP32"}]}
SERVER, CLIENT = 2, 3  # opentelemetry.proto's SpanKind numbers


def parent(trace: str, span: str, sampled: bool = True) -> str:
    return f"00-{trace}-{span}-{'01' if sampled else '00'}"


# -- the spans of a batch -----------------------------------------------------------------

@contextlib.contextmanager
def held_v1_predictor() -> Iterator[tuple[str, list[dict], threading.Event]]:
    """A KServe v1 predictor that records each call's headers and holds every call until
    released: what arrives meanwhile queues behind it, into one batch."""
    seen: list[dict] = []
    release = threading.Event()

    class Handler(JsonHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.read_json()
            seen.append({k.lower(): v for k, v in self.headers.items()})
            release.wait(60)  # a bound only: the test releases it
            self.answer_json({"predictions": [[2 * x for x in row] for row in body["instances"]]})

    try:
        with serving(Handler) as url:
            yield url, seen, release
    finally:
        release.set()


def test_a_batch_of_http_and_grpc_requests_is_one_span_linked_to_each_request_span(tmp_path):
    """Set up by the standard variables alone (OTLP over gRPC), in a gateway process."""
    traces = {name: (f"{index:x}" * 32)[:32] for index, name in enumerate(("first", "http", "grpc"), start=1)}
    spans_of = {name: f"{index + 10:016x}" for index, name in enumerate(traces)}
    with grpc_receiver() as (endpoint, received), held_v1_predictor() as (url, seen, release):
        config = tmp_path / "gateway.toml"
        config.write_text(f'[[models]]\nname = "demo"\nbackend = "kserve"\napi = "v1"\nurl = "{url}"\n'
                          '[[models.inputs]]\nname = "INPUT0"\ndatatype = "FP32"\n'
                          '[[models.outputs]]\nname = "OUTPUT0"\ndatatype = "FP32"\n')
        env = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
               "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SERVICE_NAME": "gateway-under-test",
               "OTEL_BSP_SCHEDULE_DELAY": "100"}
        process = gateway_process(config, env=env)
        try:
            http_url, grpc_address = "http://" + process.fields["http"], process.fields["grpc"]

            def over_http(name: str):
                return http_json("POST", f"{http_url}/v1/models/demo:predict", {"instances": [[1.0]]},
                                 headers={"traceparent": parent(traces[name], spans_of[name]),
                                          "X-Request-Id": name})

            def over_grpc(name: str):
                with grpc.insecure_channel(grpc_address) as channel:
                    request = pb.ModelInferRequest(model_name="demo", id=name)
                    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1]).contents.fp32_contents.append(1)
                    return pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(
                        request, timeout=60, metadata=(("traceparent", parent(traces[name], spans_of[name])),))

            with concurrent.futures.ThreadPoolExecutor(3) as pool:
                try:
                    first = pool.submit(over_http, "first")
                    wait_for(lambda: len(seen) == 1, "the first request to be held at the predictor")
                    later = [pool.submit(over_http, "http"), pool.submit(over_grpc, "grpc")]
                    # Both queued behind it (one batch in flight at a time), so they leave as one batch.
                    wait_for(lambda: scraped(http_url, "gateway_queue_depth", "demo") == 2, "the HTTP and gRPC requests to queue")
                finally:
                    release.set()
                assert first.result()[0] == 200 and later[0].result()[0] == 200 and later[1].result().outputs
        finally:
            assert process.stop() == 0  # SIGTERM: the queued spans are exported before it exits
        wait_for(lambda: len(received.named("batch")) == 2, "both batch spans at the receiver")

    requests = {bytes(s.trace_id).hex(): s for s in received.named("") if s.kind == SERVER}
    assert set(requests) == set(traces.values())
    for name, trace in traces.items():
        span = requests[trace]
        assert bytes(span.parent_span_id).hex() == spans_of[name]  # the client's trace, continued
        assert [event.name for event in span.events] == ["queued", "batched"]
    resource = received.spans[0][0]
    assert resource["service.name"] == "gateway-under-test"

    batches = sorted(received.named("batch"), key=lambda s: s.start_time_unix_nano)
    merged = batches[1]
    linked = {bytes(link.span_id) for link in merged.links}
    assert linked == {bytes(requests[traces["http"]].span_id), bytes(requests[traces["grpc"]].span_id)}
    attributes = {a.key: a.value for a in merged.attributes}
    assert attributes["gateway.batch.rows"].int_value == 2 and attributes["gateway.batch.requests"].int_value == 2
    assert attributes["gateway.batch.departure"].string_value
    assert attributes["gateway.batch.predictor_calls"].int_value == 1
    batch_id = attributes["gateway.batch.id"].string_value
    for name in ("http", "grpc"):
        [batched] = [e for e in requests[traces[name]].events if e.name == "batched"]
        assert batched.attributes[0].value.string_value == batch_id
    # The predictor call: a client span under its batch, and the context the predictor got.
    calls = sorted((s for s in received.named("predictor") if s.kind == CLIENT), key=lambda s: s.start_time_unix_nano)
    assert [bytes(c.parent_span_id) for c in calls] == [bytes(b.span_id) for b in batches]
    assert seen[1]["traceparent"] == parent(bytes(calls[1].trace_id).hex(), bytes(calls[1].span_id).hex())
    assert seen[1]["x-batch-request-ids"].split(",") in (["http", "grpc"], ["grpc", "http"])


def test_over_otlp_http_sampling_follows_the_parent_and_a_ratio_samples_new_traces():
    """The `[tracing]` table alone (OTLP over HTTP): a ratio of 0 samples no new trace, but a
    client's sampled trace is followed, and its batch with it."""
    with http_receiver() as (endpoint, received):
        document = {"models": [{"name": "demo", "backend": "simulated"}],
                    "server": {"http_port": 0, "grpc_port": 0},
                    "tracing": {"enabled": True, "protocol": "http/protobuf", "endpoint": endpoint,
                                "sample_ratio": 0.0}}
        with running_gateway(parse_config(document)) as gw:
            url = f"{gw.http_url}/v1/models/demo:predict"
            traced = parent("ab" * 16, "cd" * 8)
            assert http_json("POST", url, {"instances": [[1]]}, headers={"traceparent": traced})[0] == 200
            assert http_json("POST", url, {"instances": [[2]]})[0] == 200  # a new trace, at ratio 0
            assert http_json("POST", url, {"instances": [[3]]},
                             headers={"traceparent": parent("ef" * 16, "cd" * 8, sampled=False)})[0] == 200
        wait_for(lambda: received.named("batch"), "a batch span at the receiver")
        assert {bytes(s.trace_id).hex() for _, s in received.spans} == {"ab" * 16}
        assert sorted(s.name.split()[0] for _, s in received.spans) == ["batch", "predictor", "v1"]


def test_a_ratio_samples_that_share_of_new_traces_and_their_batches_with_them():
    with http_receiver() as (endpoint, received):
        document = {"models": [{"name": "demo", "backend": "simulated", "simulated": {"call_ms": 0}}],
                    "server": {"http_port": 0, "grpc_port": 0},
                    "tracing": {"enabled": True, "endpoint": endpoint, "sample_ratio": 0.5}}
        with running_gateway(parse_config(document)) as gw:
            url = f"{gw.http_url}/v1/models/demo:predict"
            assert all(http_json("POST", url, {"instances": [[i]]})[0] == 200 for i in range(400))
        wait_for(lambda: received.named("batch"), "a batch span at the receiver")
        requests = [s for _, s in received.spans if s.kind == SERVER]
        batches = received.named("batch")
    assert 100 < len(requests) < 300, len(requests)  # 200 expected; 10 standard deviations either side
    assert {bytes(s.trace_id) for s in batches} <= {bytes(s.trace_id) for s in requests}  # under their requests


def test_a_collector_that_is_down_costs_dropped_counted_spans_never_an_answer(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")  # each failed export gives up after 1 s
    document = {"models": [{"name": "demo", "backend": "simulated", "simulated": {"call_ms": 1}}],
                "server": {"http_port": 0, "grpc_port": 0},
                "tracing": {"enabled": True, "protocol": "http/protobuf", "max_queue_size": 8,
                            "endpoint": f"http://127.0.0.1:{free_port()}"}}  # nothing listens there
    with running_gateway(parse_config(document)) as gw:
        url = f"{gw.http_url}/v1/models/demo:predict"
        statuses = [http_json("POST", url, {"instances": [[i]]}, headers={"traceparent": parent("ab" * 16, "cd" * 8)})[0]
                    for i in range(40)]
        assert statuses == [200] * 40
        counts = gw.gateway.telemetry.span_counts()
        exposition = gw.call(gw.gateway.service.metrics.exposition()).decode()
    assert counts["dropped"] > 0 and counts["exported"] == 0, counts
    assert 'gateway_trace_spans_total{outcome="dropped"}' in exposition


@contextlib.contextmanager
def black_hole() -> Iterator[str]:
    """A collector that accepts connections and never answers: an endpoint address."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for connection in [*held, listener]:
            connection.close()


@pytest.mark.parametrize("collector", ["down", "black hole"])
def test_a_collector_that_is_down_or_never_answers_does_not_hold_the_exit(tmp_path, collector):
    """SIGTERM with spans queued for a collector that refuses connections, or accepts and
    never answers: the gateway exits within its grace and a moment, not after the
    exporter's timeouts and retries (24 to 30 s with a 1 s grace, before)."""
    config = tmp_path / "gateway.toml"
    config.write_text('[server]\ngrace_s = 1.0\n[[models]]\nname = "demo"\nbackend = "simulated"\n')
    with contextlib.ExitStack() as stack:
        endpoint = f"http://127.0.0.1:{free_port()}" if collector == "down" else stack.enter_context(black_hole())
        env = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
               "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "60000"}  # all queued at the stop
        process = stack.enter_context(gateway_process(config, env=env))
        url = f"http://{process.fields['http']}/v1/models/demo:predict"
        for index in range(20):
            assert http_json("POST", url, {"instances": [[index]]},
                             headers={"traceparent": parent("ab" * 16, "cd" * 8)})[0] == 200
        stopped = time.monotonic()
        process.signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        assert time.monotonic() - stopped < 1.0 + MIN_EXPORT_S + 2.0  # grace, the export's moment, the exit


def test_a_workers_request_spans_have_their_batched_event_too(tmp_path):
    """Under --workers 2, requests on many connections (so on both processes): every request
    span has `queued` then `batched`, the latter timed when its batch left the batcher."""
    config = tmp_path / "gateway.toml"
    config.write_text('[[models]]\nname = "demo"\nbackend = "simulated"\n')
    traces = [f"{index + 1:032x}" for index in range(16)]
    with grpc_receiver() as (endpoint, received):
        env = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
               "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
        process = gateway_process(config, env=env, workers=2)
        try:
            url = f"http://{process.fields['http']}/v1/models/demo:predict"
            for trace in traces:  # each on a connection of its own: the kernel spreads them
                assert http_json("POST", url, {"instances": [[1.0]]}, headers={"traceparent": parent(trace, "ab" * 8)})[0] == 200
        finally:
            assert process.stop() == 0
        wait_for(lambda: len([s for s in received.named("") if s.kind == SERVER]) == len(traces), "every request span")
    requests = [s for s in received.named("") if s.kind == SERVER]
    for span in requests:
        assert [event.name for event in span.events] == ["queued", "batched"], bytes(span.trace_id).hex()
        queued, batched = span.events
        assert span.start_time_unix_nano <= queued.time_unix_nano <= batched.time_unix_nano <= span.end_time_unix_nano
