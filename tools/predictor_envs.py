"""Per-predictor virtual environments for the REAL model servers the tests run against.

Each predictor server (Triton via PyTriton, KServe) gets its own venv: their pins clash
with each other and with the gateway (PyTriton needs ``numpy<2``, the gateway numpy 2).
The venvs are cached OUTSIDE the repo and created on demand, so a fresh machine (or CI)
builds them the first time a test needs one::

    ${BATCHING_GATEWAY_CACHE:-~/.cache/batching-gateway}/
        bootstrap/uv-<version>/bin/uv        # uv, pip-installed once (--target)
        uv-cache/                            # uv's download cache (safe to delete)
        venvs/<name>-<key>/                  # a complete venv (see below)
        venvs/<name>-<key>.lock              # fcntl lock serialising builds of that venv

``<key>`` is a short sha256 of the venv's pinned spec (the lock file
``tools/predictor_locks/<name>.txt`` with exact versions and hashes of every package, the
uv version, the warm-up imports) plus the interpreter's version, so changing a pin or the
Python version selects a new venv.
A venv is built in a temporary directory beside its final place and renamed into place
only when complete: an interrupted build never looks complete, and a leftover temp dir
is swept away by the next build. Deleting the cache simply makes the next call rebuild.

Public API: ``ensure_env(name) -> Path`` (the venv's python executable) for the names
in ``SPECS`` ("triton", "kserve", "torchserve", the embedding servers "infinity" and
"kserve-openai", and "mlserver", a peer of the benchmarks).

CLI::

    python -m tools.predictor_envs triton kserve     # build if missing, print paths + times
    python -m tools.predictor_envs --rebuild triton  # throw the cached venv away first
    python -m tools.predictor_envs --relock kserve   # re-resolve the lock from the top pins

Only the standard library is used, so this runs from any interpreter (gateway venv, CI).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence

CACHE_ENV_VAR = "BATCHING_GATEWAY_CACHE"
UV_VERSION = "0.13.9"
LOCK_DIR = pathlib.Path(__file__).resolve().parent / "predictor_locks"
MARKER_FILE = "predictor-env.json"  # written last inside a venv, before the rename
INSTALL_TIMEOUT_S = 1200


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What goes into one predictor venv."""

    name: str
    # Top-level pins; ``--relock`` resolves them into the full lock file.
    requirements: tuple[str, ...]
    why: str
    # Imported once at build time: a smoke test of the venv, and it writes the .pyc files of
    # exactly what the server loads (see _build).
    warmup_imports: tuple[str, ...] = ()
    # Also look in the machine's local wheel folders (``local_wheel_dirs()``): for a package
    # that exists only as a file on this disk (torch's CPU build), pinned by hash in the lock.
    # A machine without the folder gets the registry's release of the same version instead
    # (``REGISTRY_INSTEAD``), and the build says so.
    local_wheels: bool = False
    # Pins installed WITHOUT their declared dependencies: ``--relock`` compiles them alone
    # with ``--no-deps`` and appends them to the lock, and the build's ``uv pip check``
    # forgives exactly their unmet requirements (for a package of which only a few pure-Python
    # modules are used, whose full closure would be gigabytes: vllm for KServe's OpenAI types).
    no_deps: tuple[str, ...] = ()

    @property
    def lock_file(self) -> pathlib.Path:
        return LOCK_DIR / f"{self.name}.txt"


