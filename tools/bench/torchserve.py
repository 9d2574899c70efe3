"""The `torchserve` scenario of `python -m tools.bench`: the gateway against TorchServe's own
batching, on models that compute.

The real TorchServe 0.12 (`tests/predictors/torchserve_server.py`, run by path with the
TorchServe venv's python) serves two real PyTorch models on the CPU, random weights built
in code: `image`, a small CNN that decodes PNG uploads with Pillow (TorchServe's image
classifier shape: top-5 classes), and `encoder`, a 2-layer `nn.TransformerEncoder` over
token ids of any length. Two servers:

* TorchServe's own API and batching (no envelope): `image` at batch 8 with
  `max_batch_delay` 10 ms and (`image_d50`) 50 ms, as in its docs; `image_b1`, unbatched;
  `encoder` at batch 8, 10 ms (its handler pads each batch to its longest row).
* behind the `kserve` envelope with `batchSize` 1, for the gateway: every gateway batch is
  one handler call.

The gateway (max batch 8) sits in front of the second: `image` (adaptive), `image-window`
(the `window` policy at 10 ms: the KServe batcher's semantics) and `encoder` (the gateway
pads, to buckets). Loads: the real `hey` binary PUTting one PNG (`curl -T`'s request) at
1, 5 and 32 clients; for the encoder, closed-loop clients with log-normal lengths (median
48, 8..512). Each row reports req/s, p50 and p99, and the CPU of the whole path per
request (the gateway, TorchServe's Java front end and its Python workers).

It holds this scenario only; the harness (servers, rows, checks) is `tools.bench.harness`'.
It must not import another scenario.
"""
from __future__ import annotations

import asyncio
import io
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from tools.bench.harness import (
    Context,
    Gateway,
    Server,
    check,
    closed_loop,
    hey,
    lognormal_lengths,
)
from tools.processes import ROOT

SCRIPT = ROOT / "tests" / "predictors" / "torchserve_server.py"
MAX_BATCH, DELAY_MS = 8, 10
# A second batch in flight lets TorchServe's front end take it in while its worker computes the first;
# "auto" learns whether it pays (here it does: measured 264 -> 284-291 req/s at 32 clients).
INFLIGHT = "auto"
IMAGE_CLIENTS = (1, 5, 32)
ENCODER_CLIENTS = 32
# Few, wide buckets (about 2x apart): with 32 clients and batches of 8 each bucket still fills a batch.
# Measured in one run against 10 buckets 16..512 and against 5: 108k vs 76k and 95k tokens/s.
ENCODER_BUCKETS = [24, 48, 96, 160, 256, 384, 512]


class TorchServe(Server):
    """The real TorchServe on the benchmark's models, in its own short /tmp workdir (its
    worker sockets live there), removed when it stops."""

    def __init__(self, log_dir: Path, name: str, *options: str) -> None:
        from tools.predictor_envs import ensure_env

        self.workdir = Path(tempfile.mkdtemp(prefix="tsb", dir="/tmp"))
        command = [str(ensure_env("torchserve")), str(SCRIPT), "--workdir", str(self.workdir), *options]
        super().__init__(name, command, log_dir)
        self.ready_timeout = 300  # a first start builds the TorchServe venv and archives the models


