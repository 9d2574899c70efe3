"""tools.loadgen.cli: defaults and durations, and `python -m tools.loadgen` as users run it
against the simulated predictor (report, JSON, gRPC, refusals)."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.tools.loadgen.support import V1, oip
from tools import loadgen
from tools.processes import ROOT


def test_a_run_without_n_or_z_is_bounded_and_durations_parse():
    # The command line bounds a run without -n or -z by hey's default of 200 requests.
    args = loadgen.build_parser().parse_args(["http://127.0.0.1:1/"])
    assert loadgen.config_from_args(args).requests == loadgen.DEFAULT_REQUESTS
    assert loadgen.parse_duration("1.5s") == 1.5 and loadgen.parse_duration("250ms") == 0.25
    assert loadgen.parse_duration("2m") == 120 and loadgen.parse_duration("3") == 3


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
