"""The Python API: `run(config, live)` -> Result, in this process or in several.

What tools/bench/harness.py and the CLI call. It picks one process (with the progress bar when
asked) or several (`multiprocess`); it must not know the protocol, the statistics or the
command line.
"""
from __future__ import annotations

import asyncio
import sys
import time

from tools.loadgen import progress
from tools.loadgen.config import Config
from tools.loadgen.multiprocess import run_processes
from tools.loadgen.report import Result
from tools.loadgen.runner import Live, Runner


async def run(config: Config, live: Live | None = None) -> Result:
    """Run one bounded load and return its Result (the Python API).

    `live` (one process only) exposes counters while it runs and can end it early."""
    config.validate()
    if config.processes > 1:
        return await asyncio.get_running_loop().run_in_executor(None, run_processes, config)
    live = live or Live()
    runner = Runner(config, live)
    bar = None
    if config.progress:
        bar = asyncio.get_running_loop().create_task(progress.show(config, live, time.perf_counter(), sys.stderr))
    try:
        return await runner.run()
    finally:
        if bar is not None:
            bar.cancel()
            await asyncio.gather(bar, return_exceptions=True)
