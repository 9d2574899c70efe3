"""A real Triton Inference Server (via PyTriton) serving the test model ``double``.

Run by the TRITON predictor venv's interpreter (see ``tools.predictor_envs``), never by
the gateway's: PyTriton needs ``numpy<2`` and its own pins. The harness
(``tests.predictors.harness.TritonServer``) starts it; it can also be run by hand::

    <triton venv>/bin/python tests/predictors/triton_server.py \
        --http-port 8000 --grpc-port 8001 --metrics-port 8002 --workdir /tmp/triton-run

(``python -m tools.predictor_envs triton`` prints the venv's python.) Keep ``--workdir``
short: PyTriton's Unix sockets live under it and AF_UNIX paths are limited to 107 bytes.

Model ``double``: input ``INPUT0`` FP32 ``[-1, -1]`` (batch dim + any inner length),
output ``OUTPUT0`` FP32 = 2 * INPUT0. Triton's own dynamic batcher is OFF
(``batcher=None``), so every request reaches the model exactly as sent: what the
gateway batches is what Triton executes, and ``/v2/models/double/stats`` counts it.

Model ``identity`` (PyTriton, version 1): one OPTIONAL input ``INPUT_<DT>`` ``[-1, -1]`` per
datatype PyTriton can express (BOOL, UINT8..UINT64, INT8..INT64, FP16, FP32, FP64, BYTES);
each output ``OUTPUT_<DT>`` is its input, unchanged, for the inputs a request carries.
PyTriton cannot express BF16 (numpy has no bfloat16 and its proxy reads every input with
``as_numpy()``, which Triton's Python backend refuses for BF16), so model
``identity_bf16`` (``INPUT_BF16`` -> ``OUTPUT_BF16``) is a plain Python-backend model
loaded into the same Triton through its model-repository API: it passes the tensor on
through DLPack, never as numpy. Both have ``max_batch_size`` 64 and no dynamic batcher.

Model ``embed``: the test text encoder of ``embedding_model.py`` (a BERT with random
weights, mean pooling, L2 normalisation), input ``text`` BYTES ``[-1, 1]`` (one UTF-8
text per row), output ``embedding`` FP32 ``[-1, 128]``; ``max_batch_size`` 64 and no
dynamic batcher, like ``double``: one request, one execution of all its rows. It runs in
numpy (``embedding_model.NumpyEncoder``: ``tokenizers`` for the WordPiece tokenizer,
``safetensors`` for the weights, from the same model folder the torch servers load), not
torch: a few MB in this venv instead of hundreds, and no second numpy ABI beside PyTriton's
numpy<2; its answers equal ``embedding_model.embed`` (transformers' BertModel) to ~1e-7.
The folder is built here if no other venv has built it yet (numpy alone can).

Model ``rerank``: the test cross-encoder of ``rerank_model.py`` (that encoder with a
one-label classification head), inputs ``query`` and ``document`` BYTES ``[-1, 1]`` (one
pair per row, whatever query each row has), output ``score`` FP32 ``[-1, 1]``, the sigmoid of
the logit; ``max_batch_size`` 64, no dynamic batcher; in numpy
(``rerank_model.NumpyCrossEncoder``), equal to ``rerank_model.score`` to ~1e-7.

Prints ``READY`` on stdout once Triton and the models answer; stops cleanly on
SIGTERM / SIGINT (exit code 0), or exits 1 if Triton dies on its own.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import signal
import sys
import sysconfig
import threading

from stdin_watchdog import on_stdin_eof  # a sibling module: scripts run with their own venv

MODEL_NAME = "double"
EMBED_MODEL = "embed"
RERANK_MODEL = "rerank"
IDENTITY_MODEL = "identity"
IDENTITY_BF16_MODEL = "identity_bf16"
# The identity model's datatypes (BF16 is in IDENTITY_BF16_MODEL: PyTriton cannot express it).
IDENTITY_DATATYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
                      "FP16", "FP32", "FP64", "BYTES")

# identity_bf16: a plain Python-backend model. BF16 tensors cannot become numpy arrays in
# Triton's Python backend, so the input goes out again as the same DLPack buffer.
IDENTITY_BF16_CODE = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT_BF16")
            output = pb_utils.Tensor.from_dlpack("OUTPUT_BF16", tensor.to_dlpack())
            responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
        return responses
"""
IDENTITY_BF16_CONFIG = {
    "name": IDENTITY_BF16_MODEL,
    "backend": "python",
    "max_batch_size": 64,
    "input": [{"name": "INPUT_BF16", "data_type": "TYPE_BF16", "dims": [-1]}],
    "output": [{"name": "OUTPUT_BF16", "data_type": "TYPE_BF16", "dims": [-1]}],
    "instance_group": [{"kind": "KIND_CPU", "count": 1}],
}


