"""The `workers` scenario of `python -m tools.bench`: one gateway process vs `--workers 2`.

Both gateways run side by side and are loaded in interleaved rounds, in four regimes:
- **gateway-bound**: a free predictor (call-ms 0) in its own process and 64 `hey` clients,
  where the gateway's own CPU is the limit: the throughput ratio is what a second worker
  buys on this machine, whose two cores the predictor and hey share;
- **gateway-bound, embedded**: the same with the simulated predictor inside the gateway (the
  batcher's process), so that only the gateway and hey share the cores;
- **the seed scenario**: 5 closed-loop clients, a 5 ms predictor: p50 and throughput;
- **saturation**: 128 clients, a predictor of 8 slots at 20 ms + 0.25 ms per row, max_inflight 2:
  mean batch and throughput against the ideal (2 full batches always at the predictor), which
  show whether batches still form, and leave, as in one process: the regression guard of
  `--workers` (a slot left idle between batches shows here first).

It holds this scenario only; the harness (servers, load, rows, checks) is
`tools.bench.harness`'. It must not import another scenario.
"""
from __future__ import annotations

import statistics
from typing import Any

from tools.bench.harness import (
    V1_BODY,
    Context,
    Gateway,
    Predictor,
    batch_totals,
    check,
    hey,
    load,
    mean_batch_between,
    v1_model,
    warm_up,
)

SIDES = {"1 process": 1, "2 workers": 2}
AFTER, BEFORE = "this checkout", "before"
SATURATION_MS, SATURATION_ROW_MS, SATURATION_INFLIGHT, BATCH = 20.0, 0.25, 2, 32
# Two full batches always at the predictor, which has slots to spare: rows per second.
IDEAL = SATURATION_INFLIGHT * BATCH / ((SATURATION_MS + BATCH * SATURATION_ROW_MS) / 1000.0)


