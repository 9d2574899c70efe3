"""The benchmark scenarios of `python -m tools.bench`, and the harness they share.

Every server is its own process on 127.0.0.1 on free ports: the simulated predictor
(`tools.simulated_predictor`), the gateway (`gateway serve` with a generated TOML config)
and, for the overhead and ceiling scenarios, the baselines of `tools.bench_baselines`.
Each is stopped by its PID when its scenario ends, and on Ctrl-C. The load comes from
`tools.loadgen`'s Python API, in this process; every load is bounded in count and time.

A scenario returns a dict: `title`, `setup` (prose), `tables` (each `title`, `columns`
[[key, header, format]], `rows`), `checks` (target vs measured), `runs` (every raw run)
and `plots` (data for tools.bench's PNGs).
"""
from __future__ import annotations

import asyncio
import collections
import csv
import json
import math
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from tools import loadgen
from tools.processes import ServerProcess, python_module_command, simulated_predictor_command

START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 15
V1_BODY = b'{"instances": [[1, 2, 3, 4]]}'
OIP_JSON_BODY = b'{"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}'


def v1_body(rows: int) -> bytes:
    return json.dumps({"instances": [[1, 2, 3, 4]] * rows}).encode()


def oip_body(model: str, rows: int = 1) -> bytes:
    return json.dumps({"model_name": model, "inputs": [{
        "name": "INPUT0", "datatype": "FP32", "shape": [rows, 4],
        "contents": {"fp32_contents": [1, 2, 3, 4] * rows}}]}).encode()


# -- processes -----------------------------------------------------------------------------------

_SERVERS: list[Server] = []  # every server this run started, for stop_all (stopping twice is harmless)
STARTED: list[dict[str, Any]] = []  # every server this run started: name, pid, command


class Server(ServerProcess):
    """A server process of the benchmark, logging to `log_dir/NAME.log`; recorded as soon as
    it is spawned, so that Ctrl-C while it starts still stops it."""

    def __init__(self, name: str, command: list[str], log_dir: Path) -> None:
        super().__init__(command, name=name, log_path=log_dir / f"{name}.log", ready_timeout=START_TIMEOUT_S,
                         stop_timeout=STOP_TIMEOUT_S)

    def spawn(self) -> None:
        super().spawn()
        _SERVERS.append(self)
        # argv as `python` would be given it: the interpreter left out.
        STARTED.append({"name": self.name, "pid": self.pid, "argv": self.command[1:]})


def stop_all() -> None:
    """Stop every server still running, newest first (gateways before their predictors)."""
    for server in reversed(_SERVERS):
        server.stop()


class Predictor(Server):
    """The simulated predictor at a given cost, with its call log."""

    def __init__(self, log_dir: Path, name: str, call_ms: float, per_instance_ms: float = 0.0, slots: int = 1) -> None:
        super().__init__(name, simulated_predictor_command("--call-ms", f"{call_ms:g}",
                                                           "--per-instance-ms", f"{per_instance_ms:g}",
                                                           "--slots", str(slots)), log_dir)
        self.cost = {"call_ms": call_ms, "per_instance_ms": per_instance_ms, "slots": slots}

    def reset_stats(self) -> None:
        """Zero the call log once the predictor is idle: requests of the previous run still
        queued in its slots (abandoned by a -z cut) must neither count nor compete."""
        self.settle()
        _http("POST", f"{self.http_url}/stats/reset", b"")

    def settle(self, quiet_s: float = 0.3, limit_s: float = 120.0) -> None:
        """Wait until the predictor has made no call for `quiet_s` (its slot is free)."""
        quiet = max(quiet_s, 3 * self.cost["call_ms"] / 1000.0)
        deadline = time.monotonic() + limit_s
        last, since = self.stats()["calls"], time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.05)
            calls = self.stats()["calls"]
            if calls != last:
                last, since = calls, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return

    def stats(self) -> dict[str, Any]:
        return json.loads(_http("GET", f"{self.http_url}/stats")[1])


class Gateway(Server):
    """The gateway serving `models` (written to a TOML config), ready once it says so."""

    def __init__(self, log_dir: Path, name: str, models: list[dict[str, Any]], loop: str = "asyncio") -> None:
        self.config_path = log_dir / f"{name}.toml"
        log_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(to_toml(models))
        super().__init__(name, python_module_command(
            "gateway", "serve", "--config", str(self.config_path), "--host", "127.0.0.1", "--http-port", "0",
            "--grpc-port", "0", "--log-level", "WARNING", "--loop", loop), log_dir)

    def wait_ready(self) -> None:
        super().wait_ready()
        deadline = time.monotonic() + START_TIMEOUT_S
        while _http("GET", f"{self.http_url}/v2/health/ready")[0] != 200:
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.name} never became ready; its log:\n{self.log_tail()}")
            time.sleep(0.1)


