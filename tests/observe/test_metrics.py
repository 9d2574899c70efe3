"""GET /metrics: Prometheus text whose counts match the traffic the test sent."""
from __future__ import annotations

import concurrent.futures
import contextlib

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import config_for, held_slot, http, http_json, running_gateway, wait_for
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc


def scrape(gw, token: str = "") -> dict[tuple[str, tuple], float]:
    status, headers, body = http("GET", f"{gw.http_url}/metrics",
                                 headers={"Authorization": f"Bearer {token}"} if token else None)
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def sample_reader(samples: dict[tuple[str, tuple], float]):
    """`value(name, **labels)`: one scraped sample, 0 when absent."""
    def value(name: str, **labels: str) -> float:
        return samples.get((name, tuple(sorted(labels.items()))), 0)
    return value


def test_metrics_count_the_traffic_sent():
    config = config_for({"name": "demo", "backend": "simulated", "simulated": {"call_ms": 20},
                         "batching": {"max_queue": 4, "max_inflight": 1}})
    with running_gateway(config) as gw, grpc.insecure_channel(gw.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        for i in range(10):
            assert http_json("POST", f"{gw.http_url}/v1/models/demo:predict", {"instances": [[i]]})[0] == 200
        for _ in range(3):
            assert http_json("POST", f"{gw.http_url}/v1/models/demo:predict", {"instances": []})[0] == 400
        assert http_json("POST", f"{gw.http_url}/v2/models/demo/infer", {"inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1]}]})[0] == 200
        assert http_json("POST", f"{gw.http_url}/v1/models/absent:predict", {"instances": [[1]]})[0] == 404
        request = pb.ModelInferRequest(model_name="demo")
        request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1]).contents.fp32_contents.append(1)
        for _ in range(5):
            stub.ModelInfer(request, timeout=10)
        bad = pb.ModelInferRequest(model_name="demo")
        for _ in range(2):
            with contextlib.suppress(grpc.RpcError):
                stub.ModelInfer(bad, timeout=10)
        # Overload: 40 concurrent rows into a queue of 4 while the predictor's one slot is
        # held: 4 wait and are answered once it is released, 36 are refused at once.
        def predict(i: int) -> int:
            return http_json("POST", f"{gw.http_url}/v1/models/demo:predict", {"instances": [[i]]})[0]

        with held_slot(gw, "demo") as (release, batches), concurrent.futures.ThreadPoolExecutor(41) as pool:
            blocker = pool.submit(predict, -1)
            wait_for(lambda: len(batches) == 1, "the blocker's batch to reach the gate")
            overload = [pool.submit(predict, i) for i in range(40)]
            wait_for(lambda: sum(f.done() for f in overload) == 36, "36 of the 40 to be refused")
            release.set()
            codes = [f.result() for f in overload]
            assert blocker.result() == 200
        refused = codes.count(429)
        assert (refused, codes.count(200)) == (36, 4)
        answered_rows = 16 + 1 + 4  # before the overload (10 v1, 1 OIP, 5 gRPC), the blocker, the 4 queued

        value = sample_reader(scrape(gw))

        assert value("gateway_requests_total", model="demo", protocol="v1", code="200") == 10 + 1 + 4
        assert value("gateway_requests_total", model="demo", protocol="v1", code="400") == 3
        assert value("gateway_requests_total", model="demo", protocol="v1", code="429") == refused
        assert value("gateway_requests_total", model="unknown", protocol="v1", code="404") == 1
        assert value("gateway_requests_total", model="demo", protocol="oip_http", code="200") == 1
        assert value("gateway_requests_total", model="demo", protocol="oip_grpc", code="200") == 5
        assert value("gateway_requests_total", model="demo", protocol="oip_grpc", code="400") == 2
        assert value("gateway_refused_total", model="demo") == refused
        stats = gw.stats("demo")
        assert value("gateway_batches_total", model="demo") == stats.batches
        assert value("gateway_batch_size_count", model="demo") == stats.batches
        assert value("gateway_batch_size_sum", model="demo") == stats.instances == answered_rows
        assert value("gateway_predictor_latency_seconds_count", model="demo") == stats.batches
        assert value("gateway_queue_wait_seconds_count", model="demo") == answered_rows
        assert value("gateway_queue_depth", model="demo") == 0
        assert value("gateway_batches_in_flight", model="demo") == 0
        assert value("gateway_timeouts_total", model="demo") == 0
        assert value("gateway_answered_total", model="demo") == answered_rows
        assert value("gateway_batches_in_flight_limit", model="demo") == 1
        assert sum(value("gateway_batch_departures_total", model="demo", reason=reason)
                   for reason in ("full", "slot_free", "hold_expired", "window_expired", "deadline_sized")
                   ) == stats.batches


def test_every_front_end_counts_its_requests_with_one_status_vocabulary():
    # TorchServe-style clients are counted like the others, and gRPC outcomes are labelled
    # with the HTTP status their error pairs with, so one `code` vocabulary spans protocols.
    from wire.generated.torchserve import inference_pb2 as ts_pb
    from wire.generated.torchserve import inference_pb2_grpc as ts_grpc

    config = config_for({"name": "demo", "backend": "simulated", "simulated": {"call_ms": 1}})
    with running_gateway(config) as gw, grpc.insecure_channel(gw.grpc_address) as channel:
        assert http_json("POST", f"{gw.http_url}/predictions/demo", b"[1.0, 2.0]")[0] == 200
        assert http_json("POST", f"{gw.http_url}/predictions/demo", {"neither": 1})[0] == 400
        stub = ts_grpc.InferenceAPIsServiceStub(channel)
        stub.Predictions(ts_pb.PredictionsRequest(model_name="demo", input={"data": b"[1.0]"}), timeout=10)
        try:
            stub.Predictions(ts_pb.PredictionsRequest(model_name="absent", input={"data": b"[1.0]"}), timeout=10)
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.NOT_FOUND
        samples = scrape(gw)
        value = sample_reader(samples)

        assert value("gateway_requests_total", model="demo", protocol="torchserve_http", code="200") == 1
        assert value("gateway_requests_total", model="demo", protocol="torchserve_http", code="400") == 1
        assert value("gateway_requests_total", model="demo", protocol="torchserve_grpc", code="200") == 1
        assert value("gateway_requests_total", model="unknown", protocol="torchserve_grpc", code="404") == 1
        codes = {labels for (name, labels) in samples if name == "gateway_requests_total"}
        assert all(dict(labels)["code"].isdigit() for labels in codes)


def test_requests_refused_for_their_token_are_counted_on_every_front_end(monkeypatch):
    """A request is a Call from its arrival, so one refused before its handler or method
    runs (the bearer token) is counted, and timed, like any other: over HTTP and gRPC alike."""
    from wire.generated.inference import grpc_service_pb2 as pb
    from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc
    from wire.generated.torchserve import inference_pb2 as ts_pb
    from wire.generated.torchserve import inference_pb2_grpc as ts_grpc

    monkeypatch.setenv("GATEWAY_TOKEN", "s3cret")
    config = config_for({"name": "demo", "backend": "simulated", "simulated": {"call_ms": 1}},
                        server={"auth_token_env": "GATEWAY_TOKEN"})
    with running_gateway(config) as gw, grpc.insecure_channel(gw.grpc_address) as channel:
        assert http_json("POST", f"{gw.http_url}/v1/models/demo:predict", {"instances": [[1]]})[0] == 401
        request = pb.ModelInferRequest(model_name="demo")
        request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1]).contents.fp32_contents.append(1)
        refused = [
            lambda: pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=10),
            lambda: ts_grpc.InferenceAPIsServiceStub(channel).Predictions(
                ts_pb.PredictionsRequest(model_name="demo", input={"data": b"[1.0]"}), timeout=10),
            lambda: list(pb_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(iter([request]), timeout=10)),
        ]
        for attempt in refused:
            with pytest.raises(grpc.RpcError) as caught:
                attempt()
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        samples = scrape(gw, token="s3cret")
    value = sample_reader(samples)

    assert value("gateway_requests_total", model="demo", protocol="v1", code="401") == 1
    assert value("gateway_requests_total", model="demo", protocol="oip_grpc", code="401") == 1
    assert value("gateway_requests_total", model="demo", protocol="torchserve_grpc", code="401") == 1
    # A stream is refused before any of its messages is read: no model to name.
    assert value("gateway_requests_total", model="unknown", protocol="oip_grpc_stream", code="401") == 1
    for protocol in ("v1", "oip_grpc", "torchserve_grpc"):
        assert value("gateway_request_duration_seconds_count", model="demo", protocol=protocol) == 1