def _parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    parser.add_argument("--workdir", type=pathlib.Path, required=True)
    parser.add_argument(
        "--remove-workdir", action="store_true", help="delete --workdir on exit (the harness's throwaway dir)"
    )
    parser.add_argument(
        "--exit-on-stdin-eof", action="store_true", help="shut down when stdin closes (the harness's watchdog)"
    )
    return parser.parse_args(argv)


def _prepare_environment(workdir: pathlib.Path) -> None:
    """Environment fixes that must be in place before pytriton is imported / Triton starts."""
    workdir.mkdir(parents=True, exist_ok=True)
    # PyTriton reads PYTRITON_HOME at import time and puts its workspace (model store,
    # sockets) there; keep it inside the test run instead of ~/.cache/pytriton.
    os.environ["PYTRITON_HOME"] = str(workdir / "pytriton_home")
    # The Python backend stub links libpython3.11.so.1.0 by soname; without this it picks
    # the system's older libpython and the model fails to load ("'_thread.RLock' object
    # has no attribute '_recursion_count'"). The harness already sets this; repeat it
    # here so the script also works when started by hand. Triton inherits os.environ.
    libdir = sysconfig.get_config_var("LIBDIR")
    paths = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    if libdir and (not paths or paths[0] != libdir):
        os.environ["LD_LIBRARY_PATH"] = os.pathsep.join([libdir, *paths])


