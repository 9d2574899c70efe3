"""Several generator processes for one run, when one process is the bottleneck.

`run_processes` cuts a Config into shares (`Config.split`), runs each in a spawned child
process with its own `Runner`, starts them together, watches their progress through
shared counters, and merges their results (`Result.merge`). It must not know the protocol
(engines) nor how a run is measured (runner) beyond calling it.
"""
from __future__ import annotations

import asyncio
import math
import multiprocessing
import sys
import time
from typing import Any

from tools.loadgen import progress
from tools.loadgen.config import Config
from tools.loadgen.report import Result
from tools.loadgen.runner import Live, Runner

START_TIMEOUT_S = 60
FINISH_MARGIN_S = 60  # beyond time_bound(), before a silent child counts as hung


def time_bound(config: Config) -> float:
    """A generous upper bound of a run's length, for watchdogs."""
    if config.duration is not None:
        return config.duration + config.timeout
    assert config.requests is not None  # a valid run is bounded by -n or -z
    per = config.timeout * math.ceil(config.requests / max(1, config.workers))
    if config.rate:
        per = max(per, config.requests / config.rate + config.timeout)
    return per


def _child(config: Config, pipe: Any, go: Any, counter: Any) -> None:
    async def main() -> Result:
        live = Live()

        async def publish() -> None:
            while True:
                counter.value = live.finished
                await asyncio.sleep(0.1)

        pipe.send("ready")
        while not go.wait(0.1):
            pass
        task = asyncio.get_running_loop().create_task(publish())
        try:
            return await Runner(config.validate(), live).run()
        finally:
            task.cancel()
            counter.value = live.finished

    try:
        pipe.send(("result", asyncio.run(main()).to_wire()))
    except BaseException as exc:  # report, never hang the parent
        pipe.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        pipe.close()


def run_processes(config: Config) -> Result:
    """Run `config` split over `config.processes` child processes; blocks until all are done."""
    context = multiprocessing.get_context("spawn")  # no fork: grpc and event loops do not survive it
    parts = config.split(config.processes)
    go = context.Event()
    children = []
    for part in parts:
        ours, theirs = context.Pipe()
        counter = context.Value("q", 0, lock=False)
        process = context.Process(target=_child, args=(part, theirs, go, counter), daemon=True)
        process.start()
        children.append((process, ours, counter))
    try:
        for _process, pipe, _ in children:
            if not pipe.poll(START_TIMEOUT_S) or pipe.recv() != "ready":
                raise RuntimeError("a load generator process did not start")
        go.set()
        started = time.perf_counter()
        results: list[Result | None] = [None] * len(children)
        limit = time_bound(config) + FINISH_MARGIN_S
        while any(r is None for r in results):
            for i, (process, pipe, _) in enumerate(children):
                if results[i] is None and pipe.poll(0):
                    kind, payload = pipe.recv()
                    if kind == "error":
                        raise RuntimeError(f"load generator process failed: {payload}")
                    results[i] = Result.from_wire(parts[i], payload)
                elif results[i] is None and not process.is_alive() and not pipe.poll(0.2):
                    raise RuntimeError(f"load generator process exited with {process.exitcode}")
            if config.progress:
                progress.draw(config, sum(c.value for _, _, c in children), 0, started, sys.stderr)
            if time.perf_counter() - started > limit:
                raise RuntimeError("load generator processes did not finish in time")
            time.sleep(0.1)
        if config.progress:
            sys.stderr.write("\n")
        return Result.merge(config, [r for r in results if r is not None])
    finally:
        for process, pipe, _ in children:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
            pipe.close()
