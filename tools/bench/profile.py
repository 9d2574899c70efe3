"""The `profile` scenario of `python -m tools.bench`: where the gateway's CPU goes per
request, by function, sampled by py-spy at the cost scenario's load.

The gateway (and, with `--before`, another checkout's) serves KServe v1 over HTTP in front
of a simulated predictor with no cost, under 64 `hey` clients, while `py-spy record`
samples its main thread (`--nonblocking`: the gateway is never stopped to be read; idle
samples left out). Each function's share of the samples, times the process's CPU per
request measured over the same run, is what that function costs a request: its own time
(the frame on top) and its inclusive time (anywhere on the stack). Rows are the functions
with the most own time, and the packages (Tornado, asyncio, the gateway's rooms) summed.

py-spy's samples are of the Python thread that runs the loop; grpc's and the executors'
threads are not in them (at this load they do nothing). A share is of the sampled CPU, so
what the interpreter spends outside any Python frame is not shown.

It holds this scenario only; the harness is `tools.bench.harness`'. It must not import
another scenario.
"""
from __future__ import annotations

import collections
import re
import shutil
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from tools.bench.harness import V1_BODY, Context, Gateway, Predictor, check, hey, v1_model, warm_up

CLIENTS = 64
RATE_HZ = 400
TOP = 25
# A frame of py-spy's raw (collapsed) output: "function (file:line)".
_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")