class Baseline(Server):
    """A server of `tools.bench_baselines` (`kind`: minimal or trivial), logging as `name`."""

    def __init__(self, log_dir: Path, kind: str, name: str | None = None) -> None:
        super().__init__(name or f"baseline-{kind}", python_module_command("tools.bench_baselines", kind), log_dir)


def _http(method: str, url: str, body: bytes | None = None, timeout: float = 10) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, b""


def to_toml(models: list[dict[str, Any]]) -> str:
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, list):  # arrays, and arrays of inline tables ([[models.inputs]] with pad = {...})
            return "[" + ", ".join(value(item) for item in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {value(item)}" for k, item in v.items()) + " }"
        return json.dumps(str(v))

    out = []
    for model in models:
        out.append("[[models]]")
        tables = {k: v for k, v in model.items() if isinstance(v, dict)}
        out += [f"{k} = {value(v)}" for k, v in model.items() if not isinstance(v, dict)]
        for name, table in tables.items():
            out.append(f"[models.{name}]")
            out += [f"{k} = {value(v)}" for k, v in table.items()]
        out.append("")
    return "\n".join(out)


def v1_model(name: str, predictor: Predictor, **batching: Any) -> dict[str, Any]:
    return {"name": name, "backend": "kserve", "protocol": "http", "api": "v1", "url": predictor.http_url,
            "backend_model": "demo", "batching": batching}


def grpc_model(name: str, predictor: Predictor, **batching: Any) -> dict[str, Any]:
    return {"name": name, "backend": "triton", "protocol": "grpc", "url": predictor.grpc_address,
            "backend_model": "demo", "batching": batching}


# -- measuring -------------------------------------------------------------------------------------


@dataclass
class Context:
    duration: float
    repeat: int
    log_dir: Path
    memory_queued: int = 10_000
    memory_requests: int = 200_000
    progress: bool = False
    say: Callable[[str], None] = print


def load(target: str, body: bytes, *, concurrency: int, duration: float | None = None,
         requests: int | None = None, grpc: bool = False, timeout: float = 60.0, connections: int = 1,
         progress: bool = False, engine: str = "auto", processes: int = 1, rate: float | None = None,
         seed: int | None = None) -> loadgen.Result:
    """A closed-loop run of `concurrency` clients; with `rate`, an open loop of Poisson
    arrivals at most `concurrency` in flight."""
    config = loadgen.Config(
        target=target, body=body, method="POST" if not grpc else "", grpc=grpc,
        call="inference.GRPCInferenceService/ModelInfer" if grpc else "", concurrency=concurrency,
        duration=duration, requests=requests, timeout=timeout, connections=connections, progress=progress,
        engine=engine, processes=processes, rate=rate, seed=seed,
    )
    return asyncio.run(loadgen.run(config))


def warm_up(target: str, body: bytes, concurrency: int, grpc: bool = False) -> None:
    """Open connections and warm caches before measuring: at most 1 s, not recorded."""
    load(target, body, concurrency=concurrency, requests=min(200, 20 * concurrency), duration=1.0,
         grpc=grpc, timeout=10)


def run_row(name: str, result: loadgen.Result, *, rows_per_request: int = 1,
            predictor: Predictor | None = None, **extra: Any) -> dict[str, Any]:
    """One measured run as a flat row (latencies in ms)."""
    summary = result.summary()
    p = result.percentiles_ms()
    row: dict[str, Any] = {
        "name": name, "clients": result.config.workers,
        "protocol": "grpc" if result.config.grpc else "http",
        "seconds": result.elapsed_s, "ok": result.ok, "errors": summary["errors"],
        "unfinished": result.unfinished, "rps": summary["ok_rps"],
        "instances_per_s": summary["ok_rps"] * rows_per_request,
        "p10_ms": p["10"], "p25_ms": p["25"], "p50_ms": p["50"], "p75_ms": p["75"], "p90_ms": p["90"],
        "p95_ms": p["95"], "p99_ms": p["99"], "p99.9_ms": p["99.9"],
        "mean_ms": summary["average_ms"], "max_ms": summary["slowest_ms"],
        "loadgen_cpu_us": summary["cpu_us_per_request"],
        "status_codes": dict(result.statuses),
    }
    if result.errors:
        row["error_kinds"] = dict(list(result.errors.items())[:5])
    if predictor is not None:
        stats = predictor.stats()
        calls, instances = stats["calls"], stats["instances"]
        row["predictor_calls"] = calls
        row["predictor_instances"] = instances
        row["mean_batch"] = instances / calls if calls else None
        row["batch_sizes"] = dict(sorted(collections.Counter(stats["batch_sizes"]).items()))
    row.update(extra)
    return row


