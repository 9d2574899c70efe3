"""The `latency-curve` scenario of `python -m tools.bench`: latency vs throughput (for the plot).

p50/p99 vs req/s of direct, window and adaptive at 1, 4, 16 and 64 clients, in front of the
simulated predictor at 5 ms per call.

It holds this scenario only; the harness (servers, load, rows, checks) is
`tools.bench.harness`'. It must not import another scenario.
"""
from __future__ import annotations

from typing import Any

from tools.bench.harness import LATENCY_COLUMNS, V1_BODY, Context, Gateway, Predictor, load, run_row, v1_model, warm_up


def latency_curve(ctx: Context) -> dict[str, Any]:
    """p50/p99 vs req/s of direct / window / adaptive at 1, 4, 16 and 64 clients."""
    levels = (1, 4, 16, 64)
    predictor = Predictor(ctx.log_dir, "predictor-5ms-curve", call_ms=5).start()
    runs = []
    try:
        with Gateway(ctx.log_dir, "gateway-curve", [
            v1_model("window", predictor, policy="window", max_batch_size=32, max_latency_ms=500),
            v1_model("adaptive", predictor, policy="adaptive", max_batch_size=32, max_latency_ms=500),
        ]).start() as gateway:
            targets = {
                "direct": f"{predictor.http_url}/v1/models/demo:predict",
                "window": f"{gateway.http_url}/v1/models/window:predict",
                "adaptive": f"{gateway.http_url}/v1/models/adaptive:predict",
            }
            for mode, url in targets.items():
                warm_up(url, V1_BODY, 4)
                for clients in levels:
                    ctx.say(f"  latency-curve: {mode} at {clients} clients")
                    predictor.reset_stats()
                    result = load(url, V1_BODY, concurrency=clients, duration=ctx.duration, progress=ctx.progress)
                    runs.append(run_row(f"{mode} c={clients}", result, predictor=predictor, mode=mode))
    finally:
        predictor.stop()
    return {
        "title": "Latency vs throughput: direct, window, adaptive",
        "setup": f"Simulated predictor: 5 ms per call, 1 slot; KServe v1 HTTP; max_batch_size 32, "
                 f"max_latency 500 ms; {', '.join(map(str, levels))} closed-loop clients, {ctx.duration:g} s each.",
        "tables": [{"title": "", "rows": runs, "columns": [
            ["name", "run", "s"], ["rps", "req/s", ".1f"], *LATENCY_COLUMNS, ["mean_batch", "mean batch", ".2f"]]}],
        "checks": [], "runs": runs,
        "plots": {"latency_curve": [{"mode": r["mode"], "clients": r["clients"], "rps": r["rps"],
                                     "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"]} for r in runs]},
    }
