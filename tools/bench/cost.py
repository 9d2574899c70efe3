"""The `cost` scenario of `python -m tools.bench`: the gateway's CPU per request against
Tornado servers that compute the answer themselves.

At the gateway-bound load (KServe v1 over HTTP, a simulated predictor that answers at once,
64 `hey` clients), in interleaved rounds of one run:
- the gateway as it serves by default (its inference routes on the lean path);
- the same gateway with `[server] lean_routes = false` (each route's RequestHandler twin);
- with `--before`, another checkout's gateway;
- `minimal`: a minimal Tornado `RequestHandler` app that parses the request and answers it;
- `minimal-lean`: the same answer from Tornado's delegate layer, no RequestHandler
  (`tools.bench.baselines`).
CPU per request is each server's process (user + system) over its answered requests; the
gateway's predictor is shown apart (the minimal servers have none).

It holds this scenario only; the harness is `tools.bench.harness`'. It must not import
another scenario.
"""
from __future__ import annotations

import statistics
from contextlib import ExitStack
from typing import Any

from tools.bench.harness import V1_BODY, Baseline, Context, Gateway, Predictor, Server, check, hey, v1_model, warm_up

CLIENTS = 64


def cost(ctx: Context) -> dict[str, Any]:
    """The gateway's CPU per request vs minimal Tornado servers answering themselves."""
    rounds = max(3, ctx.repeat)
    body = ctx.log_dir / "v1-body.json"
    body.parent.mkdir(parents=True, exist_ok=True)
    body.write_bytes(V1_BODY)
    predictor = Predictor(ctx.log_dir, "predictor-free", call_ms=0).start()
    models = [v1_model("v1", predictor, max_batch_size=32)]
    runs: list[dict[str, Any]] = []
    try:
        with ExitStack() as started:
            gateways: dict[str, Server] = {
                "gateway": Gateway(ctx.log_dir, "gateway-cost", models),
                "gateway, RequestHandlers": Gateway(ctx.log_dir, "gateway-cost-handlers", models,
                                                   server={"lean_routes": False}),
                **({f"before: gateway of {ctx.before}": Gateway(ctx.log_dir, "gateway-cost-before", models,
                                                                root=ctx.before)} if ctx.before is not None else {}),
            }
            servers: dict[str, Server] = {
                **gateways,
                "minimal Tornado RequestHandler app": Baseline(ctx.log_dir, "minimal"),
                "minimal Tornado delegate app": Baseline(ctx.log_dir, "minimal-lean"),
            }
            for server in servers.values():
                started.enter_context(server.start())
            urls = {name: f"{server.http_url}/v1/models/{'v1' if name in gateways else 'demo'}:predict"
                    for name, server in servers.items()}
            for url in urls.values():
                warm_up(url, V1_BODY, 8)
            for round_ in range(rounds):
                for name, server in servers.items():
                    ctx.say(f"  cost: {name} (round {round_ + 1}/{rounds})")
                    cpu, predictor_cpu = server.cpu_seconds(), predictor.cpu_seconds()
                    result = hey(urls[name], body, CLIENTS, ctx.duration)
                    answered = max(1, result["ok"])
                    runs.append({"name": name, "round": round_, **result,
                                 "cpu_us": (server.cpu_seconds() - cpu) / answered * 1e6,
                                 "predictor_cpu_us": ((predictor.cpu_seconds() - predictor_cpu) / answered * 1e6
                                                      if name in gateways else None)})
    finally:
        predictor.stop()
    rows, checks = _rows(runs, list(servers)), []
    gateway = next(row for row in rows if row["name"] == "gateway")
    checks.append(check("gateway CPU per request / minimal RequestHandler app's (target <= 0.80)", "report",
                        f"{gateway['cpu_vs_minimal']:.2f}", None))
    checks.append(check("gateway req/s / minimal RequestHandler app's (target >= 100%)", "report",
                        f"{gateway['rps_vs_minimal']:.0%}", None))
    return {
        "title": "Cost: the gateway's CPU per request vs minimal Tornado servers",
        "setup": f"KServe v1 over HTTP (one instance of 4 floats), a simulated predictor with no cost (call-ms 0) "
                 f"in its own process, {CLIENTS} hey clients, {ctx.duration:g} s per run, {rounds} interleaved "
                 "rounds; ratios are medians of each round's ratio. CPU is each server's process (user + system) "
                 "over its answered requests; the gateway's predictor apart. The minimal servers parse the request "
                 "and answer it themselves (tools/bench/baselines.py).",
        "tables": [{"title": "CPU per request", "rows": rows, "columns": [
            ["name", "server", "s"], ["rps", "req/s", ".0f"], ["cpu_us", "CPU us/req", ".0f"],
            ["cpu_range", "CPU us/req, rounds", "s"], ["cpu_vs_minimal", "CPU / minimal RequestHandler", ".2f"],
            ["cpu_vs_lean", "CPU / minimal delegate", ".2f"], ["rps_vs_minimal", "req/s / minimal RequestHandler",
                                                                ".0%"],
            ["predictor_cpu_us", "predictor CPU us/req", ".0f"], ["p50_ms", "p50 ms", ".1f"]]}],
        "checks": checks,
        "runs": runs,
    }


def _rows(runs: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    """One row a server: medians over the rounds, and its ratios to the minimal servers
    measured in the same round."""
    def of(name: str) -> list[dict[str, Any]]:
        return sorted((run for run in runs if run["name"] == name), key=lambda run: run["round"])

    minimal, lean = of("minimal Tornado RequestHandler app"), of("minimal Tornado delegate app")
    rows = []
    for name in names:
        mine = of(name)
        cpu = [run["cpu_us"] for run in mine]
        predictor = [run["predictor_cpu_us"] for run in mine if run["predictor_cpu_us"] is not None]
        rows.append({
            "name": name, "rps": statistics.median(run["rps"] for run in mine), "cpu_us": statistics.median(cpu),
            "cpu_range": f"{min(cpu):.0f}-{max(cpu):.0f}",
            "cpu_vs_minimal": statistics.median(a["cpu_us"] / b["cpu_us"] for a, b in zip(mine, minimal, strict=True)),
            "cpu_vs_lean": statistics.median(a["cpu_us"] / b["cpu_us"] for a, b in zip(mine, lean, strict=True)),
            "rps_vs_minimal": statistics.median(a["rps"] / b["rps"] for a, b in zip(mine, minimal, strict=True)),
            "predictor_cpu_us": statistics.median(predictor) if predictor else None,
            "p50_ms": statistics.median(run["p50_ms"] for run in mine if run["p50_ms"] is not None),
        })
    return rows
