"""The real tritonserver binary, started directly (no PyTriton), on a plain Python-backend model.

Holds the benchmark's Triton: a standard model repository written into a work folder, and
the binary from the cached Triton venv (`tools.predictor_envs`) started on it, as
BACKENDS.md "Direct" describes. It must not know about the gateway, the scenarios or the
tests. Run with any Python (it only needs paths of the Triton venv, never its imports)::

    python -m tools.triton_direct --workdir /tmp/tdirect --call-ms 20 --per-row-ms 0.25

Prints `READY http=PORT grpc=PORT` once every model answers ready, and stops Triton (by its
PID) on SIGTERM or SIGINT. Models, each input `INPUT0` FP32 `[-1, 4]`, output `OUTPUT0` =
2 * INPUT0, `max_batch_size` 64:

- `cost`: an execution costs call-ms + per-row-ms for each row it carries; no dynamic batcher,
  so each request (or gateway batch) is one execution.
- `cost_batched`: the same model with Triton's own dynamic batcher on (its defaults: no
  queue delay, batches up to max_batch_size), so one execution may carry several requests.
- `cost_deadline`: the same cost with the dynamic batcher, `max_batch_size` 8 and a queue
  policy that REJECTs a request after 200 ms in Triton's queue: the nearest Triton has to
  deadline-aware batching (the `goodput` scenario compares it with the gateway's).
- `free`: no cost, no dynamic batcher: what one request costs Triton's front ends alone.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

from tools.predictor_envs import ensure_env
from tools.processes import free_port

MODEL_CODE = '''
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.call_s = float(parameters["call_ms"]["string_value"]) / 1000.0
        self.per_row_s = float(parameters["per_row_ms"]["string_value"]) / 1000.0

    def execute(self, requests):
        arrays = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        cost = self.call_s + self.per_row_s * sum(a.shape[0] for a in arrays)
        if cost > 0:
            time.sleep(cost)  # a device's time: the model's thread waits, the CPU is free
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", (a * 2).astype(np.float32))])
                for a in arrays]
'''

CONFIG = '''name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
parameters {{ key: "call_ms" value: {{ string_value: "{call_ms}" }} }}
parameters {{ key: "per_row_ms" value: {{ string_value: "{per_row_ms}" }} }}
{batching}'''

MODELS = ("cost", "cost_batched", "cost_deadline", "free")
DEADLINE_BATCH = 8  # cost_deadline: the goodput scenario's batch size
READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0


def write_repository(root: pathlib.Path, call_ms: float, per_row_ms: float, queue_timeout_ms: float = 200.0) -> None:
    # cost_deadline: Triton's nearest to deadline-aware batching, a queue policy that rejects a
    # request once it has waited queue_timeout_ms (a client may ask for less), batches of 8.
    deadline_batching = ("dynamic_batching { default_queue_policy { timeout_action: REJECT "
                         f"default_timeout_microseconds: {int(queue_timeout_ms * 1000)} "
                         "allow_timeout_override: true } }\n")
    batching = {"cost_batched": "dynamic_batching { }\n", "cost_deadline": deadline_batching}
    for name in MODELS:
        model = root / name
        (model / "1").mkdir(parents=True, exist_ok=True)
        (model / "1" / "model.py").write_text(MODEL_CODE)
        cost = (0.0, 0.0) if name == "free" else (call_ms, per_row_ms)
        (model / "config.pbtxt").write_text(CONFIG.format(
            name=name, call_ms=cost[0], per_row_ms=cost[1], batching=batching.get(name, ""),
            max_batch_size=DEADLINE_BATCH if name == "cost_deadline" else 64))


def backend_dir(site_packages: pathlib.Path, workdir: pathlib.Path) -> pathlib.Path:
    """A backends folder with the Python backend and the stub for this Python beside it
    (the venv's own folder lacks the stub; it is not ours to change)."""
    server = site_packages / "pytriton" / "tritonserver"
    python_backend = workdir / "backends" / "python"
    python_backend.mkdir(parents=True, exist_ok=True)
    for source in (server / "backends" / "python").iterdir():
        shutil.copy2(source, python_backend / source.name)
    stub = server / "python_backend_stubs" / f"{sys.version_info.major}.{sys.version_info.minor}" / \
        "triton_python_backend_stub"
    shutil.copy2(stub, python_backend / stub.name)
    return python_backend.parent


def command_and_env(workdir: pathlib.Path, http_port: int, grpc_port: int) -> tuple[list[str], dict[str, str]]:
    venv_python = ensure_env("triton")
    venv = venv_python.parent.parent
    site_packages = next((venv / "lib").glob("python3*/site-packages"))
    libdir = pathlib.Path(os.path.realpath(venv_python)).parent.parent / "lib"  # the base interpreter's LIBDIR
    env = dict(os.environ)
    # The stub links libpython by soname (LIBDIR first); Triton's own libraries are in
    # nvidia_pytriton.libs; the stub runs `python` from PATH, which must be the venv's (numpy<2).
    env["LD_LIBRARY_PATH"] = os.pathsep.join([str(libdir), str(site_packages / "nvidia_pytriton.libs"),
                                              *[p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]])
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    env["VIRTUAL_ENV"] = str(venv)
    env["PYTHONPATH"] = str(site_packages)
    command = [str(site_packages / "pytriton" / "tritonserver" / "bin" / "tritonserver"),
               f"--model-repository={workdir / 'models'}",
               f"--backend-directory={backend_dir(site_packages, workdir)}",
               "--http-address=127.0.0.1", f"--http-port={http_port}",
               "--grpc-address=127.0.0.1", f"--grpc-port={grpc_port}",
               "--allow-metrics=false", "--log-verbose=0", "--exit-timeout-secs=5"]
    return command, env


def _ready(http_port: int) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        for name in MODELS:
            with opener.open(f"http://127.0.0.1:{http_port}/v2/models/{name}/ready", timeout=2) as response:
                if response.status != 200:
                    return False
        return True
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=pathlib.Path, required=True)
    parser.add_argument("--call-ms", type=float, default=20.0)
    parser.add_argument("--per-row-ms", type=float, default=0.25)
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    write_repository(args.workdir / "models", args.call_ms, args.per_row_ms)
    http_port, grpc_port = free_port(), free_port()
    command, env = command_and_env(args.workdir, http_port, grpc_port)
    triton = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=sys.stderr, stderr=sys.stderr)
    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not stopping and triton.poll() is None and not _ready(http_port):
        if time.monotonic() > deadline:
            stopping = True
        time.sleep(0.1)
    if not stopping and triton.poll() is None:
        print(f"READY http={http_port} grpc={grpc_port}", flush=True)
    while not stopping and triton.poll() is None:
        time.sleep(0.2)
    if triton.poll() is None:
        triton.send_signal(signal.SIGTERM)
        try:
            triton.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            triton.kill()
            triton.wait()
    return 0 if stopping else 1


if __name__ == "__main__":
    sys.exit(main())
