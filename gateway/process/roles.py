"""Where a gateway process stands, and all that it changes: `Role`.

Every gateway process is the same assembly (`gateway.process.server.Gateway`: what decides
batches, the service, the front ends); its role says the rest:

* `SingleProcess` (here): its own `BatchScheduler` decides every batch, and its views
  (`gateway.observe.views.LocalViews`) describe the whole gateway.
* The batcher of `serve --workers N` (`gateway.process.workers.batcher_role.BatcherRole`): the same
  scheduler, also fed by its workers over their channel; it starts, restarts and signals
  them, and its /metrics adds their counts.
* A worker (`gateway.process.workers.worker_role.WorkerRole`): a stand-in scheduler that hands each
  request to the batcher, whose views it reads, and stand-in predictor clients that ask
  the batcher's what they know (a worker calls no predictor).

It knows the scheduler and views interfaces; no front end, no worker, no predictor. The
store that holds quotas across replicas (`[shared]`, `gateway.shared.store`) is started where the
scheduler decides: one process, or the batcher.
"""
from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from backends.base import Backend
from backends.registry import create_backend
from gateway.batching.scheduler import BatchScheduler, Scheduler
from gateway.config import GatewayConfig, ModelConfig, ServerConfig, SharedConfig
from gateway.observe.views import LocalViews, Views
from gateway.shared.store import RedisQuotas
from gateway.telemetry.spans import Telemetry

if TYPE_CHECKING:  # the service is built with a role's views; the role never builds a service
    from gateway.service import InferenceService


class Role(ABC):
    """What differs between the processes of a gateway (see the module). The hooks a role
    has nothing to do in are no-ops here, so each role states only what it changes."""

    ready_note = ""  # words added to the READY line (the batcher names how many workers it runs)
    drains = "finishing queued and in-flight requests"  # what its stop waits for, as the log says it

    def __init__(self) -> None:
        self._never = asyncio.Event()

    @property
    def lost(self) -> asyncio.Event:
        """Set when this process must stop on its own (a worker whose batcher has gone)."""
        return self._never

    @abstractmethod
    async def scheduler(self, loop: asyncio.AbstractEventLoop, telemetry: Telemetry) -> Scheduler:
        """What decides this process's batches."""

    @abstractmethod
    async def backend(self, config: ModelConfig) -> Backend:
        """The client the model's served model holds for its predictor (started)."""

    @abstractmethod
    def views(self, service: InferenceService) -> Views:
        """What describes the whole gateway, as this process reads it."""

    def server(self, settings: ServerConfig) -> ServerConfig:
        """The server settings its front ends bind with."""
        return settings

    async def serving(self, service: InferenceService) -> None:  # noqa: B027 - a hook most roles ignore
        """The front ends listen and the models are started: anything else to start before READY."""

    async def draining(self, grace_s: float) -> None:  # noqa: B027 - as above
        """The front ends take no more requests: anything to finish before the service closes."""

    def hurry(self) -> None:  # noqa: B027 - as above
        """A second stop signal: end every grace period now."""

    async def reloaded(self, config: GatewayConfig) -> None:  # noqa: B027 - as above
        """The service now runs `config` (a SIGHUP's reload)."""

    async def share(self, config: SharedConfig) -> None:  # noqa: B027 - as above
        """`[shared]`: hold the tenants' quotas with the other replicas (where this process's
        scheduler decides; a worker's is the batcher's)."""

    async def close(self) -> None:  # noqa: B027 - as above
        """The last step of a stop, after the service has closed (also after a failed start)."""


class SingleProcess(Role):
    """One process decides and serves everything."""

    def __init__(self) -> None:
        super().__init__()
        self.local: BatchScheduler | None = None
        self.store: RedisQuotas | None = None  # [shared]'s, when configured

    async def share(self, config: SharedConfig) -> None:
        if not config.enabled or self.local is None:
            return
        self.store = RedisQuotas(config, asyncio.get_running_loop())
        await self.store.start()
        self.local.tenants.share(self.store)

    async def close(self) -> None:
        if self.store is not None:
            store, self.store = self.store, None
            await store.close()

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
