"""The `peers` scenario of `python -m tools.bench`: the gateway at its defaults against the
batchers a user would run in its place, on one model whose call costs the same whatever its
rows (the seed's cost: 5 ms, a device's time, the CPU free).

Served five ways, each by the real server:

* **Triton, batching off**: PyTriton's model called directly, one execution per request (the floor);
* **Triton's dynamic batcher, its defaults** (`max_queue_delay_microseconds` 0);
* **Triton's dynamic batcher, tuned**: a 2 ms queue delay;
* **MLServer's adaptive batching**: `max_batch_size` 32 and `max_batch_time` 2 ms (it batches only
  with both set; everything else its default);
* **the gateway, untuned**: a model table that names only the backend, its URL and the model, in
  front of the first Triton (its batching off), over the gateway's default protocol; and the same
  gateway on uvloop (`--loop uvloop`, its one setting that is not about batching); with
  `--before`, another checkout's gateway, untuned, in the same rounds.

The load is `hey`, closed loop, single-row OIP REST JSON requests: 5 clients (the seed) and 64
(saturation). Each round runs every system once, in turn, so that a slow stretch of this shared
machine falls on all of them; the figures are medians over `--repeat` rounds. The CPU per
request is each system's server processes' user + system time over its answered requests (hey's
own not counted): the gateway's beside its predictor's, both in the total.

It holds this scenario only, with the one server it alone starts (MLServer); the harness
(servers, load, rows, checks) is `tools.bench.harness`'. It must not import another scenario.
"""
from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.bench.harness import (
    OIP_JSON_BODY,
    Context,
    Gateway,
    RealTriton,
    Server,
    batch_totals,
    check,
    hey,
    http_request,
    median_rows,
)

CALL_MS = 5.0
SEED_CLIENTS, SATURATION_CLIENTS = 5, 64
TUNED_DELAY_US = 2000
MODEL = "cost"  # the model's name at every server, the gateway's included


class MLServerModel(Server):
    """The real `mlserver start` serving tools/mlserver_model.py's `cost` model from a model folder
    of its own, with adaptive batching."""

    def __init__(self, log_dir: Path, call_ms: float, max_batch_size: int, max_batch_time_ms: float) -> None:
        from tools.predictor_envs import ensure_env

        self.workdir = Path(tempfile.mkdtemp(prefix="ms", dir="/tmp"))
        super().__init__("mlserver", [str(ensure_env("mlserver")), "tools/mlserver_model.py", "--workdir",
                                      str(self.workdir), "--call-ms", f"{call_ms:g}", "--max-batch-size",
                                      str(max_batch_size), "--max-batch-time-ms", f"{max_batch_time_ms:g}"], log_dir)
        self.ready_timeout = 180  # a first start builds the MLServer venv


@dataclass
class System:
    """One way of serving the model: where hey sends, whose CPU counts, how its batches are read."""

    name: str
    url: str
    cpu: dict[str, Callable[[], float]]  # part -> its processes' CPU seconds so far
    batches: Callable[[], tuple[float, float]] | None = None  # (calls, rows) so far, where the server says
    runs: list[dict[str, Any]] = field(default_factory=list)


def triton_batches(http_url: str) -> tuple[float, float]:
    """(executions, inferences) of `cost` so far, from Triton's statistics extension."""
    stats = json.loads(http_request("GET", f"{http_url}/v2/models/{MODEL}/stats")[1])["model_stats"][0]
    return float(stats["execution_count"]), float(stats["inference_count"])


def measure(system: System, clients: int, seconds: float, body: Path) -> dict[str, Any]:
    cpu_before = {part: read() for part, read in system.cpu.items()}
    batches_before = system.batches() if system.batches else None
    result = hey(system.url, body, clients, seconds)
    answered = max(1, result["ok"])
    row: dict[str, Any] = {"name": f"{system.name}, {clients} clients", "system": system.name, "clients": clients,
                           **result}
    for part, read in system.cpu.items():
        row[f"cpu_{part}_us"] = (read() - cpu_before[part]) / answered * 1e6
    row["cpu_us"] = sum(row[f"cpu_{part}_us"] for part in system.cpu)
    if system.batches and batches_before:
        calls, rows = (after - before for after, before in zip(system.batches(), batches_before, strict=True))
        row["mean_batch"] = rows / calls if calls else None
    return row