def test_every_request_is_timed_from_arrival_to_answer():
    config = config_for({"name": "demo", "backend": "simulated", "simulated": {"call_ms": 30}})
    with running_gateway(config) as gw:
        for _ in range(3):
            assert http_json("POST", f"{gw.http_url}/v1/models/demo:predict", {"instances": [[1]]})[0] == 200
        samples = scrape(gw)
    labels = (("model", "demo"), ("protocol", "v1"))
    assert samples[("gateway_request_duration_seconds_count", labels)] == 3
    assert samples[("gateway_request_duration_seconds_sum", labels)] >= 3 * 0.03  # the predictor's 30 ms each
    assert samples[("gateway_request_duration_seconds_bucket", tuple(sorted((*labels, ("le", "0.025")))))] == 0


def test_the_learned_latency_profile_is_exported():
    config = config_for({"name": "demo", "backend": "simulated", "simulated": {"call_ms": 5, "per_instance_ms": 1}})
    with running_gateway(config) as gw:
        for rows in (1, 4, 8, 1, 4, 8):
            instances = [[float(i)] for i in range(rows)]
            assert http_json("POST", f"{gw.http_url}/v1/models/demo:predict", {"instances": instances})[0] == 200
        text = http("GET", f"{gw.http_url}/metrics")[2].decode()
        learned = gw.stats("demo").profile.coefficients
    samples = {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.labels.get("model") == "demo"}
    # The gauges are the scheduler's fit, whatever delays this machine added to the calls
    # (how well the fit recovers a cost is tests/batching/test_profile.py's concern).
    intercept, per_row = learned
    assert samples["gateway_predictor_profile_intercept_seconds"] == pytest.approx(intercept)
    assert samples["gateway_predictor_profile_per_row_seconds"] == pytest.approx(per_row)
    assert intercept + 8 * per_row > 0.005  # it has learned from the calls: at least their fixed cost


