"""What describes the whole gateway: Triton's statistics, the /metrics exposition and the
live page's snapshot, behind one interface (`Views`) the service reads.

`LocalViews` reads this process's scheduler and metrics: the whole gateway when it runs as
one process. Under `serve --workers N` the batcher's views add every worker's own counts
to /metrics, and a worker's views ask the batcher (both in `gateway.process.workers`); the service
holds whichever its process's role gives it and never asks where it runs.

It knows the scheduler's figures, the served models (for Triton's documents) and the
metrics registry; no front end, no worker, no predictor.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from gateway.batching.scheduler import BatchScheduler
from gateway.models import triton
from gateway.models.base import ServedModel
from gateway.observe import live
from gateway.observe.metrics import Metrics
from wire.errors import ModelNotFound


class Views(Protocol):
    """The documents that describe the whole gateway, whichever process is asked."""

    async def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        """Triton's statistics document for one model (already checked to be served), or
        (no name) every model."""

    async def exposition(self) -> bytes:
        """/metrics in Prometheus' text format (read on the loop, rendered off it: `gateway.observe.metrics`)."""

    async def live(self) -> dict[str, Any]:
        """The live page's snapshot (`gateway.observe.live`; read on the loop, built off it)."""


class LocalViews:
    """The views of a process whose scheduler decides every batch (one process, or the
    batcher's own figures)."""

    def __init__(self, scheduler: BatchScheduler, models: Mapping[str, ServedModel], metrics: Metrics) -> None:
        self.scheduler = scheduler
        self.models = models  # the service's, as reloads change it
        self.metrics = metrics
        metrics.watch_scheduler(scheduler, self._replicas_in_rotation)

    def _replicas_in_rotation(self, name: str) -> list[bool]:
        served = self.models.get(name)  # a model removed by a reload may still be draining
        return served.backend.replicas_in_rotation() if served is not None else [True]

    async def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        if name and name not in self.models:  # asked of the batcher by a worker, just after a reload
            raise ModelNotFound.unknown(name)
        served = [self.models[name]] if name else list(self.models.values())
        return {"model_stats": [triton.model_statistics(m, self.scheduler.view(m.name).stats) for m in served]}

    async def exposition(self) -> bytes:
        return await self.metrics.exposition()

    async def live(self) -> dict[str, Any]:
        return await live.snapshot(self.scheduler)
