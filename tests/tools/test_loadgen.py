"""tools.loadgen against real local servers: counts, bounds, statuses, stats, JSON, gRPC,
open loop, several processes. Nothing here asserts on speed: only on counts and shapes."""
from __future__ import annotations

import asyncio
import json
import math
import socket
import subprocess
import sys

import pytest

from tests.tools.conftest import ROOT
from tools import loadgen
from tools.loadgen import Config, Result, histogram, percentile, percentiles

HANG_GUARD_S = 60  # a safety net against a hung run, not a speed assertion
V1 = b'{"instances": [[1, 2, 3, 4]]}'
ENGINES = ["fast", "aiohttp"]


def oip(model: str = "demo") -> bytes:
    return json.dumps({"model_name": model, "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4],
                                                        "contents": {"fp32_contents": [1, 2, 3, 4]}}]}).encode()


async def run(**kwargs) -> Result:
    return await asyncio.wait_for(loadgen.run(Config(**kwargs)), HANG_GUARD_S)


# -- statistics ----------------------------------------------------------------------------------


def test_percentiles_by_nearest_rank_on_known_inputs():
    values = list(range(1, 101))  # 1..100
    got = percentiles(reversed(values))  # order of input does not matter
    assert got == {"10": 10, "25": 25, "50": 50, "75": 75, "90": 90, "95": 95, "99": 99, "99.9": 100}
    thousand = list(range(1, 1001))
    assert percentile(thousand, 99.9) == 999
    assert percentile(thousand, 50) == 500
    assert percentile([7.0], 10) == 7.0 and percentile([7.0], 99.9) == 7.0
    assert percentile([1, 2, 3, 4], 50) == 2 and percentile([1, 2, 3, 4], 75) == 3
    assert math.isnan(percentile([], 50))


def test_histogram_marks_span_fastest_to_slowest_and_count_everything():
    values = [0.0, 0.1, 0.25, 0.5, 0.99, 1.0]
    bars = histogram(values, buckets=10)
    assert len(bars) == 11
    assert bars[0][0] == 0.0 and bars[-1][0] == 1.0
    assert sum(count for _, count in bars) == len(values)
    counts = dict((round(mark, 2), count) for mark, count in bars)
    assert counts[0.0] == 1 and counts[0.1] == 1 and counts[0.3] == 1 and counts[0.5] == 1 and counts[1.0] == 2
    assert histogram([0.2, 0.2]) == [(0.2, 2)]
    assert histogram([]) == []


def test_result_summary_and_merge():
    config = Config(target="http://127.0.0.1:1/", requests=4)
    a, b = Result(config, elapsed_s=2.0), Result(config, elapsed_s=1.0)
    a.latencies.extend([0.01, 0.02, 0.03])
    a.statuses = {"200": 2, "404": 1}
    a.errors = {"HTTP 404: nope": 1}
    a.sent = 3
    b.latencies.extend([0.04])
    b.statuses = {"200": 1}
    b.transport_errors, b.sent = 1, 2
    b.errors = {"connection refused": 1}
    merged = Result.merge(config, [a, b])
    assert merged.sent == 5 and merged.answered == 4 and merged.finished == 5 and merged.ok == 3
    assert merged.statuses == {"200": 3, "404": 1}
    assert merged.errors == {"HTTP 404: nope": 1, "connection refused": 1}
    assert merged.elapsed_s == 2.0 and merged.rps == 2.5
    assert merged.percentiles_ms()["50"] == pytest.approx(20.0)
    assert merged.summary()["fastest_ms"] == pytest.approx(10.0) and merged.summary()["slowest_ms"] == pytest.approx(40.0)
    wire = Result.from_wire(config, merged.to_wire())
    assert list(wire.latencies) == list(merged.latencies) and wire.statuses == merged.statuses


