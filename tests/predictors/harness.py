"""Start and stop the REAL predictor servers (Triton, KServe, TorchServe) for tests, on loopback.

Standard library only, so it runs in the gateway's venv: each server itself runs in
its own predictor venv (``tools.predictor_envs``), as a separate process group.

* ``PredictorProcess``: one server process on the project's one launcher
  (``tools.processes.ServerProcess``), in its own process group, logging to a file in its
  workdir; ``start()`` waits for a readiness probe (and fails with the log's tail if the
  process dies first), ``stop()`` sends SIGTERM to the whole group by PID, waits up to
  ``stop_timeout`` seconds, then SIGKILLs what is left. Ports come from the one
  ``tools.processes.free_port``.
* ``TritonServer`` / ``KServeServer``: handles with ``http_url``, ``grpc_address``,
  ``model`` and the predictor's OWN count of calls it received
  (Triton: ``execution_count()``, ``inference_count()``, ``batch_size_counts()`` from
  ``/v2/models/<m>/stats``;
  KServe: ``calls()`` from the model's call log).
* ``InfinityServer`` / ``KServeOpenAIServer``: the OpenAI-compatible embedding servers
  (Infinity with its own batching; KServe 0.21's ``OpenAIEncoderModel``, one forward per
  request) serving ``embedding`` (``embedding_model.py``), with ``embeddings_url`` and
  ``embed(...)``; KServe's ``calls()`` from its call log. Triton serves the same model as
  ``embed`` (BYTES ``text`` -> FP32 ``embedding``) beside ``double``.
  ``reference_embeddings(python, texts)`` and ``reference_token_counts`` run
  ``embedding_model.py`` with a predictor venv's python: the answers every server must give.
* ``TorchServeServer``: TorchServe 0.12 with one request envelope (``kserve``, or
  ``kservev2`` with OIP gRPC, or ``none``: TorchServe's own API and batching) serving one or
  more models (``double``, ``image``, ``encoder``: see ``torchserve_server.py``),
  ``http_url``, ``management_url``, ``grpc_address`` and ``calls()`` from the handlers'
  call log (one per server; each line names its model).

Servers started here also exit by themselves if the test process dies without stopping
them: they watch a stdin pipe that only the test process holds (``--exit-on-stdin-eof``).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tools.processes import ServerProcess, free_port

HERE = pathlib.Path(__file__).resolve().parent
TRITON_SCRIPT = HERE / "triton_server.py"
KSERVE_SCRIPT = HERE / "kserve_server.py"
TORCHSERVE_SCRIPT = HERE / "torchserve_server.py"
EMBEDDING_MODEL_SCRIPT = HERE / "embedding_model.py"
INFINITY_SCRIPT = HERE / "infinity_server.py"
KSERVE_OPENAI_SCRIPT = HERE / "kserve_openai_server.py"
RERANK_MODEL_SCRIPT = HERE / "rerank_model.py"
VLLM_SCORE_SCRIPT = HERE / "vllm_score_server.py"
RERANK_MODEL = "reranker"  # the cross-encoder's served name at Infinity and the vLLM-style server
TRITON_RERANK_MODEL = "rerank"  # Triton's: BYTES ``query``, ``document`` [-1, 1] -> FP32 ``score`` [-1, 1]
MODEL = "double"
EMBEDDING_MODEL = "embedding"  # the served name at Infinity and KServe
TRITON_EMBED_MODEL = "embed"  # Triton's: BYTES ``text`` [-1, 1] -> FP32 ``embedding`` [-1, 128]
EMBEDDING_DIMENSIONS = 128

# A model as Triton users write one (config.pbtxt's fields and a model.py), taking at most 4
# rows an execution (`TritonServer.loaded` loads it for the tests that need it).
SMALL_BATCH_CONFIG = {
    "name": "double_max4", "backend": "python", "max_batch_size": 4,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
    "instance_group": [{"kind": "KIND_CPU", "count": 1}],
}
SMALL_BATCH_CODE = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            rows = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", rows * 2)]))
        return responses
"""


