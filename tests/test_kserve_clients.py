"""KServe's own Python clients, unmodified, against the gateway: the v1 and v2 REST clients
and the gRPC client (run in the real KServe venv by tests/predictors/kserve_clients.py),
served by one process and by `--workers 2`."""
from __future__ import annotations

import json
import subprocess

import pytest

from tests.processes import ROOT, gateway
from tools.predictor_envs import ensure_env

DOUBLED = [[2.0, 4.0, 6.0, 8.0], [10.0, 12.0, 14.0, 16.0]]


@pytest.mark.parametrize("workers", [1, 2], ids=["one-process", "workers-2"])
def test_kserves_rest_and_grpc_clients_call_the_gateway_like_a_kserve_model(tmp_path, workers):
    python = ensure_env("kserve")
    config = tmp_path / "gateway.toml"
    config.write_text('[[models]]\nname = "demo"\nbackend = "simulated"\n')
    with gateway(config, workers=workers) as process:
        result = subprocess.run(
            [str(python), str(ROOT / "tests/predictors/kserve_clients.py"), process.http_url, process.grpc_address,
             "demo"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["v1_ready"] and seen["v2_live"] and seen["v2_ready"]
    assert seen["v1_predictions"] == DOUBLED
    assert seen["v2_id"] == "kserve-rest" and seen["v2_output"] == {"name": "OUTPUT0", "data": DOUBLED}
    assert seen["grpc_id"] == "kserve-grpc" and seen["grpc_output"] == {"name": "OUTPUT0", "data": DOUBLED}