def peers(ctx: Context) -> dict[str, Any]:
    """The gateway, untuned, against Triton's dynamic batcher (default and tuned) and MLServer."""
    body = ctx.log_dir / "oip-body.json"
    body.parent.mkdir(parents=True, exist_ok=True)
    body.write_bytes(OIP_JSON_BODY)
    servers: list[Server] = []
    try:
        plain = RealTriton(ctx.log_dir, "pytriton", CALL_MS).start()
        servers.append(plain)
        default = RealTriton(ctx.log_dir, "pytriton", CALL_MS, options=("--dynamic-batcher",),
                             name="triton-batcher-default")
        servers.append(default.start())
        tuned = RealTriton(ctx.log_dir, "pytriton", CALL_MS, name="triton-batcher-2ms",
                           options=("--dynamic-batcher", "--max-queue-delay-us", str(TUNED_DELAY_US)))
        servers.append(tuned.start())
        mlserver = MLServerModel(ctx.log_dir, CALL_MS, max_batch_size=32, max_batch_time_ms=TUNED_DELAY_US / 1000)
        servers.append(mlserver.start())
        gateway_models = [{"name": MODEL, "backend": "triton", "url": plain.http_url, "backend_model": MODEL}]
        gateway = Gateway(ctx.log_dir, "gateway-peers", gateway_models)
        servers.append(gateway.start())
        on_uvloop = Gateway(ctx.log_dir, "gateway-peers-uvloop", gateway_models, loop="uvloop")
        servers.append(on_uvloop.start())
        before = None
        if ctx.before is not None:  # --before: another checkout's gateway, untuned too, in the same rounds
            before = Gateway(ctx.log_dir, "gateway-peers-before", gateway_models, root=ctx.before)
            servers.append(before.start())
        path = f"/v2/models/{MODEL}/infer"
        systems = [
            System("Triton, batching off (direct)", plain.http_url + path, {"server": plain.group_cpu_seconds},
                   lambda: triton_batches(plain.http_url)),
            System("Triton's dynamic batcher, defaults", default.http_url + path,
                   {"server": default.group_cpu_seconds}, lambda: triton_batches(default.http_url)),
            System("Triton's dynamic batcher, 2 ms delay", tuned.http_url + path,
                   {"server": tuned.group_cpu_seconds}, lambda: triton_batches(tuned.http_url)),
            System("MLServer, adaptive batching (32, 2 ms)", mlserver.http_url + path,
                   {"server": mlserver.group_cpu_seconds}),
            System("gateway, untuned -> Triton, batching off", gateway.http_url + path,
                   {"gateway": gateway.tree_cpu_seconds, "server": plain.group_cpu_seconds},
                   lambda: batch_totals(gateway, MODEL)),
            System("gateway, untuned, --loop uvloop", on_uvloop.http_url + path,
                   {"gateway": on_uvloop.tree_cpu_seconds, "server": plain.group_cpu_seconds},
                   lambda: batch_totals(on_uvloop, MODEL)),
        ]
        if before is not None:
            systems.append(System(f"before: gateway of {ctx.before}, untuned", before.http_url + path,
                                  {"gateway": before.tree_cpu_seconds, "server": plain.group_cpu_seconds},
                                  lambda: batch_totals(before, MODEL)))
        for system in systems:  # not recorded: connections, the stubs' first calls, the gateway's learning
            for clients in (SEED_CLIENTS, SATURATION_CLIENTS):
                hey(system.url, body, clients, 5.0 if "gateway" in system.cpu else 2.0)
        for round_index in range(ctx.repeat):
            for clients in (SEED_CLIENTS, SATURATION_CLIENTS):
                for system in systems:
                    ctx.say(f"  peers: round {round_index + 1}/{ctx.repeat}, {clients} clients, {system.name}")
                    system.runs.append(measure(system, clients, ctx.duration, body))
                    time.sleep(0.3)  # the run's cut-off requests drain before the next system's
    finally:
        for server in reversed(servers):
            server.stop()
    runs = [run for system in systems for run in system.runs]
    rows = sorted(median_rows(runs), key=lambda row: row["clients"])  # stable: the systems' order within each load
    by = {(row["system"], row["clients"]): row for row in rows}
    default_name, tuned_name, mlserver_name, gateway_name = (s.name for s in systems[1:5])
    for row in rows:
        row["vs_gateway"] = row["rps"] / by[(gateway_name, row["clients"])]["rps"]
        # Counts: a median over an even number of rounds may fall between two.
        row["clients"], row["errors"] = int(row["clients"]), round(row["errors"])
    checks = []
    for clients, regime in ((SEED_CLIENTS, "the seed"), (SATURATION_CLIENTS, "saturation")):
        gw = by[(gateway_name, clients)]["rps"]
        for name, target, bar in ((tuned_name, ">= 1.0x", 1.0), (default_name, ">= 1.5x", 1.5),
                                  (mlserver_name, "", None)):
            ratio = gw / by[(name, clients)]["rps"]
            checks.append(check(f"{regime}, {clients} clients: the gateway untuned vs {name}",
                                target if clients == SEED_CLIENTS and target else "report", f"{ratio:.2f}x",
                                (ratio >= bar) if bar is not None and clients == SEED_CLIENTS else None))
    return {
        "title": "Peers: the gateway untuned vs Triton's dynamic batcher and MLServer",
        "setup": f"One model, {CALL_MS:g} ms a call whatever its rows (a sleep: a device's time), served by the real "
                 f"Triton 2.51 through PyTriton (batching off; its dynamic batcher at its defaults; the same with a "
                 f"{TUNED_DELAY_US / 1000:g} ms queue delay), by the real MLServer 1.7.1 (adaptive batching, "
                 f"max_batch_size 32, max_batch_time {TUNED_DELAY_US / 1000:g} ms, everything else its default) and "
                 f"by the gateway at its defaults in front of the first Triton (and the same on uvloop). hey, closed loop, single-row OIP "
                 f"REST JSON requests, {SEED_CLIENTS} and {SATURATION_CLIENTS} clients; {ctx.repeat} interleaved "
                 f"rounds of {ctx.duration:g} s, medians. CPU per request: the servers' processes (user + system) "
                 f"over the answered requests; the load generator's not counted. `mean batch`: rows per call as "
                 f"Triton or the gateway counts them (MLServer does not say).",
        "tables": [{"title": "", "rows": rows, "columns": [
            ["system", "system", "s"], ["clients", "clients", "d"], ["rps", "req/s", ".0f"],
            ["vs_gateway", "vs gateway", ".2f"], ["p50_ms", "p50 ms", ".1f"], ["p99_ms", "p99 ms", ".1f"],
            ["mean_batch", "mean batch", ".1f"], ["cpu_us", "CPU µs/req, all", ".0f"],
            ["cpu_gateway_us", "of which gateway", ".0f"], ["errors", "errors", "d"]]}],
        "checks": checks, "runs": runs, "plots": {},
    }
