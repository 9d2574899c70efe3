"""The project's own servers as real processes for tests, stopped by PID.

Thin helpers over `tools.processes` (the one launcher tests and tools share): the gateway
(`python -m gateway serve`), the simulated predictor (`python -m tools.simulated_predictor`)
and any `python -m MODULE` that prints a `READY key=value ...` line; each returns a started
`ServerProcess` whose `fields` hold those values."""
from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from tools.processes import (
    ROOT,
    ServerProcess,
    SimulatedPredictorProcess,
    python_module_command,
)

__all__ = ["ROOT", "ServerProcess", "SimulatedPredictorProcess", "gateway", "predictor_calls", "python_module",
           "simulated_predictor"]


def python_module(*args: str, env: dict[str, str] | None = None, ready_timeout: float = 30,
                  open_files_limit: int | None = None) -> ServerProcess:
    """`python -m ARGS` with this interpreter, started and READY."""
    return ServerProcess(python_module_command(*args), env=env, ready_timeout=ready_timeout,
                         open_files_limit=open_files_limit).start()


def simulated_predictor(*options: str, http_port: int = 0, grpc_port: int = 0) -> SimulatedPredictorProcess:
    """The simulated predictor on 127.0.0.1 (port 0: a free one), started and READY."""
    return SimulatedPredictorProcess(*options, http_port=http_port, grpc_port=grpc_port).start()


def predictor_calls(predictor: ServerProcess) -> int:
    """How many calls a simulated predictor has answered (its `GET /stats`)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{predictor.fields['http']}/stats", timeout=10) as answer:
        return int(json.load(answer)["calls"])


def gateway(config_path: Path, log_level: str = "WARNING", open_files_limit: int | None = None,
            env: dict[str, str] | None = None, workers: int = 1) -> ServerProcess:
    """`batching-gateway serve` on free ports; `workers` > 1: `--workers N` (gateway.process.workers)."""
    return python_module("gateway", "serve", "--config", str(config_path),
                         "--http-port", "0", "--grpc-port", "0", "--log-level", log_level,
                         *(("--workers", str(workers)) if workers > 1 else ()),
                         open_files_limit=open_files_limit, env=env)
