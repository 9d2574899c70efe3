"""The `inflight` scenario of `python -m tools.bench`: max_inflight = "auto" vs 1 and 2.

Side by side, in front of predictors that each want another value: the simulated predictor
with 1 or 4 slots, the real Triton's Python backend and PyTriton.

It holds this scenario only; the harness (servers, load, rows, checks) is
`tools.bench.harness`'. It must not import another scenario.
"""
from __future__ import annotations

from typing import Any

from tools.bench.harness import (
    OIP_JSON_BODY,
    V1_BODY,
    Context,
    Gateway,
    Predictor,
    RealTriton,
    batch_totals,
    check,
    load,
    mean_batch_between,
    metric,
    run_row,
    v1_model,
)


def inflight(ctx: Context) -> dict[str, Any]:
    """max_inflight 1, 2 and "auto" side by side, in front of predictors that each want another value."""
    learn_s = max(10.0, ctx.duration)
    simulated = "simulated"
    cases = [  # (name, predictor kind, cost (call ms, per-row ms, slots), closed-loop clients)
        ("simulated, 1 slot, 20 ms + 0.25 ms/row", simulated, (20.0, 0.25, 1), 128),
        # Slow enough that 4 batches in flight do not make the gateway itself the bottleneck here.
        ("simulated, 4 slots, 100 ms + 0.25 ms/row", simulated, (100.0, 0.25, 4), 128),
        ("simulated, 1 slot, 5 ms", simulated, (5.0, 0.0, 1), 5),
        ("Triton Python backend, 20 ms + 0.25 ms/row", "direct", (20.0, 0.25, 1), 128),
        ("Triton Python backend, 5 ms", "direct", (5.0, 0.0, 1), 5),
        ("PyTriton, 5 ms", "pytriton", (5.0, 0.0, 1), 5),
    ]
    runs: list[dict[str, Any]] = []
    for case, kind, (call_ms, per_row_ms, slots), clients in cases:
        predictor: Predictor | RealTriton
        if kind == simulated:
            predictor = Predictor(ctx.log_dir, f"predictor-inflight-{slots}-{call_ms:g}", call_ms=call_ms,
                                  per_instance_ms=per_row_ms, slots=slots).start()
            models = [v1_model(name, predictor, max_batch_size=32, max_inflight=value)
                      for name, value in (("fixed-1", 1), ("fixed-2", 2), ("auto", "auto"))]
        else:
            predictor = RealTriton(ctx.log_dir, kind, call_ms, per_row_ms).start()
            models = [{"name": name, "backend": "triton", "protocol": "http", "url": predictor.http_url,
                       "backend_model": "cost", "batching": {"max_batch_size": 32, "max_inflight": value}}
                      for name, value in (("fixed-1", 1), ("fixed-2", 2), ("auto", "auto"))]
        try:
            with Gateway(ctx.log_dir, "gateway-inflight", models).start() as gateway:
                for model in ("fixed-1", "fixed-2", "auto"):
                    if kind == simulated:
                        url, body = f"{gateway.http_url}/v1/models/{model}:predict", V1_BODY
                    else:
                        url, body = f"{gateway.http_url}/v2/models/{model}/infer", OIP_JSON_BODY
                    ctx.say(f"  inflight: {case}, {clients} clients, {model}")
                    # Not recorded: warm connections, and give auto the time to learn.
                    load(url, body, concurrency=clients, duration=learn_s if model == "auto" else 1.0, timeout=10)
                    predictor.settle()
                    before = batch_totals(gateway, model)
                    result = load(url, body, concurrency=clients, duration=ctx.duration, progress=ctx.progress)
                    row = run_row(f"{case}, {clients} clients: {model}", result, case=case, model=model)
                    row["mean_batch"] = mean_batch_between(before, batch_totals(gateway, model))
                    row["inflight_limit"] = metric(gateway, "gateway_batches_in_flight_limit", model)
                    runs.append(row)
        finally:
            predictor.stop()
    checks = []
    by = {(r["case"], r["model"]): r for r in runs}
    for case, _, _, clients in cases:
        best = max(by[(case, "fixed-1")]["rps"], by[(case, "fixed-2")]["rps"])
        auto = by[(case, "auto")]
        checks.append(check(f"{case}, {clients} clients: auto vs the better fixed value", ">= 95%",
                            f"{auto['rps'] / best:.0%} (learned {auto['inflight_limit']:g})" if best else "n/a",
                            bool(best) and auto["rps"] >= 0.95 * best))
    ideal = 32 / ((20.0 + 32 * 0.25) / 1000.0)
    saturation_auto = by[(cases[0][0], "auto")]["instances_per_s"]
    checks.append(check("auto in the saturation setup (simulated, 1 slot, 128 clients) vs ideal", ">= 95%",
                        f"{saturation_auto / ideal:.0%} of {ideal:.0f}", saturation_auto >= 0.95 * ideal))
    four = by[(cases[1][0], "auto")]["inflight_limit"]
    checks.append(check("auto in front of a predictor with 4 slots", "finds more than 2",
                        f"{four:g}" if four is not None else "n/a", four is not None and four > 2))
    return {
        "title": 'max_inflight = "auto" vs 1 and 2',
        "setup": f"The simulated predictor with 1 or 4 slots (v1 requests), and the real Triton 2.51 serving a "
                 f"Python-backend model started directly or a PyTriton model, its own batching off (OIP REST "
                 f"requests); closed-loop clients with one row each; max_batch_size 32, adaptive policy. Each "
                 f"run {ctx.duration:g} s after a warm-up ({learn_s:g} s for auto, so that it has learned; it "
                 f"keeps learning during the run). `learned` is auto's in-flight limit at the end of its run; "
                 f"`mean batch` is the gateway's.",
        "tables": [{"title": "", "rows": runs, "columns": [
            ["case", "predictor", "s"], ["clients", "clients", "d"], ["model", "max_inflight", "s"],
            ["rps", "req/s", ".0f"], ["p50_ms", "p50 ms", ".1f"], ["p99_ms", "p99 ms", ".1f"],
            ["mean_batch", "mean batch", ".1f"], ["inflight_limit", "learned", "g"], ["errors", "errors", "d"]]}],
        "checks": checks, "runs": runs, "plots": {},
    }