def png(size: int = 224, seed: int = 7) -> bytes:
    """A photo-sized PNG of seeded noise over a gradient (made here: no download)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    gradient = np.linspace(0, 255, size, dtype=np.float32)[None, :, None]
    pixels = np.clip(gradient + rng.normal(0, 40, (size, size, 3)), 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def _cpu(servers: list[Server]) -> float:
    return sum(server.group_cpu_seconds() for server in servers)


def torchserve_scenario(ctx: Context) -> dict[str, Any]:
    """TorchServe's own batching vs the gateway in front of TorchServe (its batching off)."""
    own = TorchServe(ctx.log_dir, "torchserve-own", "--envelope", "none", "--batch-size", str(MAX_BATCH),
                     "--max-batch-delay", str(DELAY_MS), "--model", "image", "--model", "image:d50",
                     "--model", "image:b1", "--model", "encoder")
    enveloped = TorchServe(ctx.log_dir, "torchserve-kserve", "--envelope", "kserve", "--model", "image",
                           "--model", "encoder")
    image_path = ctx.log_dir / "kitten.png"
    image_path.parent.mkdir(parents=True, exist_ok=True)
    image_path.write_bytes(png())
    runs: list[dict[str, Any]] = []
    try:
        own.start()
        enveloped.start()
        url = enveloped.http_url
        batching = {"max_batch_size": MAX_BATCH, "timeout_s": 60, "max_inflight": INFLIGHT}
        models: list[dict[str, Any]] = [
            {"name": "image", "backend": "torchserve", "protocol": "http", "url": url, "batching": batching},
            {"name": "image-grpc", "backend": "torchserve", "protocol": "grpc", "url": enveloped.grpc_address,
             "backend_model": "image", "batching": batching},
            {"name": "image-window", "backend": "torchserve", "protocol": "http", "url": url, "backend_model": "image",
             "batching": {**batching, "policy": "window", "max_latency_ms": DELAY_MS}},
            {"name": "encoder", "backend": "torchserve", "protocol": "http", "url": url,
             "inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [-1, -1], "pad": {"dim": 1, "value": 0}},
                        {"name": "length", "datatype": "INT64", "shape": [-1, 1], "generate": "length"}],
             "outputs": [{"name": "embedding", "datatype": "FP32", "shape": [-1, 64]}],
             "batching": {**batching, "buckets": ENCODER_BUCKETS}},
        ]
        with Gateway(ctx.log_dir, "gateway-torchserve", models).start() as gateway:
            plan: list[tuple[str, str, list[Server]]] = [
                ("TorchServe, unbatched", f"{own.http_url}/predictions/image_b1", [own]),
                (f"TorchServe batching, {DELAY_MS} ms", f"{own.http_url}/predictions/image", [own]),
                ("TorchServe batching, 50 ms", f"{own.http_url}/predictions/image_d50", [own]),
                ("gateway -> TorchServe (HTTP)", f"{gateway.http_url}/predictions/image", [gateway, enveloped]),
                ("gateway -> TorchServe (gRPC)", f"{gateway.http_url}/predictions/image-grpc", [gateway, enveloped]),
                (f"gateway window {DELAY_MS} ms", f"{gateway.http_url}/predictions/image-window", [gateway, enveloped]),
            ]
            for _, target, _ in plan:
                hey(target, image_path, 4, 1.0, method="PUT", content_type="image/png")  # warm up: connections, the workers' first calls
            for rep in range(ctx.repeat):
                for clients in IMAGE_CLIENTS:
                    for name, target, servers in plan:
                        ctx.say(f"  torchserve: {name}, {clients} clients ({rep + 1}/{ctx.repeat})")
                        cpu = _cpu(servers)
                        result = hey(target, image_path, clients, ctx.duration, method="PUT", content_type="image/png")
                        cpu_us = (_cpu(servers) - cpu) / max(result["ok"], 1) * 1e6
                        runs.append({"table": "image", "name": name, "clients": clients, **result, "cpu_us": cpu_us})
            runs += _encoder_runs(ctx, own, enveloped, gateway)
    finally:
        enveloped.stop()
        own.stop()
    return _report(ctx, runs)


def _encoder_runs(ctx: Context, own: TorchServe, enveloped: TorchServe, gateway: Gateway) -> list[dict[str, Any]]:
    lengths = lognormal_lengths(2000, seed=5)
    bodies = [json.dumps([(7 * i + n) % 997 + 1 for i in range(n)]).encode() for n in lengths]
    mean_tokens = statistics.fmean(lengths)
    runs = []
    plan: list[tuple[str, str, list[Server]]] = [
        (f"TorchServe batching, {DELAY_MS} ms (pads to longest)", f"{own.http_url}/predictions/encoder", [own]),
        ("gateway -> TorchServe, buckets", f"{gateway.http_url}/predictions/encoder", [gateway, enveloped]),
    ]
    for rep in range(ctx.repeat):
        for name, url, servers in plan:
            ctx.say(f"  torchserve: encoder, {name} ({rep + 1}/{ctx.repeat})")
            asyncio.run(closed_loop(url, bodies[:100], ENCODER_CLIENTS, 1.0))  # warm up, not measured
            cpu = _cpu(servers)
            result = asyncio.run(closed_loop(url, bodies, ENCODER_CLIENTS, ctx.duration))
            cpu_us = (_cpu(servers) - cpu) / max(result["ok"], 1) * 1e6
            runs.append({"table": "encoder", "name": name, "clients": ENCODER_CLIENTS, **result,
                         "tokens_per_s": result["rps"] * mean_tokens, "cpu_us": cpu_us})
    return runs


