"""The `triton` scenario of `python -m tools.bench`: the gateway against Triton's own batcher.

The real tritonserver (`tools.triton_direct`: the binary, a plain Python-backend model, no
PyTriton proxy) serves one model two ways: `cost` with no dynamic batcher (each call is one
execution) and `cost_batched` with Triton's own dynamic batcher. Closed-loop gRPC clients
(1, 5 and 128) call Triton directly (no batching, then its batcher) and the gateway in front
of `cost` (over OIP gRPC and over OIP HTTP with the binary extension). A second table is the
one-client latency on Triton's `free` model, direct and through the gateway, for both front
ends and both predictor protocols: what the gateway adds to a round trip. With `--before`,
another checkout's gateway runs the gRPC rows and the latency paths in the same rounds.

It holds this scenario only; the harness (servers, load, rows) is `tools.bench.harness`'.
It must not import another scenario.
"""
from __future__ import annotations

import json
import statistics
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from tools.bench.harness import (
    OIP_JSON_BODY,
    Context,
    Gateway,
    RealTriton,
    check,
    http_request,
    load,
    oip_body,
    run_row,
    warm_up,
)

CALL_MS, PER_ROW_MS, MAX_BATCH = 20.0, 0.25, 64
CLIENTS = (1, 5, 128)
BEFORE = "before: "  # with --before: the runs through another checkout's gateway, in the same rounds
ON_UVLOOP = "uvloop: "  # the latency paths through a second gateway, on uvloop (`serve --loop uvloop`)


class Triton(RealTriton):
    """The real tritonserver on its plain Python-backend models, with their execution counts."""

    def __init__(self, log_dir: Path) -> None:
        super().__init__(log_dir, "direct", CALL_MS, PER_ROW_MS)

    def executions(self, model: str) -> tuple[int, int]:
        """(inferences, executions) Triton has counted for `model` so far."""
        status, body = http_request("GET", f"{self.http_url}/v2/models/{model}/stats")
        if status != 200:  # Triton gone (it once died of a SIGSEGV under a run's load): say so, with its log
            raise RuntimeError(f"Triton answered {status} to its statistics; its log:\n{self.log_tail()}")
        stats = json.loads(body)["model_stats"][0]
        return int(stats["inference_count"]), int(stats["execution_count"])


UNTUNED = "gateway -> Triton over gRPC, untuned (max_inflight auto)"
LEARN_S = 15.0  # the untuned gateway's load before each measured run, at the run's clients


