"""Benchmark runner: starts the simulated predictor, the gateway (and baselines) as separate
processes on 127.0.0.1, drives them with tools.loadgen, and writes a markdown table, a JSON
file and PNG plots.

    python -m tools.bench                                   # every scenario, 10 s per run
    python -m tools.bench --scenario kserve-docs --duration 1 --out /tmp/bench   # smoke run
    python -m tools.bench --scenario kserve-docs saturation overhead --duration 5 --repeat 3

Scenarios: `tools/bench/scenarios.py` `SCENARIOS` (listed by --help). Output in --out
(default bench-results/): results.md, results.json, latency_vs_throughput.png,
batch_sizes.png, saturation.png, goodput.png, memory.png (each plot when its scenario
ran; written by `tools/bench/report.py`). Servers are stopped by PID at the end and on Ctrl-C.

It holds the command line, the machine's description and the run of the chosen scenarios
(`python -m tools.bench` is `tools/bench/__main__.py`, which calls `main`). It must not know
any scenario's insides, nor how the report is laid out: it reads SCENARIOS and hands the
results dict to the report.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tools.bench import harness, report
from tools.bench.harness import Context
from tools.bench.scenarios import SCENARIOS
from tools.processes import ROOT

PACKAGES = ("grpcio", "protobuf", "tornado", "numpy", "orjson", "aiohttp", "matplotlib")
DEFAULT_ORDER = ("loadgen-ceiling", "kserve-docs", "latency-curve", "saturation", "overhead", "memory")


def machine(before: Path | None = None) -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    memory_kb = 0
    try:
        with open("/proc/meminfo") as meminfo:
            memory_kb = int(meminfo.readline().split()[1])
    except (OSError, ValueError, IndexError):
        pass
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    commit = _commit(ROOT)
    if harness.GATEWAY_ROOT != ROOT:
        commit += f", the gateway's {_commit(harness.GATEWAY_ROOT)}"
    if before is not None:
        commit += f", before: {_commit(before)}"
    return {
        "cores": os.cpu_count(), "cpu": model, "memory_gib": round(memory_kb / 1024 / 1024, 1),
        "python": platform.python_version(), "implementation": platform.python_implementation(),
        "os": f"{platform.system()} {platform.release()}", "packages": versions,
        "load_average_at_start": os.getloadavg(), "commit": commit,
    }


def _commit(checkout: Path) -> str:
    """The checkout's short commit, `+dirty` when a tracked file differs from it."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout,
                                capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                    cwd=checkout, capture_output=True, text=True,
                                    timeout=10).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return ""
    return commit + ("+dirty" if dirty else "")



# -- main -------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="scenarios:\n" + "\n".join(f"  {name:16} {text}" for name, (_, text) in SCENARIOS.items()),
    )
    parser.add_argument("--scenario", nargs="+", choices=[*SCENARIOS, "all"], default=["all"],
                        help="scenarios to run (default: all)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per measured run (default 10)")
    parser.add_argument("--repeat", type=int, default=1, help="repeats of each run; medians are reported")
    parser.add_argument("--out", default="bench-results", help="output directory (default bench-results/)")
    parser.add_argument("--memory-queued", type=int, default=10_000, help="memory: requests held in the queue")
    parser.add_argument("--memory-requests", type=int, default=200_000, help="memory: requests for the RSS trend")
    parser.add_argument("--progress", action="store_true", help="progress bar of each load on stderr")
    parser.add_argument("--gateway-from", metavar="CHECKOUT", type=Path,
                        help="run the gateway from another checkout of this repository (e.g. a `git worktree` of "
                             "an older commit): the before of an A/B, with this checkout's load and report")
    parser.add_argument("--before", metavar="CHECKOUT", type=Path,
                        help="workers, overhead, saturation: run the gateway of another checkout beside this one's, in the "
                             "same interleaved rounds (a before-and-after from one run)")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: rewrite results.md and the plots from --out's results.json")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.report_only:
        _, plots = report.write_results(json.loads((out / "results.json").read_text()), out, json_file=False)
        print(f"wrote {out / 'results.md'}" + "".join(f", {p}" for p in plots), file=sys.stderr)
        return 0
    if args.duration <= 0 or args.repeat < 1 or args.memory_queued < 1 or args.memory_requests < 2:
        parser.error("--duration must be > 0, --repeat >= 1, --memory-queued >= 1, --memory-requests >= 2")
    names = list(DEFAULT_ORDER) if "all" in args.scenario else list(dict.fromkeys(args.scenario))
    if args.gateway_from is not None:
        if not (args.gateway_from / "gateway" / "__main__.py").is_file():
            parser.error(f"--gateway-from: {args.gateway_from} is not a checkout of this repository")
        harness.GATEWAY_ROOT = args.gateway_from.resolve()
    if args.before is not None and not (args.before / "gateway" / "__main__.py").is_file():
        parser.error(f"--before: {args.before} is not a checkout of this repository")

    out.mkdir(parents=True, exist_ok=True)
    context = Context(duration=args.duration, repeat=args.repeat, log_dir=out / "logs",
                      memory_queued=args.memory_queued, memory_requests=args.memory_requests,
                      progress=args.progress, say=lambda text: print(text, file=sys.stderr, flush=True),
                      before=args.before.resolve() if args.before is not None else None)

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_term)
    # Ctrl-C stops the run even when the bench was started with SIGINT ignored, as every
    # background job of a non-interactive shell is (`run.sh &`, nohup, a CI runner's):
    # Python installs no KeyboardInterrupt handler then.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    command = "python -m tools.bench " + " ".join(argv if argv is not None else sys.argv[1:])
    results: dict[str, Any] = {
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": command.strip(), "machine": machine(args.before),
        "settings": {"duration_s": args.duration, "repeat": args.repeat, "scenarios": names,
                     "memory_queued": args.memory_queued, "memory_requests": args.memory_requests},
        "scenarios": {},
    }
    started = time.monotonic()
    status = 0
    try:
        for name in names:
            print(f"scenario {name}", file=sys.stderr, flush=True)
            began = time.monotonic()
            scenario = SCENARIOS[name][0](context)
            scenario["seconds"] = round(time.monotonic() - began, 1)
            results["scenarios"][name] = scenario
    except KeyboardInterrupt:
        print("interrupted: stopping servers", file=sys.stderr)
        status = 130
    finally:
        harness.stop_all()
    results["seconds"] = round(time.monotonic() - started, 1)
    results["servers"] = harness.STARTED  # all stopped by now
    text, plots = report.write_results(results, out)
    print(text)
    print(f"wrote {out / 'results.md'}, {out / 'results.json'}" + "".join(f", {p}" for p in plots), file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
