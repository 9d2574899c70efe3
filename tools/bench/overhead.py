"""The `overhead` scenario of `python -m tools.bench`.

The gateway vs minimal servers doing the same front-end work (`tools.bench.baselines`
`minimal`), and the latency it adds at 1 client; the gateway on its default loop (asyncio's)
and on uvloop (`serve --loop uvloop`).

With `--before`, another checkout's gateway (on asyncio's loop) runs in the same rounds, and
the tables carry its rows beside this checkout's: a before and after from one run.

It holds this scenario only; the harness (servers, load, rows, checks) is
`tools.bench.harness`'. It must not import another scenario.
"""
from __future__ import annotations

import statistics
from contextlib import ExitStack
from typing import Any

from tools.bench.harness import (
    V1_BODY,
    Baseline,
    Context,
    Gateway,
    Predictor,
    Server,
    batch_totals,
    check,
    grpc_model,
    load,
    mean_batch_between,
    oip_body,
    run_row,
    v1_model,
    warm_up,
)


def overhead(ctx: Context) -> dict[str, Any]:
    """Gateway vs minimal servers doing the same front-end work, and added latency at 1 client;
    the gateway on its default loop (asyncio's) and on uvloop (`serve --loop uvloop`)."""
    clients = 32
    pairs = max(5, ctx.repeat)
    predictor = Predictor(ctx.log_dir, "predictor-free", call_ms=0).start()
    models = [v1_model("v1", predictor, max_batch_size=32), grpc_model("oip", predictor, max_batch_size=32)]
    runs = []
    try:
        with ExitStack() as started:
            gateways = {"gateway": Gateway(ctx.log_dir, "gateway-overhead", models),
                        "gateway-uvloop": Gateway(ctx.log_dir, "gateway-overhead-uvloop", models, loop="uvloop"),
                        **({"gateway-before": Gateway(ctx.log_dir, "gateway-overhead-before", models, root=ctx.before)}
                           if ctx.before is not None else {})}
            for gateway in gateways.values():
                started.enter_context(gateway.start())
            servers: dict[str, Server] = {**gateways, "baseline": started.enter_context(
                Baseline(ctx.log_dir, "minimal").start())}
            throughput: dict[tuple[str, str], dict[str, Any]] = {}
            for side, server in servers.items():
                v1, oip = ("demo", "demo") if side == "baseline" else ("v1", "oip")
                throughput[("http", side)] = dict(target=f"{server.http_url}/v1/models/{v1}:predict", body=V1_BODY)
                throughput[("grpc", side)] = dict(target=server.grpc_address, body=oip_body(oip), grpc=True)
            single: dict[tuple[str, str], dict[str, Any]] = {
                ("http", "direct"): dict(target=f"{predictor.http_url}/v1/models/demo:predict", body=V1_BODY),
                ("grpc", "direct"): dict(target=predictor.grpc_address, body=oip_body("demo"), grpc=True),
                **{key: spec for key, spec in throughput.items() if key[1] != "baseline"},
            }
            for spec in throughput.values():
                warm_up(spec["target"], spec["body"], 8, grpc=spec.get("grpc", False))
            for pair in range(pairs):
                for (protocol, side), spec in throughput.items():
                    ctx.say(f"  overhead: {protocol} {side}, {clients} clients (pair {pair + 1}/{pairs})")
                    server = servers[side]
                    model = "v1" if protocol == "http" else "oip"
                    batches = batch_totals(gateways[side], model) if side in gateways else None
                    cpu_before, predictor_before = server.cpu_seconds(), predictor.cpu_seconds()
                    result = load(concurrency=clients, duration=ctx.duration, progress=ctx.progress, **spec)
                    answered = max(1, result.ok)
                    runs.append(run_row(
                        f"{protocol} {side} c={clients}", result, kind="throughput", side=side, pair=pair,
                        server_cpu_us=(server.cpu_seconds() - cpu_before) / answered * 1e6,
                        predictor_cpu_us=(predictor.cpu_seconds() - predictor_before) / answered * 1e6,
                        mean_batch=None if batches is None else mean_batch_between(
                            batches, batch_totals(gateways[side], model))))
            for rep in range(ctx.repeat):
                for (protocol, side), spec in single.items():
                    ctx.say(f"  overhead: {protocol} {side}, 1 client ({rep + 1}/{ctx.repeat})")
                    result = load(concurrency=1, duration=ctx.duration, progress=ctx.progress, **spec)
                    runs.append(run_row(f"{protocol} {side} c=1", result, kind="latency", side=side, repeat=rep))
    finally:
        predictor.stop()
    ratio_rows, latency_rows, checks = [], [], []
    for protocol in ("http", "grpc"):
        base = [r for r in runs if r["name"] == f"{protocol} baseline c={clients}"]
        direct = [r for r in runs if r["name"] == f"{protocol} direct c=1"]
        d50 = statistics.median(r["p50_ms"] for r in direct)
        d99 = statistics.median(r["p99_ms"] for r in direct)
        sides = [("gateway", "gateway"), ("gateway-uvloop", "gateway --loop uvloop")]
        if ctx.before is not None:
            sides.append(("gateway-before", f"before: gateway of {ctx.before}"))
        for side, label in sides:
            gw = [r for r in runs if r["name"] == f"{protocol} {side} c={clients}"]
            ratios = [g["rps"] / b["rps"] for g, b in zip(gw, base, strict=False) if b["rps"]]
            cpu_ratios = [g["server_cpu_us"] / b["server_cpu_us"] for g, b in zip(gw, base, strict=False)
                          if b["server_cpu_us"]]
            ratio_rows.append({
                "name": f"{protocol}: {label}", "gateway_rps": statistics.median(g["rps"] for g in gw),
                "baseline_rps": statistics.median(b["rps"] for b in base),
                "ratio": statistics.median(ratios) if ratios else None,
                "gateway_cpu_us": statistics.median(g["server_cpu_us"] for g in gw),
                "baseline_cpu_us": statistics.median(b["server_cpu_us"] for b in base),
                "cpu_ratio": statistics.median(cpu_ratios) if cpu_ratios else None,
                "predictor_cpu_us": statistics.median(g["predictor_cpu_us"] for g in gw),
                "mean_batch": statistics.median(batch) if (batch := [g["mean_batch"] for g in gw
                                                                      if g["mean_batch"] is not None]) else None,
                "gateway_p50": statistics.median(g["p50_ms"] for g in gw),
                "baseline_p50": statistics.median(b["p50_ms"] for b in base), "pairs": len(ratios),
            })
            via = [r for r in runs if r["name"] == f"{protocol} {side} c=1"]
            g50, g99 = statistics.median(r["p50_ms"] for r in via), statistics.median(r["p99_ms"] for r in via)
            latency_rows.append({"name": f"{protocol}: {label}", "direct_p50": d50, "gateway_p50": g50,
                                 "added_p50": g50 - d50, "direct_p99": d99, "gateway_p99": g99})
            checks.append(check(f"{protocol}, {label}: req/s vs minimal baseline (median of {len(ratios)} pairs)",
                                "report", f"{ratio_rows[-1]['ratio']:.0%}" if ratios else "n/a", None))
            checks.append(check(f"{protocol}, {label}: added p50 at 1 client vs calling the predictor directly",
                                "report", f"{g50 - d50:+.2f} ms", None))
    return {
        "title": "Overhead: gateway vs minimal servers; added latency",
        "setup": f"Simulated predictor with no cost (call-ms 0). Throughput: {clients} closed-loop clients, "
                 f"{ctx.duration:g} s per run, {pairs} interleaved rounds (gateway, gateway on uvloop, "
                 f"baseline), median ratio; the baselines (tools/bench/baselines.py) are a minimal Tornado app that "
                 f"parses the v1 request and answers it, and a minimal grpc.aio ModelInfer servicer. The gateway "
                 f"also forwards every batch to the predictor process, on the same 2 cores. CPU is each process's "
                 f"user + system time per answered request. Latency: 1 client, median of {ctx.repeat} run(s)."
                 + (f" With --before, the gateway of {ctx.before} runs in the same rounds." if ctx.before else ""),
        "tables": [
            {"title": "Throughput", "rows": ratio_rows, "columns": [
                ["name", "protocol: server", "s"], ["gateway_rps", "gateway req/s", ".0f"],
                ["baseline_rps", "minimal server req/s", ".0f"], ["ratio", "gateway / minimal", ".0%"],
                ["gateway_cpu_us", "gateway CPU us/req", ".0f"], ["baseline_cpu_us", "minimal CPU us/req", ".0f"],
                ["cpu_ratio", "CPU gateway / minimal", ".2f"], ["predictor_cpu_us", "predictor CPU us/req", ".0f"],
                ["mean_batch", "mean batch", ".1f"],
                ["gateway_p50", "gateway p50 ms", ".2f"], ["baseline_p50", "minimal p50 ms", ".2f"]]},
            {"title": "Latency at 1 client", "rows": latency_rows, "columns": [
                ["name", "protocol: server", "s"], ["direct_p50", "direct p50 ms", ".2f"],
                ["gateway_p50", "gateway p50 ms", ".2f"], ["added_p50", "added p50 ms", "+.2f"],
                ["direct_p99", "direct p99 ms", ".2f"], ["gateway_p99", "gateway p99 ms", ".2f"]]},
        ],
        "checks": checks, "runs": runs, "plots": {},
    }
