"""The `saturation` scenario of `python -m tools.bench`.

128 clients with one instance each, through the gateway over HTTP (v1) and gRPC (OIP) with
max_inflight 1 and 2, in front of the simulated predictor at 20 ms + 0.25 ms per instance
(1 slot); against the ideal batched ceiling and the predictor's own, measured in the same run.
With `--before`, another checkout's gateway runs the same loads in the same rounds ("before: ...").

It holds this scenario only; the harness (servers, load, rows, checks) is
`tools.bench.harness`'. It must not import another scenario.
"""
from __future__ import annotations

from contextlib import ExitStack
from typing import Any

from tools.bench.harness import (
    V1_BODY,
    Context,
    Gateway,
    Predictor,
    check,
    grpc_model,
    load,
    median_rows,
    oip_body,
    run_row,
    v1_body,
    v1_model,
    warm_up,
)


def saturation(ctx: Context) -> dict[str, Any]:
    call_ms, per_ms, size, clients = 20.0, 0.25, 32, 128
    ideal = size / ((call_ms + size * per_ms) / 1000.0)
    predictor = Predictor(ctx.log_dir, "predictor-saturation", call_ms=call_ms, per_instance_ms=per_ms).start()
    runs = []
    try:
        models = []
        for inflight in (1, 2):
            models.append(v1_model(f"http-{inflight}", predictor, max_batch_size=size, max_inflight=inflight))
            models.append(grpc_model(f"grpc-{inflight}", predictor, max_batch_size=size, max_inflight=inflight))
        with ExitStack() as started:
            sides = [("", started.enter_context(Gateway(ctx.log_dir, "gateway-saturation", models).start()))]
            if ctx.before is not None:
                sides.append(("before: ", started.enter_context(
                    Gateway(ctx.log_dir, "gateway-saturation-before", models, root=ctx.before).start())))
            plan: list[tuple[str, dict[str, Any], int]] = [
                ("predictor ceiling, http, 32/call, c=1",
                 dict(target=f"{predictor.http_url}/v1/models/demo:predict", body=v1_body(size), concurrency=1), size),
                ("predictor ceiling, http, 32/call, c=2",
                 dict(target=f"{predictor.http_url}/v1/models/demo:predict", body=v1_body(size), concurrency=2), size),
                ("predictor ceiling, grpc, 32/call, c=2",
                 dict(target=predictor.grpc_address, body=oip_body("demo", size), concurrency=2, grpc=True), size),
                ("direct unbatched, http",
                 dict(target=f"{predictor.http_url}/v1/models/demo:predict", body=V1_BODY, concurrency=clients), 1),
            ]
            for inflight in (1, 2):
                for prefix, gateway in sides:
                    plan.append((f"{prefix}gateway http (v1), max_inflight {inflight}",
                                 dict(target=f"{gateway.http_url}/v1/models/http-{inflight}:predict", body=V1_BODY,
                                      concurrency=clients), 1))
                    plan.append((f"{prefix}gateway grpc (OIP), max_inflight {inflight}",
                                 dict(target=gateway.grpc_address, body=oip_body(f"grpc-{inflight}"),
                                      concurrency=clients, grpc=True, connections=4), 1))
            for _, spec, _ in plan:
                warm_up(spec["target"], spec["body"], min(spec["concurrency"], 16), grpc=spec.get("grpc", False))
            for rep in range(ctx.repeat):
                for name, spec, rows_per_request in plan:
                    ctx.say(f"  saturation: {name} ({rep + 1}/{ctx.repeat})")
                    predictor.reset_stats()
                    result = load(duration=ctx.duration, progress=ctx.progress, **spec)
                    runs.append(run_row(name, result, rows_per_request=rows_per_request, predictor=predictor,
                                        repeat=rep))
    finally:
        predictor.stop()
    rows = median_rows(runs)
    ceiling = max(r["instances_per_s"] for r in rows if r["name"].startswith("predictor ceiling"))
    for row in rows:
        row["vs_ideal"] = row["instances_per_s"] / ideal
        row["vs_ceiling"] = row["instances_per_s"] / ceiling if ceiling else None
    by = {r["name"]: r for r in rows}
    checks = []
    for protocol in ("http (v1)", "grpc (OIP)"):
        best = max(by[f"gateway {protocol}, max_inflight {i}"]["instances_per_s"] for i in (1, 2))
        checks.append(check(f"gateway {protocol}, best of max_inflight 1/2, vs measured predictor ceiling",
                            "close to 100%", f"{best:.0f} inst/s = {best / ceiling:.0%} of {ceiling:.0f}", None))
    direct = by["direct unbatched, http"]["instances_per_s"]
    gw_best = max(r["instances_per_s"] for r in rows if r["name"].startswith("gateway"))
    checks.append(check("batching gain: best gateway vs direct unbatched", "> 10x",
                        f"{gw_best / direct:.1f}x" if direct else "n/a", bool(direct) and gw_best / direct > 10))
    return {
        "title": f"Saturation: 128 clients, predictor {call_ms:g} ms + {per_ms:g} ms/instance, 1 slot",
        "setup": f"Ideal batched ceiling 32 / ({call_ms:g} ms + 32 x {per_ms:g} ms) = {ideal:.0f} instances/s. "
                 f"{clients} closed-loop clients with one instance each, {ctx.duration:g} s per run, median of "
                 f"{ctx.repeat}; max_batch_size {size}, adaptive policy. The predictor's own ceiling is measured "
                 f"in the same run with back-to-back batches of 32 straight to it.",
        "tables": [{"title": "", "rows": rows, "columns": [
            ["name", "run", "s"], ["clients", "clients", "d"], ["instances_per_s", "instances/s", ".0f"],
            ["vs_ideal", "vs ideal", ".0%"], ["vs_ceiling", "vs ceiling", ".0%"],
            ["p50_ms", "p50 ms", ".1f"], ["p99_ms", "p99 ms", ".1f"], ["mean_batch", "mean batch", ".1f"],
            ["errors", "errors", "d"]]}],
        "checks": checks, "runs": runs, "ideal": ideal, "ceiling": ceiling,
        "plots": {
            "batch_sizes": {r["name"].replace("gateway ", "sat "): r.get("batch_sizes", {}) for r in rows
                            if r["name"].startswith("gateway")},
            "saturation": {"ideal": ideal, "ceiling": ceiling,
                           "bars": [(r["name"], r["instances_per_s"]) for r in rows]},
        },
    }