def workers(ctx: Context) -> dict[str, Any]:
    """One process vs two workers: gateway-bound throughput, the seed scenario, saturation."""
    free = Predictor(ctx.log_dir, "predictor-free", call_ms=0).start()
    seed = Predictor(ctx.log_dir, "predictor-seed", call_ms=5).start()
    saturated = Predictor(ctx.log_dir, "predictor-saturation", call_ms=SATURATION_MS, per_instance_ms=SATURATION_ROW_MS,
                          slots=8).start()
    body_file = ctx.log_dir / "v1-body.json"
    body_file.write_bytes(V1_BODY)
    models = [v1_model("free", free, max_batch_size=32), v1_model("seed", seed, max_batch_size=32),
              v1_model("saturation", saturated, max_batch_size=BATCH, max_inflight=SATURATION_INFLIGHT),
              {"name": "embedded", "backend": "simulated", "simulated": {"call_ms": 0},
               "batching": {"max_batch_size": 32}}]
    runs: list[dict[str, Any]] = []
    # This checkout's gateways, and with --before another checkout's beside them, in the same rounds.
    versions = {AFTER: None, **({BEFORE: ctx.before} if ctx.before is not None else {})}
    try:
        gateways = {(version, side): Gateway(ctx.log_dir, f"gateway-workers-{count}{'-before' if root else ''}",
                                             models, workers=count, root=root).start()
                    for version, root in versions.items() for side, count in SIDES.items()}
        try:
            for gateway in gateways.values():
                for model in ("free", "embedded", "seed", "saturation"):
                    warm_up(f"{gateway.http_url}/v1/models/{model}:predict", V1_BODY, 8)
            for rep in range(max(3, ctx.repeat)):
                for (version, side), gateway in gateways.items():
                    ctx.say(f"  workers: {side}{' (before)' if version == BEFORE else ''}, round {rep + 1}")
                    cpu_before = gateway.tree_cpu_seconds()
                    result = hey(f"{gateway.http_url}/v1/models/free:predict", body_file, 64, ctx.duration)
                    answered = result["ok"]
                    runs.append({"regime": "gateway-bound", "version": version, "side": side, "round": rep, **result,
                                 # every process of the gateway, summed: what a request costs it
                                 "cpu_us": (gateway.tree_cpu_seconds() - cpu_before) / answered * 1e6
                                 if answered else 0.0})
                    result = hey(f"{gateway.http_url}/v1/models/embedded:predict", body_file, 64, ctx.duration)
                    runs.append({"regime": "gateway-bound, embedded", "version": version, "side": side, "round": rep,
                                 **result})
                    closed = load(f"{gateway.http_url}/v1/models/seed:predict", V1_BODY, concurrency=5,
                                  duration=ctx.duration)
                    runs.append({"regime": "seed", "version": version, "side": side, "round": rep, "rps": closed.ok / closed.elapsed_s,
                                 "p50_ms": closed.percentiles_ms()["50"], "errors": closed.summary()["errors"]})
                    before = batch_totals(gateway, "saturation")
                    busy = load(f"{gateway.http_url}/v1/models/saturation:predict", V1_BODY, concurrency=128,
                                duration=ctx.duration)
                    runs.append({"regime": "saturation", "version": version, "side": side, "round": rep,
                                 "rps": busy.ok / busy.elapsed_s,
                                 "vs_ideal": busy.ok / busy.elapsed_s / IDEAL,
                                 "mean_batch": mean_batch_between(before, batch_totals(gateway, "saturation")),
                                 "errors": busy.summary()["errors"]})
        finally:
            for gateway in gateways.values():
                gateway.stop()
    finally:
        for predictor in (free, seed, saturated):
            predictor.stop()

    rows = _rows([r for r in runs if r["version"] == AFTER])
    by: dict[tuple[str, str], float] = {(r["regime"], r["metric"]): r["ratio"] for r in rows}
    one_ideal, two_ideal = (next(r[side] for r in rows if (r["regime"], r["metric"]) == ("saturation", "vs_ideal"))
                            for side in ("one", "two"))
    checks = [
        check("gateway-bound (free predictor, 64 hey clients): req/s, 2 workers vs 1 process", ">= 1.3x",
              f"{by[('gateway-bound', 'rps')]:.2f}x", by[("gateway-bound", "rps")] >= 1.3),
        check("gateway-bound: the gateway's CPU per request (all its processes), 2 workers vs 1 process",
              "<= 1.15x", f"{by[('gateway-bound', 'cpu_us')]:.2f}x", by[("gateway-bound", "cpu_us")] <= 1.15),
        check("gateway-bound, embedded predictor: req/s, 2 workers vs 1 process", ">= 1.3x",
              f"{by[('gateway-bound, embedded', 'rps')]:.2f}x", by[("gateway-bound, embedded", "rps")] >= 1.3),
        check("seed (5 clients, 5 ms): p50, 2 workers vs 1 process", "within 10%",
              f"{by[('seed', 'p50_ms')]:.2f}x", abs(by[("seed", "p50_ms")] - 1) <= 0.10),
        check("seed (5 clients, 5 ms): req/s, 2 workers vs 1 process", "within 10%",
              f"{by[('seed', 'rps')]:.2f}x", abs(by[("seed", "rps")] - 1) <= 0.10),
        check("saturation (128 clients, 20 ms + 0.25 ms/row, max_inflight 2): mean batch", "within 5%",
              f"{by[('saturation', 'mean_batch')]:.2f}x", abs(by[("saturation", "mean_batch")] - 1) <= 0.05),
        check("saturation: req/s", "within 5%", f"{by[('saturation', 'rps')]:.2f}x",
              abs(by[("saturation", "rps")] - 1) <= 0.05),
        check("saturation: 2 workers' req/s vs the ideal (2 full batches always at the predictor)", ">= 90%",
              f"{two_ideal:.0%}", two_ideal >= 0.90),
        check("saturation: 2 workers vs 1 process, points of the ideal", "within 5 points",
              f"{(two_ideal - one_ideal) * 100:+.1f}", abs(two_ideal - one_ideal) <= 0.05),
    ]
    return {
        "title": "Workers: one gateway process vs --workers 2",
        "setup": f"Both gateways side by side, loaded in {max(3, ctx.repeat)} interleaved rounds of {ctx.duration:g} s "
                 "per regime; v1 requests of one row, max_batch_size 32; simulated predictors in their own "
                 "processes (embedded: inside the gateway). Gateway-bound: call-ms 0, the real hey with 64 "
                 "clients. Seed: call-ms 5, 5 closed-loop clients (tools.loadgen). "
                 f"Saturation: 8 predictor slots at 20 ms + 0.25 ms per row, max_inflight 2, 128 clients; ideal "
                 f"{IDEAL:.0f} req/s (2 batches of 32 always at the predictor). "
                 "Ratios are medians of each round's 2-workers / 1-process ratio."
                 + (" With --before, the other checkout's two gateways run in the same rounds, interleaved." if
                    ctx.before is not None else ""),
        "tables": [{"title": title, "rows": version_rows, "columns": COLUMNS} for title, version_rows in (
            ("This checkout" if ctx.before is not None else "", rows),
            *([(f"Before: the gateway of {ctx.before}, in the same rounds",
                _rows([r for r in runs if r["version"] == BEFORE]))] if ctx.before is not None else []))],
        "checks": checks, "runs": runs,
    }


COLUMNS = [["regime", "regime", "s"], ["metric", "metric", "s"], ["one", "1 process", ".2f"],
           ["two", "2 workers", ".2f"], ["ratio", "2 workers / 1 process", ".2f"]]
METRICS = (("gateway-bound", "rps"), ("gateway-bound", "p50_ms"), ("gateway-bound", "cpu_us"),
           ("gateway-bound, embedded", "rps"), ("seed", "rps"), ("seed", "p50_ms"), ("saturation", "rps"),
           ("saturation", "vs_ideal"), ("saturation", "mean_batch"))


def _rows(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One gateway version's table: each metric's median per side, and the median of each
    round's 2-workers / 1-process ratio."""
    def of(regime: str, side: str) -> list[dict[str, Any]]:
        return [r for r in runs if r["regime"] == regime and r["side"] == side]

    def ratio(regime: str, key: str) -> float:
        pairs = zip(of(regime, "1 process"), of(regime, "2 workers"), strict=True)
        return statistics.median(b[key] / a[key] for a, b in pairs if a[key])

    return [{"regime": regime, "metric": key, "one": statistics.median(r[key] for r in of(regime, "1 process")),
             "two": statistics.median(r[key] for r in of(regime, "2 workers")), "ratio": ratio(regime, key)}
            for regime, key in METRICS]
