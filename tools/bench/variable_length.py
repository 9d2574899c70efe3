"""The `variable-length` scenario of `python -m tools.bench`: variable-length inputs.

Token sequences of log-normal lengths (8..512): padding off vs pad to the longest vs buckets,
in front of the gateway's embedded model whose cost grows with padded elements.

It holds this scenario only; the harness (servers, load, rows, checks) is
`tools.bench.harness`'. It must not import another scenario.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any

from tools.bench.harness import Context, Gateway, check, closed_loop, lognormal_lengths, metric

VARIABLE_LENGTH_BUCKETS = [16, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 320, 384, 512]


def variable_length(ctx: Context) -> dict[str, Any]:
    """Token sequences of skewed lengths: padding off (today: one signature per length) vs pad
    to the longest vs buckets, in front of a predictor whose cost grows with padded elements."""
    clients, call_ms, per_element_us = 64, 10.0, 15.0
    lengths = lognormal_lengths(4000, seed=11)
    bodies = [json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, n],
                                      "data": [float(i % 7) for i in range(n)]}]}).encode() for n in lengths]
    signature = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, -1], "pad": {"dim": 1, "value": 0}}],
                 "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, -1], "follows_pad": 1}]}
    modes: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
        ("off", {}, {}),
        ("pad to longest", signature, {"max_batch_cost": 8192}),
        ("buckets", signature, {"buckets": VARIABLE_LENGTH_BUCKETS, "max_batch_cost": 8192}),
    ]
    runs: list[dict[str, Any]] = []
    for name, tensors, padding in modes:
        model = {"name": "demo", "backend": "simulated", **tensors,
                 "simulated": {"call_ms": call_ms, "per_element_us": per_element_us},
                 "batching": {"max_batch_size": 32, "timeout_s": 30, **padding}}
        with Gateway(ctx.log_dir, f"gateway-variable-length-{name.replace(' ', '-')}", [model]).start() as gateway:
            ctx.say(f"  variable-length: {name}")
            url = f"{gateway.http_url}/v2/models/demo/infer"
            asyncio.run(closed_loop(url, bodies[:200], clients, 1.0))  # warm up, not measured
            before = {key: (metric(gateway, key, "demo") or 0.0) for key in
                      ("gateway_batches_total", "gateway_batched_instances_total", "gateway_padded_elements_total",
                       "gateway_real_elements_total")}
            result = asyncio.run(closed_loop(url, bodies, clients, ctx.duration))
            after = {key: (metric(gateway, key, "demo") or 0.0) - value for key, value in before.items()}
        batches = after["gateway_batches_total"]
        real = after["gateway_real_elements_total"]
        runs.append({"name": name, **result,
                     "mean_batch": after["gateway_batched_instances_total"] / batches if batches else None,
                     # share of the predictor's elements that were padding (0 when nothing is padded)
                     "waste_pct": 100 * (1 - real / after["gateway_padded_elements_total"]) if real else 0.0,
                     "padded_per_real": after["gateway_padded_elements_total"] / real if real else 1.0})
    by_name = {run["name"]: run for run in runs}
    off, buckets = by_name["off"], by_name["buckets"]
    ratio = buckets["rps"] / max(off["rps"], 1e-9)
    checks = [
        check("buckets throughput vs padding off", ">= 3x", f"{ratio:.2f}x", ratio >= 3),
        check("buckets p99 vs padding off", "equal or better", f"{buckets['p99_ms']:.0f} vs {off['p99_ms']:.0f} ms",
              buckets["p99_ms"] <= off["p99_ms"]),
        check("padding waste with buckets", "< 30% of padded elements", f"{buckets['waste_pct']:.1f}%",
              buckets["waste_pct"] < 30),
        check("pad to longest throughput vs padding off", "", f"{by_name['pad to longest']['rps'] / max(off['rps'], 1e-9):.2f}x",
              None),
    ]
    return {
        "title": "Variable-length inputs: padding off vs pad to longest vs buckets",
        "setup": f"The gateway's embedded simulated model at {call_ms:g} ms per call + {per_element_us:g} us per padded "
                 f"element of INPUT0, one call at a time. {clients} closed-loop clients send OIP JSON requests of one "
                 f"row whose lengths are log-normal (median 48) clipped to 8..512, the same seeded sequence for each "
                 f"mode, for {ctx.duration:g} s after 1 s of warm-up. max_batch_size 32; padded modes also cap a batch "
                 f"at max_batch_cost 8192 padded elements; buckets {VARIABLE_LENGTH_BUCKETS}. Waste is the share of "
                 f"padded elements that were padding (gateway_padded_elements / gateway_real_elements).",
        "tables": [{"title": "", "rows": runs, "columns": [
            ["name", "mode", "s"], ["rps", "req/s", ".0f"], ["p50_ms", "p50 ms", ".0f"], ["p99_ms", "p99 ms", ".0f"],
            ["waste_pct", "waste %", ".1f"], ["mean_batch", "rows/batch", ".1f"], ["errors", "errors", "d"]]}],
        "checks": checks, "runs": runs, "plots": {},
    }
