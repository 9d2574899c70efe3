"""The harness the benchmark scenarios of `python -m tools.bench` share.

Every server is its own process on 127.0.0.1 on free ports: the simulated predictor
(`tools.simulated_predictor`), the gateway (`gateway serve` with a generated TOML config)
and, for the overhead and ceiling scenarios, the baselines of `tools.bench.baselines`.
Each is stopped by its PID when its scenario ends, and on Ctrl-C. The load comes from
`tools.loadgen`'s Python API, in this process; every load is bounded in count and time.

It holds what more than one scenario uses: the server processes (`Server`, `Predictor`,
`Gateway`, `Baseline`, `RealTriton`; `stop_all` and `STARTED` for the CLI), the gateway's
TOML config (`to_toml`, `v1_model`, `grpc_model`), request bodies, `Context`, the load and
its rows (`load`, `warm_up`, `run_row`, `median_rows`, `check`), a small HTTP helper
(`http_request`), the gateway's metrics (`metric`, `batch_totals`), and a closed-loop
aiohttp client with skewed lengths (`closed_loop`, `lognormal_lengths`). It must not know
any scenario, the SCENARIOS table, the command line or the report: scenarios import it,
never the reverse.
"""
from __future__ import annotations

import asyncio
import collections
import csv
import io
import json
import math
import os
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
from tools.processes import ROOT, ServerProcess, free_port, python_module_command, simulated_predictor_command

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

# Where gateways run from: this checkout, or another's (`--gateway-from`: the before of an
# A/B of two commits, with this checkout's predictors, baselines, load and report).
GATEWAY_ROOT: Path = ROOT
_SERVERS: list[Server] = []  # every server this run started, for stop_all (stopping twice is harmless)
STARTED: list[dict[str, Any]] = []  # every server this run started: name, pid, command


class Server(ServerProcess):
    """A server process of the benchmark, logging to `log_dir/NAME.log`; recorded as soon as
    it is spawned, so that Ctrl-C while it starts still stops it."""

    workdir: Path | None = None  # a folder of the server's own (set before __init__), removed when it stops

    def __init__(self, name: str, command: list[str], log_dir: Path, cwd: Path = ROOT) -> None:
        super().__init__(command, name=name, log_path=log_dir / f"{name}.log", ready_timeout=START_TIMEOUT_S,
                         stop_timeout=STOP_TIMEOUT_S, cwd=cwd)

    def stop(self, timeout: float | None = None) -> int | None:
        code = super().stop(timeout)
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return code

    def spawn(self) -> None:
        super().spawn()
        _SERVERS.append(self)
        # argv as `python` would be given it: the interpreter left out.
        STARTED.append({"name": self.name, "pid": self.pid, "argv": self.command[1:], "cwd": str(self.cwd)})


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
        http_request("POST", f"{self.http_url}/stats/reset", b"")

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
        return json.loads(http_request("GET", f"{self.http_url}/stats")[1])


class Gateway(Server):
    """The gateway serving `models` (written to a TOML config), ready once it says so."""

    def __init__(self, log_dir: Path, name: str, models: list[dict[str, Any]], loop: str = "asyncio",
                 tracing: dict[str, Any] | None = None, workers: int = 1,
                 tenants: list[dict[str, Any]] | None = None, root: Path | None = None,
                 server: dict[str, Any] | None = None) -> None:
        # `root`: the checkout it runs from (a scenario's --before side), else GATEWAY_ROOT.
        # `server`: keys of its [server] table beyond the address and ports.
        self.config_path = log_dir / f"{name}.toml"
        log_dir.mkdir(parents=True, exist_ok=True)
        tables = {"tracing": tracing or {}, "server": server or {}}
        self.config_path.write_text(to_toml(models) + to_toml(tenants or [], "tenants") + "".join(
            f"\n[{title}]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in keys.items())
            for title, keys in tables.items() if keys))
        super().__init__(name, python_module_command(
            "gateway", "serve", "--config", str(self.config_path), "--host", "127.0.0.1", "--http-port", "0",
            "--grpc-port", "0", "--log-level", "WARNING", "--loop", loop, "--workers", str(workers)), log_dir,
            cwd=root or GATEWAY_ROOT)

    def wait_ready(self) -> None:
        super().wait_ready()
        deadline = time.monotonic() + START_TIMEOUT_S
        while http_request("GET", f"{self.http_url}/v2/health/ready")[0] != 200:
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.name} never became ready; its log:\n{self.log_tail()}")
            time.sleep(0.1)