def median_rows(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs grouped by name (in first-seen order), numeric fields as medians over repeats."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault(run["name"], []).append(run)
    out = []
    for name, group in groups.items():
        row: dict[str, Any] = {"name": name, "repeats": len(group)}
        for key, value in group[0].items():
            if key in row:
                continue
            values = [g.get(key) for g in group]
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                row[key] = statistics.median(cast(list[float], values))  # all numbers, just checked
            elif key == "batch_sizes":
                total: collections.Counter = collections.Counter()
                for v in values:
                    total.update({int(k): n for k, n in (v or {}).items()})
                row[key] = dict(sorted(total.items()))
            elif all(v == value for v in values):
                row[key] = value
        out.append(row)
    return out


def check(what: str, target: str, value: str, ok: bool | None) -> dict[str, Any]:
    return {"what": what, "target": target, "value": value, "ok": ok}


LATENCY_COLUMNS = [["p50_ms", "p50 ms", ".1f"], ["p90_ms", "p90 ms", ".1f"], ["p99_ms", "p99 ms", ".1f"]]


# -- scenario 1: the KServe batcher's documented example ------------------------------------------


def kserve_docs(ctx: Context) -> dict[str, Any]:
    """5 clients against POST /v1/models/<m>:predict; direct vs gateway window vs adaptive."""
    clients = 5
    predictor = Predictor(ctx.log_dir, "predictor-5ms", call_ms=5).start()
    try:
        gateway = Gateway(ctx.log_dir, "gateway-docs", [
            v1_model("window", predictor, policy="window", max_batch_size=32, max_latency_ms=500),
            v1_model("adaptive", predictor, policy="adaptive", max_batch_size=32, max_latency_ms=500),
        ]).start()
        with gateway:
            targets = {
                "direct": f"{predictor.http_url}/v1/models/demo:predict",
                "gateway window": f"{gateway.http_url}/v1/models/window:predict",
                "gateway adaptive": f"{gateway.http_url}/v1/models/adaptive:predict",
            }
            for url in targets.values():
                warm_up(url, V1_BODY, clients)
            runs = []
            for rep in range(ctx.repeat):
                for name, url in targets.items():
                    ctx.say(f"  kserve-docs: {name} ({rep + 1}/{ctx.repeat})")
                    predictor.reset_stats()
                    result = load(url, V1_BODY, concurrency=clients, duration=ctx.duration, progress=ctx.progress)
                    runs.append(run_row(name, result, predictor=predictor, repeat=rep))
    finally:
        predictor.stop()
    rows = median_rows(runs)
    by = {r["name"]: r for r in rows}
    window, adaptive = by["gateway window"], by["gateway adaptive"]
    ratio = adaptive["rps"] / window["rps"] if window["rps"] else math.inf
    checks = [
        check("window p50 reproduces KServe's documented 0.515 s", "~500 ms",
              f"{window['p50_ms']:.0f} ms", 450 <= (window["p50_ms"] or 0) <= 600),
        check("window req/s reproduces KServe's documented 9.5 req/s", "~9.5 req/s",
              f"{window['rps']:.1f} req/s", 7.5 <= window["rps"] <= 11.5),
        check("adaptive p50", "<= 15 ms", f"{adaptive['p50_ms']:.1f} ms", (adaptive["p50_ms"] or 1e9) <= 15),
        check("adaptive req/s vs window", ">= 35x", f"{ratio:.1f}x", ratio >= 35),
    ]
    return {
        "title": "KServe docs example: 5 clients, max_batch_size 32, max_latency 500 ms",
        "setup": f"Simulated predictor: 5 ms per call, 1 slot. {clients} closed-loop clients for "
                 f"{ctx.duration:g} s each, `POST /v1/models/<m>:predict` with one instance; gateway over "
                 f"KServe v1 HTTP to the predictor. Median of {ctx.repeat} run(s).",
        "tables": [{"title": "", "rows": rows, "columns": [
            ["name", "run", "s"], ["clients", "clients", "d"], ["rps", "req/s", ".1f"], *LATENCY_COLUMNS,
            ["mean_batch", "mean batch", ".2f"], ["errors", "errors", "d"]]}],
        "checks": checks, "runs": runs,
        "plots": {"batch_sizes": {f"docs {r['name']}": r.get("batch_sizes", {}) for r in rows
                                  if r["name"] != "direct"}},
    }


# -- latency vs throughput sweep (for the plot) ------------------------------------------------------


def latency_curve(ctx: Context) -> dict[str, Any]:
    """p50/p99 vs req/s of direct / window / adaptive at 1, 4, 16 and 64 clients."""
    levels = (1, 4, 16, 64)
    predictor = Predictor(ctx.log_dir, "predictor-5ms-curve", call_ms=5).start()
    runs = []
    try:
        with Gateway(ctx.log_dir, "gateway-curve", [
            v1_model("window", predictor, policy="window", max_batch_size=32, max_latency_ms=500),
            v1_model("adaptive", predictor, policy="adaptive", max_batch_size=32, max_latency_ms=500),
        ]).start() as gateway:
            targets = {
                "direct": f"{predictor.http_url}/v1/models/demo:predict",
                "window": f"{gateway.http_url}/v1/models/window:predict",
                "adaptive": f"{gateway.http_url}/v1/models/adaptive:predict",
            }
            for mode, url in targets.items():
                warm_up(url, V1_BODY, 4)
                for clients in levels:
                    ctx.say(f"  latency-curve: {mode} at {clients} clients")
                    predictor.reset_stats()
                    result = load(url, V1_BODY, concurrency=clients, duration=ctx.duration, progress=ctx.progress)
                    runs.append(run_row(f"{mode} c={clients}", result, predictor=predictor, mode=mode))
    finally:
        predictor.stop()
    return {
        "title": "Latency vs throughput: direct, window, adaptive",
        "setup": f"Simulated predictor: 5 ms per call, 1 slot; KServe v1 HTTP; max_batch_size 32, "
                 f"max_latency 500 ms; {', '.join(map(str, levels))} closed-loop clients, {ctx.duration:g} s each.",
        "tables": [{"title": "", "rows": runs, "columns": [
            ["name", "run", "s"], ["rps", "req/s", ".1f"], *LATENCY_COLUMNS, ["mean_batch", "mean batch", ".2f"]]}],
        "checks": [], "runs": runs,
        "plots": {"latency_curve": [{"mode": r["mode"], "clients": r["clients"], "rps": r["rps"],
                                     "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"]} for r in runs]},
    }


