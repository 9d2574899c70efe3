"""The `memory` scenario of `python -m tools.bench`: the gateway's RSS.

Part A: requests held in the queue behind a predictor that never answers in time (gRPC, then
HTTP), beside the minimal servers of `tools.bench.baselines` holding as many (the floor the
frameworks themselves set). Part B: RSS across many requests through a fresh gateway.

It holds this scenario only; the harness (servers, load, rows, checks) is
`tools.bench.harness`'. It must not import another scenario.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

from tools import loadgen
from tools.bench.harness import (
    V1_BODY,
    Baseline,
    Context,
    Gateway,
    Predictor,
    Server,
    check,
    grpc_model,
    load,
    oip_body,
    v1_model,
    warm_up,
)


def memory(ctx: Context) -> dict[str, Any]:
    queued, total = ctx.memory_queued, ctx.memory_requests
    samples_wanted = 10
    chunk = max(1, total // samples_wanted)
    rows: list[dict[str, Any]] = []
    checks = []
    # Part A: requests held in the queue by a predictor that never answers in time, once
    # with gRPC clients (many calls on a few HTTP/2 connections) and once with HTTP clients
    # (one connection each), each through a fresh gateway.
    hung = Predictor(ctx.log_dir, "predictor-hung", call_ms=60_000).start()
    fast = Predictor(ctx.log_dir, "predictor-fast", call_ms=0).start()
    try:
        for protocol in ("grpc", "http"):
            label = "gRPC" if protocol == "grpc" else "HTTP v1"
            with Gateway(ctx.log_dir, f"gateway-memory-queue-{protocol}", [
                grpc_model("hung", hung, max_batch_size=32, max_queue=queued * 2, timeout_s=600),
                v1_model("hung-v1", hung, max_batch_size=32, max_queue=queued * 2, timeout_s=600),
                v1_model("warm", fast, max_batch_size=32), grpc_model("warm-grpc", fast, max_batch_size=32),
            ]).start() as gateway:
                warm_up(f"{gateway.http_url}/v1/models/warm:predict", V1_BODY, 16)
                warm_up(gateway.grpc_address, oip_body("warm-grpc"), 16, grpc=True)
                ctx.say(f"  memory: queueing {queued} {protocol} requests behind a hung predictor")
                held = asyncio.run(_hold(gateway, queued, protocol, "hung" if protocol == "grpc" else "hung-v1"))
            # The floor: the minimal Tornado app / grpc.aio servicer holding as many requests
            # (parsed, then awaiting an event), which is what the frameworks themselves keep.
            with Baseline(ctx.log_dir, "minimal", f"baseline-minimal-memory-{protocol}").start() as baseline:
                warm_up(f"{baseline.http_url}/v1/models/demo:predict", V1_BODY, 16)
                warm_up(baseline.grpc_address, oip_body("demo"), 16, grpc=True)
                ctx.say(f"  memory: holding {queued} {protocol} requests in the minimal server")
                floor = asyncio.run(_hold(baseline, queued, protocol, "hold"))
            own, bare = held["per_request_kb"], floor["per_request_kb"]
            rows += [
                {"name": f"{label}: gateway RSS idle (after warm-up)", "value": f"{held['idle_kb'] / 1024:.1f} MiB"},
                {"name": f"{label}: gateway RSS with {held['inflight']} requests queued",
                 "value": f"{held['rss_kb'] / 1024:.1f} MiB"},
                {"name": f"{label}: per queued request", "value": f"{own:.1f} KiB"},
                {"name": f"{label}: minimal server, per held request (the framework's floor)",
                 "value": f"{bare:.1f} KiB"},
                {"name": f"{label}: the gateway's own share (gateway - floor)", "value": f"{own - bare:.1f} KiB"},
                {"name": f"{label}: gateway RSS after the clients went away",
                 "value": f"{held['after_kb'] / 1024:.1f} MiB"},
            ]
            checks.append(check(f"{label}: {queued} requests queued", "all held, none refused",
                                f"{held['inflight']} in flight, {held['answered']} answered early",
                                held["inflight"] == queued))
            checks.append(check(f"{label}: minimal server holding {queued} requests", "all held",
                                f"{floor['inflight']} in flight, {floor['answered']} answered early",
                                floor["inflight"] == queued))
    finally:
        hung.stop()
        fast.stop()
    # Part B: RSS across many requests through a fresh gateway.
    fast = Predictor(ctx.log_dir, "predictor-fast-2", call_ms=0).start()
    samples: list[dict[str, Any]] = []
    try:
        with Gateway(ctx.log_dir, "gateway-memory-steady", [
            v1_model("v1", fast, max_batch_size=32), grpc_model("oip", fast, max_batch_size=32),
        ]).start() as gateway:
            http_target = (f"{gateway.http_url}/v1/models/v1:predict", V1_BODY, False)
            grpc_target = (gateway.grpc_address, oip_body("oip"), True)
            warm_up(http_target[0], http_target[1], 16)
            warm_up(grpc_target[0], grpc_target[1], 16, grpc=True)
            samples.append({"requests": 0, "rss_kb": gateway.rss_kb()})
            sent = 0
            index = 0
            while sent < total:
                n = min(chunk, total - sent)
                target, body, grpc = http_target if index % 2 == 0 else grpc_target
                ctx.say(f"  memory: requests {sent + 1}-{sent + n} over {'gRPC' if grpc else 'HTTP'}")
                result = load(target, body, concurrency=64, requests=n, grpc=grpc, timeout=60,
                              progress=ctx.progress)
                sent += n
                index += 1
                samples.append({"requests": sent, "rss_kb": gateway.rss_kb(), "ok": result.ok,
                                "protocol": "grpc" if grpc else "http", "rps": result.rps})
    finally:
        fast.stop()
    first, last = samples[1]["rss_kb"], samples[-1]["rss_kb"]
    growth = (last - first) / first
    rows += [
        {"name": f"RSS after the first {samples[1]['requests']} requests", "value": f"{first / 1024:.1f} MiB"},
        {"name": f"RSS after {samples[-1]['requests']} requests", "value": f"{last / 1024:.1f} MiB"},
        {"name": "growth first -> last", "value": f"{growth:+.1%}"},
        {"name": "samples (requests: MiB)",
         "value": ", ".join(f"{s['requests'] // 1000}k: {s['rss_kb'] / 1024:.0f}" for s in samples)},
        {"name": "requests ok", "value": f"{sum(s.get('ok', 0) for s in samples)} of {total}"},
    ]
    checks.append(check(f"RSS flat across {total} requests (first sample vs last)", "within 10%",
                        f"{growth:+.1%}", abs(growth) <= 0.10))
    return {
        "title": "Memory: gateway RSS",
        "setup": f"Gateway RSS (VmRSS) with {queued} requests queued (predictor of 1 slot, 60 s per call; "
                 f"max_queue {queued * 2}): {queued} gRPC calls in flight on {max(1, queued // 100)} connections, "
                 f"then {queued} HTTP clients with a connection each, each through a fresh gateway; the same "
                 f"requests held by the minimal Tornado app and grpc.aio servicer of tools/bench/baselines.py "
                 f"(parsed, then waiting), the floor the frameworks themselves set; "
                 f"then across {total} requests "
                 f"through a fresh gateway (no-cost predictor, 64 clients, alternating HTTP v1 and gRPC in "
                 f"chunks of {chunk}), sampled after each chunk.",
        "tables": [{"title": "", "rows": rows, "columns": [["name", "measure", "s"], ["value", "value", "s"]]}],
        "checks": checks, "runs": [{"queued": queued, "samples": samples}],
        "plots": {"memory": samples},
    }


async def _hold(server: Server, queued: int, protocol: str, model: str) -> dict[str, Any]:
    """Open `queued` requests to `model`, which never answers in time, measure the server's
    RSS once it is steady, let them go."""
    idle = server.rss_kb()
    live = loadgen.Live()
    if protocol == "grpc":
        config = loadgen.Config(
            target=server.grpc_address, grpc=True, call="inference.GRPCInferenceService/ModelInfer",
            body=oip_body(model), concurrency=queued, requests=queued, timeout=300,
            connections=max(1, queued // 100), duration=240)
    else:
        config = loadgen.Config(
            target=f"{server.http_url}/v1/models/{model}:predict", body=V1_BODY, concurrency=queued,
            requests=queued, timeout=300, duration=240)
    task = asyncio.get_running_loop().create_task(loadgen.run(config, live))
    steady_since, last, deadline = None, 0, time.monotonic() + 120
    rss = 0
    while time.monotonic() < deadline and not task.done():
        await asyncio.sleep(0.5)
        rss = server.rss_kb()
        if live.sent >= queued and abs(rss - last) <= max(256, last // 200):
            steady_since = steady_since or time.monotonic()
            if time.monotonic() - steady_since >= 2.0:
                break
        else:
            steady_since = None
        last = rss
    inflight, answered = live.inflight, live.finished
    live.stop()
    await task
    await asyncio.sleep(1.0)
    return {"idle_kb": idle, "rss_kb": rss, "per_request_kb": (rss - idle) / queued, "after_kb": server.rss_kb(),
            "inflight": inflight, "answered": answered}