def triton_scenario(ctx: Context) -> dict[str, Any]:
    """Triton's own dynamic batcher vs the gateway in front of the same model, batching off."""
    triton = Triton(ctx.log_dir).start()
    runs: list[dict[str, Any]] = []
    try:
        models: list[dict[str, Any]] = [
            {"name": "gw-grpc", "backend": "triton", "protocol": "grpc", "url": triton.grpc_address,
             "backend_model": "cost", "batching": {"max_batch_size": MAX_BATCH, "max_inflight": 2}},
            {"name": "gw-http", "backend": "triton", "protocol": "http", "url": triton.http_url, "binary_data": True,
             "backend_model": "cost", "batching": {"max_batch_size": MAX_BATCH, "max_inflight": 2}},
            # Untuned: the model's batch size, and max_inflight learned ("auto") instead of chosen.
            {"name": "gw-auto", "backend": "triton", "protocol": "grpc", "url": triton.grpc_address,
             "backend_model": "cost", "batching": {"max_batch_size": MAX_BATCH, "max_inflight": "auto"}},
            {"name": "free-grpc", "backend": "triton", "protocol": "grpc", "url": triton.grpc_address,
             "backend_model": "free", "batching": {"max_batch_size": MAX_BATCH}},
            {"name": "free-http", "backend": "triton", "protocol": "http", "url": triton.http_url, "binary_data": True,
             "backend_model": "free", "batching": {"max_batch_size": MAX_BATCH}},
        ]
        # The latency table also runs a second gateway on uvloop: what the other loop changes.
        with ExitStack() as started:
            gateway = started.enter_context(Gateway(ctx.log_dir, "gateway-triton", models).start())
            on_uvloop = started.enter_context(Gateway(ctx.log_dir, "gateway-triton-uvloop", models[3:],
                                                      loop="uvloop").start())
            plan = [
                ("Triton, no batching", triton.grpc_address, "cost", "cost"),
                ("Triton's dynamic batcher", triton.grpc_address, "cost_batched", "cost_batched"),
                ("gateway -> Triton over gRPC", gateway.grpc_address, "gw-grpc", "cost"),
                ("gateway -> Triton over HTTP (binary)", gateway.grpc_address, "gw-http", "cost"),
                (UNTUNED, gateway.grpc_address, "gw-auto", "cost"),
            ]
            fronts: list[tuple[str, Gateway]] = [("", gateway), (ON_UVLOOP, on_uvloop)]
            if ctx.before is not None:  # --before: another checkout's gateway in the same rounds
                earlier = started.enter_context(Gateway(ctx.log_dir, "gateway-triton-before", models,
                                                        root=ctx.before).start())
                plan += [(BEFORE + "gateway -> Triton over gRPC", earlier.grpc_address, "gw-grpc", "cost"),
                         (BEFORE + UNTUNED, earlier.grpc_address, "gw-auto", "cost")]
                fronts.append((BEFORE, earlier))
            for _, address, model, _ in plan:
                warm_up(address, oip_body(model), 4, grpc=True)
            for rep in range(ctx.repeat):
                for clients in CLIENTS:
                    for name, address, model, executed in plan:
                        ctx.say(f"  triton: {name}, {clients} clients ({rep + 1}/{ctx.repeat})")
                        if name.endswith(UNTUNED):
                            # What a deployment's gateway has done long before: learn its in-flight
                            # level at this load (other loads ran since; see batching.inflight).
                            load(address, oip_body(model), concurrency=clients, duration=LEARN_S, grpc=True)
                        before = triton.executions(executed)
                        result = load(address, oip_body(model), concurrency=clients, duration=ctx.duration, grpc=True,
                                      progress=ctx.progress)
                        after = triton.executions(executed)
                        calls = after[1] - before[1]
                        runs.append(run_row(name, result, kind="throughput", clients_n=clients, repeat=rep,
                                            mean_batch=(after[0] - before[0]) / calls if calls else None))
            latency_plan = [
                ("direct", "http", f"{triton.http_url}/v2/models/free/infer", OIP_JSON_BODY, False),
                ("direct", "grpc", triton.grpc_address, oip_body("free"), True),
            ]
            for predictor in ("grpc", "http"):
                for label, server in fronts:
                    latency_plan += [
                        (f"{label}gateway -> {predictor}", "http", f"{server.http_url}/v2/models/free-{predictor}/infer",
                         OIP_JSON_BODY, False),
                        (f"{label}gateway -> {predictor}", "grpc", server.grpc_address, oip_body(f"free-{predictor}"),
                         True),
                    ]
            for _, _, target, body, grpc in latency_plan:
                warm_up(target, body, 1, grpc=grpc)
            for rep in range(ctx.repeat):
                for path, front, target, body, grpc in latency_plan:
                    ctx.say(f"  triton: one client, {front} front, {path} ({rep + 1}/{ctx.repeat})")
                    result = load(target, body, concurrency=1, duration=ctx.duration, grpc=grpc, progress=ctx.progress)
                    runs.append(run_row(f"{front} client, {path}", result, kind="latency", front=front, path=path,
                                        repeat=rep))
    finally:
        triton.stop()
    return _report(ctx, runs)