# -- scenario 2: saturation ---------------------------------------------------------------------------


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
        with Gateway(ctx.log_dir, "gateway-saturation", models).start() as gateway:
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
                plan.append((f"gateway http (v1), max_inflight {inflight}",
                             dict(target=f"{gateway.http_url}/v1/models/http-{inflight}:predict", body=V1_BODY,
                                  concurrency=clients), 1))
                plan.append((f"gateway grpc (OIP), max_inflight {inflight}",
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


# -- scenario 3: overhead --------------------------------------------------------------------------


def overhead(ctx: Context) -> dict[str, Any]:
    """Gateway vs minimal servers doing the same front-end work, and added latency at 1 client;
    the gateway on its default loop (asyncio's) and on uvloop (`serve --loop uvloop`)."""
    clients = 32
    pairs = max(5, ctx.repeat)
    predictor = Predictor(ctx.log_dir, "predictor-free", call_ms=0).start()
    models = [v1_model("v1", predictor, max_batch_size=32), grpc_model("oip", predictor, max_batch_size=32)]
    runs = []
    try:
        with Gateway(ctx.log_dir, "gateway-overhead", models).start() as gateway, \
                Gateway(ctx.log_dir, "gateway-overhead-uvloop", models, loop="uvloop").start() as on_uvloop, \
                Baseline(ctx.log_dir, "minimal").start() as baseline:
            servers: dict[str, Server] = {"gateway": gateway, "gateway-uvloop": on_uvloop, "baseline": baseline}
            throughput: dict[tuple[str, str], dict[str, Any]] = {}
            for side, server in servers.items():
                v1, oip = ("demo", "demo") if side == "baseline" else ("v1", "oip")
                throughput[("http", side)] = dict(target=f"{server.http_url}/v1/models/{v1}:predict", body=V1_BODY)
                throughput[("grpc", side)] = dict(target=server.grpc_address, body=oip_body(oip), grpc=True)
            single: dict[tuple[str, str], dict[str, Any]] = {
                ("http", "direct"): dict(target=f"{predictor.http_url}/v1/models/demo:predict", body=V1_BODY),
                ("grpc", "direct"): dict(target=predictor.grpc_address, body=oip_body("demo"), grpc=True),
                **{key: spec for key, spec in throughput.items() if key[1] != "baseline"},
            }
            for spec in throughput.values():
                warm_up(spec["target"], spec["body"], 8, grpc=spec.get("grpc", False))
            for pair in range(pairs):
                for (protocol, side), spec in throughput.items():
                    ctx.say(f"  overhead: {protocol} {side}, {clients} clients (pair {pair + 1}/{pairs})")
                    server = servers[side]
                    cpu_before, predictor_before = server.cpu_seconds(), predictor.cpu_seconds()
                    result = load(concurrency=clients, duration=ctx.duration, progress=ctx.progress, **spec)
                    answered = max(1, result.ok)
                    runs.append(run_row(
                        f"{protocol} {side} c={clients}", result, kind="throughput", side=side, pair=pair,
                        server_cpu_us=(server.cpu_seconds() - cpu_before) / answered * 1e6,
                        predictor_cpu_us=(predictor.cpu_seconds() - predictor_before) / answered * 1e6))
            for rep in range(ctx.repeat):
                for (protocol, side), spec in single.items():
                    ctx.say(f"  overhead: {protocol} {side}, 1 client ({rep + 1}/{ctx.repeat})")
                    result = load(concurrency=1, duration=ctx.duration, progress=ctx.progress, **spec)
                    runs.append(run_row(f"{protocol} {side} c=1", result, kind="latency", side=side, repeat=rep))
    finally:
        predictor.stop()
    ratio_rows, latency_rows, checks = [], [], []
    for protocol in ("http", "grpc"):
        base = [r for r in runs if r["name"] == f"{protocol} baseline c={clients}"]
        direct = [r for r in runs if r["name"] == f"{protocol} direct c=1"]
        d50 = statistics.median(r["p50_ms"] for r in direct)
        d99 = statistics.median(r["p99_ms"] for r in direct)
        for side, label in (("gateway", "gateway"), ("gateway-uvloop", "gateway --loop uvloop")):
            gw = [r for r in runs if r["name"] == f"{protocol} {side} c={clients}"]
            ratios = [g["rps"] / b["rps"] for g, b in zip(gw, base, strict=False) if b["rps"]]
            cpu_ratios = [g["server_cpu_us"] / b["server_cpu_us"] for g, b in zip(gw, base, strict=False)
                          if b["server_cpu_us"]]
            ratio_rows.append({
                "name": f"{protocol}: {label}", "gateway_rps": statistics.median(g["rps"] for g in gw),
                "baseline_rps": statistics.median(b["rps"] for b in base),
                "ratio": statistics.median(ratios) if ratios else None,
                "gateway_cpu_us": statistics.median(g["server_cpu_us"] for g in gw),
                "baseline_cpu_us": statistics.median(b["server_cpu_us"] for b in base),
                "cpu_ratio": statistics.median(cpu_ratios) if cpu_ratios else None,
                "predictor_cpu_us": statistics.median(g["predictor_cpu_us"] for g in gw),
                "gateway_p50": statistics.median(g["p50_ms"] for g in gw),
                "baseline_p50": statistics.median(b["p50_ms"] for b in base), "pairs": len(ratios),
            })
            via = [r for r in runs if r["name"] == f"{protocol} {side} c=1"]
            g50, g99 = statistics.median(r["p50_ms"] for r in via), statistics.median(r["p99_ms"] for r in via)
            latency_rows.append({"name": f"{protocol}: {label}", "direct_p50": d50, "gateway_p50": g50,
                                 "added_p50": g50 - d50, "direct_p99": d99, "gateway_p99": g99})
            checks.append(check(f"{protocol}, {label}: req/s vs minimal baseline (median of {len(ratios)} pairs)",
                                "report", f"{ratio_rows[-1]['ratio']:.0%}" if ratios else "n/a", None))
            checks.append(check(f"{protocol}, {label}: added p50 at 1 client vs calling the predictor directly",
                                "report", f"{g50 - d50:+.2f} ms", None))
    return {
        "title": "Overhead: gateway vs minimal servers; added latency",
        "setup": f"Simulated predictor with no cost (call-ms 0). Throughput: {clients} closed-loop clients, "
                 f"{ctx.duration:g} s per run, {pairs} interleaved rounds (gateway, gateway on uvloop, "
                 f"baseline), median ratio; the baselines (tools/bench_baselines.py) are a minimal Tornado app that "
                 f"parses the v1 request and answers it, and a minimal grpc.aio ModelInfer servicer. The gateway "
                 f"also forwards every batch to the predictor process, on the same 2 cores. CPU is each process's "
                 f"user + system time per answered request. Latency: 1 client, median of {ctx.repeat} run(s).",
        "tables": [
            {"title": "Throughput", "rows": ratio_rows, "columns": [
                ["name", "protocol: server", "s"], ["gateway_rps", "gateway req/s", ".0f"],
                ["baseline_rps", "minimal server req/s", ".0f"], ["ratio", "gateway / minimal", ".0%"],
                ["gateway_cpu_us", "gateway CPU us/req", ".0f"], ["baseline_cpu_us", "minimal CPU us/req", ".0f"],
                ["cpu_ratio", "CPU gateway / minimal", ".2f"], ["predictor_cpu_us", "predictor CPU us/req", ".0f"],
                ["gateway_p50", "gateway p50 ms", ".2f"], ["baseline_p50", "minimal p50 ms", ".2f"]]},
            {"title": "Latency at 1 client", "rows": latency_rows, "columns": [
                ["name", "protocol: server", "s"], ["direct_p50", "direct p50 ms", ".2f"],
                ["gateway_p50", "gateway p50 ms", ".2f"], ["added_p50", "added p50 ms", "+.2f"],
                ["direct_p99", "direct p99 ms", ".2f"], ["gateway_p99", "gateway p99 ms", ".2f"]]},
        ],
        "checks": checks, "runs": runs, "plots": {},
    }


# -- scenario 4: memory --------------------------------------------------------------------------------


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
                 f"requests held by the minimal Tornado app and grpc.aio servicer of tools/bench_baselines.py "
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


# -- the load generator's own ceiling ---------------------------------------------------------------


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
        "setup": f"tools.loadgen, 32 closed-loop clients for {ctx.duration:g} s, against tools/bench_baselines "
                 f"`trivial` (a fixed 200 `{{}}` from an asyncio.Protocol HTTP server; an empty message from a "
                 f"generic grpc.aio handler) on the same 2-core machine: req/s achieved (the server shares the "
                 f"machine) and the generator's CPU per request (its ceiling per core).",
        "tables": [{"title": "", "rows": runs, "columns": [
            ["name", "run", "s"], ["rps", "req/s", ".0f"], ["loadgen_cpu_us", "CPU us/request", ".0f"],
            ["ceiling_per_core", "ceiling req/s per core", ".0f"], ["p50_ms", "p50 ms", ".2f"]]}],
        "checks": [], "runs": runs, "plots": {},
    }


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
    }
    row.update(extra)
    return row


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
            before = _batch_totals(gateway, "demo") if gateway else None
            result = asyncio.run(loadgen.run(_open_loop(url, body, factor * capacity, ctx.duration, arrivals=arrivals)))
            mean_batch = _mean_batch(before, _batch_totals(gateway, "demo")) if gateway and before else None
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

    # Two priority levels at 1.5x capacity, half the requests each: the high level's goodput.
    priority_model = {"name": "demo", "backend": "simulated",
                      "simulated": {"call_ms": call_ms, "per_instance_ms": per_row_ms},
                      "batching": {"max_batch_size": batch, "timeout_s": 30, "slo_ms": slo_s * 1000,
                                   "priority_levels": 2}}
    with Gateway(ctx.log_dir, "gateway-goodput-priority", [priority_model]).start() as gateway:
        url = f"{gateway.http_url}/v2/models/demo/infer"
        load(url, body, concurrency=2000, rate=capacity, duration=1.0, seed=1)
        ctx.say("  goodput: deadline with two priority levels at 1.5x capacity")

        def at_level(level: int) -> bytes:  # the OIP `priority` parameter, as Triton's clients send it
            return json.dumps({"parameters": {"priority": level}, "inputs": [
                {"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}).encode()

        async def both() -> list[loadgen.Result]:
            return list(await asyncio.gather(*(
                loadgen.run(_open_loop(url, at_level(level), 0.75 * capacity, ctx.duration)) for level in (1, 2))))

        for level, result in zip((1, 2), asyncio.run(both()), strict=True):
            runs.append(_goodput_row(f"deadline, priority {level} of 2", 1.5, result, slo_s, ctx.duration,
                                     share_of_offered=result.sent / ctx.duration / (0.75 * capacity)))

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
    high = next(r for r in runs if r["name"] == "deadline, priority 1 of 2")
    checks.append(check("priority 1 of 2 at 1.5x capacity: its goodput", ">= 95% of what it offered",
                        f"{high['goodput'] / max(high['offered'], 1e-9):.0%}",
                        high["goodput"] >= 0.95 * high["offered"]))
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
            ["refused_pct", "refused %", ".0f"], ["p50_ms", "200 p50 ms", ".0f"], ["p99_ms", "200 p99 ms", ".0f"],
            ["refusal_p50_ms", "refusal p50 ms", ".1f"], ["mean_batch", "mean batch", ".1f"]]}],
        "checks": checks, "runs": runs,
        "plots": {"goodput": {"capacity": capacity, "loads": [x for x in GOODPUT_LOADS if x != "bursty"],
                              "series": {name: [goodput_of(name, x) for x in GOODPUT_LOADS if x != "bursty"]
                                         for name in (*policies, "Triton dynamic batcher")}}},
    }