def test_runs_are_always_bounded_and_configs_validated():
    with pytest.raises(ValueError, match="unbounded"):
        Config(target="http://127.0.0.1:1/").validate()
    with pytest.raises(ValueError, match="unbounded"):
        Config(target="http://127.0.0.1:1/", rate=10).validate()
    with pytest.raises(ValueError):
        Config(target="127.0.0.1:1", requests=1).validate()  # not a URL
    with pytest.raises(ValueError, match="--call"):
        Config(target="127.0.0.1:1", grpc=True, requests=1).validate()
    # The command line bounds a run without -n or -z by hey's default of 200 requests.
    args = loadgen.build_parser().parse_args(["http://127.0.0.1:1/"])
    assert loadgen.config_from_args(args).requests == loadgen.DEFAULT_REQUESTS
    assert loadgen.parse_duration("1.5s") == 1.5 and loadgen.parse_duration("250ms") == 0.25
    assert loadgen.parse_duration("2m") == 120 and loadgen.parse_duration("3") == 3


def test_split_shares_the_load_exactly():
    config = Config(target="http://127.0.0.1:1/", requests=101, concurrency=7, rate=30.0, seed=1)
    parts = config.split(3)
    assert sum(p.requests for p in parts) == 101
    assert sum(p.concurrency for p in parts) == 7
    assert sum(p.rate for p in parts) == pytest.approx(30.0)
    assert len({p.seed for p in parts}) == 3


# -- HTTP against a real server ------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
async def test_n_is_honoured_exactly(local_server, engine):
    result = await run(target=f"{local_server.url}/ok", requests=137, concurrency=8, engine=engine)
    assert local_server.seen.count == 137
    assert result.sent == 137 and result.finished == 137 and result.answered == 137
    assert result.statuses == {"200": 137} and result.ok == 137 and result.errors == {}
    assert result.unfinished == 0 and result.bytes_received == 137 * len(b'{"ok": true}')


async def test_n_smaller_than_c(local_server):
    result = await run(target=f"{local_server.url}/ok", requests=3, concurrency=50)
    assert local_server.seen.count == 3 and result.ok == 3


@pytest.mark.parametrize("engine", ENGINES)
async def test_z_bounds_the_run(local_server, engine):
    # /slow answers in 50 ms: 4 workers for 0.5 s can send at most 4 x (0.5 / 0.05 + 1) requests.
    result = await run(target=f"{local_server.url}/slow", duration=0.5, concurrency=4, engine=engine)
    assert result.elapsed_s == 0.5
    assert 1 <= result.sent <= 44
    assert result.sent == result.finished + result.unfinished
    assert result.unfinished <= 4
    assert result.statuses == {"200": result.answered}


@pytest.mark.parametrize("engine", ENGINES)
async def test_status_distribution_counts_error_statuses(local_server, engine):
    result = await run(target=f"{local_server.url}/flaky", requests=30, concurrency=1, engine=engine)
    assert result.statuses == {"200": 20, "500": 10}
    assert result.ok == 20
    assert result.errors == {'HTTP 500: {"error": "every third request fails"}': 10}

    missing = await run(target=f"{local_server.url}/no-such-path", requests=12, concurrency=3, engine=engine)
    assert missing.statuses == {"404": 12} and missing.ok == 0
    assert sum(missing.errors.values()) == 12 and all(k.startswith("HTTP 404") for k in missing.errors)
    assert missing.answered == 12  # answered, with a latency, though not ok


@pytest.mark.parametrize("engine", ENGINES)
async def test_transport_errors_are_counted_without_latencies(engine):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = await run(target=f"http://127.0.0.1:{port}/", requests=5, concurrency=2, engine=engine)
    assert result.sent == 5 and result.transport_errors == 5 and result.answered == 0
    assert result.statuses == {} and sum(result.errors.values()) == 5
    assert result.summary()["average_ms"] is None and result.percentiles_ms()["50"] is None
    assert "Error distribution" in result.format_report()


