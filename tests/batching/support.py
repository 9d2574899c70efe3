"""Helpers shared by the batching tests: a recording executor and row-numbered requests."""
from __future__ import annotations

import asyncio

import numpy as np

from gateway.batching.config import BatchingConfig
from gateway.batching.scheduler import BatchScheduler
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


def rows(start: int, count: int, width: int = 2) -> list[Tensor]:
    data = np.arange(start * width, (start + count) * width, dtype=np.float32).reshape(count, width)
    return [Tensor("INPUT0", "FP32", data)]


def scheduler_with(executor, **config) -> BatchScheduler:
    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("m", executor, BatchingConfig(**config))
    return scheduler
