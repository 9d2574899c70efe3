"""The `perf-analyzer` scenario of `python -m tools.bench`: Triton's perf_analyzer as the load.

The unmodified binary (`tools.client_tools`, installed on first use) over HTTP, gRPC and gRPC
streaming at 1 and 16 concurrent requests, against the gateway's embedded 5 ms model.

It holds this scenario only; the harness (servers, load, rows, checks) is
`tools.bench.harness`'. It must not import another scenario.
"""
from __future__ import annotations

import csv
import subprocess
from typing import Any

from tools.bench.harness import Context, Gateway


def perf_analyzer_scenario(ctx: Context) -> dict[str, Any]:
    """Triton's perf_analyzer, unmodified, as the load: HTTP, gRPC and gRPC streaming at 1 and
    16 concurrent requests, against the gateway on its embedded 5 ms model."""
    from tools.client_tools import perf_analyzer  # installs it on first use

    tool = perf_analyzer()
    runs = []
    with Gateway(ctx.log_dir, "gateway-perf-analyzer", [{"name": "demo", "backend": "simulated"}]).start() as gateway:
        for name, address, mode in [("http", gateway.http_address, ["-i", "http"]),
                                    ("grpc", gateway.grpc_address, ["-i", "grpc"]),
                                    ("grpc --streaming", gateway.grpc_address, ["-i", "grpc", "--streaming"])]:
            ctx.say(f"  perf-analyzer: {name}")
            csv_path = ctx.log_dir / f"perf-analyzer-{name.replace(' ', '')}.csv"
            argv = tool.argv("-m", "demo", "-u", address, *mode, "--shape", "INPUT0:4", "--concurrency-range",
                             "1:16:15", "--measurement-interval", str(int(ctx.duration * 1000)), "-f", str(csv_path))
            result = subprocess.run(argv, env=tool.env(), capture_output=True, text=True, timeout=600)
            if result.returncode != 0:
                raise RuntimeError(f"perf_analyzer failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
            for line in csv.DictReader(csv_path.read_text().splitlines()):
                runs.append({"name": name, "concurrency": int(line["Concurrency"]),
                             "rps": float(line["Inferences/Second"]),
                             "p50_ms": int(line["p50 latency"]) / 1000, "p99_ms": int(line["p99 latency"]) / 1000,
                             "queue_ms": int(line["Server Queue"]) / 1000,
                             "compute_ms": int(line["Server Compute Infer"]) / 1000})
    return {
        "title": "perf_analyzer against the gateway",
        "setup": f"Triton's perf_analyzer (tritonclient 2.50.0's binary, unmodified), {ctx.duration:g} s measurement "
                 f"windows, batch size 1, INPUT0 of 4 FP32, against the gateway's embedded model (5 ms per call). "
                 f"Server queue and compute are read from the gateway's Triton statistics.",
        "tables": [{"title": "", "rows": runs, "columns": [
            ["name", "protocol", "s"], ["concurrency", "concurrency", "d"], ["rps", "infer/s", ".1f"],
            ["p50_ms", "p50 ms", ".2f"], ["p99_ms", "p99 ms", ".2f"], ["queue_ms", "server queue ms", ".2f"],
            ["compute_ms", "server compute ms", ".2f"]]}],
        "checks": [], "runs": runs, "plots": {},
    }
