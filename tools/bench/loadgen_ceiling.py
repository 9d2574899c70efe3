"""The `loadgen-ceiling` scenario of `python -m tools.bench`: the load generator's own ceiling.

tools.loadgen against servers that do nothing (`tools.bench.baselines` `trivial`): its own
cost per request, by engine and number of processes.

It holds this scenario only; the harness (servers, load, rows, checks) is
`tools.bench.harness`'. It must not import another scenario.
"""
from __future__ import annotations

from typing import Any

from tools.bench.harness import V1_BODY, Baseline, Context, load, oip_body, run_row


def loadgen_ceiling(ctx: Context) -> dict[str, Any]:
    """tools.loadgen against servers that do nothing: its own cost per request."""
    runs = []
    with Baseline(ctx.log_dir, "trivial").start() as trivial:
        url = f"{trivial.http_url}/v1/models/demo:predict"
        plan: dict[str, dict[str, Any]] = {
            "http fast engine, 1 process": dict(target=url, body=V1_BODY),
            "http aiohttp engine, 1 process": dict(target=url, body=V1_BODY, engine="aiohttp"),
            "http fast engine, 2 processes": dict(target=url, body=V1_BODY, processes=2),
            "grpc, 1 process": dict(target=trivial.grpc_address, body=oip_body("demo"), grpc=True, connections=2),
            "grpc, 2 processes": dict(target=trivial.grpc_address, body=oip_body("demo"), grpc=True, connections=2,
                                      processes=2),
        }
        for name, spec in plan.items():
            ctx.say(f"  loadgen-ceiling: {name}")
            result = load(concurrency=32, duration=ctx.duration, **spec)
            row = run_row(name, result)
            row["ceiling_per_core"] = 1e6 / row["loadgen_cpu_us"] if row["loadgen_cpu_us"] else None
            runs.append(row)
    return {
        "title": "The load generator's own ceiling",
        "setup": f"tools.loadgen, 32 closed-loop clients for {ctx.duration:g} s, against tools/bench/baselines.py "
                 f"`trivial` (a fixed 200 `{{}}` from an asyncio.Protocol HTTP server; an empty message from a "
                 f"generic grpc.aio handler) on the same 2-core machine: req/s achieved (the server shares the "
                 f"machine) and the generator's CPU per request (its ceiling per core).",
        "tables": [{"title": "", "rows": runs, "columns": [
            ["name", "run", "s"], ["rps", "req/s", ".0f"], ["loadgen_cpu_us", "CPU us/request", ".0f"],
            ["ceiling_per_core", "ceiling req/s per core", ".0f"], ["p50_ms", "p50 ms", ".2f"]]}],
        "checks": [], "runs": runs, "plots": {},
    }
