"""A real TorchServe 0.12 (Java frontend + Python workers) serving test models that compute.

Its models: ``double`` (the default), ``image`` and ``encoder``.

Run by the TORCHSERVE predictor venv's interpreter (see ``tools.predictor_envs``), never
by the gateway's. The harness (``tests.predictors.harness.TorchServeServer``) starts it and
waits for every model's worker to be READY; benchmarks run it by path; by hand::

    <torchserve venv>/bin/python tests/predictors/torchserve_server.py --workdir /tmp/ts-run \
        --inference-port 8080 --management-port 8081 --metrics-port 8082 \
        --grpc-inference-port 7070 --grpc-management-port 7071 --envelope kserve
    # TorchServe's own API and batching, the image model at two batch delays:
    ... --envelope none --model image --model image:d50 --model encoder \
        --batch-size 8 --max-batch-delay 10

The models (``--model``, repeatable; default ``double`` alone), all with random weights
built in code (``torch.manual_seed(0)``, no download), one worker each:

* ``double``: ``nn.Linear(4, 4, bias=False)``, weight ``2 * I``; handler
  ``torchserve_handler.py`` (rows of 4 numbers behind an envelope; batchSize always 1).
* ``image``: ``torchserve_models/tiny_cnn.py`` + ``image_handler.py``: an image (PNG,
  JPEG, ...: raw bytes, a multipart file part, or base64 in ``{"data": ...}``) in, its top-5
  ``{"class_<k>": probability}`` out.
* ``encoder``: ``torchserve_models/text_encoder.py`` + ``encoder_handler.py``: token ids
  (a JSON list of ints, or the gateway's padded ``{"input_ids": [...], "length": [n]}``) in,
  64 floats out.

A ``--model`` is ``KIND[:bN][:dMS]``: ``:bN`` and ``:dMS`` override ``--batch-size`` and
``--max-batch-delay`` for that model, which is then served under the name with ``_`` for
``:`` (``image:d50`` is model ``image_d50``, the same network and weights as ``image``
with its own batch delay), so one server can offer one network at several batch delays.
Defaults: ``--batch-size 1``, ``--max-batch-delay 10`` (ms); ``double`` is always batchSize 1.

Every handler call appends one JSON line to ``--call-log`` (one file for all the models):
``{"model", "envelope", "batch_size": <rows in the call>, "pid", "t"}``, the encoder's also
``"lengths"`` (each row's real length). A JSON body must say ``Content-Type:
application/json``: TorchServe's frontend reads a form-urlencoded body (curl ``-d``'s
default) as form fields, so the handler or envelope sees neither ``data`` nor ``body``.
It knows nothing of the gateway: it is TorchServe as its users set it up.

What it does, all inside ``--workdir``:

1. builds the weights in a short-lived child (``build/<kind>.pt``, double's ``build/model.pt``);
2. archives each model with ``torch-model-archiver`` as TorchServe's users do
   (``--model-file``, ``--serialized-file``, ``--handler``, ``--extra-files``) into
   ``store/<name>.mar``; its model-config.yaml names the call log the handler writes and
   the envelope;
3. writes ``config.properties``: every address on 127.0.0.1, token authorization off
   (0.12 turns it ON by default and then even /ping fails), the model API on, each model
   with its ``batchSize``/``maxBatchDelay`` and one worker, and ``service_envelope`` =
   ``--envelope`` (``kservev2`` also sets ``ts_open_inference_protocol=true``: OIP over
   gRPC; ``none`` writes no envelope: TorchServe's own inference API and batching);
4. runs ``torchserve --start --ncs --foreground`` with ``TMPDIR``/``TEMP`` = ``--tmpdir``
   (TorchServe's pid file, worker sockets and unpacked models go there) and
   ``LOG_LOCATION``/``METRICS_LOCATION`` = ``workdir/logs``.

Once every model's worker is READY it prints ``READY http=127.0.0.1:P grpc=127.0.0.1:P
management=127.0.0.1:P`` on stdout (a port left out, or 0, is a free one it chose), the
READY line `tools.processes` reads from every server of the project.

On SIGTERM / SIGINT (or stdin EOF with ``--exit-on-stdin-eof``) it runs
``torchserve --stop`` with the same ``TMPDIR`` (which finds the Java frontend by that pid
file), waits for it and exits 0; it exits 1 if TorchServe dies on its own.

NEVER combine an envelope with TorchServe's own batching (``batchSize`` > 1): the
envelope reads only the first request of TorchServe's batch (BACKENDS.md), so a batch size
above 1 is refused unless ``--envelope none``. ``double``'s handler reads envelope rows, so it
is refused with ``--envelope none``; the image and encoder handlers read rows and KServe v1
instances, not OIP tensors, so they are refused with ``--envelope kservev2``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import threading
import urllib.request

from stdin_watchdog import on_stdin_eof  # a sibling module: scripts run with their own venv

# The project's one free_port (standard library only), reached through the repository root.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from tools.processes import free_port  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
MODELS_DIR = HERE / "torchserve_models"
STOP_TIMEOUT_S = 30
DEFAULT_MODEL = "double"


@dataclasses.dataclass(frozen=True)
class Kind:
    """One network and its handler: what ``torch-model-archiver`` packs for it."""

    handler: pathlib.Path
    weights: str                           # the state dict's file name in build/
    model_file: pathlib.Path | None = None  # its nn.Module class, imported by BaseHandler
    extra_files: tuple[pathlib.Path, ...] = ()
    labels: int = 0                        # classes named in index_to_name.json (classifiers)


KINDS = {
    # As before: a function handler that builds nn.Linear itself (no --model-file).
    "double": Kind(handler=HERE / "torchserve_handler.py", weights="model.pt"),
    "image": Kind(handler=MODELS_DIR / "image_handler.py", weights="image.pt", model_file=MODELS_DIR / "tiny_cnn.py",
                  extra_files=(MODELS_DIR / "call_logging.py",), labels=10),
    "encoder": Kind(handler=MODELS_DIR / "encoder_handler.py", weights="encoder.pt",
                    model_file=MODELS_DIR / "text_encoder.py", extra_files=(MODELS_DIR / "call_logging.py",)),
}


@dataclasses.dataclass(frozen=True)
class ServedModel:
    """One ``--model``: the name TorchServe serves it under and its batching."""

    name: str
    kind: str
    batch_size: int
    max_batch_delay: int


_OPTION = re.compile(r"([bd])(\d+)")


def served_model(spec: str, batch_size: int, max_batch_delay: int) -> ServedModel:
    """``KIND[:bN][:dMS]`` -> ``ServedModel`` named ``spec`` with ``_`` for ``:``."""
    kind, *options = spec.split(":")
    if kind not in KINDS:
        raise ValueError(f"unknown model {kind!r} in --model {spec!r}; known: {', '.join(KINDS)}")
    for option in options:
        match = _OPTION.fullmatch(option)
        if not match:
            raise ValueError(f"--model {spec!r}: {option!r} is neither bN (batch size) nor dMS (batch delay)")
        if match[1] == "b":
            batch_size = int(match[2])
        else:
            max_batch_delay = int(match[2])
    if kind == "double":
        if options:
            raise ValueError("double takes no options: it is always served with batchSize 1")
        # Today's entry, unchanged: one request = one handler call.
        batch_size, max_batch_delay = 1, 1
    if batch_size < 1 or max_batch_delay < 0:
        raise ValueError(f"--model {spec!r}: batch size must be >= 1 and delay >= 0")
    return ServedModel(spec.replace(":", "_"), kind, batch_size, max_batch_delay)


def _parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[ServedModel]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=pathlib.Path, required=True)
    parser.add_argument("--tmpdir", type=pathlib.Path, help="TMPDIR/TEMP of TorchServe (default: workdir/tmp)")
    for name in ("inference", "management", "metrics", "grpc-inference", "grpc-management"):
        parser.add_argument(f"--{name}-port", type=int, default=0, help="default 0: a free port, named on READY")
    parser.add_argument("--envelope", choices=["kserve", "kservev2", "none"], default="kserve",
                        help="service_envelope; none = TorchServe's own inference API (and batching)")
    parser.add_argument("--model", action="append", dest="models", metavar="KIND[:bN][:dMS]",
                        help=f"a model to serve, repeatable: {', '.join(KINDS)} (default: {DEFAULT_MODEL})")
    parser.add_argument("--batch-size", type=int, default=1,
                        help="TorchServe's batchSize of image/encoder models (above 1 only with --envelope none)")
    parser.add_argument("--max-batch-delay", type=int, default=10, metavar="MS",
                        help="TorchServe's maxBatchDelay of image/encoder models, in milliseconds")
    parser.add_argument("--call-log", type=pathlib.Path, help="default: workdir/calls.jsonl (one for all models)")
    parser.add_argument(
        "--exit-on-stdin-eof", action="store_true", help="shut down when stdin closes (the harness's watchdog)"
    )
    args = parser.parse_args(argv)
    for name in ("inference", "management", "metrics", "grpc_inference", "grpc_management"):
        if not getattr(args, f"{name}_port"):
            setattr(args, f"{name}_port", free_port())
    try:
        models = [served_model(spec, args.batch_size, args.max_batch_delay) for spec in args.models or [DEFAULT_MODEL]]
    except ValueError as exc:
        parser.error(str(exc))
    names = [model.name for model in models]
    if len(set(names)) != len(names):
        parser.error(f"a model is named twice: {names}")
    for model in models:
        if args.envelope != "none" and model.batch_size > 1:
            parser.error(f"{model.name}: batch size {model.batch_size} with envelope {args.envelope}: the envelope "
                         "reads only the first request of TorchServe's batch (use --envelope none)")
        if args.envelope == "none" and model.kind == "double":
            parser.error("double's handler reads envelope rows: it needs --envelope kserve or kservev2")
        if args.envelope == "kservev2" and model.kind != "double":
            parser.error(f"{model.name}'s handler reads rows or KServe v1 instances, not the OIP tensors of kservev2")
    return args, models


def announce_when_ready(args: argparse.Namespace, models: list[ServedModel], stop: threading.Event) -> None:
    """Print ``READY http=P grpc=P management=P`` on stdout once every model's worker is
    READY (``/ping`` says Healthy seconds before a worker can serve), as the project's other
    servers do (``tools.processes``); a launcher that passed no ports learns them here."""
    while not stop.wait(0.25):
        try:
            ready = all(_model_ready(args.management_port, model.name) for model in models)
        except OSError:
            continue  # not listening yet
        if ready:
            print(f"READY http=127.0.0.1:{args.inference_port} grpc=127.0.0.1:{args.grpc_inference_port} "
                  f"management=127.0.0.1:{args.management_port}", flush=True)
            return


def _model_ready(port: int, name: str) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/models/{name}", timeout=2) as answer:
        described = json.loads(answer.read())
    return any(worker.get("status") == "READY" for entry in described for worker in entry.get("workers", []))


def build_weights(build: pathlib.Path, kinds: list[str]) -> None:
    """Save each kind's state dict in ``build`` (run in the short-lived child)."""
    import torch

    for kind in kinds:
        torch.manual_seed(0)  # each network's weights alone decide its answers, in any order
        model_file = KINDS[kind].model_file
        if model_file is None:  # double: nn.Linear(4, 4), weight 2*I, no bias: output = 2 x input
            model = torch.nn.Linear(4, 4, bias=False)
            with torch.no_grad():
                model.weight.copy_(2 * torch.eye(4))
        else:
            # The one nn.Module class of the model file, as TorchServe's BaseHandler finds it.
            sys.path.insert(0, str(model_file.parent))
            module = importlib.import_module(model_file.stem)
            (model_class,) = [c for c in vars(module).values()
                              if isinstance(c, type) and c.__module__ == module.__name__]
            model = model_class()
        torch.save(model.state_dict(), build / KINDS[kind].weights)