# An opener without proxy handling: a proxy from http_proxy/HTTP_PROXY must never
# see (or break) requests to our loopback servers.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    """GET ``url``; return (status, body). Non-2xx statuses are returned, not raised."""
    try:
        with _OPENER.open(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """True if ``GET url`` answers 200; False if it answers otherwise or not at all."""
    try:
        return http_get(url, timeout)[0] == 200
    except (OSError, urllib.error.URLError):  # refused / reset / timed out while starting
        return False


def http_json(url: str, timeout: float = 5.0) -> Any:
    status, body = http_get(url, timeout)
    if status != 200:
        raise RuntimeError(f"GET {url} -> {status}: {body[:500]!r}")
    return json.loads(body)


def http_post_json(url: str, body: Any, timeout: float = 10.0) -> tuple[int, Any]:
    """POST ``body`` as JSON; return (status, decoded JSON reply, None for an empty one).
    Non-2xx are returned.

    Content-Type is exactly ``application/json``: KServe parses the body as JSON only then.
    """
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def _tail(path: pathlib.Path, lines: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    # The predictor runs from its own venv: nothing of the gateway's environment may leak
    # into its import path.
    for name in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP"):
        env.pop(name, None)
    env["PYTHONUNBUFFERED"] = "1"  # log lines (and READY) reach the log file at once
    env.update(extra or {})
    return env


class PredictorProcess(ServerProcess):
    """One real predictor server (`tools.processes.ServerProcess`, the one launcher): run
    from ``workdir`` with the predictor's own environment (`_child_env`), its output in
    ``workdir/<name>.log``, ready when ``ready_probe()`` says so (None: when it prints its
    READY line, as TorchServe's script does), holding its stdin (it
    exits if the test process dies) and stopped with its whole process group by PID."""

    def __init__(self, name: str, cmd: Sequence[str | int | os.PathLike[str]], workdir: pathlib.Path,
                 ready_probe: Callable[[], bool] | None, *, env: dict[str, str] | None = None,
                 ready_timeout: float = 120.0, stop_timeout: float = 15.0,
                 cleanup: Sequence[pathlib.Path] = ()) -> None:
        self.workdir = pathlib.Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        super().__init__([str(part) for part in cmd], name=name, env=_child_env(env),
                         log_path=self.workdir / f"{name}.log", ready_timeout=ready_timeout,
                         stop_timeout=stop_timeout, ready_probe=ready_probe, cwd=self.workdir, hold_stdin=True,
                         cleanup=list(cleanup))

    def log_tail(self, lines: int = 60) -> str:  # type: ignore[override]  # by lines, as the tests read it
        return _tail(self.log_path, lines) if self.log_path is not None else "(no log)"

    def kill_group(self) -> None:
        """Crash the server: SIGKILL its whole process group and wait until nothing runs."""
        self.kill()


def _venv_libdir(python: pathlib.Path) -> str:
    """``sysconfig LIBDIR`` of ``python`` (for a venv: its base interpreter's lib dir)."""
    result = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))"],
        capture_output=True,
        text=True,
        check=True,
        env=_child_env(),
    )
    return result.stdout.strip()


def _read_log_contains(path: pathlib.Path, needle: str) -> bool:
    try:
        return needle in path.read_text(errors="replace").splitlines()
    except OSError:
        return False


