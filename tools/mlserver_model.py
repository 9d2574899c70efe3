"""Seldon's MLServer serving one model of a known cost, with its own adaptive batching: a
peer of the gateway in the benchmarks (`--scenario peers`).

This file is both the model's runtime (`CostRuntime`, which MLServer imports by name from
the model folder's path) and the script that writes that folder and starts the real
`mlserver start`, the way MLServer's users run a custom runtime. It must not know the
gateway, the scenarios or the tests.

Run by the MLServer venv's interpreter (`python -m tools.predictor_envs mlserver` prints
it), never the gateway's; it imports nothing of this repository but the standard library's
free port::

    <mlserver venv>/bin/python tools/mlserver_model.py --workdir /tmp/ms --call-ms 5 \
        --max-batch-size 32 --max-batch-time-ms 2

Model `cost`: input `INPUT0` FP32 [-1, 4], output `OUTPUT0` = 2 * INPUT0; each call sleeps
call-ms + per-row-ms per row, blocking its worker (a device's time: one call at a time, the
CPU free). Everything else is MLServer's default (one parallel worker, its access log on).
Prints `READY http=PORT grpc=PORT` once the model answers its readiness; stops MLServer on
SIGTERM or SIGINT.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import urllib.request

import numpy as np
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse

MODEL_NAME = "cost"


class CostRuntime(MLModel):
    """2 * INPUT0, after a sleep of the configured cost (from the model's `parameters.extra`)."""

    async def load(self) -> bool:
        extra = (self.settings.parameters.extra if self.settings.parameters else None) or {}
        self._call_s = float(extra.get("call_ms", 5.0)) / 1000.0
        self._per_row_s = float(extra.get("per_row_ms", 0.0)) / 1000.0
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        rows = NumpyCodec.decode_input(payload.inputs[0])
        time.sleep(self._call_s + self._per_row_s * len(rows))  # blocking: the device does one call at a time
        output = NumpyCodec.encode_output("OUTPUT0", (rows * 2).astype(np.float32))
        return InferenceResponse(model_name=self.name, outputs=[output])


def write_model_folder(folder: pathlib.Path, http_port: int, grpc_port: int, metrics_port: int,
                       args: argparse.Namespace) -> None:
    """settings.json and model-settings.json, as `mlserver start` reads them."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "settings.json").write_text(json.dumps({
        "host": "127.0.0.1", "http_port": http_port, "grpc_port": grpc_port, "metrics_port": metrics_port,
    }))
    model: dict[str, object] = {
        "name": MODEL_NAME, "implementation": f"{pathlib.Path(__file__).stem}.CostRuntime",
        "parameters": {"extra": {"call_ms": args.call_ms, "per_row_ms": args.per_row_ms}},
    }
    if args.max_batch_size > 1:
        model |= {"max_batch_size": args.max_batch_size, "max_batch_time": args.max_batch_time_ms / 1000.0}
    (folder / "model-settings.json").write_text(json.dumps(model))


def ready(http_port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/models/{MODEL_NAME}/ready", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=pathlib.Path, required=True, help="the model folder to write and serve")
    parser.add_argument("--call-ms", type=float, default=5.0)
    parser.add_argument("--per-row-ms", type=float, default=0.0)
    parser.add_argument("--max-batch-size", type=int, default=32, help="1: adaptive batching off")
    parser.add_argument("--max-batch-time-ms", type=float, default=2.0)
    args = parser.parse_args(argv)
    # By path from the repository, like tools/pytriton_model.py: the one free_port.
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
    from tools.processes import free_port

    http_port, grpc_port = free_port(), free_port()
    write_model_folder(args.workdir, http_port, grpc_port, free_port(), args)
    # MLServer imports the runtime by module name; this file's folder on the path makes it found
    # in the server and in its inference worker.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(pathlib.Path(__file__).parent),
                                                                     os.environ.get("PYTHONPATH")]))}
    mlserver = pathlib.Path(sys.executable).with_name("mlserver")
    server = subprocess.Popen([str(mlserver), "start", str(args.workdir)], env=env, stdout=sys.stderr)
    signal.signal(signal.SIGTERM, lambda *_: server.terminate())
    signal.signal(signal.SIGINT, lambda *_: server.terminate())
    while server.poll() is None and not ready(http_port):
        time.sleep(0.2)
    if server.poll() is None:
        print(f"READY http={http_port} grpc={grpc_port}", flush=True)
    return server.wait()


if __name__ == "__main__":
    sys.exit(main())