class Baseline(Server):
    """A server of `tools.bench.baselines` (`kind`: minimal or trivial), logging as `name`."""

    def __init__(self, log_dir: Path, kind: str, name: str | None = None) -> None:
        super().__init__(name or f"baseline-{kind}", python_module_command("tools.bench.baselines", kind), log_dir)


PREDICTORS = ROOT / "tests" / "predictors"  # the predictor scripts the tests and scenarios share


class Script(Server):
    """A predictor script of tests/predictors run by path with its venv's python; ready on
    its READY line (a first start builds the venv and the model folder)."""

    def __init__(self, log_dir: Path, name: str, venv: str, script: str, *options: str,
                 env: dict[str, str] | None = None) -> None:
        from tools.predictor_envs import ensure_env

        self.python = ensure_env(venv)
        super().__init__(name, [str(self.python), str(PREDICTORS / script), *options], log_dir)
        self.ready_timeout = 300
        if env:
            self.env = {**os.environ, **env}


class PyTritonScript(Script):
    """tests/predictors/triton_server.py (PyTriton serving the tests' models) on free ports,
    in a short workdir; ready once `model` answers its readiness (Triton's own log shares
    stdout)."""

    def __init__(self, log_dir: Path, name: str, model: str) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="tp", dir="/tmp"))  # short: Triton's socket paths
        self.grpc_port, http_port = free_port(), free_port()
        super().__init__(log_dir, name, "triton", "triton_server.py", "--http-port", str(http_port),
                         "--grpc-port", str(self.grpc_port), "--metrics-port", str(free_port()),
                         "--workdir", str(self.workdir))
        ready_url = f"http://127.0.0.1:{http_port}/v2/models/{model}/ready"
        self.ready_probe = lambda: http_request("GET", ready_url, timeout=2)[0] == 200


class RealTriton(Server):
    """The real Triton serving model `cost` (INPUT0 FP32 [4] -> 2 x INPUT0, call-ms + per-row-ms
    per execution, no dynamic batcher): a plain Python-backend model (`tools.triton_direct`,
    the binary started directly) or a PyTriton one (`tools/pytriton_model.py`; `options` are
    that script's, which may turn Triton's dynamic batcher on)."""

    def __init__(self, log_dir: Path, kind: str, call_ms: float, per_row_ms: float = 0.0, *,
                 options: tuple[str, ...] = (), name: str | None = None) -> None:
        cost = ("--call-ms", f"{call_ms:g}", "--per-row-ms", f"{per_row_ms:g}")
        if kind == "pytriton":
            from tools.predictor_envs import ensure_env

            command = [str(ensure_env("triton")), "tools/pytriton_model.py", *cost, *options]
        else:
            self.workdir = Path(tempfile.mkdtemp(prefix="td", dir="/tmp"))  # short: Triton's socket paths
            command = python_module_command("tools.triton_direct", "--workdir", str(self.workdir), *cost)
        super().__init__(name or f"triton-{kind}-{call_ms:g}", command, log_dir)
        self.ready_timeout = 180  # a first start builds the Triton venv

    def settle(self) -> None:
        time.sleep(0.5)  # the previous run's abandoned calls drain (the queue holds a few batches at most)


def http_request(method: str, url: str, body: bytes | None = None, timeout: float = 10) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, b""


