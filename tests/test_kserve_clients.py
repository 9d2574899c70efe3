"""KServe's own Python clients, unmodified, against the gateway: the v1 and v2 REST clients
and the gRPC client (run in the real KServe venv by tests/predictors/kserve_clients.py)."""
from __future__ import annotations

import json
import subprocess

from tests.harness import config_for, running_gateway
from tests.processes import ROOT
from tools.predictor_envs import ensure_env

DOUBLED = [[2.0, 4.0, 6.0, 8.0], [10.0, 12.0, 14.0, 16.0]]


def test_kserves_rest_and_grpc_clients_call_the_gateway_like_a_kserve_model():
    python = ensure_env("kserve")
    with running_gateway(config_for({"name": "demo", "backend": "simulated"})) as gw:
        result = subprocess.run(
            [str(python), str(ROOT / "tests/predictors/kserve_clients.py"), gw.http_url, gw.grpc_address, "demo"],
            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["v1_ready"] and seen["v2_live"] and seen["v2_ready"]
    assert seen["v1_predictions"] == DOUBLED
    assert seen["v2_id"] == "kserve-rest" and seen["v2_output"] == {"name": "OUTPUT0", "data": DOUBLED}
    assert seen["grpc_id"] == "kserve-grpc" and seen["grpc_output"] == {"name": "OUTPUT0", "data": DOUBLED}
