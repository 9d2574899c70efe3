"""The gateway's resident memory after large gRPC messages: what `gateway/observe/memory.py` is for.

Starts `python -m gateway serve` on its embedded default (model `demo`, FP32 `[-1, -1]`),
sends `--messages` distinct `ModelInfer` calls of `--mb` MiB each (random float32 in
`raw_input_contents`, each on its own connection so that under `--workers` they spread over
the processes, `--concurrency` at a time), then reads every gateway process's VmRSS: before
(after one small call), right after the burst, and after `--idle-s` seconds with no traffic.
With `--gateway-root` it runs another checkout's gateway (e.g. an older commit, extracted
with `git archive`), to compare::

    python -m tools.large_message_rss --messages 40 --mb 12 --workers 2

It prints one line per process and a JSON summary. It measures; it asserts nothing, and it
must not know the gateway's code (it talks to it over gRPC, and reads /proc).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np

from tools.processes import ROOT, ServerProcess, child_pids, process_rss_kb, python_module_command
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc


def gateway_rss_kb(gateway: ServerProcess) -> dict[int, int]:
    """VmRSS of the gateway's process and of the workers it started (the batcher first)."""
    return {pid: process_rss_kb(pid) for pid in [gateway.pid, *child_pids(gateway.pid)]}


def infer(address: str, floats: int, seed: int) -> None:
    """One ModelInfer of `floats` random float32 values, on a connection of its own."""
    request = pb.ModelInferRequest(model_name="demo")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, floats])
    request.raw_input_contents.append(np.random.default_rng(seed).random(floats, dtype=np.float32).tobytes())
    options = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_receive_message_length", -1),
               ("grpc.max_send_message_length", -1)]
    with grpc.insecure_channel(address, options=options) as channel:
        answer = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=120)
    if len(answer.raw_output_contents[0]) != floats * 4:
        raise RuntimeError(f"message {seed}: {len(answer.raw_output_contents[0])} bytes back, not {floats * 4}")


def measure(messages: int, mb: float, concurrency: int, workers: int, idle_s: float, root: Path) -> dict:
    gateway = ServerProcess(python_module_command("gateway", "serve", "--http-port", "0", "--grpc-port", "0",
                                                  "--log-level", "WARNING", "--workers", str(workers)),
                            name="gateway", cwd=root).start()
    try:
        address = gateway.grpc_address
        floats = int(mb * 2**20) // 4
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(lambda seed: infer(address, 4, seed), range(2 * workers)))  # warm: every process answered
            time.sleep(1.0)
            before = gateway_rss_kb(gateway)
            started = time.monotonic()
            list(pool.map(lambda seed: infer(address, floats, seed), range(messages)))
            seconds = time.monotonic() - started
        after = gateway_rss_kb(gateway)
        time.sleep(idle_s)
        idle = gateway_rss_kb(gateway)
    finally:
        gateway.stop()
    processes = [{"pid": pid, "before_mib": before.get(pid, 0) / 1024, "after_mib": after.get(pid, 0) / 1024,
                  "idle_mib": idle.get(pid, 0) / 1024} for pid in before]
    return {"messages": messages, "mb": mb, "concurrency": concurrency, "workers": workers, "idle_s": idle_s,
            "root": str(root), "burst_s": seconds, "processes": processes,
            "total": {key: sum(p[key] for p in processes) for key in ("before_mib", "after_mib", "idle_mib")}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.large_message_rss", description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=40, help="distinct ModelInfer calls (default 40)")
    parser.add_argument("--mb", type=float, default=12, help="MiB of FP32 per message (default 12)")
    parser.add_argument("--concurrency", type=int, default=4, help="calls at once (default 4)")
    parser.add_argument("--workers", type=int, default=1, help="the gateway's --workers (default 1)")
    parser.add_argument("--idle-s", type=float, default=5.0, help="seconds idle before the last reading (default 5)")
    parser.add_argument("--gateway-root", type=Path, default=ROOT,
                        help="the checkout whose gateway runs (default this one)")
    args = parser.parse_args(argv)
    result = measure(args.messages, args.mb, args.concurrency, args.workers, args.idle_s, args.gateway_root)
    for index, process in enumerate(result["processes"]):
        role = "gateway" if args.workers == 1 else ("batcher" if index == 0 else f"worker {index}")
        print(f"{role:>9} pid {process['pid']}: RSS {process['before_mib']:.0f} MiB before, "
              f"{process['after_mib']:.0f} after {args.messages} x {args.mb:g} MiB, "
              f"{process['idle_mib']:.0f} after {args.idle_s:g} s idle")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