def to_toml(models: list[dict[str, Any]], array: str = "models") -> str:
    """`models` as TOML's array of tables `array` ([[models]], or [[tenants]]), each table's
    tables as its sub-tables."""
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
        out.append(f"[[{array}]]")
        tables = {k: v for k, v in model.items() if isinstance(v, dict)}
        out += [f"{k} = {value(v)}" for k, v in model.items() if not isinstance(v, dict)]
        for name, table in tables.items():
            out.append(f"[{array}.{name}]")
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
    before: Path | None = None  # --before: another checkout whose gateway a scenario runs beside this one's


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
            if key == "batch_sizes":
                total: collections.Counter = collections.Counter()
                for v in values:
                    total.update({int(k): n for k, n in (v or {}).items()})
                row[key] = dict(sorted(total.items()))
            elif all(v == value for v in values):  # a setting, or a count that did not move: as it is
                row[key] = value
            elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                row[key] = statistics.median(cast(list[float], values))  # all numbers, just checked
        out.append(row)
    return out


def check(what: str, target: str, value: str, ok: bool | None) -> dict[str, Any]:
    return {"what": what, "target": target, "value": value, "ok": ok}


LATENCY_COLUMNS = [["p50_ms", "p50 ms", ".1f"], ["p90_ms", "p90 ms", ".1f"], ["p99_ms", "p99 ms", ".1f"]]


# -- the gateway's metrics -----------------------------------------------------------------------


def metric(gateway: Gateway, name: str, model: str) -> float | None:
    """One sample of the gateway's /metrics, or None if it has none."""
    text = http_request("GET", f"{gateway.http_url}/metrics")[1].decode()
    for line in text.splitlines():
        if line.startswith(f'{name}{{model="{model}"}} '):
            return float(line.rsplit(" ", 1)[1])
    return None


def hey(url: str, body: Path, clients: int, duration: float, *, method: str = "POST",
        content_type: str = "application/json") -> dict[str, Any]:
    """The real `hey` (Go: the load costs little of the cores it shares with the gateway),
    sending the file `body` (`-D`, as `curl -T` or `-d @file` would) for `duration` seconds."""
    command = ["hey", "-z", f"{duration:g}s", "-c", str(clients), "-m", method, "-T", content_type,
               "-D", str(body), "-t", "30", "-o", "csv", url]
    output = subprocess.run(command, capture_output=True, text=True, check=True, timeout=duration + 120).stdout
    rows = list(csv.DictReader(io.StringIO(output)))
    ok = sorted(float(r["response-time"]) for r in rows if r["status-code"] == "200")
    elapsed = max((float(r["offset"]) + float(r["response-time"]) for r in rows), default=duration)
    return {"ok": len(ok), "errors": len(rows) - len(ok), "rps": len(ok) / elapsed,
            "p50_ms": 1000 * ok[len(ok) // 2] if ok else None,
            "p99_ms": 1000 * ok[min(len(ok) - 1, int(len(ok) * 0.99))] if ok else None}


def batch_totals(gateway: Gateway, model: str) -> tuple[float, float]:
    """(batches, rows) the gateway has sent for `model` so far."""
    return (metric(gateway, "gateway_batch_size_count", model) or 0.0,
            metric(gateway, "gateway_batch_size_sum", model) or 0.0)


def mean_batch_between(before: tuple[float, float], after: tuple[float, float]) -> float | None:
    """Mean rows per batch between two `batch_totals`."""
    batches, rows = after[0] - before[0], after[1] - before[1]
    return rows / batches if batches else None


# -- a closed loop of its own, over skewed lengths ---------------------------------------------------


def lognormal_lengths(count: int, seed: int, low: int = 8, high: int = 512) -> list[int]:
    """Skewed sequence lengths: log-normal (median 48) clipped to low..high."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [int(n) for n in np.clip(np.round(rng.lognormal(math.log(48), 0.8, count)), low, high)]


async def closed_loop(url: str, bodies: list[bytes], clients: int, duration: float) -> dict[str, Any]:
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