SPECS: dict[str, EnvSpec] = {
    spec.name: spec
    for spec in (
        EnvSpec(
            name="triton",
            # Full dependency closure, not BACKENDS.md's lean `--no-deps` install: with only
            # pytriton + numpy, `from pytriton.triton import Triton` fails (gevent, tritonclient,
            # grpcio, zmq, ... are imported), and serving needs more (sh, zope.*). The lock pins
            # every package, so the result is reproducible all the same.
            # tokenizers + safetensors: the `embed` model (triton_server.py) tokenizes and runs
            # the test encoder in numpy (embedding_model.NumpyEncoder).
            # torch + pillow: the image classifier moved from TorchServe
            # (tests/predictors/from_torchserve/) runs TorchServe's network in the Python
            # backend's stub. It must answer exactly what TorchServe answers, and only the same
            # torch build on the same thread count computes the same float32 bits (a numpy
            # forward sums in another order: the last bits of every probability differ). Both
            # are pinned to the TorchServe venv's versions (torch's CPU build from the local
            # wheel folder, as there; Pillow the same decoder, so the same pixels). torch runs
            # with numpy 1.26 here (its wheel is built against numpy 2, whose C API runs on 1.x).
            requirements=("nvidia-pytriton==0.7.0", "numpy<2", "tokenizers", "safetensors",
                          "torch==2.13.0+cpu", "pillow==13.0.0"),
            why="Triton Inference Server 2.51 bundled in PyTriton, with CPU torch 2.13.0; its Python stub needs numpy<2",
            warmup_imports=(
                "numpy", "pytriton.triton", "pytriton.decorators", "pytriton.model_config",
                # What the Python stub's model.py (a copy of pytriton/proxy/model.py) loads.
                "pytriton.proxy.communication", "pytriton.proxy.data", "pytriton.proxy.inference",
                "pytriton.proxy.types", "pytriton.proxy.validators", "zmq", "sh",
                "tokenizers", "safetensors.numpy",
                # What the image classifier's model.py loads in the stub.
                "torch", "PIL.Image", "PIL.PngImagePlugin", "PIL.JpegImagePlugin",
            ),
            local_wheels=True,
        ),
        EnvSpec(
            name="kserve",
            requirements=("kserve==0.21.0",),
            why="KServe model server (v1 + Open Inference Protocol over REST and gRPC)",
            warmup_imports=(
                "numpy", "kserve", "kserve.model_server", "kserve.errors", "kserve.utils.utils",
                "kserve.protocol.rest.server", "kserve.protocol.grpc.server", "uvicorn", "uvloop",
                "httptools", "grpc.aio",
            ),
        ),
        EnvSpec(
            name="torchserve",
            # torch's CPU build is the wheel on this disk (``local_wheels``), pinned WITH its
            # local version label: the index has no 2.13.0+cpu. Without the file, the build
            # says so and installs the registry's 2.13.0 (the CUDA build). pyyaml and numpy are
            # needed by torchserve but not declared by its wheel. pillow: the test image model's
            # handler decodes uploads with it (torchvision, what TorchServe's own image handlers
            # use, has no wheel for this torch); named here, not left to torchserve's own
            # dependency, because our handler imports it.
            requirements=("torch==2.13.0+cpu", "torchserve==0.12.0", "torch-model-archiver==0.12.0",
                          "pyyaml", "numpy", "pillow"),
            why="TorchServe 0.12 (Java frontend of the machine's JDK 17) with CPU torch 2.13.0 from the local wheel",
            warmup_imports=(
                # What the worker (ts/model_service_worker.py) and the test handlers load.
                "numpy", "yaml", "torch", "ts.model_service_worker", "ts.torch_handler.base_handler",
                "ts.model_server", "model_archiver.model_packaging",
                # The image handler's decoders (Image.open loads the format plugins on first use).
                "PIL", "PIL.Image", "PIL.PngImagePlugin", "PIL.JpegImagePlugin",
            ),
            local_wheels=True,
        ),
        EnvSpec(
            name="infinity",
            # infinity-emb's `server` extra is its CLI and FastAPI app; `torch` its torch engine
            # (sentence-transformers, which brings transformers and tokenizers). torch is the CPU
            # wheel on this disk, pinned with its local label as for torchserve; infinity-emb
            # itself caps numpy<2. No optimum/onnx/ct2 extras: the engine is torch.
            requirements=("torch==2.13.0+cpu", "infinity-emb[server,torch]==0.0.78"),
            why="Infinity 0.0.78, an OpenAI-compatible embedding server with its own batching, on CPU torch 2.13.0",
            warmup_imports=(
                "numpy", "torch", "transformers", "tokenizers", "sentence_transformers", "safetensors",
                "infinity_emb", "infinity_emb.cli", "infinity_emb.infinity_server",
                "infinity_emb.transformer.embedder.sentence_transformer", "uvicorn", "fastapi",
            ),
            local_wheels=True,
        ),
        EnvSpec(
            name="kserve-openai",
            # KServe's OpenAI endpoints (`kserve.protocol.rest.openai`: OpenAIEncoderModel,
            # /openai/v1/embeddings) take their request and response types from vllm's package:
            # kserve 0.21.0's `llm` extra pins vllm==0.24.0, whose full closure is CUDA torch 2.11,
            # flashinfer, xgrammar, ... (gigabytes). Only vllm's pure-Python protocol modules are
            # imported, so its wheel (279 MB) goes in WITHOUT dependencies (`no_deps`), beside
            # exactly the packages those imports need, found by importing until nothing was
            # missing: openai, cbor2, pyzmq, openai-harmony, pybase64, cachetools, msgspec,
            # cloudpickle, py-cpuinfo (vllm's compiled ops never load: they are built for torch
            # 2.11 + CUDA; nothing here calls them). torch is the CPU wheel on this disk;
            # transformers/tokenizers/safetensors run the test embedding model.
            requirements=("kserve==0.21.0", "torch==2.13.0+cpu", "transformers", "tokenizers", "safetensors",
                          "openai", "cbor2", "pyzmq", "openai-harmony", "pybase64", "cachetools", "msgspec",
                          "cloudpickle", "py-cpuinfo"),
            no_deps=("vllm==0.24.0",),
            why="KServe 0.21.0's OpenAI embeddings endpoint (OpenAIEncoderModel) on CPU torch 2.13.0, with vllm's protocol types",
            warmup_imports=(
                "numpy", "torch", "transformers", "tokenizers", "safetensors",
                "transformers.models.bert.modeling_bert", "kserve", "kserve.model_server", "kserve.errors",
                "kserve.protocol.rest.server", "kserve.protocol.rest.openai",
                "kserve.protocol.rest.openai.dataplane", "kserve.protocol.rest.openai.endpoints",
                "uvicorn", "uvloop", "httptools", "grpc.aio",
            ),
            local_wheels=True,
        ),
        EnvSpec(
            name="mlserver",
            # Seldon's MLServer, a peer the gateway is measured against (`--scenario peers`): its
            # own adaptive batching in front of a custom runtime (tools/mlserver_model.py). Not a
            # predictor of the tests; only that scenario builds it. uvloop below 0.22: from 0.22
            # its get_event_loop() raises where no loop is set, which MLServer's inference worker
            # calls as it starts (every worker dies and the model never loads).
            requirements=("mlserver==1.7.1", "uvloop<0.22"),
            why="Seldon MLServer 1.7.1 (OIP over REST and gRPC, its own adaptive batching), for the peers benchmark",
            warmup_imports=(
                "numpy", "mlserver", "mlserver.server", "mlserver.settings", "mlserver.model", "mlserver.codecs",
                "mlserver.parallel", "mlserver.batching", "uvicorn", "uvloop", "grpc.aio",
            ),
        ),
    )
}

