"""Where a gateway process stands, and all that it changes: `Role`.

Every gateway process is the same assembly (`gateway.server.Gateway`: what decides
batches, the service, the front ends); its role says the rest:

* `SingleProcess` (here): its own `BatchScheduler` decides every batch, and its views
  (`gateway.views.LocalViews`) describe the whole gateway.
* The batcher of `serve --workers N` (`gateway.workers.supervisor.BatcherRole`): the same
  scheduler, also fed by its workers over their channel; it starts, restarts and signals
  them, and its /metrics adds their counts.
* A worker (`gateway.workers.remote.WorkerRole`): a stand-in scheduler that hands each
  request to the batcher, whose views it reads, and stand-in predictor clients that ask
  the batcher's what they know (a worker calls no predictor).

It knows the scheduler and views interfaces; no front end, no worker, no predictor.
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

from backends.base import Backend
from backends.registry import create_backend
from gateway.batching.scheduler import BatchScheduler, Scheduler
from gateway.config import GatewayConfig, ModelConfig, ServerConfig
from gateway.telemetry import Telemetry
from gateway.views import LocalViews, Views

if TYPE_CHECKING:  # the service is built with a role's views; the role never builds a service
    from gateway.service import InferenceService


class Role(Protocol):
    """What differs between the processes of a gateway (see the module)."""

    @property
    def lost(self) -> asyncio.Event:
        """Set when this process must stop on its own (a worker whose batcher has gone)."""

    @property
    def ready_note(self) -> str:
        """Words added to the READY line (the batcher names how many workers it runs)."""

    @property
    def drains(self) -> str:
        """What its stop waits for, as the log says it."""

    async def scheduler(self, loop: asyncio.AbstractEventLoop, telemetry: Telemetry) -> Scheduler:
        """What decides this process's batches."""

    async def backend(self, config: ModelConfig) -> Backend:
        """The client the model's served model holds for its predictor (started)."""

    def views(self, service: InferenceService) -> Views:
        """What describes the whole gateway, as this process reads it."""

    def server(self, settings: ServerConfig) -> ServerConfig:
        """The server settings its front ends bind with."""

    async def serving(self, service: InferenceService) -> None:
        """The front ends listen and the models are started: anything else to start before READY."""

    async def draining(self, grace_s: float) -> None:
        """The front ends take no more requests: anything to finish before the service closes."""

    def hurry(self) -> None:
        """A second stop signal: end every grace period now."""

    async def reloaded(self, config: GatewayConfig) -> None:
        """The service now runs `config` (a SIGHUP's reload)."""

    async def close(self) -> None:
        """The last step of a stop, after the service has closed (also after a failed start)."""


class SingleProcess:
    """One process decides and serves everything."""

    ready_note = ""
    drains = "finishing queued and in-flight requests"

    def __init__(self) -> None:
        self.lost = asyncio.Event()  # never set: only a signal stops it
        self.local: BatchScheduler | None = None

    async def scheduler(self, loop: asyncio.AbstractEventLoop, telemetry: Telemetry) -> Scheduler:
        self.local = BatchScheduler(loop, telemetry.batches)
        return self.local

    async def backend(self, config: ModelConfig) -> Backend:
        backend = create_backend(config.predictor)
        await backend.start()
        return backend

    def views(self, service: InferenceService) -> Views:
        assert self.local is not None, "views before the scheduler"
        return LocalViews(self.local, service.models, service.metrics)

    def server(self, settings: ServerConfig) -> ServerConfig:
        return settings

    async def serving(self, service: InferenceService) -> None:
        pass

    async def draining(self, grace_s: float) -> None:
        pass

    def hurry(self) -> None:
        pass

    async def reloaded(self, config: GatewayConfig) -> None:
        pass

    async def close(self) -> None:
        pass