def archive(build: pathlib.Path, store: pathlib.Path, models: list[ServedModel], call_log: pathlib.Path,
            envelope: str, env: dict[str, str]) -> None:
    """``torch-model-archiver`` -> ``store/<name>.mar`` for each model."""
    kinds = sorted({model.kind for model in models})
    # torch is imported in a short-lived child: this process stays small (~15 MB, not ~240)
    # while it supervises TorchServe.
    subprocess.run([sys.executable, __file__, "--build-model", build, *kinds], check=True, env=env,
                   stdin=subprocess.DEVNULL, stdout=sys.stderr)
    archiver = pathlib.Path(sys.executable).parent / "torch-model-archiver"
    running = []
    for model in models:
        kind = KINDS[model.kind]
        model_config = build / f"{model.name}-config.yaml"
        # Read by the handlers through context.model_yaml_config (JSON is valid YAML).
        model_config.write_text(json.dumps({"handler": {"call_log": str(call_log), "envelope": envelope}}) + "\n")
        cmd: list[str | os.PathLike[str]] = [
            archiver, "--model-name", model.name, "--version", "1.0", "--serialized-file", build / kind.weights,
            "--handler", kind.handler, "--config-file", model_config, "--export-path", store, "-f"]
        if kind.model_file is not None:
            cmd += ["--model-file", kind.model_file]
        extra = list(kind.extra_files)
        if kind.labels:
            # TorchServe's label map: BaseHandler loads it as self.mapping, and the classifier
            # answers with these names (class index -> "class_<index>").
            labels = build / "index_to_name.json"
            labels.write_text(json.dumps({str(k): f"class_{k}" for k in range(kind.labels)}) + "\n")
            extra.append(labels)
        if extra:
            cmd += ["--extra-files", ",".join(map(str, extra))]
        # The archivers run at once: each is a Python start and a small zip.
        running.append(subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=sys.stderr))
    failed = [proc.args for proc in running if proc.wait() != 0]
    if failed:
        raise RuntimeError(f"torch-model-archiver failed: {failed}")


