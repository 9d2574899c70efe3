"""`python -m tools.demo`: the demo predictors of "Coming from TorchServe" (docs/from-torchserve.md),
started on 127.0.0.1 with the gateway config to put in front of them.

What it runs, each server in its own cached venv (`tools.predictor_envs`, built on first use)
and its own process group (`tools.processes`, the one launcher), on free ports:

- **TorchServe 0.12** serving the image classifier `image` (`tests/predictors/torchserve_server.py`,
  run by path as the benchmarks run it: TinyCNN, its handler and label map archived into
  `image.mar`), behind the `kserve` envelope with `batchSize` 1, as the gateway needs it;
- **Triton 2.51** (the `tritonserver` binary PyTriton bundles, started as `tools.triton_direct`
  starts it) on a model repository holding the same model moved to Triton's Python backend:
  `tests/predictors/from_torchserve/model_repository/image` (its `config.pbtxt` and `1/model.py`) with the
  files of TorchServe's `image.mar` unzipped beside `model.py`, the first step of the move.

Triton starts as soon as the archive exists, while TorchServe's workers load. Once both answer,
it writes `gateway.toml` (model `image`: Triton over gRPC; `image_torchserve`: TorchServe over
HTTP) and a picture, `kitten.png` (the tests' `images.png(1)`, made by the TorchServe venv's
Pillow), into its folder, prints the config and the two commands to type next, with that
folder's path, and runs until Ctrl-C or SIGTERM, when it stops both servers by PID. It exits 1
if either dies on its own. Its folder is `--workdir`, or else a new one for this run in the
temporary directory (`batching-gateway-demo-XXXXXXXX`, `tempfile.mkdtemp`: the user's alone,
never another run's), removed when the demo stops.

It must not know the gateway's code (it writes a config for it) nor the tests' (it runs their
scripts and model files by path, never imports them).
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path

from tools.predictor_envs import ensure_env
from tools.processes import ROOT, ServerProcess, ServerStartError, free_port
from tools.triton_direct import command_and_env

WORKDIR_PREFIX = "batching-gateway-demo-"  # in the temporary directory: TorchServe's worker sockets live under it
PREDICTORS = ROOT / "tests" / "predictors"
TORCHSERVE_SCRIPT = PREDICTORS / "torchserve_server.py"
TRITON_MODEL = PREDICTORS / "from_torchserve" / "model_repository" / "image"
MODEL = "image"
READY_TIMEOUT_S = 180.0  # a first start compiles nothing, but a busy 2-core machine is slow
STOP_TIMEOUT_S = 40.0    # torchserve_server.py's own `torchserve --stop` waits up to 30 s

CONFIG = """\
# The demo's predictors (python -m tools.demo); stop them with Ctrl-C there.
[[models]]
name = "{model}"                      # the image CNN moved to Triton's Python backend
backend = "triton"
protocol = "grpc"
url = "{triton}"
[models.batching]
max_batch_size = 8
max_inflight = "auto"