@dataclasses.dataclass
class TritonServer:
    """A running Triton Inference Server (PyTriton) serving ``double``, ``identity``,
    ``identity_bf16`` and ``embed`` (the test text encoder: BYTES ``text`` ``[-1, 1]`` ->
    FP32 ``embedding`` ``[-1, 128]``)."""

    http_port: int
    grpc_port: int
    metrics_port: int
    process: PredictorProcess
    model: str = MODEL

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @contextlib.contextmanager
    def loaded(self, config: dict[str, Any], code: str) -> Iterator[str]:
        """A Python-backend model loaded into this Triton as its users write one (``config``:
        config.pbtxt's fields as JSON; ``code``: its model.py), through Triton's model-repository
        API; unloaded afterwards. Yields its name."""
        name = config["name"]
        repository = f"{self.http_url}/v2/repository/models/{name}"
        status, body = http_post_json(f"{repository}/load", {"parameters": {
            "config": json.dumps(config), "file:1/model.py": base64.b64encode(code.encode()).decode()}}, timeout=120)
        if status != 200:
            raise RuntimeError(f"Triton did not load {name}: {status} {body}")
        try:
            yield name
        finally:
            http_post_json(f"{repository}/unload", {}, timeout=60)

    @classmethod
    def start(cls, python: pathlib.Path, workdir: pathlib.Path, *, ready_timeout: float = 120.0) -> TritonServer:
        """Start ``triton_server.py`` with the Triton venv's ``python`` on free loopback ports."""
        workdir = pathlib.Path(workdir)
        http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
        libdir = _venv_libdir(python)
        # PyTriton and Triton's Python stub talk over Unix sockets under PYTRITON_HOME and
        # $TMPDIR, and AF_UNIX paths are limited to 107 bytes: below a pytest tmp dir they
        # overflow ("OSError: AF_UNIX path too long", model load fails). So the server's
        # own --workdir is a short dir in /tmp, removed when it exits (and again by stop(),
        # in case it had to be killed); the log stays in workdir.
        runtime = pathlib.Path(tempfile.mkdtemp(prefix="triton-", dir="/tmp" if os.path.isdir("/tmp") else None))
        tmpdir = runtime / "tmp"
        tmpdir.mkdir()
        env = {
            # Fix 1 of BACKENDS.md: the Python backend stub must load the venv interpreter's
            # libpython3.11.so.1.0, not the system's (model load fails otherwise).
            "LD_LIBRARY_PATH": os.pathsep.join(
                p for p in (libdir, os.environ.get("LD_LIBRARY_PATH", "")) if p
            ),
            # Temp files and multiprocessing sockets of PyTriton and the stub: kept short and
            # removed with the runtime dir. (The Python backend's /tmp/folderXXXX model copies
            # ignore TMPDIR; Triton removes them itself on a clean shutdown.)
            "TMPDIR": str(tmpdir),
        }
        http_url = f"http://127.0.0.1:{http_port}"
        log_path = workdir / "triton.log"

        def ready() -> bool:
            # READY is printed once PyTriton has loaded the model; the HTTP checks confirm
            # the server really answers on our port.
            return (
                _read_log_contains(log_path, "READY")
                and http_ok(f"{http_url}/v2/health/ready")
                and http_ok(f"{http_url}/v2/models/{MODEL}/ready")
                and http_ok(f"{http_url}/v2/models/{TRITON_EMBED_MODEL}/ready")
            )

        process = PredictorProcess(
            "triton",
            [python, TRITON_SCRIPT, "--http-port", http_port, "--grpc-port", grpc_port,
             "--metrics-port", metrics_port, "--workdir", runtime, "--remove-workdir",
             "--exit-on-stdin-eof"],
            workdir,
            ready,
            env=env,
            ready_timeout=ready_timeout,
            cleanup=[runtime],
        )
        process.start()
        return cls(http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port, process=process)

    def stop(self) -> int | None:
        return self.process.stop()

    def metadata(self, model: str | None = None) -> dict[str, Any]:
        """``GET /v2/models/<model>``."""
        return http_json(f"{self.http_url}/v2/models/{model or self.model}")

    def model_stats(self, model: str | None = None) -> dict[str, Any]:
        """``GET /v2/models/<model>/stats`` (Triton's statistics extension)."""
        return http_json(f"{self.http_url}/v2/models/{model or self.model}/stats")

    def batch_size_counts(self, model: str | None = None) -> dict[int, int]:
        """{batch size: how many executions had it}, from the stats' ``batch_stats``."""
        counts: dict[int, int] = {}
        for stats in self.model_stats(model)["model_stats"]:
            for batch in stats.get("batch_stats", []):
                size = int(batch["batch_size"])
                counts[size] = counts.get(size, 0) + int(batch["compute_infer"]["count"])
        return counts

    def execution_count(self, model: str | None = None) -> int:
        """How many times Triton executed the model: one per batch it ran."""
        return sum(int(s.get("execution_count", 0)) for s in self.model_stats(model)["model_stats"])

    def executions_reaching(self, count: int, model: str | None = None, timeout: float = 20.0) -> int:
        """`execution_count` once it has reached `count`, or what it is after `timeout`:
        Triton counts an execution (and its inferences) once its response is out, so a read
        right after the answer may lag it. Reached, its inference counts are current too."""
        deadline = time.monotonic() + timeout
        while (counted := self.execution_count(model)) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        return counted

    def inference_count(self, model: str | None = None) -> int:
        """How many inferences (rows, summed over all batches) Triton ran."""
        return sum(int(s.get("inference_count", 0)) for s in self.model_stats(model)["model_stats"])

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Triton's ``embed`` over OIP REST JSON: ``texts`` as the BYTES ``text`` tensor
        ``[rows, 1]``; one vector of 128 floats per text. Raises on a non-200 answer."""
        body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [len(texts), 1], "data": list(texts)}]}
        status, answer = http_post_json(f"{self.http_url}/v2/models/{TRITON_EMBED_MODEL}/infer", body)
        if status != 200:
            raise RuntimeError(f"Triton embed -> {status}: {answer}")
        (output,) = answer["outputs"]
        rows, width = output["shape"]
        flat = output["data"]
        return [flat[row * width:(row + 1) * width] for row in range(rows)]


@dataclasses.dataclass
class KServeServer:
    """A running KServe model server serving ``double`` (v1 and v2, REST and gRPC)."""

    http_port: int
    grpc_port: int
    call_log: pathlib.Path
    process: PredictorProcess
    model: str = MODEL

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @classmethod
    def start(cls, python: pathlib.Path, workdir: pathlib.Path, *, ready_timeout: float = 60.0,
              http_port: int | None = None, grpc_port: int | None = None) -> KServeServer:
        """Start ``kserve_server.py`` with the KServe venv's ``python`` on loopback ports
        (free ones unless given: a restart after a crash reuses the old ones)."""
        workdir = pathlib.Path(workdir)
        http_port, grpc_port = http_port or free_port(), grpc_port or free_port()
        call_log = workdir / "calls.jsonl"
        http_url = f"http://127.0.0.1:{http_port}"

        def ready() -> bool:
            # KServe has no READY hook: poll the server and the model. The gRPC server is
            # started in the same event loop right after the REST one.
            return http_ok(f"{http_url}/v2/health/ready") and http_ok(f"{http_url}/v2/models/{MODEL}/ready")

        process = PredictorProcess(
            "kserve",
            [python, KSERVE_SCRIPT, "--http-port", http_port, "--grpc-port", grpc_port, "--call-log", call_log,
             "--exit-on-stdin-eof"],
            workdir,
            ready,
            ready_timeout=ready_timeout,
        )
        process.start()
        return cls(http_port=http_port, grpc_port=grpc_port, call_log=call_log, process=process)

    def stop(self) -> int | None:
        return self.process.stop()

    def metadata(self, model: str | None = None) -> dict[str, Any]:
        """``GET /v2/models/<model>``."""
        return http_json(f"{self.http_url}/v2/models/{model or self.model}")

    def calls(self) -> list[dict[str, Any]]:
        """The predict calls the model received so far, oldest first (one dict per call)."""
        try:
            text = self.call_log.read_text()
        except FileNotFoundError:
            return []
        # Only complete lines: the server may be appending one right now.
        return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]


def _run_embedding_model(python: pathlib.Path, command: str, texts: Sequence[str], *args: str) -> Any:
    result = subprocess.run(
        [str(python), str(EMBEDDING_MODEL_SCRIPT), command, *args], input=json.dumps(list(texts)),
        capture_output=True, text=True, env=_child_env(), timeout=300, check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"embedding_model.py {command} failed ({result.returncode}): {result.stderr[-3000:]}")
    return json.loads(result.stdout)


def reference_embeddings(python: pathlib.Path, texts: Sequence[str], *, engine: str = "torch") -> list[list[float]]:
    """``embedding_model.embed(texts)`` run by a predictor venv's ``python``: the reference
    every embedding server must equal (float32 values as JSON floats, one list per text).
    ``engine="torch"`` (transformers' BertModel) needs the infinity or kserve-openai venv;
    ``"numpy"`` (``NumpyEncoder``) also runs with the triton venv's python."""
    return _run_embedding_model(python, "embed", texts, "--engine", engine)


def reference_token_counts(python: pathlib.Path, texts: Sequence[str]) -> list[int]:
    """Each text's tokens by the model's tokenizer ([CLS] and [SEP] included, cut at 512);
    any predictor venv with ``tokenizers`` (infinity, kserve-openai, triton)."""
    return _run_embedding_model(python, "tokens", texts)


def embedding_model_folder(python: pathlib.Path) -> pathlib.Path:
    """Build (or find) the model folder with a predictor venv's ``python``; its path (a
    ``tokenizer.json`` for the gateway's tokenizer setting is in it)."""
    result = subprocess.run([str(python), str(EMBEDDING_MODEL_SCRIPT), "build"], capture_output=True, text=True,
                            env=_child_env(), timeout=300, check=True)
    return pathlib.Path(result.stdout.strip().splitlines()[-1])


def reference_rerank_scores(python: pathlib.Path, pairs: Sequence[tuple[str, str]], *,
                            engine: str = "torch") -> list[float]:
    """``rerank_model.score(pairs)`` run by a predictor venv's ``python``: the sigmoid of the test
    cross-encoder's logit for each (query, document) pair. ``"torch"`` needs the infinity venv;
    ``"numpy"`` (``NumpyCrossEncoder``) also runs with the triton venv's python."""
    result = subprocess.run([str(python), str(RERANK_MODEL_SCRIPT), "score", "--engine", engine],
                            input=json.dumps([list(pair) for pair in pairs]), capture_output=True, text=True,
                            env=_child_env(), timeout=300, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"rerank_model.py score failed ({result.returncode}): {result.stderr[-3000:]}")
    return json.loads(result.stdout)


def rerank_model_folder(python: pathlib.Path) -> pathlib.Path:
    """Build (or find) the cross-encoder's folder with a predictor venv's ``python``."""
    result = subprocess.run([str(python), str(RERANK_MODEL_SCRIPT), "build"], capture_output=True, text=True,
                            env=_child_env(), timeout=300, check=True)
    return pathlib.Path(result.stdout.strip().splitlines()[-1])


@dataclasses.dataclass
class VllmScoreServer:
    """The tests' server of vLLM's score and rerank APIs (``vllm_score_server.py``: vLLM's
    wheel needs CUDA), computing with the test cross-encoder, one call at a time; each
    call's pair and query counts in ``calls()``."""

    http_port: int
    process: PredictorProcess
    call_log: pathlib.Path

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @classmethod
    def start(cls, python: pathlib.Path, workdir: pathlib.Path, *, ready_timeout: float = 120.0) -> VllmScoreServer:
        workdir = pathlib.Path(workdir)
        port = free_port()
        call_log = workdir / "calls.jsonl"
        process = PredictorProcess("vllm-score", [python, VLLM_SCORE_SCRIPT, "--port", port, "--call-log", call_log,
                                                  "--exit-on-stdin-eof"],
                                   workdir, None, env={"HF_HUB_OFFLINE": "1"}, ready_timeout=ready_timeout)
        process.start()
        return cls(http_port=port, process=process, call_log=call_log)

    def stop(self) -> int | None:
        return self.process.stop()

    def calls(self) -> list[dict[str, Any]]:
        return _read_call_log(self.call_log)


def post_embeddings(url: str, texts: str | Sequence[Any], *, model: str = EMBEDDING_MODEL,
                    timeout: float = 30.0, **options: Any) -> tuple[int, Any]:
    """POST an OpenAI embeddings body (``input`` = ``texts``: a string, strings, or token ids,
    plus ``options`` such as ``encoding_format`` or ``dimensions``) to ``url``; (status,
    decoded JSON answer)."""
    body = {"model": model, "input": texts if isinstance(texts, str) else list(texts), **options}
    return http_post_json(url, body, timeout=timeout)


def decode_embeddings(answer: dict[str, Any]) -> list[list[float]]:
    """The vectors of an OpenAI embeddings answer in ``index`` order, float or base64
    (little-endian float32, as OpenAI's clients read it)."""
    import array
    import base64

    vectors: list[list[float]] = []
    for item in sorted(answer["data"], key=lambda entry: entry["index"]):
        value = item["embedding"]
        if isinstance(value, str):
            floats = array.array("f", base64.b64decode(value))
            if sys.byteorder != "little":
                floats.byteswap()
            vectors.append(list(floats))
        else:
            vectors.append([float(x) for x in value])
    return vectors


@dataclasses.dataclass
class InfinityServer:
    """A running Infinity 0.0.78 (``infinity_server.py``) serving ``embedding`` with its own
    batching (``batch_size`` rows at most). Routes under ``url_prefix`` (Infinity's default:
    none, so ``/embeddings`` and ``/models``; ``/v1`` for an OpenAI client's ``base_url``)."""

    http_port: int
    url_prefix: str
    process: PredictorProcess
    model: str = EMBEDDING_MODEL

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def base_url(self) -> str:
        """What an OpenAI client takes as ``base_url``: ``<base_url>/embeddings`` is the route."""
        return f"{self.http_url}{self.url_prefix}"

    @property
    def embeddings_url(self) -> str:
        return f"{self.base_url}/embeddings"

    @classmethod
    def start(cls, python: pathlib.Path, workdir: pathlib.Path, *, url_prefix: str = "", batch_size: int = 32,
              count_tokens: bool = False, ready_timeout: float = 180.0, rerank: bool = False) -> InfinityServer:
        """Start ``infinity_server.py`` with the infinity venv's ``python`` on a free loopback port
        (``rerank``: serving the test cross-encoder, ``reranker``, at ``<prefix>/rerank``)."""
        workdir = pathlib.Path(workdir)
        port = free_port()
        # Ready on its READY line: printed once /health and <prefix>/models answer (the
        # engine is loaded in the app's lifespan, before uvicorn accepts).
        process = PredictorProcess(
            "infinity",
            [python, INFINITY_SCRIPT, "--port", port, "--url-prefix", url_prefix, "--batch-size", batch_size,
             *(["--count-tokens"] if count_tokens else []), *(["--model", "rerank"] if rerank else []),
             "--exit-on-stdin-eof"],
            workdir,
            None,
            env={"DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"},
            ready_timeout=ready_timeout,
        )
        process.start()
        return cls(http_port=port, url_prefix=url_prefix, process=process,
                   model=RERANK_MODEL if rerank else EMBEDDING_MODEL)

    def stop(self) -> int | None:
        return self.process.stop()

    def rerank(self, query: str, documents: Sequence[str], **options: Any) -> tuple[int, Any]:
        """``POST <prefix>/rerank`` in Cohere's shape; (status, decoded JSON answer)."""
        body = {"model": self.model, "query": query, "documents": list(documents), **options}
        return http_post_json(f"{self.base_url}/rerank", body)

    def models(self) -> dict[str, Any]:
        """``GET <prefix>/models`` (Infinity's queue and batch stats per model)."""
        return http_json(f"{self.base_url}/models")

    def embed(self, texts: str | Sequence[Any], **options: Any) -> tuple[int, Any]:
        return post_embeddings(self.embeddings_url, texts, model=self.model, **options)


@dataclasses.dataclass
class KServeOpenAIServer:
    """A running KServe 0.21.0 model server (``kserve_openai_server.py``) whose
    ``OpenAIEncoderModel`` ``embedding`` answers ``POST <route_prefix>/v1/embeddings``
    (KServe's default prefix ``/openai``), one forward per request."""

    http_port: int
    grpc_port: int
    route_prefix: str
    call_log: pathlib.Path
    process: PredictorProcess
    model: str = EMBEDDING_MODEL

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def base_url(self) -> str:
        """What an OpenAI client takes as ``base_url``: ``<base_url>/embeddings`` is the route."""
        return f"{self.http_url}{self.route_prefix}/v1"

    @property
    def embeddings_url(self) -> str:
        return f"{self.base_url}/embeddings"

    @classmethod
    def start(cls, python: pathlib.Path, workdir: pathlib.Path, *, route_prefix: str = "/openai",
              ready_timeout: float = 120.0) -> KServeOpenAIServer:
        """Start ``kserve_openai_server.py`` with the kserve-openai venv's ``python`` on free
        loopback ports."""
        workdir = pathlib.Path(workdir)
        http_port, grpc_port = free_port(), free_port()
        call_log = workdir / "calls.jsonl"
        # Ready on its READY line: printed once /v2/health/ready and <prefix>/v1/models answer.
        process = PredictorProcess(
            "kserve-openai",
            [python, KSERVE_OPENAI_SCRIPT, "--http-port", http_port, "--grpc-port", grpc_port,
             "--route-prefix", route_prefix, "--call-log", call_log, "--exit-on-stdin-eof"],
            workdir,
            None,
            ready_timeout=ready_timeout,
        )
        process.start()
        return cls(http_port=http_port, grpc_port=grpc_port, route_prefix=route_prefix, call_log=call_log,
                   process=process)

    def stop(self) -> int | None:
        return self.process.stop()

    def embed(self, texts: str | Sequence[Any], **options: Any) -> tuple[int, Any]:
        return post_embeddings(self.embeddings_url, texts, model=self.model, **options)

    def calls(self) -> list[dict[str, Any]]:
        """The embeddings calls so far, oldest first, one per forward (= one per HTTP request):
        ``{"texts": [its inputs as sent], "tokens": <prompt tokens>, "padded": <rows x longest>,
        "t": <time.time()>}``."""
        return _read_call_log(self.call_log)


def _read_call_log(path: pathlib.Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    # Only complete lines: the server may be appending one right now.
    return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]


def _group_rss_bytes(pids: Sequence[int]) -> dict[int, int]:
    """{pid: resident set size in bytes} from /proc (processes gone meanwhile are left out)."""
    sizes = {}
    for pid in pids:
        try:
            for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    sizes[pid] = int(line.split()[1]) * 1024
        except OSError:
            continue
    return sizes


# AF_UNIX socket paths (TorchServe's worker sockets, ``$TMPDIR/.ts.sock.<port>``) are
# limited to 107 bytes.
_MAX_SOCKET_DIR = 80


@dataclasses.dataclass
class TorchServeServer:
    """A running TorchServe 0.12 serving ``double`` (``nn.Linear``, weight 2*I) and/or the
    computing test models ``image`` and ``encoder`` (``torchserve_server.py`` describes their
    inputs and outputs) through one request envelope: ``kserve`` (KServe v1 over HTTP, and
    TorchServe's own gRPC ``Predictions`` with ``{"instances": [...]}`` in
    ``input["data"]``), ``kservev2`` (Open Inference Protocol over HTTP and gRPC; outputs come
    back flattened and FP64), or ``none`` (TorchServe's own ``/predictions/<m>`` with its own
    batching). The envelope is global to a TorchServe server, hence one server per envelope.

    ``models`` holds the served names (``image:d50`` is served as ``image_d50``); ``model``
    is the first of them, the default of ``describe()``."""

    inference_port: int
    management_port: int
    metrics_port: int
    grpc_port: int
    grpc_management_port: int
    envelope: str
    call_log: pathlib.Path
    process: PredictorProcess
    model: str = MODEL
    models: tuple[str, ...] = (MODEL,)

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.inference_port}"

    @property
    def management_url(self) -> str:
        return f"http://127.0.0.1:{self.management_port}"

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @classmethod
    def start(cls, python: pathlib.Path, workdir: pathlib.Path, *, envelope: str = "kserve",
              models: Sequence[str] = (MODEL,), batch_size: int = 1, max_batch_delay: int = 10,
              ready_timeout: float = 120.0) -> TorchServeServer:
        """Start ``torchserve_server.py`` with the TorchServe venv's ``python`` on free
        loopback ports; return once every model's worker is READY.

        ``models``: ``--model`` specs, ``KIND[:bN][:dMS]`` with KIND ``double``, ``image`` or
        ``encoder``; ``batch_size`` / ``max_batch_delay`` (ms): TorchServe's ``batchSize`` /
        ``maxBatchDelay`` of the image and encoder models (a batch size above 1 needs
        ``envelope="none"``; the script refuses it otherwise)."""
        workdir = pathlib.Path(workdir).resolve()
        # The script's naming rule: a spec's options become part of the served name.
        names = tuple(spec.replace(":", "_") for spec in models)
        ports = [free_port() for _ in range(5)]
        call_log = workdir / "calls.jsonl"
        # TorchServe's TMPDIR/TEMP (pid file, worker sockets, unpacked models) lives in the
        # workdir, unless that path is too long for a Unix socket: then a short one in /tmp,
        # removed by stop().
        tmpdir, cleanup = workdir / "tmp", []
        if len(str(tmpdir)) > _MAX_SOCKET_DIR:
            tmpdir = pathlib.Path(tempfile.mkdtemp(prefix="torchserve-", dir="/tmp" if os.path.isdir("/tmp") else None))
            cleanup.append(tmpdir)

        # Ready when the script says READY: it waits for every model's worker itself (/ping
        # says Healthy seconds before the workers can serve).
        process = PredictorProcess(
            "torchserve",
            [python, TORCHSERVE_SCRIPT, "--workdir", workdir, "--tmpdir", tmpdir,
             "--inference-port", ports[0], "--management-port", ports[1], "--metrics-port", ports[2],
             "--grpc-inference-port", ports[3], "--grpc-management-port", ports[4],
             "--envelope", envelope, *(arg for spec in models for arg in ("--model", spec)),
             "--batch-size", batch_size, "--max-batch-delay", max_batch_delay,
             "--call-log", call_log, "--exit-on-stdin-eof"],
            workdir,
            None,
            ready_timeout=ready_timeout,
            stop_timeout=40.0,  # the script's own `torchserve --stop` waits up to 30 s
            cleanup=cleanup,
        )
        process.start()
        return cls(*ports, envelope=envelope, call_log=call_log, process=process, model=names[0], models=names)

    def stop(self) -> int | None:
        """SIGTERM by PID: the script runs ``torchserve --stop`` with the same TMPDIR."""
        return self.process.stop()

    def describe(self, model: str | None = None) -> list[dict[str, Any]]:
        """``GET <management>/models/<model>`` (workers, batch size, ...)."""
        return http_json(f"{self.management_url}/models/{model or self.model}")

    def calls(self, model: str | None = None) -> list[dict[str, Any]]:
        """The handler calls so far (of ``model``, or of all models), oldest first:
        ``{"model", "envelope", "batch_size", "pid", "t"}`` (the encoder adds ``lengths``, each
        row's real length)."""
        calls = _read_call_log(self.call_log)
        return calls if model is None else [call for call in calls if call.get("model") == model]

    def memory(self) -> dict[int, int]:
        """{pid: RSS bytes} of the server's processes (supervisor, launcher, Java, worker)."""
        return _group_rss_bytes(self.process.group_pids())


def main(argv: Sequence[str] | None = None) -> int:
    """Start one server by hand and keep it running: ``python -m tests.predictors.harness triton``."""
    import argparse

    from tools.predictor_envs import ensure_env  # run from the repo root (python -m)

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("server", choices=["triton", "kserve", "torchserve", "infinity", "kserve-openai"])
    args = parser.parse_args(argv)
    workdir = pathlib.Path(tempfile.mkdtemp(prefix=f"{args.server}-"))
    python = ensure_env(args.server)
    server: TritonServer | KServeServer | TorchServeServer | InfinityServer | KServeOpenAIServer
    server = {"triton": TritonServer, "kserve": KServeServer, "torchserve": TorchServeServer,
              "infinity": InfinityServer, "kserve-openai": KServeOpenAIServer}[args.server].start(python, workdir)
    where = (f"{server.http_url} grpc {server.grpc_address}" if hasattr(server, "grpc_address")
             else f"embeddings {server.embeddings_url}")
    print(f"{args.server} ready in {server.process.startup_seconds:.1f} s: {where} (log {server.process.log_path}); "
          "Ctrl-C stops it", flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
