"""The benchmarks: `python -m tools.bench` (see `cli.py`).

- `cli.py` (with `__main__.py`): the command line; runs the chosen scenarios.
- `scenarios.py`: the one SCENARIOS table, name -> (function, description).
- one module per scenario (`kserve_docs.py`, `latency_curve.py`, `saturation.py`,
  `overhead.py`, `memory.py`, `loadgen_ceiling.py`, `goodput.py`, `inflight.py`,
  `perf_analyzer.py`, `variable_length.py`, `triton.py`, `torchserve.py`).
- `harness.py`: what the scenarios share (server processes, Context, load, rows, checks).
- `report.py`: results.md, results.json and the PNG plots.
- `baselines.py`: the minimal servers the overhead, memory and loadgen-ceiling scenarios
  compare against, run as their own process (`python -m tools.bench.baselines KIND`).

Imports go one way: cli -> scenarios -> each scenario -> harness; cli -> report. A scenario
never imports another, the harness imports no scenario, and the report knows only the
results dict (lint-imports checks it: [tool.importlinter] in pyproject.toml). This file
imports nothing, so that `python -m tools.bench.baselines` loads no more than the baseline
servers.
"""
