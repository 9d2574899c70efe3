"""Triton's perf_analyzer, unmodified (tools/client_tools.py installs it), against the
gateway as Triton users run it: HTTP and gRPC, sync, --async and gRPC --streaming, by
concurrency and by request rate; in front of the simulated predictor and the real Triton.
Every run must finish cleanly (exit 0, its report printed), and the gateway's statistics,
which perf_analyzer reads and checks, must show no failed request."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.harness import http_json
from tests.processes import gateway
from tools.client_tools import perf_analyzer

RUN_TIMEOUT_S = 120  # perf_analyzer can wait forever on a broken stream: always bounded
# Short windows, and a looser stability test than the default 10%: CI machines are noisy.
QUICK = ["--measurement-interval", "500", "--stability-percentage", "50", "--max-trials", "10"]


@pytest.fixture(scope="module")
def tool():
    return perf_analyzer()


@pytest.fixture(scope="module", params=[1, 2], ids=["one-process", "workers-2"])
def simulated_gateway(tmp_path_factory, request):
    """One gateway process, and `--workers 2` (perf_analyzer reads the whole gateway's
    statistics whichever worker answers)."""
    config = tmp_path_factory.mktemp("perf") / "gateway.toml"
    config.write_text('[[models]]\nname = "demo"\nbackend = "simulated"\n')
    with gateway(config, workers=request.param) as process:
        yield process


def run(tool, *args: str) -> str:
    result = subprocess.run(tool.argv(*args), env=tool.env(), capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-2000:]}"
    assert "Inferences/Second vs. Client" in result.stdout, result.stdout[-3000:]
    return result.stdout


def failed_requests(http_url: str, model: str) -> int:
    return http_json("GET", f"{http_url}/v2/models/{model}/stats")[1]["model_stats"][0]["inference_stats"]["fail"]["count"]


@pytest.mark.parametrize("mode", [
    ["-i", "http"],
    ["-i", "http", "--async"],
    ["-i", "grpc"],
    ["-i", "grpc", "--async"],
    ["-i", "grpc", "--streaming"],
])
def test_by_concurrency_in_front_of_the_simulated_predictor(tool, simulated_gateway, mode):
    address = simulated_gateway.http_address if mode[1] == "http" else simulated_gateway.grpc_address
    before = failed_requests(simulated_gateway.http_url, "demo")
    report = run(tool, "-m", "demo", "-u", address, *mode, "--shape", "INPUT0:4",
                 "--concurrency-range", "1:8:7", *QUICK)
    assert "Concurrency: 8" in report
    assert failed_requests(simulated_gateway.http_url, "demo") == before


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_by_request_rate(tool, simulated_gateway, protocol):
    address = simulated_gateway.http_address if protocol == "http" else simulated_gateway.grpc_address
    report = run(tool, "-m", "demo", "-u", address, "-i", protocol, "--shape", "INPUT0:4",
                 "--request-rate-range", "50:200:150", *QUICK)
    assert "Request Rate: 200" in report


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_in_front_of_the_real_triton(tool, triton_server, tmp_path: Path, protocol):
    url = triton_server.http_url if protocol == "http" else triton_server.grpc_address
    config = tmp_path / "gateway.toml"
    config.write_text(f'[[models]]\nname = "double"\nbackend = "triton"\nprotocol = "{protocol}"\nurl = "{url}"\n')
    with gateway(config) as process:
        address = process.http_address if protocol == "http" else process.grpc_address
        report = run(tool, "-m", "double", "-u", address, "-i", protocol, "--shape", "INPUT0:4",
                     "--concurrency-range", "4", *QUICK)
        assert "Server:" in report  # its statistics were read and accepted
        assert failed_requests(process.http_url, "double") == 0