def test_the_limits_and_replicas_in_rotation_are_exported():
    """What the alerts and the dashboard compare depth, batch sizes and replicas with:
    `max_queue`, `max_batch_size`, and how many of a model's replicas batches are sent to
    (a single predictor is one, always in rotation)."""
    from tests.processes import simulated_predictor
    from tools.processes import free_port

    live = simulated_predictor("--call-ms", "1")
    try:
        dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: its first batch takes it out
        pooled = {"name": "pooled", "backend": "kserve", "api": "v1", "backend_model": "demo",
                  "inputs": [{"name": "INPUT0", "datatype": "FP32"}], "outputs": [{"name": "OUTPUT0", "datatype": "FP32"}],
                  "url": [dead, f"http://127.0.0.1:{live.fields['http']}"]}
        single = {"name": "single", "backend": "simulated", "batching": {"max_queue": 7, "max_batch_size": 5}}
        with running_gateway(config_for(pooled, single)) as gw:
            value = sample_reader(scrape(gw))
            assert value("gateway_replicas", model="pooled") == value("gateway_replicas_in_rotation", model="pooled") == 2
            # The dead replica is tried first (no batch in flight anywhere), taken out, and the batch retried.
            assert http_json("POST", f"{gw.http_url}/v1/models/pooled:predict", {"instances": [[1]]})[0] == 200
            value = sample_reader(scrape(gw))
    finally:
        live.stop()
    assert value("gateway_replicas", model="pooled") == 2
    assert value("gateway_replicas_in_rotation", model="pooled") == 1
    assert value("gateway_replicas", model="single") == value("gateway_replicas_in_rotation", model="single") == 1
    assert value("gateway_queue_limit", model="single") == 7
    assert value("gateway_queue_limit", model="pooled") == 4096  # the default max_queue
    assert value("gateway_batch_size_limit", model="single") == 5