# -- scenario: max_inflight = "auto" ---------------------------------------------------------------


def _metric(gateway: Gateway, name: str, model: str) -> float | None:
    """One sample of the gateway's /metrics, or None if it has none."""
    text = _http("GET", f"{gateway.http_url}/metrics")[1].decode()
    for line in text.splitlines():
        if line.startswith(f'{name}{{model="{model}"}} '):
            return float(line.rsplit(" ", 1)[1])
    return None


def _batch_totals(gateway: Gateway, model: str) -> tuple[float, float]:
    """(batches, rows) the gateway has sent for `model` so far."""
    return (_metric(gateway, "gateway_batch_size_count", model) or 0.0,
            _metric(gateway, "gateway_batch_size_sum", model) or 0.0)


def _mean_batch(before: tuple[float, float], after: tuple[float, float]) -> float | None:
    """Mean rows per batch between two `_batch_totals`."""
    batches, rows = after[0] - before[0], after[1] - before[1]
    return rows / batches if batches else None


class RealTriton(Server):
    """The real Triton serving model `cost` (INPUT0 FP32 [4] -> 2 x INPUT0, call-ms + per-row-ms
    per execution, no dynamic batcher): a plain Python-backend model (`tools.triton_direct`,
    the binary started directly) or a PyTriton one (`tools/pytriton_model.py`)."""

    def __init__(self, log_dir: Path, kind: str, call_ms: float, per_row_ms: float = 0.0) -> None:
        cost = ("--call-ms", f"{call_ms:g}", "--per-row-ms", f"{per_row_ms:g}")
        self.workdir: Path | None = None
        if kind == "pytriton":
            from tools.predictor_envs import ensure_env

            command = [str(ensure_env("triton")), "tools/pytriton_model.py", *cost]
        else:
            self.workdir = Path(tempfile.mkdtemp(prefix="td", dir="/tmp"))  # short: Triton's socket paths
            command = python_module_command("tools.triton_direct", "--workdir", str(self.workdir), *cost)
        super().__init__(f"triton-{kind}-{call_ms:g}", command, log_dir)
        self.ready_timeout = 180  # a first start builds the Triton venv

    def stop(self, timeout: float | None = None) -> int | None:
        code = super().stop(timeout)
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return code

    def settle(self) -> None:
        time.sleep(0.5)  # the previous run's abandoned calls drain (the queue holds a few batches at most)


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
                    before = _batch_totals(gateway, model)
                    result = load(url, body, concurrency=clients, duration=ctx.duration, progress=ctx.progress)
                    row = run_row(f"{case}, {clients} clients: {model}", result, case=case, model=model)
                    row["mean_batch"] = _mean_batch(before, _batch_totals(gateway, model))
                    row["inflight_limit"] = _metric(gateway, "gateway_batches_in_flight_limit", model)
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