[[models]]
name = "{model}_torchserve"           # the same CNN in TorchServe itself (service_envelope=kserve)
backend = "torchserve"
protocol = "http"
url = "{torchserve}"
backend_model = "{model}"
[models.batching]
max_batch_size = 8
max_inflight = "auto"
"""


def gateway_config(triton_grpc: str, torchserve_url: str) -> str:
    """The gateway's TOML for the two predictors: clients name `image` (Triton) or
    `image_torchserve` (TorchServe)."""
    return CONFIG.format(model=MODEL, triton=triton_grpc, torchserve=torchserve_url)


def triton_repository(archive: Path, root: Path) -> Path:
    """A Triton model repository at `root` holding `image`: the Python-backend model of
    `TRITON_MODEL` with the files of TorchServe's `archive` (`image.mar`, a zip: the network's
    file, its weights, the label map) unzipped into its version folder."""
    model = root / MODEL
    shutil.copytree(TRITON_MODEL, model, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    with zipfile.ZipFile(archive) as mar:
        mar.extractall(model / "1")
    return root


def torchserve_process(workdir: Path) -> ServerProcess:
    """TorchServe serving `image` behind the `kserve` envelope; READY names its ports."""
    command: list[str | os.PathLike[str]] = [ensure_env("torchserve"), TORCHSERVE_SCRIPT, "--workdir", workdir, "--envelope", "kserve",
               "--model", MODEL, "--exit-on-stdin-eof"]
    return ServerProcess(command, name="torchserve", log_path=workdir / "torchserve.log", cwd=workdir,
                         hold_stdin=True, ready_timeout=READY_TIMEOUT_S, stop_timeout=STOP_TIMEOUT_S)


def triton_process(workdir: Path, http_port: int, grpc_port: int) -> ServerProcess:
    """tritonserver on `workdir/models` (`tools.triton_direct`), ready when `image` is."""
    command, env = command_and_env(workdir, http_port, grpc_port)
    ready_url = f"http://127.0.0.1:{http_port}/v2/models/{MODEL}/ready"
    return ServerProcess(command, name="triton", env=env, log_path=workdir / "triton.log", cwd=workdir,
                         ready_probe=lambda: _answers(ready_url), ready_timeout=READY_TIMEOUT_S)


def _answers(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never a proxy
    try:
        with opener.open(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def write_picture(path: Path) -> None:
    """`kitten.png`: the tests' `images.png(1)`, made by the TorchServe venv (numpy, Pillow)."""
    code = "import sys; sys.path.insert(0, sys.argv[1]); import images; sys.stdout.buffer.write(images.png(1))"
    done = subprocess.run([ensure_env("torchserve"), "-c", code, PREDICTORS], capture_output=True, check=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    path.write_bytes(done.stdout)


def _wait_for(path: Path, server: ServerProcess, timeout: float) -> None:
    """Until `path` exists; TorchServe's start fails here if its script exits first."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if not server.is_running() or time.monotonic() > deadline:
            server.stop()
            raise ServerStartError(f"TorchServe wrote no {path.name}; its log:\n{server.log_tail()}")
        time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path,
                        help="where the servers run and gateway.toml and kitten.png go (default: a new folder "
                             f"{WORKDIR_PREFIX}XXXXXXXX in the temporary directory, removed when the demo stops)")
    args = parser.parse_args(argv)
    workdir = args.workdir.resolve() if args.workdir is not None else run_folder()
    try:
        return run(workdir)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


def run_folder() -> Path:
    """A new folder for this run, in the temporary directory, readable by this user alone."""
    return Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX)).resolve()


def run(workdir: Path) -> int:
    """Start both servers in `workdir`, write the config and picture, wait for Ctrl-C."""
    for old in ("torchserve", "triton", "gateway.toml"):  # a previous run's, never reused
        shutil.rmtree(workdir / old, ignore_errors=True)
    (workdir / "gateway.toml").unlink(missing_ok=True)
    (workdir / "triton").mkdir(parents=True)

    # Ctrl-C and SIGTERM stop it alike; SIGINT set here too, since a shell that starts it in
    # the background (`&`) hands it SIGINT ignored.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    started = time.monotonic()
    print("Starting TorchServe (the image CNN) and Triton (the same model); a first run builds their venvs.",
          flush=True)
    servers: list[ServerProcess] = []
    try:
        torchserve = torchserve_process(workdir / "torchserve")
        triton_http, triton_grpc = free_port(), free_port()
        triton = triton_process(workdir / "triton", triton_http, triton_grpc)
        servers = [torchserve, triton]
        torchserve.spawn()
        # The script writes config.properties once every archive is complete (its steps 2, 3).
        _wait_for(workdir / "torchserve" / "config.properties", torchserve, READY_TIMEOUT_S)
        triton_repository(workdir / "torchserve" / "store" / f"{MODEL}.mar", workdir / "triton" / "models")
        triton.spawn()
        write_picture(workdir / "kitten.png")
        for server in servers:
            server.wait_ready()
        config = gateway_config(f"127.0.0.1:{triton_grpc}", torchserve.http_url)
        (workdir / "gateway.toml.tmp").write_text(config)
        (workdir / "gateway.toml.tmp").rename(workdir / "gateway.toml")  # whole, or not at all
        print(f"TorchServe (pid {torchserve.pid}) and Triton (pid {triton.pid}) ready in "
              f"{time.monotonic() - started:.1f} s. The gateway's config, {workdir / 'gateway.toml'}:\n", flush=True)
        print(config, flush=True)
        print(f"Next, in a second terminal:\n  {_gateway_command()} serve --config {workdir / 'gateway.toml'}\n"
              f"and in a third:\n  curl -T {workdir / 'kitten.png'} localhost:8080/predictions/{MODEL}\n"
              f"Ctrl-C here stops TorchServe and Triton.", flush=True)
        while True:
            time.sleep(0.5)
            dead = [server.name for server in servers if not server.is_running()]
            if dead:
                print(f"{', '.join(dead)} exited on its own; see {workdir}/*/*.log", file=sys.stderr, flush=True)
                return 1
    except KeyboardInterrupt:
        print("Stopping TorchServe and Triton.", flush=True)
        return 0
    except ServerStartError as exc:
        print(exc, file=sys.stderr, flush=True)
        return 1
    finally:
        for server in servers:
            server.stop()


def _gateway_command() -> str:
    """The gateway's command beside this Python (the quick start's `.venv/bin/batching-gateway`,
    as the user would type it from here), else its bare name."""
    beside = Path(sys.executable).parent / "batching-gateway"
    if not beside.exists():
        return "batching-gateway"
    relative = os.path.relpath(beside)
    return relative if not relative.startswith("..") else str(beside)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt

if __name__ == "__main__":
    sys.exit(main())
