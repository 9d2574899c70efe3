"""The `tracing` scenario of `python -m tools.bench`: what OpenTelemetry tracing costs.

The same gateway four ways, loaded in interleaved rounds: tracing off (twice: two identical
processes show the noise floor), on at a 1% ratio, and on for every request, exporting over OTLP gRPC to a receiver in this process (the
collector's protocol; it counts what it is sent). Closed-loop v1 clients that send no
traceparent (so the ratio decides), a free predictor: the gateway is the limit, which is
where a cost per request shows.

It holds this scenario only; the harness (servers, load, rows, checks) is
`tools.bench.harness`'. It must not import another scenario.
"""
from __future__ import annotations

import statistics
from typing import Any

from tools.bench.harness import V1_BODY, Context, Gateway, Predictor, check, load, run_row, v1_model, warm_up
from tools.otlp_receiver import grpc_receiver

# "off again" is a second gateway with tracing off: the difference two identical processes
# show, the noise floor the other ratios are read against.
SETTINGS = {"off": None, "off again": None, "1%": 0.01, "100%": 1.0}


def tracing(ctx: Context) -> dict[str, Any]:
    """Tracing off, at 1% and at 100%: req/s and gateway CPU per request, as ratios to off."""
    clients = 32
    predictor = Predictor(ctx.log_dir, "predictor-free", call_ms=0).start()
    models = [v1_model("v1", predictor, max_batch_size=32)]
    runs = []
    try:
        with grpc_receiver(keep=False) as (endpoint, received):
            gateways = {label: Gateway(ctx.log_dir, f"gateway-tracing-{label.rstrip('%').replace(' ', '-')}", models, tracing=(
                None if ratio is None else {"enabled": True, "protocol": "grpc", "endpoint": endpoint,
                                            "sample_ratio": ratio})).start()
                        for label, ratio in SETTINGS.items()}
            try:
                for gateway in gateways.values():
                    warm_up(f"{gateway.http_url}/v1/models/v1:predict", V1_BODY, 8)
                for rep in range(max(3, ctx.repeat)):
                    for label, gateway in gateways.items():
                        ctx.say(f"  tracing: {label}, {clients} clients (round {rep + 1})")
                        cpu_before = gateway.cpu_seconds()
                        result = load(f"{gateway.http_url}/v1/models/v1:predict", V1_BODY, concurrency=clients,
                                      duration=ctx.duration, progress=ctx.progress)
                        runs.append(run_row(label, result, kind="throughput", repeat=rep,
                                            gateway_cpu_us=(gateway.cpu_seconds() - cpu_before) / max(1, result.ok)
                                            * 1e6))
            finally:
                for gateway in gateways.values():
                    gateway.stop()
            spans = received.count
    finally:
        predictor.stop()
    off = [r for r in runs if r["name"] == "off"]
    rows, checks = [], []
    for label in SETTINGS:
        mine = [r for r in runs if r["name"] == label]
        rps_ratio = statistics.median(m["rps"] / o["rps"] for m, o in zip(mine, off, strict=True))
        cpu_ratio = statistics.median(m["gateway_cpu_us"] / o["gateway_cpu_us"] for m, o in zip(mine, off, strict=True))
        rows.append({"name": label, "rps": statistics.median(m["rps"] for m in mine), "rps_ratio": rps_ratio,
                     "gateway_cpu_us": statistics.median(m["gateway_cpu_us"] for m in mine), "cpu_ratio": cpu_ratio})
    one_percent = next(r for r in rows if r["name"] == "1%")
    checks.append(check("tracing at 1%: req/s vs off (median of the rounds' ratios)", ">= 0.95x",
                        f"{one_percent['rps_ratio']:.3f}x", one_percent["rps_ratio"] >= 0.95))
    checks.append(check("tracing at 1%: gateway CPU per request vs off", "<= 1.05x",
                        f"{one_percent['cpu_ratio']:.3f}x", one_percent["cpu_ratio"] <= 1.05))
    return {
        "title": "Tracing: what OpenTelemetry costs, off vs 1% vs 100%",
        "setup": f"One gateway per setting (v1 model, max_batch_size 32, simulated predictor at call-ms 0), "
                 f"{clients} closed-loop v1 clients without a traceparent, {ctx.duration:g} s per run, rounds "
                 f"interleaved; spans exported over OTLP gRPC to a receiver in the bench process "
                 f"({spans} spans received in all).",
        "tables": [{"title": "", "rows": rows, "columns": [
            ["name", "tracing", "s"], ["rps", "req/s", ".0f"], ["rps_ratio", "req/s vs off", ".3f"],
            ["gateway_cpu_us", "gateway CPU µs/request", ".1f"], ["cpu_ratio", "CPU vs off", ".3f"]]}],
        "checks": checks, "runs": runs,
    }
