"""The runner: one bounded load in this process, through one engine.

`Runner` drives an `Engine` in a closed loop (`-c` workers, each sending its next request
when the previous one is answered) or an open loop (arrivals at `--rate`, at most `-c` in
flight), until `-n` requests are done or `-z` has elapsed, and records each answer into a
`Result`. `Live` holds the counters a caller can watch meanwhile, and ends a run early. It
must not know the protocol (engines), the terminal (progress) or other processes.
"""
from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from tools.loadgen.config import BURST_PERIOD_S, Config
from tools.loadgen.engines import Engine, Slot, make_engine
from tools.loadgen.report import REFUSAL_STATUSES, Result, count_error


class Live:
    """Counters a caller can watch while a run goes on, and a way to end it early."""

    def __init__(self) -> None:
        self.sent = 0
        self.finished = 0
        self.inflight = 0
        self.errors = 0
        self._stop: asyncio.Event | None = None

    def stop(self) -> None:
        """End the run now, like -z elapsing (call on the run's event loop)."""
        if self._stop is not None:
            self._stop.set()


class Runner:
    """One run of `config` on the running event loop; `run()` once."""

    def __init__(self, config: Config, live: Live) -> None:
        self.config = config
        self.live = live
        self.engine: Engine = make_engine(config)
        self.result = Result(config)
        self.remaining = config.requests  # None: until the deadline
        self.last_done = 0.0

    def _record(self, latency: float, status: str | None, size: int, error: str | None) -> None:
        result = self.result
        if status is not None:
            result.latencies.append(latency)
            if error is None:
                result.ok_latencies.append(latency)
            elif status in REFUSAL_STATUSES:
                result.refusal_latencies.append(latency)
            result.statuses[status] = result.statuses.get(status, 0) + 1
            result.bytes_received += size
        else:
            result.transport_errors += 1
        if error is not None:
            count_error(result.errors, error)
            self.live.errors += 1
        self.live.finished += 1
        self.last_done = time.perf_counter()

    async def _closed_worker(self, index: int) -> None:
        engine, live, clock = self.engine, self.live, time.perf_counter
        slot = engine.new_slot(index)
        call, record = engine.call, self._record
        try:
            while True:
                if self.remaining is not None:
                    if self.remaining <= 0:
                        return
                    self.remaining -= 1
                live.sent += 1
                live.inflight += 1
                started = clock()
                try:
                    status, size, error = await call(slot)
                finally:
                    live.inflight -= 1
                record(clock() - started, status, size, error)
        finally:
            engine.release(slot)

    async def _open_loop(self, end: float | None) -> None:
        config, live, engine = self.config, self.live, self.engine
        loop = asyncio.get_running_loop()
        rng = random.Random(config.seed)
        rate, cap, late_s = config.rate, config.workers, config.late_ms / 1000.0
        assert rate is not None, "an open loop has a rate"
        poisson, bursty = config.arrivals == "poisson", config.arrivals == "bursty"
        if bursty:
            rate *= 2  # during the on halves; none arrive in the off halves
        idle: list[Slot] = []
        tasks: set[asyncio.Task] = set()
        counter = 0
        record, clock = self._record, time.perf_counter

        async def one() -> None:
            nonlocal counter
            slot = idle.pop() if idle else engine.new_slot(counter)
            counter += 1
            started = clock()
            try:
                status, size, error = await engine.call(slot)
            except asyncio.CancelledError:
                engine.release(slot)
                raise
            finally:
                live.inflight -= 1
            idle.append(slot)
            record(clock() - started, status, size, error)

        arrivals = 0
        start, half = loop.time(), BURST_PERIOD_S / 2

        def arrival_time(offset: float) -> float:
            """An offset on the arrival clock as a time: bursty arrivals' clock runs only in the on halves."""
            return start + (offset // half * BURST_PERIOD_S + offset % half if bursty else offset)

        offset = rng.expovariate(rate) if poisson or bursty else 0.0
        next_at = arrival_time(offset)
        try:
            while (self.remaining is None or arrivals < self.remaining) and (end is None or next_at < end):
                now = loop.time()
                if next_at > now:
                    await asyncio.sleep(next_at - now)
                    continue
                lag = now - next_at
                arrivals += 1
                if live.inflight >= cap:
                    self.result.dropped += 1
                else:
                    if lag > late_s:
                        self.result.late += 1
                    if lag > self.result.max_lag_s:
                        self.result.max_lag_s = lag
                    live.sent += 1
                    live.inflight += 1
                    task = loop.create_task(one())
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                offset += rng.expovariate(rate) if poisson or bursty else 1.0 / rate
                next_at = arrival_time(offset)
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            for task in tasks:
                task.cancel()
            for slot in idle:
                engine.release(slot)

    async def run(self) -> Result:
        config, live = self.config, self.live
        loop = asyncio.get_running_loop()
        live._stop = stop = asyncio.Event()
        await self.engine.start()
        result = self.result
        cpu0 = time.process_time()
        result.started_at = time.time()
        start = time.perf_counter()
        end = None if config.duration is None else loop.time() + config.duration
        if config.open_loop:
            jobs = [loop.create_task(self._open_loop(end))]
        else:
            workers = config.workers if config.requests is None else min(config.workers, config.requests)
            jobs = [loop.create_task(self._closed_worker(i)) for i in range(workers)]
        failures: list[BaseException] = []

        def on_done(job: asyncio.Task) -> None:
            failure = None if job.cancelled() else job.exception()
            if failure is not None:
                failures.append(failure)  # a bug, not a failed request: end the run
                stop.set()

        for job in jobs:
            job.add_done_callback(on_done)
        everything = asyncio.gather(*jobs, return_exceptions=True)
        stopper = loop.create_task(stop.wait())
        how = "finished"
        try:
            timeout = None if end is None else max(0.0, end - loop.time())
            waited: set[asyncio.Future[Any]] = {everything, stopper}
            done, _ = await asyncio.wait(waited, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if everything not in done:
                how = "stopped" if stopper in done else "deadline"
        finally:
            result.unfinished = live.inflight
            for job in jobs:
                job.cancel()
            await asyncio.gather(everything, return_exceptions=True)
            stopper.cancel()
            stopped = time.perf_counter()
            await self.engine.close()
        if failures:
            raise failures[0]
        if how == "deadline":
            assert config.duration is not None  # only a run with -z has a deadline
            result.elapsed_s = config.duration
        elif how == "stopped" or not self.last_done:
            result.elapsed_s = stopped - start
        else:
            result.elapsed_s = self.last_done - start
        result.sent = live.sent
        result.cpu_s = time.process_time() - cpu0
        return result
