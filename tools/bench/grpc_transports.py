"""The `grpc-transports` scenario of `python -m tools.bench`: two ways of taking the
gateway's gRPC requests, measured against each other and a bare grpc.aio servicer in one
run.

- `grpc.aio servicer`: the gateway as it serves gRPC (`gateway/grpc/oip.py`);
- `sync server, N threads`: grpc's synchronous server on a thread pool, each request parsed
  on its thread and handed into the same gateway's loop (`tools.bench.grpc_sync`), on the
  same scheduler and predictor;
- `bare grpc.aio servicer`: `tools.bench.baselines` `minimal`, answering itself.
OIP `ModelInfer`, one row of 4 floats, a simulated predictor with no cost, 32 clients of
`tools.loadgen`, interleaved rounds. CPU per request is the serving process's (both
gateway transports are one process, loaded one at a time).

It holds this scenario only; the harness is `tools.bench.harness`'. It must not import
another scenario.
"""
from __future__ import annotations

import statistics
from contextlib import ExitStack
from typing import Any

from tools.bench.harness import (
    Baseline,
    Context,
    Predictor,
    Server,
    check,
    grpc_model,
    load,
    oip_body,
    to_toml,
    warm_up,
)
from tools.processes import LOOPBACK, python_module_command

CLIENTS = 32
THREADS = 8


def grpc_transports(ctx: Context) -> dict[str, Any]:
    """The gateway's grpc.aio servicer vs grpc's synchronous server feeding the same loop."""
    rounds = max(3, ctx.repeat)
    predictor = Predictor(ctx.log_dir, "predictor-free", call_ms=0).start()
    config = ctx.log_dir / "gateway-grpc-transports.toml"
    config.write_text(to_toml([grpc_model("oip", predictor, max_batch_size=32)]))
    runs: list[dict[str, Any]] = []
    try:
        with ExitStack() as started:
            gateway = started.enter_context(Server("gateway-grpc-transports", python_module_command(
                "tools.bench.grpc_sync", str(config), "--threads", str(THREADS)), ctx.log_dir).start())
            bare = started.enter_context(Baseline(ctx.log_dir, "minimal").start())
            targets: dict[str, tuple[Server, str, bytes]] = {
                "gateway, grpc.aio servicer (today)": (gateway, gateway.grpc_address, oip_body("oip")),
                f"gateway, sync server, {THREADS} threads": (gateway, f"{LOOPBACK}:{gateway.port('sync')}",
                                                             oip_body("oip")),
                "bare grpc.aio servicer": (bare, bare.grpc_address, oip_body("demo")),
            }
            for _, target, body in targets.values():
                warm_up(target, body, 8, grpc=True)
            for round_ in range(rounds):
                for name, (server, target, body) in targets.items():
                    ctx.say(f"  grpc-transports: {name} (round {round_ + 1}/{rounds})")
                    cpu = server.cpu_seconds()
                    result = load(target, body, concurrency=CLIENTS, duration=ctx.duration, grpc=True,
                                  progress=ctx.progress)
                    summary, answered = result.summary(), max(1, result.ok)
                    runs.append({"name": name, "round": round_, "rps": summary["ok_rps"],
                                 "errors": summary["errors"], "p50_ms": result.percentiles_ms()["50"],
                                 "cpu_us": (server.cpu_seconds() - cpu) / answered * 1e6})
    finally:
        predictor.stop()
    bare_runs = [run for run in runs if run["name"] == "bare grpc.aio servicer"]
    rows = []
    for name in targets:
        mine = [run for run in runs if run["name"] == name]
        rows.append({"name": name, "rps": statistics.median(run["rps"] for run in mine),
                     "cpu_us": statistics.median(run["cpu_us"] for run in mine),
                     "cpu_range": f"{min(run['cpu_us'] for run in mine):.0f}-{max(run['cpu_us'] for run in mine):.0f}",
                     "rps_vs_bare": statistics.median(a["rps"] / b["rps"] for a, b in zip(mine, bare_runs, strict=True)),
                     "p50_ms": statistics.median(run["p50_ms"] for run in mine),
                     "errors": sum(run["errors"] for run in mine)})
    checks = [check(f"{row['name']}: req/s / bare grpc.aio servicer's (target >= 70%)", "report",
                    f"{row['rps_vs_bare']:.0%}", None) for row in rows[:2]]
    return {
        "title": "gRPC transports: the grpc.aio servicer vs grpc's synchronous server feeding the same loop",
        "setup": f"OIP ModelInfer (one row of 4 floats) to a simulated predictor with no cost (OIP gRPC), "
                 f"{CLIENTS} tools.loadgen gRPC clients, {ctx.duration:g} s per run, {rounds} interleaved rounds "
                 f"(medians). Both gateway transports run in one process (tools/bench/grpc_sync.py), loaded one "
                 f"at a time; CPU is that process's (user + system) over its answered requests.",
        "tables": [{"title": "CPU per request", "rows": rows, "columns": [
            ["name", "server", "s"], ["rps", "req/s", ".0f"], ["cpu_us", "CPU us/req", ".0f"],
            ["cpu_range", "CPU us/req, rounds", "s"], ["rps_vs_bare", "req/s / bare servicer", ".0%"],
            ["p50_ms", "p50 ms", ".1f"], ["errors", "errors", "d"]]}],
        "checks": checks,
        "runs": runs,
    }
