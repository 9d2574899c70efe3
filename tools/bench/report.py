"""The benchmark's report: results.md, results.json and the PNG plots in --out, from the
results dict the CLI gathered (`machine`, `command`, `scenarios` with their `tables`,
`checks` and `plots`; `tools.bench.scenarios` describes a scenario's part).

It holds the markdown (tables, checks, the machine line), the plots (matplotlib, imported
when drawing) and `write_results`, which writes the three. It must not know how a scenario
runs: no servers, no loads, no harness; only the dict.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


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

    scaled = scenarios.get("autoscale", {}).get("plots", {}).get("autoscale")
    if scaled:
        written.append(_autoscale_plot(plt, scaled, out / "autoscale.png", subtitle))

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


def _autoscale_plot(plt: Any, data: dict[str, Any], path: Path, subtitle: str) -> str:
    """One subplot per signal: offered load and replicas (both in units of one replica's
    capacity) against simulated minutes, and each sync period's goodput on the right axis."""
    series = data["series"]
    fig, axes = plt.subplots(len(series), 1, figsize=(7.5, 2.1 * len(series)), dpi=90, sharex=True, squeeze=False)
    for ax, (name, run) in zip(axes[:, 0], series.items(), strict=True):
        ax.plot(run["t_min"], run["offered_x"], color="tab:gray", label="offered (x one replica)")
        ax.step(run["t_min"], run["ready"], where="post", color="tab:blue", label="replicas in rotation")
        ax.step(run["t_min"], run["spec"], where="post", color="tab:blue", linestyle=":", alpha=0.6,
                label="replicas asked for")
        ax.set_ylim(0, max([*run["spec"], *run["offered_x"], 1]) * 1.15)
        ax.set_ylabel("x capacity", fontsize=7)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
        right = ax.twinx()
        right.plot(run["period_t_min"], run["goodput_pct"], ".-", color="tab:green", markersize=3, linewidth=0.8,
                   label=f"goodput within {data['slo_ms']:g} ms")
        right.set_ylim(0, 105)
        right.set_ylabel("goodput %", fontsize=7)
        right.tick_params(labelsize=7)
        ax.set_title(name, fontsize=8)
        handles = [a.get_legend_handles_labels() for a in (ax, right)]
    axes[-1, 0].set_xlabel(f"simulated minutes (1 minute = {data['minute_s']:g} s real)", fontsize=7)
    fig.suptitle(f"Autoscaling the predictor fleet: offered load, replicas and goodput ({subtitle})", fontsize=9)
    fig.legend(handles[0][0] + handles[1][0], handles[0][1] + handles[1][1], fontsize=7, ncol=4, loc="upper center",
               bbox_to_anchor=(0.5, 0.965), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return _save(fig, path)


def _save(fig: Any, path: Path) -> str:
    import matplotlib.pyplot as plt
    fig.savefig(path)
    plt.close(fig)
    return str(path)



# -- files ------------------------------------------------------------------------------------------


def write_results(results: dict[str, Any], out: Path, json_file: bool = True) -> tuple[str, list[str]]:
    """Write the plots, results.json (unless `json_file` is false: rewriting from it) and
    results.md into `out`; return the markdown and the plots' paths."""
    plots = make_plots(results, out) if results["scenarios"] else []
    if json_file:
        (out / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    report = markdown_report(results, plots)
    (out / "results.md").write_text(report)
    return report, plots