def profile(ctx: Context) -> dict[str, Any]:
    """The gateway's CPU per request, by function and by package, sampled under load."""
    spy = _py_spy()
    body = ctx.log_dir / "v1-body.json"
    body.parent.mkdir(parents=True, exist_ok=True)
    body.write_bytes(V1_BODY)
    predictor = Predictor(ctx.log_dir, "predictor-free", call_ms=0).start()
    models = [v1_model("v1", predictor, max_batch_size=32)]
    sides: dict[str, dict[str, Any]] = {}
    try:
        with ExitStack() as started:
            gateways = {"now": Gateway(ctx.log_dir, "gateway-profile", models)}
            if ctx.before is not None:
                gateways[f"before ({ctx.before.name})"] = Gateway(ctx.log_dir, "gateway-profile-before", models,
                                                                  root=ctx.before)
            for gateway in gateways.values():
                started.enter_context(gateway.start())
                warm_up(f"{gateway.http_url}/v1/models/v1:predict", V1_BODY, 8)
            for name, gateway in gateways.items():
                ctx.say(f"  profile: {name}")
                out = ctx.log_dir / f"profile-{gateway.name}.txt"
                sampler = subprocess.Popen(
                    [spy, "record", "--pid", str(gateway.pid), "--rate", str(RATE_HZ), "--duration",
                     f"{ctx.duration:g}", "--nonblocking", "--function", "--format", "raw", "--output", str(out)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                cpu = gateway.cpu_seconds()
                result = hey(f"{gateway.http_url}/v1/models/v1:predict", body, CLIENTS, ctx.duration)
                cpu_us = (gateway.cpu_seconds() - cpu) / max(1, result["ok"]) * 1e6
                _, errors = sampler.communicate(timeout=ctx.duration + 60)
                if sampler.returncode != 0 or not out.exists():
                    raise RuntimeError(f"py-spy failed on {name}: {errors[-2000:]}")
                sides[name] = {"cpu_us": cpu_us, "rps": result["rps"], **_aggregate(out.read_text())}
    finally:
        predictor.stop()
    return _report(ctx, sides)


def _py_spy() -> str:
    """py-spy beside this interpreter (the test venv has it), else on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if found is None:
        raise RuntimeError("py-spy is not installed: pip install py-spy (the dev extra has it)")
    return found


def _aggregate(raw: str) -> dict[str, Any]:
    """Samples by function (own and inclusive) and by package, from py-spy's raw output."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    packages: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [name for name in map(_name, stack.split(";")) if name is not None]
        if not frames:
            continue
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
        packages[_package(frames[-1])] += count
    return {"samples": total, "own": own, "inclusive": inclusive, "packages": packages}


def _name(frame: str) -> str | None:
    """`function (short/path.py)`, the path from its package on; None for the thread's root."""
    match = _FRAME.match(frame.strip())
    if match is None:
        return frame.strip() or None
    path = match["file"]
    for marker in ("site-packages/", "/lib/python3.", "/work/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    path = re.sub(r"^\d+/", "", path)  # the stdlib's "11/asyncio/..." once "/lib/python3." is cut
    for root in ("gateway/", "wire/", "backends/", "tools/"):
        index = path.find(root)
        if index > 0:
            path = path[index:]
            break
    return f"{match['function']} ({path})"


def _package(name: str) -> str:
    """The package a frame's file lies in: tornado, asyncio, the gateway's room, or other."""
    path = name.rsplit("(", 1)[-1].rstrip(")")
    head = path.split("/")
    if head[0] == "gateway" and len(head) > 2:
        return f"gateway/{head[1]}"
    return head[0].removesuffix(".py") if head else "other"


def _report(ctx: Context, sides: dict[str, dict[str, Any]]) -> dict[str, Any]:
    names = list(sides)
    functions = collections.Counter[str]()
    for side in sides.values():
        for function, count in side["own"].items():
            functions[function] = max(functions[function], count * 1_000_000 // max(1, side["samples"]))
    top = [function for function, _ in functions.most_common(TOP)]

    def us(side: dict[str, Any], counter: str, key: str) -> float:
        return side[counter][key] / max(1, side["samples"]) * side["cpu_us"]

    function_rows = [{"function": function,
                      **{f"own:{name}": us(side, "own", function) for name, side in sides.items()},
                      **{f"incl:{name}": us(side, "inclusive", function) for name, side in sides.items()}}
                     for function in top]
    package_keys = sorted({key for side in sides.values() for key in side["packages"]},
                          key=lambda key: -max(us(side, "packages", key) for side in sides.values()))
    package_rows = [{"package": key, **{f"own:{name}": us(side, "packages", key) for name, side in sides.items()}}
                    for key in package_keys]
    summary = [{"name": name, "cpu_us": side["cpu_us"], "rps": side["rps"], "samples": side["samples"]}
               for name, side in sides.items()]
    checks = [check(f"gateway CPU per request, {name}", "report", f"{side['cpu_us']:.0f} us", None)
              for name, side in sides.items()]
    return {
        "title": "Profile: the gateway's CPU per request by function",
        "setup": f"KServe v1 over HTTP (one instance of 4 floats), a simulated predictor with no cost, {CLIENTS} hey "
                 f"clients for {ctx.duration:g} s, py-spy sampling the gateway's loop thread at {RATE_HZ} Hz "
                 "(nonblocking, idle left out). A function's us/req is its share of the samples times the "
                 "process's CPU per request in the same run: own (on top of the stack) and inclusive.",
        "tables": [
            {"title": "CPU per request", "rows": summary, "columns": [
                ["name", "gateway", "s"], ["rps", "req/s", ".0f"], ["cpu_us", "CPU us/req", ".0f"],
                ["samples", "samples", "d"]]},
            {"title": "By package (own time)", "rows": package_rows, "columns": [
                ["package", "package", "s"], *[[f"own:{name}", f"us/req, {name}", ".1f"] for name in names]]},
            {"title": f"The {TOP} functions with the most own time", "rows": function_rows, "columns": [
                ["function", "function", "s"], *[[f"own:{name}", f"own us/req, {name}", ".1f"] for name in names],
                *[[f"incl:{name}", f"inclusive us/req, {name}", ".1f"] for name in names]]},
        ],
        "checks": checks,
        "runs": [{"name": name, "cpu_us": side["cpu_us"], "rps": side["rps"], "samples": side["samples"],
                  "own": dict(side["own"].most_common(200)), "packages": dict(side["packages"])}
                 for name, side in sides.items()],
    }
