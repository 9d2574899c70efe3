"""A real Triton, through PyTriton, serving one model of a known cost: for the benchmarks.

PyTriton is how many users put a Python model behind Triton; its proxy between Triton
and the Python callable adds its own time to every execution, which changes what the
gateway's best `max_inflight` is (see the `inflight` scenario). This script holds only
that: the model and its server. It must not know the gateway, the scenarios or the tests.

Run by the Triton venv's interpreter (`python -m tools.predictor_envs triton` prints it),
never the gateway's (PyTriton needs numpy<2); it imports nothing of this repository::

    <triton venv>/bin/python tools/pytriton_model.py --call-ms 5 --per-row-ms 0

Model `cost`: input `INPUT0` FP32 [-1, 4], output `OUTPUT0` = 2 * INPUT0, max_batch_size 64;
each execution sleeps call-ms + per-row-ms per row (a device's time: the CPU is free).
Triton's dynamic batcher is off (`batcher=None`), so each gateway batch is one execution;
`--dynamic-batcher` turns it on at Triton's defaults, `--max-queue-delay-us` tunes its
delay (the peers scenario measures Triton's own batching this way).
Prints `READY http=PORT grpc=PORT` once ready; stops Triton on SIGTERM or SIGINT.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import signal
import sys
import sysconfig
import tempfile
import threading
import time

# Run by the Triton venv's interpreter, by path: the project's one free_port (standard
# library only) is reached through the repository root.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from tools.processes import free_port  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--call-ms", type=float, default=5.0)
    parser.add_argument("--per-row-ms", type=float, default=0.0)
    parser.add_argument("--dynamic-batcher", action="store_true", help="Triton's own dynamic batcher on")
    parser.add_argument("--max-queue-delay-us", type=int, default=0, help="its max_queue_delay_microseconds")
    args = parser.parse_args(argv)
    # Triton logs to the stdout it inherits: keep stdout for the READY line, send the rest to stderr.
    ready_line = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    # Short: PyTriton's AF_UNIX socket paths live under it (107 bytes at most).
    workdir = tempfile.mkdtemp(prefix="pt", dir="/tmp")
    os.environ["PYTRITON_HOME"] = workdir
    libdir = sysconfig.get_config_var("LIBDIR")  # Triton's Python stub links this interpreter's libpython
    os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [libdir, os.environ.get("LD_LIBRARY_PATH")]))

    import numpy as np
    from pytriton.decorators import batch
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

    call_s, per_row_s = args.call_ms / 1000.0, args.per_row_ms / 1000.0
    batcher = DynamicBatcher(max_queue_delay_microseconds=args.max_queue_delay_us) if args.dynamic_batcher else None

    @batch
    def infer(INPUT0: np.ndarray) -> dict[str, np.ndarray]:  # noqa: N803 (the tensor's name)
        time.sleep(call_s + per_row_s * len(INPUT0))
        return {"OUTPUT0": (INPUT0 * 2).astype(np.float32)}

    http_port, grpc_port = free_port(), free_port()
    config = TritonConfig(http_address="127.0.0.1", http_port=http_port, grpc_address="127.0.0.1",
                          grpc_port=grpc_port, metrics_address="127.0.0.1", metrics_port=free_port(),
                          allow_gpu_metrics=False, exit_timeout_secs=10)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        with Triton(config=config, security_config=TritonSecurityConfig(restricted_endpoints=[])) as triton:
            triton.bind(model_name="cost", infer_func=infer,
                        inputs=[Tensor(name="INPUT0", dtype=np.float32, shape=(4,))],
                        outputs=[Tensor(name="OUTPUT0", dtype=np.float32, shape=(4,))],
                        config=ModelConfig(max_batch_size=64, batcher=batcher))
            triton.run()
            print(f"READY http={http_port} grpc={grpc_port}", file=ready_line, flush=True)
            while not stop.wait(0.2):
                if not triton.is_alive():
                    return 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