LOCAL_WHEELS_DEFAULT = "/opt/wheels"


def local_wheel_dirs() -> list[str]:
    """Folders holding wheels that exist only on this machine's disk (torch's CPU build):
    pip's own find-links setting of the machine (``PIP_FIND_LINKS``, space-separated), else
    ``/opt/wheels``; only those that exist. uv ignores pip's config, so they are passed to it."""
    configured = os.environ.get("PIP_FIND_LINKS", "").split() or [LOCAL_WHEELS_DEFAULT]
    return [d for d in configured if os.path.isdir(d)]


def _find_links(spec: EnvSpec) -> list[str]:
    if not spec.local_wheels:
        return []
    return [arg for d in local_wheel_dirs() for arg in ("--find-links", d)]


# What a machine without the local wheel folder installs instead of a pin with a local label
# (torch's CPU build): the registry's release of the same version, with its own dependencies.
# For torch that is the CUDA build: about 3 GB to download, 5 GB in each venv that takes it.
REGISTRY_INSTEAD = "the registry's {pin}, with its own dependencies (torch's CUDA build: about 3 GB to " \
                   "download, 5 GB in the venv)"


def local_pins(lock_text: str) -> list[str]:
    """The pins of a lock that carry a local version label (``torch==2.13.0+cpu``): files of
    the local wheel folder, which no registry serves."""
    return [line.split()[0] for line in lock_text.splitlines()
            if not line.startswith((" ", "#")) and "==" in line and "+" in line.split("==", 1)[1].split()[0]]


