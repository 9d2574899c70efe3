"""The `kserve-docs` scenario of `python -m tools.bench`: the KServe batcher's documented example.

5 clients against `POST /v1/models/<m>:predict`, straight to the simulated predictor (5 ms per
call) and through the gateway with the `window` policy (max_batch_size 32, max_latency 500 ms:
KServe's documented 0.515 s and 9.5 req/s) and the `adaptive` one.

It holds this scenario only; the harness (servers, load, rows, checks) is
`tools.bench.harness`'. It must not import another scenario.
"""
from __future__ import annotations

import math
from typing import Any

from tools.bench.harness import (
    LATENCY_COLUMNS,
    V1_BODY,
    Context,
    Gateway,
    Predictor,
    check,
    load,
    median_rows,
    run_row,
    v1_model,
    warm_up,
)


def kserve_docs(ctx: Context) -> dict[str, Any]:
    """5 clients against POST /v1/models/<m>:predict; direct vs gateway window vs adaptive."""
    clients = 5
    predictor = Predictor(ctx.log_dir, "predictor-5ms", call_ms=5).start()
    try:
        gateway = Gateway(ctx.log_dir, "gateway-docs", [
            v1_model("window", predictor, policy="window", max_batch_size=32, max_latency_ms=500),
            v1_model("adaptive", predictor, policy="adaptive", max_batch_size=32, max_latency_ms=500),
        ]).start()
        with gateway:
            targets = {
                "direct": f"{predictor.http_url}/v1/models/demo:predict",
                "gateway window": f"{gateway.http_url}/v1/models/window:predict",
                "gateway adaptive": f"{gateway.http_url}/v1/models/adaptive:predict",
            }
            for url in targets.values():
                warm_up(url, V1_BODY, clients)
            runs = []
            for rep in range(ctx.repeat):
                for name, url in targets.items():
                    ctx.say(f"  kserve-docs: {name} ({rep + 1}/{ctx.repeat})")
                    predictor.reset_stats()
                    result = load(url, V1_BODY, concurrency=clients, duration=ctx.duration, progress=ctx.progress)
                    runs.append(run_row(name, result, predictor=predictor, repeat=rep))
    finally:
        predictor.stop()
    rows = median_rows(runs)
    by = {r["name"]: r for r in rows}
    window, adaptive = by["gateway window"], by["gateway adaptive"]
    ratio = adaptive["rps"] / window["rps"] if window["rps"] else math.inf
    checks = [
        check("window p50 reproduces KServe's documented 0.515 s", "~500 ms",
              f"{window['p50_ms']:.0f} ms", 450 <= (window["p50_ms"] or 0) <= 600),
        check("window req/s reproduces KServe's documented 9.5 req/s", "~9.5 req/s",
              f"{window['rps']:.1f} req/s", 7.5 <= window["rps"] <= 11.5),
        check("adaptive p50", "<= 15 ms", f"{adaptive['p50_ms']:.1f} ms", (adaptive["p50_ms"] or 1e9) <= 15),
        check("adaptive req/s vs window", ">= 35x", f"{ratio:.1f}x", ratio >= 35),
    ]
    return {
        "title": "KServe docs example: 5 clients, max_batch_size 32, max_latency 500 ms",
        "setup": f"Simulated predictor: 5 ms per call, 1 slot. {clients} closed-loop clients for "
                 f"{ctx.duration:g} s each, `POST /v1/models/<m>:predict` with one instance; gateway over "
                 f"KServe v1 HTTP to the predictor. Median of {ctx.repeat} run(s).",
        "tables": [{"title": "", "rows": rows, "columns": [
            ["name", "run", "s"], ["clients", "clients", "d"], ["rps", "req/s", ".1f"], *LATENCY_COLUMNS,
            ["mean_batch", "mean batch", ".2f"], ["errors", "errors", "d"]]}],
        "checks": checks, "runs": runs,
        "plots": {"batch_sizes": {f"docs {r['name']}": r.get("batch_sizes", {}) for r in rows
                                  if r["name"] != "direct"}},
    }