def write_config(path: pathlib.Path, args: argparse.Namespace, store: pathlib.Path, models: list[ServedModel]) -> None:
    entries = {model.name: {"1.0": {
        "defaultVersion": True, "marName": f"{model.name}.mar",
        "minWorkers": 1, "maxWorkers": 1,
        # 1 behind an envelope (one request = one handler call; an envelope breaks with more).
        "batchSize": model.batch_size,
        "maxBatchDelay": model.max_batch_delay, "responseTimeout": 120,
    }} for model in models}
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
        f"load_models={','.join(f'{model.name}.mar' for model in models)}",
        f"models={json.dumps(entries)}",
        "default_workers_per_model=1",
        "number_of_gpu=0",
        "install_py_dep_per_model=false",
        # Lean JVM on a shared 2-core machine; no hsperfdata files left in /tmp.
        "vmargs=-Xmx512m -XX:+UseSerialGC -XX:-UsePerfData -XX:ActiveProcessorCount=2",
    ]
    if args.envelope != "none":
        lines.append(f"service_envelope={args.envelope}")
    if args.envelope == "kservev2":
        lines.append("ts_open_inference_protocol=true")
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] == ["--build-model"]:
        build_weights(pathlib.Path(sys.argv[2]), sys.argv[3:] or [DEFAULT_MODEL])
        return 0
    args, models = _parse_args(argv)
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
    archive(build, store, models, call_log, args.envelope, env)
    config = workdir / "config.properties"
    write_config(config, args, store, models)

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
        stdout=sys.stderr,  # stdout is the READY line's alone
    )
    threading.Thread(target=announce_when_ready, args=(args, models, stop), daemon=True).start()
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
                               stdin=subprocess.DEVNULL, stdout=sys.stderr, timeout=STOP_TIMEOUT_S, check=False)
        try:
            launcher.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            launcher.kill()
            launcher.wait()
        if own_tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