def _load_identity_bf16(http_port: int) -> None:
    """Load ``identity_bf16`` through Triton's model-repository API (config and model.py
    inline, as PyTriton loads its own models)."""
    import base64
    import json
    import urllib.request

    body = json.dumps({"parameters": {
        "config": json.dumps(IDENTITY_BF16_CONFIG),
        "file:1/model.py": base64.b64encode(IDENTITY_BF16_CODE.encode()).decode(),
    }}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{http_port}/v2/repository/models/{IDENTITY_BF16_MODEL}/load", data=body,
        headers={"Content-Type": "application/json"}, method="POST")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=120) as response:
        response.read()


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    _prepare_environment(args.workdir)

    # Imported only now: PYTRITON_HOME must be set first.
    import numpy as np
    from pytriton.decorators import batch
    from pytriton.model_config import ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

    # Triton's Python stub runs in this venv; numpy 2 there breaks output tensors
    # ("output tensor shape does not match size of output"). The venv pins numpy<2.
    if int(np.__version__.split(".")[0]) >= 2:
        print(f"numpy {np.__version__} found; the Triton venv needs numpy<2", file=sys.stderr)
        return 2

    @batch
    def infer_double(INPUT0: np.ndarray) -> dict[str, np.ndarray]:  # noqa: N803 (tensor name)
        return {"OUTPUT0": (INPUT0 * 2).astype(np.float32)}

    def infer_identity(requests: list) -> list[dict[str, np.ndarray]]:
        # Not @batch: inputs are optional, so requests may carry different sets of them.
        return [{"OUTPUT_" + name.removeprefix("INPUT_"): value for name, value in request.items()}
                for request in requests]

    import embedding_model  # a sibling module, like stdin_watchdog

    encoder = embedding_model.NumpyEncoder()

    @batch
    def infer_embed(text: np.ndarray) -> dict[str, np.ndarray]:
        texts = [bytes(row[0]).decode("utf-8", errors="replace") for row in text]
        return {"embedding": encoder.embed(texts)}

    import rerank_model

    cross_encoder = rerank_model.NumpyCrossEncoder()

    @batch
    def infer_rerank(query: np.ndarray, document: np.ndarray) -> dict[str, np.ndarray]:
        pairs = [(bytes(q[0]).decode("utf-8", errors="replace"), bytes(d[0]).decode("utf-8", errors="replace"))
                 for q, d in zip(query, document, strict=True)]
        return {"score": cross_encoder.score(pairs).reshape(-1, 1)}

    identity_dtypes = {"BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
                       "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
                       "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
                       "BYTES": np.bytes_}

    config = TritonConfig(
        http_address="127.0.0.1",
        http_port=args.http_port,
        grpc_address="127.0.0.1",
        grpc_port=args.grpc_port,
        metrics_address="127.0.0.1",
        metrics_port=args.metrics_port,
        allow_gpu_metrics=False,
        # Below 5 s PyTriton can orphan the Python stub process on shutdown.
        exit_timeout_secs=10,
    )

    stop_requested = threading.Event()

    def _on_signal(signum: int, _frame: object) -> None:
        stop_requested.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    if args.exit_on_stdin_eof:
        on_stdin_eof(lambda: os.kill(os.getpid(), signal.SIGTERM))

    # PyTriton 0.7 protects shared-memory, model-repository, statistics, trace and logging
    # with a random access token by default (403 "expecting header 'triton-access-token'"),
    # unlike a stock tritonserver. Tests read /v2/models/<m>/stats, and the server only
    # listens on loopback: restrict nothing, as tritonserver does out of the box.
    security = TritonSecurityConfig(restricted_endpoints=[])
    triton = Triton(config=config, security_config=security)
    try:
        triton.bind(
            model_name=MODEL_NAME,
            infer_func=infer_double,
            inputs=[Tensor(name="INPUT0", dtype=np.float32, shape=(-1,))],
            outputs=[Tensor(name="OUTPUT0", dtype=np.float32, shape=(-1,))],
            # batcher=None: Triton's dynamic batching OFF (PyTriton's default is ON).
            config=ModelConfig(max_batch_size=64, batcher=None),
            strict=True,
        )
        triton.bind(
            model_name=IDENTITY_MODEL,
            infer_func=infer_identity,
            inputs=[Tensor(name=f"INPUT_{dt}", dtype=identity_dtypes[dt], shape=(-1,), optional=True)
                    for dt in IDENTITY_DATATYPES],
            outputs=[Tensor(name=f"OUTPUT_{dt}", dtype=identity_dtypes[dt], shape=(-1,))
                     for dt in IDENTITY_DATATYPES],
            config=ModelConfig(max_batch_size=64, batcher=None),
            strict=False,  # a request's outputs are those of the inputs it carries
        )
        triton.bind(
            model_name=EMBED_MODEL,
            infer_func=infer_embed,
            inputs=[Tensor(name="text", dtype=np.bytes_, shape=(1,))],
            outputs=[Tensor(name="embedding", dtype=np.float32, shape=(embedding_model.DIMENSIONS,))],
            config=ModelConfig(max_batch_size=64, batcher=None),
            strict=True,
        )
        triton.bind(
            model_name=RERANK_MODEL,
            infer_func=infer_rerank,
            inputs=[Tensor(name="query", dtype=np.bytes_, shape=(1,)), Tensor(name="document", dtype=np.bytes_, shape=(1,))],
            outputs=[Tensor(name="score", dtype=np.float32, shape=(1,))],
            config=ModelConfig(max_batch_size=64, batcher=None),
            strict=True,
        )
        triton.run()  # returns once the server and the models are ready
        _load_identity_bf16(args.http_port)
        # On a line of its own, in ONE write: Triton writes its log to the same file, in
        # pieces, and may be mid-line right now ("model_lifecycl" READY "e.cc:839] ..." was
        # seen); newlines on both sides keep READY alone on its line wherever it lands.
        sys.stdout.write("\nREADY\n")
        sys.stdout.flush()
        # Wake up now and then to notice a Triton that died under us.
        while not stop_requested.wait(timeout=1.0):
            if not triton.is_alive():
                print("Triton is no longer alive", file=sys.stderr, flush=True)
                return 1
        return 0
    finally:
        triton.stop()
        if args.remove_workdir:
            shutil.rmtree(args.workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
