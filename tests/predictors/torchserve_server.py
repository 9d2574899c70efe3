"""A real TorchServe (0.12, Java frontend + Python worker) serving the test model ``double``.

Run by the TORCHSERVE predictor venv's interpreter (see ``tools.predictor_envs``), never
by the gateway's. The harness (``tests.predictors.harness.TorchServeServer``) starts it
and waits for the model's worker to be READY; it can also be run by hand::

    <torchserve venv>/bin/python tests/predictors/torchserve_server.py --workdir /tmp/ts-run \
        --inference-port 8080 --management-port 8081 --metrics-port 8082 \
        --grpc-inference-port 7070 --grpc-management-port 7071 --envelope kserve

What it does, all inside ``--workdir``:

1. builds the model in code: ``torch.nn.Linear(4, 4, bias=False)`` with weight ``2 * I``
   (no weights are downloaded), saves its state dict as ``build/model.pt``;
2. archives it with ``torch-model-archiver`` and ``torchserve_handler.py`` into
   ``store/double.mar`` (model-config.yaml names the call log the handler writes);
3. writes ``config.properties``: every address on 127.0.0.1, token authorization off
   (0.12 turns it ON by default and then even /ping fails), the model API on, the model
   with ``batchSize`` 1 and one worker, and ``service_envelope`` = ``--envelope``
   (``kservev2`` also sets ``ts_open_inference_protocol=true``: OIP over gRPC);
4. runs ``torchserve --start --ncs --foreground`` with ``TMPDIR``/``TEMP`` = ``--tmpdir``
   (TorchServe's pid file, worker sockets and unpacked models go there) and
   ``LOG_LOCATION``/``METRICS_LOCATION`` = ``workdir/logs``.

On SIGTERM / SIGINT (or stdin EOF with ``--exit-on-stdin-eof``) it runs
``torchserve --stop`` with the same ``TMPDIR`` (which finds the Java frontend by that pid
file), waits for it and exits 0; it exits 1 if TorchServe dies on its own.

NEVER combine an envelope with TorchServe's own batching (``batchSize`` > 1): the
envelope reads only the first request of TorchServe's batch (BACKENDS.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import threading

from stdin_watchdog import on_stdin_eof  # a sibling module: scripts run with their own venv

MODEL_NAME = "double"
HANDLER = pathlib.Path(__file__).resolve().parent / "torchserve_handler.py"
STOP_TIMEOUT_S = 30


def _parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=pathlib.Path, required=True)
    parser.add_argument("--tmpdir", type=pathlib.Path, help="TMPDIR/TEMP of TorchServe (default: workdir/tmp)")
    for name in ("inference", "management", "metrics", "grpc-inference", "grpc-management"):
        parser.add_argument(f"--{name}-port", type=int, required=True)
    parser.add_argument("--envelope", choices=["kserve", "kservev2"], default="kserve")
    parser.add_argument("--call-log", type=pathlib.Path, help="default: workdir/calls.jsonl")
    parser.add_argument(
        "--exit-on-stdin-eof", action="store_true", help="shut down when stdin closes (the harness's watchdog)"
    )
    return parser.parse_args(argv)


def build_model(build: pathlib.Path) -> pathlib.Path:
    """``nn.Linear(4, 4)``, weight 2*I, no bias: output = 2 x input. Returns the state dict file."""
    import torch

    model = torch.nn.Linear(4, 4, bias=False)
    with torch.no_grad():
        model.weight.copy_(2 * torch.eye(4))
    path = build / "model.pt"
    torch.save(model.state_dict(), path)
    return path


def archive(build: pathlib.Path, store: pathlib.Path, call_log: pathlib.Path, env: dict[str, str]) -> pathlib.Path:
    """``torch-model-archiver`` -> ``store/double.mar``."""
    # torch is imported in a short-lived child: this process stays small (~15 MB, not ~240)
    # while it supervises TorchServe.
    serialized = build / "model.pt"
    subprocess.run([sys.executable, __file__, "--build-model", build], check=True, env=env,
                   stdin=subprocess.DEVNULL)
    model_config = build / "model-config.yaml"
    # Read by the handler through context.model_yaml_config (JSON is valid YAML).
    model_config.write_text(json.dumps({"handler": {"call_log": str(call_log)}}) + "\n")
    archiver = pathlib.Path(sys.executable).parent / "torch-model-archiver"
    subprocess.run(
        [archiver, "--model-name", MODEL_NAME, "--version", "1.0", "--serialized-file", serialized,
         "--handler", HANDLER, "--config-file", model_config, "--export-path", store, "-f"],
        check=True, env=env, stdin=subprocess.DEVNULL,
    )
    return store / f"{MODEL_NAME}.mar"


def write_config(path: pathlib.Path, args: argparse.Namespace, store: pathlib.Path) -> None:
    models = {MODEL_NAME: {"1.0": {
        "defaultVersion": True, "marName": f"{MODEL_NAME}.mar",
        "minWorkers": 1, "maxWorkers": 1,
        "batchSize": 1,  # one request = one handler call; an envelope breaks with more
        "maxBatchDelay": 1, "responseTimeout": 120,
    }}}
    lines = [
        f"inference_address=http://127.0.0.1:{args.inference_port}",
        f"management_address=http://127.0.0.1:{args.management_port}",
        f"metrics_address=http://127.0.0.1:{args.metrics_port}",
        "grpc_inference_address=127.0.0.1",
        f"grpc_inference_port={args.grpc_inference_port}",
        "grpc_management_address=127.0.0.1",
        f"grpc_management_port={args.grpc_management_port}",
        "disable_token_authorization=true",
        "enable_model_api=true",
        f"model_store={store}",
        f"load_models={MODEL_NAME}.mar",
        f"models={json.dumps(models)}",
        "default_workers_per_model=1",
        "number_of_gpu=0",
        "install_py_dep_per_model=false",
        f"service_envelope={args.envelope}",
        # Lean JVM on a shared 2-core machine; no hsperfdata files left in /tmp.
        "vmargs=-Xmx512m -XX:+UseSerialGC -XX:-UsePerfData -XX:ActiveProcessorCount=2",
    ]
    if args.envelope == "kservev2":
        lines.append("ts_open_inference_protocol=true")
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] == ["--build-model"]:
        build_model(pathlib.Path(sys.argv[2]))
        return 0
    args = _parse_args(argv)
    workdir: pathlib.Path = args.workdir.resolve()
    tmpdir: pathlib.Path = (args.tmpdir or workdir / "tmp").resolve()
    call_log: pathlib.Path = (args.call_log or workdir / "calls.jsonl").resolve()
    build, store, logs = workdir / "build", workdir / "store", workdir / "logs"
    own_tmpdir = not tmpdir.exists()  # removed on exit only if we made it
    for folder in (workdir, tmpdir, build, store, logs):
        folder.mkdir(parents=True, exist_ok=True)
    call_log.touch()

    env = dict(os.environ)
    env.update(
        TMPDIR=str(tmpdir), TEMP=str(tmpdir),  # pid file, worker sockets, unpacked models
        LOG_LOCATION=str(logs), METRICS_LOCATION=str(logs),
        OMP_NUM_THREADS="1",
    )
    archive(build, store, call_log, env)
    config = workdir / "config.properties"
    write_config(config, args, store)

    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if args.exit_on_stdin_eof:
        on_stdin_eof(stop.set)

    torchserve = pathlib.Path(sys.executable).parent / "torchserve"
    launcher = subprocess.Popen(
        [torchserve, "--start", "--ncs", "--foreground", "--ts-config", config, "--model-store", store,
         "--disable-token-auth", "--enable-model-api"],
        cwd=workdir, env=env, stdin=subprocess.DEVNULL,
    )
    try:
        while not stop.wait(timeout=0.5):
            if launcher.poll() is not None:
                print(f"TorchServe exited on its own with code {launcher.returncode}", file=sys.stderr, flush=True)
                return 1
        return 0
    finally:
        if launcher.poll() is None or (tmpdir / ".model_server.pid").exists():
            # The pid file in this TMPDIR names the Java frontend; --foreground waits for it.
            with contextlib.suppress(subprocess.TimeoutExpired):
                subprocess.run([torchserve, "--stop", "--foreground"], cwd=workdir, env=env,
                               stdin=subprocess.DEVNULL, timeout=STOP_TIMEOUT_S, check=False)
        try:
            launcher.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            launcher.kill()
            launcher.wait()
        if own_tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