@pytest.mark.parametrize("engine", ENGINES)
async def test_method_headers_and_body_reach_the_server(local_server, engine):
    result = await run(target=f"{local_server.url}/echo", method="PUT", body=b"hello", requests=2, concurrency=1,
                       headers=(("X-Test", "yes"),), content_type="text/plain", engine=engine)
    assert result.statuses == {"200": 2}
    last = local_server.seen.last
    assert last["method"] == "PUT" and last["body"] == b"hello"
    assert last["headers"]["X-Test"] == "yes" and last["headers"]["Content-Type"] == "text/plain"
    # A body without -m means POST, like curl.
    await run(target=f"{local_server.url}/echo", body=V1, requests=1, concurrency=1, engine=engine)
    assert local_server.seen.last["method"] == "POST" and local_server.seen.last["body"] == V1


async def test_fast_engine_reads_chunked_and_connection_close_answers(local_server):
    chunked = await run(target=f"{local_server.url}/chunked", requests=20, concurrency=2)
    assert chunked.statuses == {"200": 20} and chunked.bytes_received == 20 * 15
    closing = await run(target=f"{local_server.url}/close", requests=20, concurrency=2)
    assert closing.statuses == {"200": 20} and closing.bytes_received == 20 * 3
    no_keepalive = await run(target=f"{local_server.url}/ok", requests=20, concurrency=2, keepalive=False)
    assert no_keepalive.statuses == {"200": 20} and local_server.seen.paths["/ok"] == 20


async def test_progress_bar_goes_to_stderr(local_server, capsys):
    await run(target=f"{local_server.url}/slow", requests=10, concurrency=1, progress=True)
    err = capsys.readouterr().err
    assert "10/10 done" in err and "100%" in err


# -- open loop -----------------------------------------------------------------------------------


@pytest.mark.parametrize("arrivals", ["poisson", "uniform"])
async def test_open_loop_sends_about_rate_times_duration(local_server, arrivals):
    result = await run(target=f"{local_server.url}/ok", rate=100, duration=1.0, arrivals=arrivals, seed=7)
    # 100/s for 1 s: about 100 arrivals (Poisson: within +-5 sigma).
    assert 50 <= result.sent + result.dropped <= 150
    assert local_server.seen.count == result.sent
    assert result.sent == result.finished + result.unfinished


async def test_open_loop_is_bounded_by_n_and_drops_when_too_many_are_in_flight(local_server):
    exact = await run(target=f"{local_server.url}/ok", rate=200, requests=25, arrivals="uniform")
    assert exact.sent == 25 and exact.ok == 25 and exact.dropped == 0
    # 50 arrivals at 500/s on a 50 ms endpoint with at most 2 in flight: most cannot be sent.
    crowded = await run(target=f"{local_server.url}/slow", rate=500, requests=50, concurrency=2, arrivals="uniform")
    assert crowded.dropped > 0
    assert crowded.sent + crowded.dropped == 50
    assert local_server.seen.paths["/slow"] == crowded.sent
    assert "Dropped" in crowded.format_report()


# -- gRPC and the command line against the simulated predictor ----------------------------------------


async def test_grpc_mode_against_the_simulated_predictor(predictor):
    call = "inference.GRPCInferenceService/ModelInfer"
    result = await run(target=predictor.grpc_address, grpc=True, call=call, body=oip(), requests=40, concurrency=4)
    assert result.statuses == {"OK": 40} and result.ok == 40 and result.bytes_received > 0
    wrong = await run(target=predictor.grpc_address, grpc=True, call=call, body=oip("nope"), requests=6,
                      concurrency=2, connections=2)
    assert wrong.statuses == {"NOT_FOUND": 6} and wrong.ok == 0
    assert list(wrong.errors) == ["NOT_FOUND: unknown model 'nope'"]
    live = await run(target=predictor.grpc_address, grpc=True, call="inference.GRPCInferenceService.ServerLive",
                     requests=3, concurrency=1)
    assert live.statuses == {"OK": 3}