def _median(runs: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else float("nan")


def _report(ctx: Context, runs: list[dict[str, Any]]) -> dict[str, Any]:
    rows, checks = [], []
    names = list(dict.fromkeys(r["name"] for r in runs if r["kind"] == "throughput"))
    for clients in CLIENTS:
        at = [r for r in runs if r["kind"] == "throughput" and r["clients_n"] == clients]
        batcher = _median([r for r in at if r["name"] == "Triton's dynamic batcher"], "rps")
        ideal = clients / ((CALL_MS + PER_ROW_MS * min(clients, MAX_BATCH)) / 1000) if clients <= MAX_BATCH else \
            MAX_BATCH / ((CALL_MS + PER_ROW_MS * MAX_BATCH) / 1000)
        for name in names:
            mine = [r for r in at if r["name"] == name]
            rps = _median(mine, "rps")
            rows.append({"name": name, "clients": clients, "rps": rps, "vs_ideal": rps / ideal,
                         "vs_batcher": rps / batcher if batcher else None, "p50_ms": _median(mine, "p50_ms"),
                         "p99_ms": _median(mine, "p99_ms"), "mean_batch": _median(mine, "mean_batch")})
            if name.startswith("gateway"):
                checks.append(check(f"{name}, {clients} clients: req/s vs Triton's dynamic batcher", "report",
                                    f"{rps / batcher:.2f}x" if batcher else "n/a", None))
            if name == UNTUNED and clients == max(CLIENTS):
                checks.append(check(f"{name}, {clients} clients: of ideal", ">= 97%", f"{rps / ideal:.0%}",
                                    rps / ideal >= 0.97))
    latency_rows = []
    for front in ("http", "grpc"):
        direct = _median([r for r in runs if r["kind"] == "latency" and r["front"] == front and r["path"] == "direct"],
                         "p50_ms")
        labels = ("", ON_UVLOOP, BEFORE) if any(r.get("path", "").startswith(BEFORE) for r in runs) else ("", ON_UVLOOP)
        for path in [f"{label}gateway -> {predictor}" for label in labels for predictor in ("grpc", "http")]:
            via = [r for r in runs if r["kind"] == "latency" and r["front"] == front and r["path"] == path]
            p50 = _median(via, "p50_ms")
            latency_rows.append({"name": f"{front} client, {path} (binary)" if path.endswith("http") else
                                 f"{front} client, {path}", "direct_p50": direct, "gateway_p50": p50,
                                 "added_p50": p50 - direct, "gateway_p99": _median(via, "p99_ms")})
            if not path.startswith((ON_UVLOOP, BEFORE)):
                checks.append(check(f"added p50 at 1 client: {front} client, {path}", "<= 1.0 ms",
                                    f"{p50 - direct:+.2f} ms", p50 - direct <= 1.0))
    return {
        "title": "Triton: its own dynamic batcher vs the gateway in front of it",
        "setup": f"The real tritonserver (the binary from the cached Triton venv, no PyTriton) with a plain "
                 f"Python-backend model costing {CALL_MS:g} ms + {PER_ROW_MS:g} ms per row per execution "
                 f"(max_batch_size {MAX_BATCH}). Triton's dynamic batcher: default settings (no queue delay). "
                 f"The gateway: policy adaptive, max_batch_size {MAX_BATCH}, max_inflight 2, in front of the "
                 f"same model with Triton's batching off; untuned, the same with max_inflight \"auto\", measured after "
                 f"{LEARN_S:g} s of the same load to learn it. "
                 f"Closed-loop gRPC (OIP) clients, {ctx.duration:g} s per "
                 f"run, median of {ctx.repeat}. Ideal: clients / one execution's time, at most {MAX_BATCH} rows "
                 f"per execution. Latency: one client on a model of no cost, median p50 of {ctx.repeat} run(s), "
                 f"through the gateway on its default loop (asyncio's) and through a second one on uvloop.",
        "tables": [
            {"title": "Throughput", "rows": rows, "columns": [
                ["name", "run", "s"], ["clients", "clients", "d"], ["rps", "req/s", ".1f"],
                ["vs_ideal", "of ideal", ".0%"], ["vs_batcher", "vs Triton's batcher", ".2f"],
                ["p50_ms", "p50 ms", ".1f"], ["p99_ms", "p99 ms", ".1f"], ["mean_batch", "rows/execution", ".1f"]]},
            {"title": "Added latency at 1 client (model of no cost)", "rows": latency_rows, "columns": [
                ["name", "path", "s"], ["direct_p50", "direct p50 ms", ".2f"], ["gateway_p50", "gateway p50 ms", ".2f"],
                ["added_p50", "added p50 ms", "+.2f"], ["gateway_p99", "gateway p99 ms", ".2f"]]},
        ],
        "checks": checks, "runs": runs, "plots": {},
    }
