"""Helpers shared by the batching tests: a recording executor, row-numbered requests, and
the history of closed-loop clients that teaches a policy its learned hold."""
from __future__ import annotations

import asyncio

import numpy as np

from gateway.batching.config import BatchingConfig
from gateway.batching.policies.adaptive import AdaptivePolicy
from gateway.batching.scheduler import BatchScheduler
from gateway.batching.stats import ModelStats
from wire.tensors import Tensor


class RecordingExecutor:
    """Doubles its input after `delay_s`; remembers every batch it was given."""

    def __init__(self, delay_s: float = 0.01) -> None:
        self.delay_s = delay_s
        self.batches: list[np.ndarray] = []
        self.concurrent = 0
        self.max_concurrent = 0
        self.release: asyncio.Event | None = None

    async def __call__(self, inputs: list[Tensor]) -> list[Tensor]:
        self.batches.append(inputs[0].data.copy())
        self.concurrent += 1
        self.max_concurrent = max(self.max_concurrent, self.concurrent)
        try:
            if self.release is not None:
                await self.release.wait()
            await asyncio.sleep(self.delay_s)
        finally:
            self.concurrent -= 1
        return [Tensor("OUTPUT0", "FP32", inputs[0].data * 2)]


async def until_sent(executor: RecordingExecutor, batches: int = 1) -> None:
    """Until `executor` has been given `batches` batches in all: a queue weighs an arrival
    at the end of the loop's pass, and the batch's task starts a pass later."""
    for _ in range(100):
        if len(executor.batches) >= batches:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{batches} batches expected at the executor, {len(executor.batches)} given")


def rows(start: int, count: int, width: int = 2) -> list[Tensor]:
    data = np.arange(start * width, (start + count) * width, dtype=np.float32).reshape(count, width)
    return [Tensor("INPUT0", "FP32", data)]


def stats_of(scheduler: BatchScheduler, model: str) -> ModelStats:
    """The model's live counters and learned profile, as its queue records them: what the
    tests read between events (readers outside the scheduler get its `view`)."""
    return scheduler._queues[model].stats


def scheduler_with(executor, **config) -> BatchScheduler:
    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("m", executor, BatchingConfig(**config))
    return scheduler


def closed_loop_history(arrive, deliver, cycles: int = 4, clients: int = 4,
                        call_s: float = 0.006, return_s: float = 0.001) -> float:
    """Deliveries of `clients` requests whose clients all come back `return_s` later, for
    `cycles` + 1 rounds, then one more delivery; returns the time of that last delivery."""
    now = 1.0
    for _ in range(cycles + 1):
        deliver(now, clients, call_s)
        for _ in range(clients):
            arrive(now + return_s)
        now += return_s + call_s
    deliver(now, clients, call_s)
    return now


def learned(policy: AdaptivePolicy, **history) -> float:
    """Teach `policy` a closed-loop history (see `closed_loop_history`); the last delivery's time."""
    return closed_loop_history(policy.on_arrival, policy.on_delivery, **history)