def _without_local_pins(lock_text: str) -> str:
    """The lock less the blocks (pin, hashes, comments) of its local pins."""
    local = set(local_pins(lock_text))
    kept: list[str] = []
    skipping = False
    for line in lock_text.splitlines():
        if not line.startswith((" ", "#")) and line.strip():  # a pin starts a block
            skipping = line.split()[0] in local
        if not skipping:
            kept.append(line)
    return "\n".join(kept) + "\n"


class PredictorEnvError(RuntimeError):
    """A predictor venv could not be built."""


def cache_root() -> pathlib.Path:
    """The cache folder: ``$BATCHING_GATEWAY_CACHE`` or ``~/.cache/batching-gateway``."""
    configured = os.environ.get(CACHE_ENV_VAR)
    root = pathlib.Path(configured) if configured else pathlib.Path.home() / ".cache" / "batching-gateway"
    return root.expanduser().resolve()


def base_python() -> pathlib.Path:
    """The real interpreter behind the running one (a venv's python is only a symlink)."""
    return pathlib.Path(getattr(sys, "_base_executable", None) or sys.executable).resolve()


def python_version() -> str:
    return f"{platform.python_implementation()}-{platform.python_version()}"


def env_key(spec: EnvSpec) -> str:
    """Short sha256 of the pinned spec (lock file content, installer version, warm-up
    imports) and the Python version: change any of them and a new venv is built."""
    parts = [spec.name, _read_lock(spec), f"uv=={UV_VERSION}", *spec.warmup_imports, python_version()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


def env_dir(name: str) -> pathlib.Path:
    """Where the venv for ``name`` lives (whether or not it has been built yet)."""
    spec = _spec(name)
    return cache_root() / "venvs" / f"{spec.name}-{env_key(spec)}"


def ensure_env(name: str) -> pathlib.Path:
    """Return the python executable of the predictor venv ``name``, building it if missing.

    Safe to call from several processes at once: one builds, the others wait on the lock
    and then use the result. Raises ``PredictorEnvError`` if the build fails.
    """
    spec = _spec(name)
    final = env_dir(name)
    python = final / "bin" / "python"
    if _is_complete(final):
        return python
    final.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(final.with_name(final.name + ".lock")):
        # Someone else may have finished the build while we waited for the lock.
        if _is_complete(final):
            return python
        if final.exists():
            # Present but unusable, e.g. its base interpreter was removed: rebuild.
            _remove_tree(final)
        _sweep_temp_dirs(final)
        _build(spec, final)
    return python


def env_info(name: str) -> dict[str, object]:
    """The marker of a built venv: pins, Python version, install seconds, build time."""
    return json.loads((env_dir(name) / MARKER_FILE).read_text())


# --- building ---------------------------------------------------------------------------


def _spec(name: str) -> EnvSpec:
    try:
        return SPECS[name]
    except KeyError:
        raise ValueError(f"unknown predictor env {name!r}; known: {sorted(SPECS)}") from None


def _read_lock(spec: EnvSpec) -> str:
    try:
        return spec.lock_file.read_text()
    except FileNotFoundError:
        raise PredictorEnvError(
            f"{spec.lock_file} is missing; create it with `python -m tools.predictor_envs --relock {spec.name}`"
        ) from None


def _is_complete(venv: pathlib.Path) -> bool:
    # The marker is written before the atomic rename, so "final dir + marker" means complete;
    # bin/python must also still resolve (it is a symlink to the base interpreter).
    return (venv / MARKER_FILE).is_file() and (venv / "bin" / "python").exists()


@contextlib.contextmanager
def _file_lock(path: pathlib.Path) -> Iterator[None]:
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file is closed
        yield


def _temp_prefix(final: pathlib.Path) -> str:
    return f".{final.name}.tmp-"


def _trash_prefix(final: pathlib.Path) -> str:
    return f".{final.name}.trash-"


def _sweep_temp_dirs(final: pathlib.Path) -> None:
    """Remove temp dirs of interrupted builds (and interrupted deletions). Only called while
    holding the build lock, so none of them can belong to a build still running."""
    for leftover in [*final.parent.glob(_temp_prefix(final) + "*"), *final.parent.glob(_trash_prefix(final) + "*")]:
        shutil.rmtree(leftover, ignore_errors=True)


def _remove_tree(path: pathlib.Path) -> None:
    # Rename first so a half-deleted tree never sits at a name that means something.
    doomed = path.with_name(f"{_trash_prefix(path)}{os.getpid()}-{time.monotonic_ns()}")
    path.rename(doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def run_logged(cmd: Sequence[str | os.PathLike[str]], log: pathlib.Path, env: dict[str, str] | None = None, *,
               timeout: float = INSTALL_TIMEOUT_S, error: type[Exception] = PredictorEnvError) -> None:
    """Run an install step, appending its output to ``log``; raise `error` with the log tail
    on failure (`tools.client_tools` runs its steps through this too)."""
    line = " ".join(map(str, cmd))
    with open(log, "a") as out:
        out.write(f"$ {line}\n")
        out.flush()
        try:
            result = subprocess.run(
                [str(c) for c in cmd],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise error(f"timed out after {timeout} s: {line}\n{log_tail(log)}") from None
    if result.returncode != 0:
        raise error(f"exit code {result.returncode}: {line}\n{log_tail(log)}")


def log_tail(path: pathlib.Path, lines: int = 40) -> str:
    """The last `lines` lines of an install log, for an error message."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _uv_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        UV_CACHE_DIR=str(cache_root() / "uv-cache"),
        # Never fetch a Python build: only the registries are reachable, and the venv must
        # use the same interpreter as the key says.
        UV_PYTHON_DOWNLOADS="never",
        # Ignore user/system uv.toml so the install depends only on the lock file.
        UV_NO_CONFIG="1",
    )
    return env


def ensure_uv() -> pathlib.Path:
    """The pinned uv binary, pip-installed once into the cache's bootstrap folder."""
    final = cache_root() / "bootstrap" / f"uv-{UV_VERSION}"
    uv = final / "bin" / "uv"
    if uv.is_file():
        return uv
    final.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(final.with_name(final.name + ".lock")):
        if uv.is_file():
            return uv
        _sweep_temp_dirs(final)
        tmp = pathlib.Path(tempfile.mkdtemp(prefix=_temp_prefix(final), dir=final.parent))
        log = final.parent / f"{final.name}.log"
        log.unlink(missing_ok=True)
        try:
            run_logged(
                [base_python(), "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check",
                 "--no-compile", "--target", tmp, f"uv=={UV_VERSION}"],
                log,
            )
            tmp.chmod(0o755)
            tmp.rename(final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return uv


def _build(spec: EnvSpec, final: pathlib.Path) -> None:
    lock_text = _read_lock(spec)
    uv = ensure_uv()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=_temp_prefix(final), dir=final.parent))
    log = final.with_name(final.name + ".build.log")  # kept beside the venv for post-mortems
    log.unlink(missing_ok=True)
    started = time.monotonic()
    try:
        env = _uv_env()
        # --relocatable: entry-point scripts and activate files refer to the venv relatively,
        # so they keep working after the rename from the temp dir to the final name.
        run_logged([uv, "venv", "--relocatable", "--python", base_python(), "--clear", tmp], log, env)
        lock_file, instead = spec.lock_file, []
        if spec.local_wheels and not local_wheel_dirs():
            # No local wheel folder (any machine but this image): the same versions from the registry.
            instead = [pin.split("+", 1)[0] for pin in local_pins(lock_text)]
            lock_file = tmp.with_name(tmp.name + ".registry-lock.txt")
            lock_file.write_text(_without_local_pins(lock_text))
            print(f"predictor_envs: '{spec.name}': no local wheel folder (PIP_FIND_LINKS or {LOCAL_WHEELS_DEFAULT}): "
                  f"installing {REGISTRY_INSTEAD.format(pin=', '.join(instead))}", file=sys.stderr)
        run_logged(
            [uv, "pip", "install", "--python", tmp / "bin" / "python",
             "--require-hashes",
             # Every package is pinned with hashes; resolving again would be pure overhead,
             # and --require-hashes already refuses a lock that misses a dependency.
             "--no-deps",
             *_find_links(spec),
             "-r", lock_file],
            log,
            env,
        )
        if instead:
            # Resolved here (their dependencies are not in the lock): what the lock pinned stays.
            run_logged([uv, "pip", "install", "--python", tmp / "bin" / "python", *instead], log, env)
            lock_file.unlink()
        _check(spec, uv, tmp / "bin" / "python", log, env)
        # Bytecode: this machine sets PYTHONDONTWRITEBYTECODE=1, and a server started without
        # .pyc files compiles from source on EVERY start (KServe: ~5 s instead of ~1.5 s).
        # `uv pip install --compile-bytecode` compiles all 5,600 files of the KServe venv
        # (~18 s, mostly the kubernetes client nobody imports); importing what the servers
        # load writes only the ~1,100 .pyc files needed, in ~3 s, and proves they import.
        if spec.warmup_imports:
            warmup_env = dict(env)
            warmup_env.pop("PYTHONDONTWRITEBYTECODE", None)
            statements = "; ".join(f"import {module}" for module in spec.warmup_imports)
            run_logged([tmp / "bin" / "python", "-c", statements], log, warmup_env)
        seconds = round(time.monotonic() - started, 1)
        marker = {
            "name": spec.name,
            "requirements": list(spec.requirements),
            "lock_sha256": hashlib.sha256(lock_text.encode()).hexdigest(),
            "python": python_version(),
            "base_python": str(base_python()),
            "uv": UV_VERSION,
            "install_seconds": seconds,
            "from_registry_instead_of_local_wheels": instead,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        (tmp / MARKER_FILE).write_text(json.dumps(marker, indent=2) + "\n")
        tmp.chmod(0o755)  # mkdtemp makes it 0700; a venv is normally world-readable
        tmp.rename(final)  # atomic: the venv appears complete or not at all
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _requirement_name(requirement: str) -> str:
    """The normalised distribution name of a pin such as ``vllm==0.24.0``."""
    name = requirement
    for separator in "=<>!~;[ @":
        name = name.split(separator, 1)[0]
    return name.strip().lower().replace("_", "-").replace(".", "-")


def _check(spec: EnvSpec, uv: pathlib.Path, python: pathlib.Path, log: pathlib.Path, env: dict[str, str]) -> None:
    """``uv pip check`` of a new venv; with ``spec.no_deps``, the unmet requirements of those
    packages (and only theirs) are expected and forgiven."""
    if not spec.no_deps:
        run_logged([uv, "pip", "check", "--python", python], log, env)
        return
    result = subprocess.run([str(uv), "pip", "check", "--python", str(python)], capture_output=True, text=True,
                            env=env, stdin=subprocess.DEVNULL, timeout=INSTALL_TIMEOUT_S, check=False)
    output = result.stdout + result.stderr
    with open(log, "a") as out:
        out.write(f"$ uv pip check (forgiving {', '.join(spec.no_deps)})\n{output}")
    forgiven = {_requirement_name(requirement) for requirement in spec.no_deps}
    problems = [
        line for line in output.splitlines()
        if line.startswith("The package ")
        and _requirement_name(line.split("`")[1] if "`" in line else "") not in forgiven
    ]
    if problems:
        raise PredictorEnvError("uv pip check found unmet requirements:\n" + "\n".join(problems))


def relock(name: str) -> pathlib.Path:
    """Re-resolve ``SPECS[name].requirements`` into its lock file (exact pins + hashes).

    The lock is resolved for the running interpreter's Python version and platform
    (CPython 3.11, Linux x86_64 on the project's machines).
    """
    spec = _spec(name)
    uv = ensure_uv()
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmpdir:
        requirements_in = pathlib.Path(tmpdir) / f"{name}.in"
        requirements_in.write_text("\n".join(spec.requirements) + "\n")
        log = pathlib.Path(tmpdir) / "relock.log"
        run_logged(
            [uv, "pip", "compile", requirements_in, "--python", base_python(), *_find_links(spec),
             "--generate-hashes", "--no-header", "--annotation-style", "line",
             "--output-file", spec.lock_file],
            log,
            _uv_env(),
        )
        if spec.no_deps:
            alone_in = pathlib.Path(tmpdir) / f"{name}-no-deps.in"
            alone_in.write_text("\n".join(spec.no_deps) + "\n")
            alone_out = pathlib.Path(tmpdir) / f"{name}-no-deps.txt"
            run_logged(
                [uv, "pip", "compile", alone_in, "--python", base_python(), "--no-deps",
                 "--generate-hashes", "--no-header", "--annotation-style", "line", "--output-file", alone_out],
                log,
                _uv_env(),
            )
            with open(spec.lock_file, "a") as lock:
                lock.write("# Installed WITHOUT their dependencies (EnvSpec.no_deps):\n" + alone_out.read_text())
    header = (
        f"# Lock for the '{name}' predictor venv: {spec.why}.\n"
        f"# Top-level pins: {', '.join(spec.requirements)}\n"
        + (f"# Pinned without their dependencies: {', '.join(spec.no_deps)}\n" if spec.no_deps else "")
        + f"# Resolved for {python_version()} on {platform.system()} {platform.machine()}.\n"
        f"# Regenerate with: python -m tools.predictor_envs --relock {name}\n"
    )
    spec.lock_file.write_text(header + spec.lock_file.read_text())
    return spec.lock_file


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.predictor_envs", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="+", choices=sorted(SPECS), help="predictor venvs to build")
    parser.add_argument("--rebuild", action="store_true", help="delete the cached venv and build it again")
    parser.add_argument("--relock", action="store_true", help="re-resolve the lock file(s), then build")
    args = parser.parse_args(argv)

    for name in args.names:
        if args.relock:
            print(f"{name}: lock written to {relock(name)}", flush=True)
        final = env_dir(name)
        if args.rebuild and final.exists():
            with _file_lock(final.with_name(final.name + ".lock")):
                _remove_tree(final)
        was_built = _is_complete(final)
        started = time.monotonic()
        python = ensure_env(name)
        info = env_info(name)
        if was_built:
            how = f"cached; its install took {info['install_seconds']} s on {info['built_at']}"
        else:
            # The wait may include bootstrapping uv, or another process's build of this venv.
            how = f"ready after {time.monotonic() - started:.1f} s; its install took {info['install_seconds']} s"
        print(f"{name}: {python}  ({how})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