def _median(runs: list[dict[str, Any]], table: str) -> list[dict[str, Any]]:
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for run in runs:
        if run["table"] == table:
            groups.setdefault((run["name"], run["clients"]), []).append(run)
    rows = []
    for (name, clients), group in groups.items():
        row: dict[str, Any] = {"name": name, "clients": clients}
        for key in ("rps", "p50_ms", "p99_ms", "cpu_us", "tokens_per_s", "errors"):
            values = [g[key] for g in group if g.get(key) is not None]
            row[key] = statistics.median(values) if values else None
        rows.append(row)
    return rows


def _report(ctx: Context, runs: list[dict[str, Any]]) -> dict[str, Any]:
    image, encoder = _median(runs, "image"), _median(runs, "encoder")
    at = {(row["name"], row["clients"]): row for row in image}
    checks = []
    own10, gateway = f"TorchServe batching, {DELAY_MS} ms", "gateway -> TorchServe (HTTP)"
    if (own10, 32) in at and (gateway, 32) in at:
        ratio = at[(gateway, 32)]["rps"] / max(at[(own10, 32)]["rps"], 1e-9)
        checks.append(check("image, 32 clients: throughput vs TorchServe's batching", ">= 1.0x", f"{ratio:.2f}x",
                            ratio >= 1.0))
    for clients in (1, 5):
        if (own10, clients) in at and (gateway, clients) in at:
            ratio = at[(gateway, clients)]["p50_ms"] / max(at[(own10, clients)]["p50_ms"], 1e-9)
            checks.append(check(f"image, {clients} clients: p50 vs TorchServe's batching at {DELAY_MS} ms", "<= 0.5x",
                                f"{ratio:.2f}x", ratio <= 0.5))
    if len(encoder) == 2:
        ts, gw = encoder
        ratio = gw["tokens_per_s"] / max(ts["tokens_per_s"], 1e-9)
        checks.append(check("encoder: tokens/s vs TorchServe's batching", ">= 1.5x", f"{ratio:.2f}x", ratio >= 1.5))
        checks.append(check("encoder: p99", "equal or better", f"{gw['p99_ms']:.0f} vs {ts['p99_ms']:.0f} ms",
                            gw["p99_ms"] <= ts["p99_ms"]))
    columns = [["name", "path", "s"], ["clients", "clients", "d"], ["rps", "req/s", ".0f"], ["p50_ms", "p50 ms", ".1f"],
               ["p99_ms", "p99 ms", ".1f"], ["cpu_us", "CPU us/req", ".0f"], ["errors", "errors", ".0f"]]
    return {
        "title": "TorchServe: its own batching vs the gateway in front of it, on models that compute",
        "setup": f"The real TorchServe 0.12 (CPU torch, one worker per model, one thread) on the same 2-core machine "
                 f"as the gateway and the load. image: a 3-conv CNN on 224x224 RGB decoded with Pillow, top-5 out; "
                 f"hey PUTs one {len(png()) // 1024} KiB PNG (curl -T's request) for {ctx.duration:g} s per run. "
                 f"encoder: a 2-layer TransformerEncoder (d_model 64), {ENCODER_CLIENTS} closed-loop clients, "
                 f"log-normal lengths (median 48, 8..512), JSON token ids. TorchServe's batching: batch_size "
                 f"{MAX_BATCH}, max_batch_delay {DELAY_MS} ms (and 50 ms); the gateway: max_batch_size {MAX_BATCH}, "
                 f"adaptive, max_inflight {INFLIGHT}, in front of TorchServe's kserve envelope with batchSize 1; the encoder padded by the "
                 f"gateway to buckets {ENCODER_BUCKETS}. CPU is the whole path's (gateway + TorchServe's Java front "
                 f"end and Python workers) per answered request. Medians of {ctx.repeat} run(s).",
        "tables": [{"title": "image classifier (hey, PUT of a PNG)", "rows": image, "columns": columns},
                   {"title": "text encoder (closed loop, skewed lengths)", "rows": encoder,
                    "columns": [*columns[:2], ["tokens_per_s", "tokens/s", ".0f"], *columns[2:]]}],
        "checks": checks, "runs": runs, "plots": {},
    }