def perf_analyzer_scenario(ctx: Context) -> dict[str, Any]:
    """Triton's perf_analyzer, unmodified, as the load: HTTP, gRPC and gRPC streaming at 1 and
    16 concurrent requests, against the gateway on its embedded 5 ms model."""
    from tools.client_tools import perf_analyzer  # installs it on first use

    tool = perf_analyzer()
    runs = []
    with Gateway(ctx.log_dir, "gateway-perf-analyzer", [{"name": "demo", "backend": "simulated"}]).start() as gateway:
        for name, address, mode in [("http", gateway.http_address, ["-i", "http"]),
                                    ("grpc", gateway.grpc_address, ["-i", "grpc"]),
                                    ("grpc --streaming", gateway.grpc_address, ["-i", "grpc", "--streaming"])]:
            ctx.say(f"  perf-analyzer: {name}")
            csv_path = ctx.log_dir / f"perf-analyzer-{name.replace(' ', '')}.csv"
            argv = tool.argv("-m", "demo", "-u", address, *mode, "--shape", "INPUT0:4", "--concurrency-range",
                             "1:16:15", "--measurement-interval", str(int(ctx.duration * 1000)), "-f", str(csv_path))
            result = subprocess.run(argv, env=tool.env(), capture_output=True, text=True, timeout=600)
            if result.returncode != 0:
                raise RuntimeError(f"perf_analyzer failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
            for line in csv.DictReader(csv_path.read_text().splitlines()):
                runs.append({"name": name, "concurrency": int(line["Concurrency"]),
                             "rps": float(line["Inferences/Second"]),
                             "p50_ms": int(line["p50 latency"]) / 1000, "p99_ms": int(line["p99 latency"]) / 1000,
                             "queue_ms": int(line["Server Queue"]) / 1000,
                             "compute_ms": int(line["Server Compute Infer"]) / 1000})
    return {
        "title": "perf_analyzer against the gateway",
        "setup": f"Triton's perf_analyzer (tritonclient 2.50.0's binary, unmodified), {ctx.duration:g} s measurement "
                 f"windows, batch size 1, INPUT0 of 4 FP32, against the gateway's embedded model (5 ms per call). "
                 f"Server queue and compute are read from the gateway's Triton statistics.",
        "tables": [{"title": "", "rows": runs, "columns": [
            ["name", "protocol", "s"], ["concurrency", "concurrency", "d"], ["rps", "infer/s", ".1f"],
            ["p50_ms", "p50 ms", ".2f"], ["p99_ms", "p99 ms", ".2f"], ["queue_ms", "server queue ms", ".2f"],
            ["compute_ms", "server compute ms", ".2f"]]}],
        "checks": [], "runs": runs, "plots": {},
    }


# -- scenario: variable-length inputs ------------------------------------------------------------------


def _lognormal_lengths(count: int, seed: int, low: int = 8, high: int = 512) -> list[int]:
    """Skewed sequence lengths: log-normal (median 48) clipped to low..high."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [int(n) for n in np.clip(np.round(rng.lognormal(math.log(48), 0.8, count)), low, high)]


async def _closed_loop(url: str, bodies: list[bytes], clients: int, duration: float) -> dict[str, Any]:
    """`clients` workers, each sending the next body as soon as its last answer is in, for
    `duration` seconds (every request bounded by a 30 s timeout)."""
    import aiohttp

    latencies: list[float] = []
    errors = 0
    next_body = iter(range(1 << 62))
    stop_at = time.monotonic() + duration
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients), timeout=timeout) as session:
        async def worker() -> None:
            nonlocal errors
            while time.monotonic() < stop_at:
                body = bodies[next(next_body) % len(bodies)]
                started = time.monotonic()
                try:
                    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as reply:
                        await reply.read()
                        ok = reply.status == 200
                except (aiohttp.ClientError, TimeoutError):
                    ok = False
                if ok:
                    latencies.append(time.monotonic() - started)
                else:
                    errors += 1

        began = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(clients)))
        elapsed = time.monotonic() - began
    latencies.sort()
    return {"ok": len(latencies), "errors": errors, "rps": len(latencies) / elapsed,
            "p50_ms": 1000 * latencies[len(latencies) // 2] if latencies else None,
            "p99_ms": 1000 * latencies[int(len(latencies) * 0.99)] if latencies else None}


VARIABLE_LENGTH_BUCKETS = [16, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 320, 384, 512]


def variable_length(ctx: Context) -> dict[str, Any]:
    """Token sequences of skewed lengths: padding off (today: one signature per length) vs pad
    to the longest vs buckets, in front of a predictor whose cost grows with padded elements."""
    clients, call_ms, per_element_us = 64, 10.0, 15.0
    lengths = _lognormal_lengths(4000, seed=11)
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
            asyncio.run(_closed_loop(url, bodies[:200], clients, 1.0))  # warm up, not measured
            before = {key: (_metric(gateway, key, "demo") or 0.0) for key in
                      ("gateway_batches_total", "gateway_batched_instances_total", "gateway_padded_elements_total",
                       "gateway_real_elements_total")}
            result = asyncio.run(_closed_loop(url, bodies, clients, ctx.duration))
            after = {key: (_metric(gateway, key, "demo") or 0.0) - value for key, value in before.items()}
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


def triton(ctx: Context) -> dict[str, Any]:
    from tools.bench_triton import triton_scenario  # its own module; imported here, not at the top (it imports this one)

    return triton_scenario(ctx)


def torchserve(ctx: Context) -> dict[str, Any]:
    from tools.bench_torchserve import torchserve_scenario  # its own module, as triton's

    return torchserve_scenario(ctx)


SCENARIOS: dict[str, tuple[Callable[[Context], dict[str, Any]], str]] = {
    "kserve-docs": (kserve_docs, "5 clients, window vs adaptive vs direct (KServe's documented example)"),
    "saturation": (saturation, "128 clients on a 20 ms + 0.25 ms/instance predictor; HTTP and gRPC; inflight 1/2"),
    "overhead": (overhead, "gateway vs minimal Tornado / grpc.aio servers; added latency at 1 client"),
    "latency-curve": (latency_curve, "p50/p99 vs req/s for direct, window and adaptive (plot)"),
    "memory": (memory, "RSS with 10,000 requests queued, and across 200,000 requests"),
    "loadgen-ceiling": (loadgen_ceiling, "the load generator's own cost per request against trivial servers"),
    "goodput": (goodput, "answers within a 200 ms SLO per second: adaptive, window, deadline, Triton's batcher"),
    "perf-analyzer": (perf_analyzer_scenario, "Triton's perf_analyzer as the load: HTTP, gRPC, streaming at 1 and 16"),
    "variable-length": (variable_length, "log-normal lengths 8..512: padding off vs pad to longest vs buckets"),
    "inflight": (inflight, 'max_inflight 1 vs 2 vs "auto" in front of predictors that want different values'),
    "torchserve": (torchserve, "TorchServe's own batching vs the gateway in front of it: a CNN on PNG uploads, an encoder"),
    "triton": (triton, "the real Triton's dynamic batcher vs the gateway in front of it: 1, 5, 128 clients; added latency"),
}