def test_grpc_request_json_and_method_are_checked():
    path, payload = loadgen.grpc_payload("inference.GRPCInferenceService/ModelInfer", oip())
    assert path == "/inference.GRPCInferenceService/ModelInfer" and b"INPUT0" in payload
    with pytest.raises(ValueError, match="does not fit"):
        loadgen.grpc_payload("inference.GRPCInferenceService/ModelInfer", b'{"no_such_field": 1}')
    with pytest.raises(ValueError, match="no method"):
        loadgen.grpc_payload("inference.GRPCInferenceService/Nope", b"")
    with pytest.raises(ValueError, match="unknown gRPC service"):
        loadgen.grpc_payload("nope.Service/Call", b"")


def test_cli_writes_the_json_result(predictor, tmp_path):
    out = tmp_path / "result.json"
    body = tmp_path / "body.json"
    body.write_bytes(V1)
    completed = subprocess.run(
        [sys.executable, "-m", "tools.loadgen", "-n", "50", "-c", "5", "-D", str(body), "--json", str(out),
         f"{predictor.http_url}/v1/models/demo:predict"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    for heading in ("Summary:", "Requests/sec:", "Response time histogram:", "Latency distribution:",
                    "99.9% in", "Status code distribution:", "[200]\t50 responses"):
        assert heading in completed.stdout
    document = json.loads(out.read_text())
    assert set(document) >= {"config", "summary", "percentiles_ms", "histogram", "status_codes", "errors"}
    assert document["config"]["requests"] == 50 and document["config"]["method"] == "POST"
    assert document["config"]["body"] == V1.decode()
    assert list(document["percentiles_ms"]) == ["10", "25", "50", "75", "90", "95", "99", "99.9"]
    values = list(document["percentiles_ms"].values())
    assert values == sorted(values) and all(v > 0 for v in values)
    assert sum(bar["count"] for bar in document["histogram"]) == 50
    assert all(set(bar) == {"le_ms", "count"} for bar in document["histogram"])
    assert document["status_codes"] == {"200": 50} and document["errors"] == {}
    summary = document["summary"]
    for key in ("total_s", "slowest_ms", "fastest_ms", "average_ms", "rps", "sent", "ok", "unfinished"):
        assert key in summary
    assert summary["sent"] == 50 and summary["ok"] == 50
    assert summary["fastest_ms"] <= summary["average_ms"] <= summary["slowest_ms"]


def test_cli_grpc_and_refusals(predictor, tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "tools.loadgen", "--grpc", "--call", "inference.GRPCInferenceService/ModelInfer",
         "-n", "20", "-c", "2", "-d", oip().decode(), "--json", "-", predictor.grpc_address],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["status_codes"] == {"OK": 20}
    refused = subprocess.run([sys.executable, "-m", "tools.loadgen", "--grpc", "-n", "1", predictor.grpc_address],
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "--call" in refused.stderr


async def test_several_processes_merge_their_results(predictor):
    result = await run(target=f"{predictor.http_url}/v1/models/demo:predict", body=V1, requests=101,
                       concurrency=4, processes=2)
    assert result.processes == 2
    assert result.sent == 101 and result.statuses == {"200": 101} and result.answered == 101


async def test_live_counters_and_stopping_a_run_early(local_server):
    live = loadgen.Live()
    task = asyncio.get_running_loop().create_task(
        loadgen.run(Config(target=f"{local_server.url}/slow", requests=1000, concurrency=3), live))
    while live.finished < 6:
        await asyncio.sleep(0.01)
    assert live.inflight <= 3
    live.stop()
    result = await asyncio.wait_for(task, HANG_GUARD_S)
    assert 6 <= result.finished < 1000
    assert result.sent == result.finished + result.unfinished and result.unfinished <= 3


async def test_fast_engine_reports_a_malformed_answer_as_an_error():
    async def answer(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: lots\r\n\r\n")
        await writer.drain()
        await reader.read()  # until the client hangs up

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        result = await run(target=f"http://127.0.0.1:{port}/", requests=3, concurrency=1)
    finally:
        server.close()
    assert result.transport_errors == 3 and result.statuses == {}
    assert all("malformed HTTP response" in message for message in result.errors)
