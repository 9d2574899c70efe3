"""Benchmark runner: starts the simulated predictor, the gateway (and baselines) as separate
processes on 127.0.0.1, drives them with tools.loadgen, and writes a markdown table, a JSON
file and PNG plots.

    python -m tools.bench                                   # every scenario, 10 s per run
    python -m tools.bench --scenario kserve-docs --duration 1 --out /tmp/bench   # smoke run
    python -m tools.bench --scenario kserve-docs saturation overhead --duration 5 --repeat 3

Scenarios: `tools/bench_scenarios.py` `SCENARIOS` (listed by --help). Output in --out
(default bench-results/): results.md, results.json, latency_vs_throughput.png,
batch_sizes.png, saturation.png, goodput.png, memory.png (each plot when its scenario
ran). Servers are stopped by PID at the end and on Ctrl-C.
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

from tools import bench_scenarios
from tools.bench_scenarios import SCENARIOS, Context
from tools.processes import ROOT

PACKAGES = ("grpcio", "protobuf", "tornado", "numpy", "orjson", "aiohttp", "matplotlib")
DEFAULT_ORDER = ("loadgen-ceiling", "kserve-docs", "latency-curve", "saturation", "overhead", "memory")


def machine() -> dict[str, Any]:
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
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                    cwd=ROOT, capture_output=True, text=True,
                                    timeout=10).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "", False
    return {
        "cores": os.cpu_count(), "cpu": model, "memory_gib": round(memory_kb / 1024 / 1024, 1),
        "python": platform.python_version(), "implementation": platform.python_implementation(),
        "os": f"{platform.system()} {platform.release()}", "packages": versions,
        "load_average_at_start": os.getloadavg(), "commit": commit + ("+dirty" if dirty else ""),
    }


def machine_line(info: dict[str, Any]) -> str:
    packages = ", ".join(f"{k} {v}" for k, v in info["packages"].items() if v)
    load = ", ".join(f"{x:.2f}" for x in info["load_average_at_start"])
    return (f"{info['cores']} cores ({info['cpu'] or 'unknown CPU'}), {info['memory_gib']} GiB, "
            f"{info['os']}, Python {info['python']}; {packages}; load average at start {load}; "
            f"commit {info['commit'] or 'unknown'}")


# -- report ---------------------------------------------------------------------------------------


def _cell(value: Any, fmt: str) -> str:
    if value is None:
        return "–"
    if fmt == "s":
        return str(value)
    try:
        return format(value, fmt)
    except (TypeError, ValueError):
        return str(value)


def markdown_table(columns: list[list[str]], rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(header for _, header, _ in columns) + " |",
             "|" + "|".join("---" if fmt == "s" else "---:" for _, _, fmt in columns) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(key), fmt) for key, _, fmt in columns) + " |")
    return "\n".join(lines)


def markdown_report(results: dict[str, Any], plots: list[str], heading: str = "#") -> str:
    out = [f"{heading} Benchmark results", "",
           f"Machine: {machine_line(results['machine'])}.", "",
           f"Command: `{results['command']}`", ""]
    for name, scenario in results["scenarios"].items():
        out += [f"{heading}# {name}: {scenario['title']}", "", scenario["setup"], ""]
        for table in scenario["tables"]:
            if table["title"]:
                out += [f"**{table['title']}**", ""]
            out += [markdown_table(table["columns"], table["rows"]), ""]
        if scenario["checks"]:
            for c in scenario["checks"]:
                mark = {True: "PASS", False: "FAIL", None: "info"}[c["ok"]]
                out.append(f"- {mark}: {c['what']}: {c['value']} (target {c['target']})")
            out.append("")
    if plots:
        out += [f"{heading}# Plots", ""] + [f"![{Path(p).stem}]({Path(p).name})" for p in plots] + [""]
    return "\n".join(out)


# -- plots ------------------------------------------------------------------------------------------


def make_plots(results: dict[str, Any], out: Path) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    scenarios = results["scenarios"]
    subtitle = f"{results['machine']['cores']} cores, Python {results['machine']['python']}"

    curve = scenarios.get("latency-curve", {}).get("plots", {}).get("latency_curve")
    if curve:
        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=90)
        colors = {"direct": "tab:gray", "window": "tab:red", "adaptive": "tab:blue"}
        for mode in ("direct", "window", "adaptive"):
            points = sorted((p for p in curve if p["mode"] == mode and p["rps"]), key=lambda p: p["clients"])
            if not points:
                continue
            xs = [p["rps"] for p in points]
            ax.plot(xs, [p["p50_ms"] for p in points], "o-", color=colors[mode], label=f"{mode} p50")
            ax.plot(xs, [p["p99_ms"] for p in points], "s--", color=colors[mode], alpha=0.6, label=f"{mode} p99")
            for p in points:
                ax.annotate(f"c={p['clients']}", (p["rps"], p["p50_ms"]), textcoords="offset points",
                            xytext=(4, -10), fontsize=7, color=colors[mode])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("throughput (requests/s)")
        ax.set_ylabel("latency (ms)")
        ax.set_title(f"Latency vs throughput, predictor 5 ms/call, batch 32 ({subtitle})", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, ncol=3)
        fig.tight_layout()
        written.append(_save(fig, out / "latency_vs_throughput.png"))

    batches: dict[str, dict] = {}
    for name in ("kserve-docs", "saturation"):
        batches.update(scenarios.get(name, {}).get("plots", {}).get("batch_sizes", {}))
    batches = {k: v for k, v in batches.items() if v}
    if batches:
        n = len(batches)
        cols = min(3, n)
        rows = (n + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.3 * rows), dpi=90, squeeze=False)
        for ax, (name, sizes) in zip(axes.flat, batches.items(), strict=False):
            keys = sorted(int(k) for k in sizes)
            counts = [sizes.get(k, sizes.get(str(k), 0)) for k in keys]
            total = sum(counts) or 1
            mean = sum(k * c for k, c in zip(keys, counts, strict=True)) / total
            ax.bar(keys, [c / total for c in counts], width=0.8, color="tab:blue")
            ax.set_title(f"{name}\nmean {mean:.1f}, {total} calls", fontsize=8)
            ax.set_xlim(0, 33)
            ax.tick_params(labelsize=7)
            ax.set_xlabel("batch size (instances)", fontsize=7)
        for ax in list(axes.flat)[n:]:
            ax.axis("off")
        fig.suptitle("Batch sizes the predictor received (share of calls)", fontsize=9)
        fig.tight_layout()
        written.append(_save(fig, out / "batch_sizes.png"))

    sat = scenarios.get("saturation", {}).get("plots", {}).get("saturation")
    if sat:
        fig, ax = plt.subplots(figsize=(7, 3.6), dpi=90)
        names = [n for n, _ in sat["bars"]]
        values = [v for _, v in sat["bars"]]
        bar_colors = ["tab:gray" if n.startswith(("predictor", "direct")) else "tab:blue" for n in names]
        ax.barh(range(len(names)), values, color=bar_colors)
        ax.axvline(sat["ideal"], color="tab:red", linestyle="--", label=f"ideal {sat['ideal']:.0f}/s")
        ax.set_yticks(range(len(names)), names, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("instances/s")
        ax.set_title("Saturation: 128 clients, predictor 20 ms + 0.25 ms/instance, 1 slot", fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        written.append(_save(fig, out / "saturation.png"))

    good = scenarios.get("goodput", {}).get("plots", {}).get("goodput")
    if good:
        fig, ax = plt.subplots(figsize=(6.5, 3.8), dpi=90)
        loads = good["loads"]
        for name, series in good["series"].items():
            ax.plot(loads, series, "o-", label=name)
        ax.plot(loads, [min(x, 1.0) * good["capacity"] for x in loads], ":", color="gray", label="capacity")
        ax.set_xlabel("offered load (x the predictor's batched capacity)")
        ax.set_ylabel("goodput (answers within the SLO per s)")
        ax.set_ylim(0, good["capacity"] * 1.15)
        ax.set_title(f"Goodput vs offered load ({subtitle})", fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        written.append(_save(fig, out / "goodput.png"))

    mem = scenarios.get("memory", {}).get("plots", {}).get("memory")
    if mem:
        fig, ax = plt.subplots(figsize=(6, 3), dpi=90)
        ax.plot([s["requests"] for s in mem], [s["rss_kb"] / 1024 for s in mem], "o-")
        ax.set_xlabel("requests served")
        ax.set_ylabel("gateway RSS (MiB)")
        ax.set_ylim(0, max(s["rss_kb"] for s in mem) / 1024 * 1.2)
        ax.set_title("Gateway RSS across requests", fontsize=9)
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        written.append(_save(fig, out / "memory.png"))
    return written


def _save(fig: Any, path: Path) -> str:
    import matplotlib.pyplot as plt
    fig.savefig(path)
    plt.close(fig)
    return str(path)


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
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: rewrite results.md and the plots from --out's results.json")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.report_only:
        written = json.loads((out / "results.json").read_text())
        plots = make_plots(written, out)
        (out / "results.md").write_text(markdown_report(written, plots))
        print(f"wrote {out / 'results.md'}" + "".join(f", {p}" for p in plots), file=sys.stderr)
        return 0
    if args.duration <= 0 or args.repeat < 1 or args.memory_queued < 1 or args.memory_requests < 2:
        parser.error("--duration must be > 0, --repeat >= 1, --memory-queued >= 1, --memory-requests >= 2")
    names = list(DEFAULT_ORDER) if "all" in args.scenario else list(dict.fromkeys(args.scenario))

    out.mkdir(parents=True, exist_ok=True)
    context = Context(duration=args.duration, repeat=args.repeat, log_dir=out / "logs",
                      memory_queued=args.memory_queued, memory_requests=args.memory_requests,
                      progress=args.progress, say=lambda text: print(text, file=sys.stderr, flush=True))

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_term)

    command = "python -m tools.bench " + " ".join(argv if argv is not None else sys.argv[1:])
    results: dict[str, Any] = {
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": command.strip(), "machine": machine(),
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
        bench_scenarios.stop_all()
    results["seconds"] = round(time.monotonic() - started, 1)
    results["servers"] = bench_scenarios.STARTED  # all stopped by now
    plots = make_plots(results, out) if results["scenarios"] else []
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    report = markdown_report(results, plots)
    (out / "results.md").write_text(report)
    print(report)
    print(f"wrote {out / 'results.md'}, {out / 'results.json'}" + "".join(f", {p}" for p in plots), file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
