"""The `goodput` scenario of `python -m tools.bench`: answers within their SLO per second.

From half to twice the predictor's batched capacity and in bursts, open-loop arrivals:
FIFO (adaptive), window, deadline, and the real Triton's own dynamic batcher; then two
priority levels at 1.5x capacity, shared equally or taken by level 1 alone.

It holds this scenario only; the harness (servers, load, rows, checks) is
`tools.bench.harness`'. It must not import another scenario.
"""
from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from tools import loadgen
from tools.bench.harness import (
    OIP_JSON_BODY,
    Context,
    Gateway,
    RealTriton,
    batch_totals,
    check,
    load,
    mean_batch_between,
)

GOODPUT_LOADS: tuple[float | str, ...] = (0.5, 0.8, 1.0, 1.2, 1.5, 2.0, "bursty")


def _goodput_row(name: str, load_label: float | str, result: loadgen.Result, slo_s: float, duration: float,
                 **extra: Any) -> dict[str, Any]:
    """Goodput (answers within the SLO, per second) and what became of the rest, for one run."""
    answered = sorted(result.ok_latencies)
    good = sum(1 for latency in answered if latency <= slo_s)
    refused = sum(count for status, count in result.statuses.items() if status in ("429", "503", "504"))
    refusal_ms = sorted(1000 * latency for latency in result.refusal_latencies)
    row = {
        "name": name, "load": load_label, "offered": result.sent / duration,
        "goodput": good / duration, "answered": len(answered) / duration,
        "late_pct": 100 * (len(answered) - good) / max(1, len(answered)),
        "refused_pct": 100 * refused / max(1, result.sent),
        "p50_ms": 1000 * answered[len(answered) // 2] if answered else None,
        "p99_ms": 1000 * answered[int(len(answered) * 0.99)] if answered else None,
        "refusal_p50_ms": refusal_ms[len(refusal_ms) // 2] if refusal_ms else None,
        "expired_pct": 100 * result.statuses.get("504", 0) / max(1, result.sent),
    }
    row.update(extra)
    return row


STARVED = "1.5: 1.2 + 0.3"  # level 1 alone takes more than the predictor answers


def priority_runs(ctx: Context, slo_s: float, call_ms: float, per_row_ms: float, batch: int) -> list[dict[str, Any]]:
    """Two priority levels under `slo_ms`, each level's goodput: at 1.5x capacity shared
    equally, and with level 1 alone at 1.2x, where level 2 can only be refused (fast) or
    left to expire."""
    capacity = batch / ((call_ms + per_row_ms * batch) / 1000)
    model = {"name": "demo", "backend": "simulated", "simulated": {"call_ms": call_ms, "per_instance_ms": per_row_ms},
             "batching": {"max_batch_size": batch, "timeout_s": 30, "slo_ms": slo_s * 1000, "priority_levels": 2}}
    runs = []
    with Gateway(ctx.log_dir, "gateway-goodput-priority", [model]).start() as gateway:
        url = f"{gateway.http_url}/v2/models/demo/infer"
        load(url, OIP_JSON_BODY, concurrency=2000, rate=capacity, duration=1.0, seed=1)

        def at_level(level: int) -> bytes:  # the OIP `priority` parameter, as Triton's clients send it
            return json.dumps({"parameters": {"priority": level}, "inputs": [
                {"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}).encode()

        for label, shares in (("1.5: 0.75 + 0.75", (0.75, 0.75)), (STARVED, (1.2, 0.3))):
            ctx.say(f"  goodput: deadline with two priority levels, {label} x capacity")

            async def both(shares: tuple[float, float] = shares) -> list[loadgen.Result]:
                return list(await asyncio.gather(*(
                    loadgen.run(_open_loop(url, at_level(level), share * capacity, ctx.duration))
                    for level, share in zip((1, 2), shares, strict=True))))

            for level, share, result in zip((1, 2), shares, asyncio.run(both()), strict=True):
                runs.append(_goodput_row(f"deadline, priority {level} of 2", label, result, slo_s, ctx.duration,
                                         share_of_offered=result.sent / ctx.duration / (share * capacity)))
    return runs


def _open_loop(url: str, body: bytes, rate: float, duration: float, *, arrivals: str = "poisson") -> loadgen.Config:
    return loadgen.Config(target=url, body=body, method="POST", concurrency=2000, duration=duration, timeout=60,
                          rate=rate, arrivals=arrivals, seed=1).validate()


def goodput(ctx: Context) -> dict[str, Any]:
    """Answers within their SLO per second, from half to twice the predictor's batched capacity
    and in bursts: FIFO (adaptive), window, deadline, and the real Triton's own dynamic batcher."""
    slo_s, call_ms, per_row_ms, batch = 0.2, 50.0, 1.0, 8
    capacity = batch / ((call_ms + per_row_ms * batch) / 1000)  # rows per second
    body = OIP_JSON_BODY
    policies: dict[str, dict[str, Any]] = {
        "adaptive (FIFO)": {},
        "window (50 ms)": {"policy": "window", "max_latency_ms": 50},
        "deadline": {"slo_ms": slo_s * 1000},
    }
    runs: list[dict[str, Any]] = []

    def run_loads(name: str, url: str, gateway: Gateway | None = None) -> None:
        # A second at 1x first: warm connections, and teach the deadline policy its profile.
        load(url, body, concurrency=2000, rate=capacity, duration=1.0, seed=1)
        for load_label in GOODPUT_LOADS:
            factor, arrivals = (1.0, "bursty") if load_label == "bursty" else (float(load_label), "poisson")
            ctx.say(f"  goodput: {name} at {load_label}{'' if load_label == 'bursty' else 'x'} capacity")
            before = batch_totals(gateway, "demo") if gateway else None
            result = asyncio.run(loadgen.run(_open_loop(url, body, factor * capacity, ctx.duration, arrivals=arrivals)))
            mean_batch = mean_batch_between(before, batch_totals(gateway, "demo")) if gateway and before else None
            runs.append(_goodput_row(name, load_label, result, slo_s, ctx.duration, mean_batch=mean_batch))
            time.sleep(slo_s * 2)  # what the previous load left queued drains

    for name, batching in policies.items():
        model = {"name": "demo", "backend": "simulated",
                 "simulated": {"call_ms": call_ms, "per_instance_ms": per_row_ms},
                 "batching": {"max_batch_size": batch, "timeout_s": 30, **batching}}
        with Gateway(ctx.log_dir, f"gateway-goodput-{name.split()[0]}", [model]).start() as gateway:
            run_loads(name, f"{gateway.http_url}/v2/models/demo/infer", gateway)
    triton = RealTriton(ctx.log_dir, "direct", call_ms, per_row_ms).start()
    try:
        run_loads("Triton dynamic batcher", f"{triton.http_url}/v2/models/cost_deadline/infer")
    finally:
        triton.stop()

    runs.extend(priority_runs(ctx, slo_s, call_ms, per_row_ms, batch))
    def goodput_of(name: str, load_label: float | str) -> float:
        return next(float(r["goodput"]) for r in runs if r["name"] == name and r["load"] == load_label)

    checks = []
    for load_label in (1.5, 2.0):
        value = goodput_of("deadline", load_label)
        checks.append(check(f"deadline goodput at {load_label}x capacity", ">= 90% of capacity",
                            f"{value / capacity:.0%}", value >= 0.9 * capacity))
    for other in ("adaptive (FIFO)", "window (50 ms)", "Triton dynamic batcher"):
        worst = min(goodput_of("deadline", label) / max(goodput_of(other, label), 1e-9) for label in GOODPUT_LOADS)
        checks.append(check(f"deadline goodput vs {other}, at every load", ">= 1.0x everywhere",
                            f"lowest ratio {worst:.2f}x", worst >= 0.99))
    high = next(r for r in runs if r["name"] == "deadline, priority 1 of 2" and r["load"] == "1.5: 0.75 + 0.75")
    checks.append(check("priority 1 of 2 at 1.5x capacity: its goodput", ">= 95% of what it offered",
                        f"{high['goodput'] / max(high['offered'], 1e-9):.0%}",
                        high["goodput"] >= 0.95 * high["offered"]))
    starved = next(r for r in runs if r["name"] == "deadline, priority 2 of 2" and r["load"] == STARVED)
    checks.append(check("priority 2 of 2 while level 1 alone takes 1.2x capacity: its requests that wait out their "
                        "deadline (504)", "<= 5%", f"{starved['expired_pct']:.1f}%", starved["expired_pct"] <= 5))
    low_load = [r for r in runs if r["name"] == "deadline" and r["load"] in (0.5, 0.8)]
    checks.append(check("deadline at <= 0.8x capacity: refusals", "none",
                        f"{max(r['refused_pct'] for r in low_load):.1f}%",
                        all(r["refused_pct"] == 0 for r in low_load)))
    return {
        "title": "Goodput: answers within their SLO per second, by policy, from 0.5x to 2x capacity and in bursts",
        "setup": f"The gateway's embedded simulated model at {call_ms:g} ms + {per_row_ms:g} ms per row, batches of "
                 f"{batch}: a capacity of {capacity:.0f} rows/s. The real Triton 2.51 serves a Python-backend model "
                 f"of the same cost with its own dynamic batcher (max_batch_size {batch}) and a queue policy that "
                 f"rejects a request after {slo_s * 1000:.0f} ms in its queue, the nearest Triton has. tools.loadgen's "
                 f"open loop sends single-row OIP REST requests, Poisson arrivals at each load for {ctx.duration:g} s "
                 f"(`bursty`: 2x capacity for half of each second, none in the other half), after 1 s at 1x. "
                 f"Goodput counts 200s within {slo_s * 1000:.0f} ms; `deadline` sets slo_ms = {slo_s * 1000:.0f}. "
                 f"Refused: 429, 503 and 504 (an answer that comes back late is counted in `late`, not here).",
        "tables": [{"title": "", "rows": runs, "columns": [
            ["name", "system", "s"], ["load", "load x capacity", "s"], ["offered", "offered req/s", ".0f"],
            ["goodput", "goodput/s", ".1f"], ["answered", "200/s", ".1f"], ["late_pct", "late 200s %", ".0f"],
            ["refused_pct", "refused %", ".0f"], ["expired_pct", "of which 504 %", ".0f"],
            ["p50_ms", "200 p50 ms", ".0f"], ["p99_ms", "200 p99 ms", ".0f"],
            ["refusal_p50_ms", "refusal p50 ms", ".1f"], ["mean_batch", "mean batch", ".1f"]]}],
        "checks": checks, "runs": runs,
        "plots": {"goodput": {"capacity": capacity, "loads": [x for x in GOODPUT_LOADS if x != "bursty"],
                              "series": {name: [goodput_of(name, x) for x in GOODPUT_LOADS if x != "bursty"]
                                         for name in (*policies, "Triton dynamic batcher")}}},
    }
