"""A worker's side of the batcher's channel: its role, its scheduler and its views.

A worker's service holds a `RemoteScheduler` where one process holds a `BatchScheduler`
(both are a `gateway.batching.scheduler.Scheduler`): `submit` sends the `BatchRequest` to
the batcher and waits for its rows; a cancelled wait (the client went) cancels it there.
Its models' queues, counts and learned profiles are the batcher's alone: every figure is
read there, through `RemoteViews`. When the batcher goes, every waiting request fails
Unavailable and `lost` is set: the worker stops (the supervisor is gone, or restarting
everything).

It knows the channel, the scheduler's, the views' and the predictor client's interfaces
and the role interface; no front end, no predictor protocol, and not `gateway.process.server`.
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from backends.base import Backend, BatchForm
from gateway.batching.config import BatchingConfig, TenantPolicy
from gateway.batching.executor import Executor, Replicas, one_replica
from gateway.batching.request import BatchRequest, BatchResult
from gateway.batching.scheduler import Scheduler
from gateway.config import ModelConfig
from gateway.observe.views import Views
from gateway.process.roles import Role
from gateway.process.workers.channel import (
    Ask,
    Cancel,
    Channel,
    ChannelClosed,
    Failure,
    Message,
    PredictorQuestion,
    Reply,
    Result,
    Submit,
    ViewQuestion,
)
from gateway.telemetry.spans import Telemetry
from wire.errors import GatewayError, ModelNotFound, Unavailable
from wire.tensors import ModelSignature, Tensor

if TYPE_CHECKING:
    from gateway.service import InferenceService

log = logging.getLogger(__name__)


class BatcherClient:
    """A worker's connection to the batcher."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self.lost = asyncio.Event()
        self.answer: dict[str, Callable[[], Any]] = {}  # the batcher's questions: name -> what answers it
        self._reader: asyncio.Task[None] | None = None

    @classmethod
    async def connect(cls, path: str) -> BatcherClient:
        reader, writer = await asyncio.open_unix_connection(path)
        client = cls(Channel(reader, writer))
        client._reader = asyncio.get_running_loop().create_task(client._read())
        return client

    async def _read(self) -> None:
        try:
            while True:
                for message in await self.channel.receive():
                    self._handle(message)
        except ChannelClosed:
            log.error("the batcher has gone: this worker stops")
        finally:
            self.lost.set()
            for waiting in self._waiting.values():
                if not waiting.done():
                    waiting.set_exception(Unavailable("the gateway's batcher is gone; try again"))
            self._waiting.clear()

    def _handle(self, message: Message) -> None:
        if isinstance(message, Ask):
            answer = self.answer.get(message.name)
            self.channel.send(Reply(message.id, answer() if answer is not None else None))
            return
        waiting = self._waiting.pop(message.id, None)
        if waiting is None or waiting.done():
            return  # cancelled meanwhile
        if isinstance(message, Failure):
            waiting.set_exception(message.error)
        elif isinstance(message, Result):
            waiting.set_result(message.result)
        elif isinstance(message, Reply):
            waiting.set_result(message.value)
        else:
            log.error("the batcher sent an unexpected %s", type(message).__name__)

    def request(self, message: Callable[[int], Message]) -> tuple[int, asyncio.Future[Any]]:
        """Send `message(id)` with a fresh id; the future of its answer."""
        if self.lost.is_set():
            raise Unavailable("the gateway's batcher is gone; try again")
        message_id = next(self._ids)
        waiting: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[message_id] = waiting
        self.channel.send(message(message_id))
        return message_id, waiting

    def forget(self, message_id: int) -> None:
        self._waiting.pop(message_id, None)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        self.channel.close()


class RemoteScheduler:
    """What a worker's service holds in place of the scheduler (see the module)."""

    def __init__(self, batcher: BatcherClient) -> None:
        self.batcher = batcher
        self._models: set[str] = set()
        self._waiting: dict[int, asyncio.Future[Any]] = {}  # this worker's requests at the batcher
        self._idle = asyncio.Event()
        self._idle.set()
        self._hurry = asyncio.Event()

    def add_model(self, name: str, executor: Executor, config: BatchingConfig, form: str = "",
                  replicas: Replicas = one_replica) -> None:
        """Register (or re-tune) a model here: the batcher runs it (its own service adds it)."""
        self._models.add(name)

    def replace_model(self, name: str, executor: Executor, config: BatchingConfig, grace_s: float,
                      form: str = "", replicas: Replicas = one_replica) -> None:
        self._models.add(name)  # the batcher's own service replaces its queue

    async def remove_model(self, name: str, grace_s: float) -> None:
        self._models.discard(name)

    def set_tenants(self, policies: Sequence[TenantPolicy]) -> None:
        """Nothing here: the batcher's scheduler holds the tenants' quotas for the whole
        gateway (its own service sets them)."""

    async def submit(self, request: BatchRequest) -> BatchResult:
        if request.model not in self._models:
            raise ModelNotFound.unknown(request.model)
        message_id, waiting = self.batcher.request(lambda message_id: Submit(message_id, request))
        self._waiting[message_id] = waiting
        self._idle.clear()
        try:
            result: BatchResult = await waiting
            return result
        except asyncio.CancelledError:
            self._withdraw(message_id)
            raise
        finally:
            self._waiting.pop(message_id, None)
            if not self._waiting:
                self._idle.set()

    def _withdraw(self, message_id: int) -> None:
        self.batcher.forget(message_id)
        if not self.batcher.lost.is_set():
            with contextlib.suppress(ChannelClosed):  # gone meanwhile: nothing left there to cancel
                self.batcher.channel.send(Cancel(message_id))

    async def close(self, grace_s: float = 0.0) -> None:
        """Wait (at most `grace_s`, or until `hurry`) for this worker's requests at the
        batcher; answer what is left Unavailable, as one process answers what its grace
        could not finish, and withdraw it there."""
        idle, hurried = (asyncio.ensure_future(event.wait()) for event in (self._idle, self._hurry))
        try:
            await asyncio.wait((idle, hurried), timeout=grace_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            idle.cancel()
            hurried.cancel()
        if self._waiting:
            log.warning("stopping: %d requests still at the batcher are answered 503", len(self._waiting))
        for message_id, waiting in list(self._waiting.items()):
            self._withdraw(message_id)
            if not waiting.done():
                waiting.set_exception(Unavailable("the gateway is shutting down"))

    def hurry(self) -> None:
        """End a `close` grace period now (a second SIGTERM)."""
        self._hurry.set()


class RemoteBackend(Backend):
    """A worker's stand-in for a model's predictor client: the batcher's client sends every
    batch, so this one never does; what the served model learns of its predictor (its
    batch form and capabilities, signature and versions, readiness, Triton configuration)
    it asks of the batcher, whose client knows it. A worker builds no predictor client and
    polls no predictor."""

    def __init__(self, model: str, batcher: BatcherClient, batch_form: BatchForm,
                 capabilities: dict[str, bool] | None = None) -> None:
        self.model = model
        self.batcher = batcher
        self.batch_form = batch_form
        if capabilities is not None:
            self.take_capabilities(capabilities)

    @classmethod
    async def of(cls, model: str, batcher: BatcherClient) -> RemoteBackend:
        travels = await cls._ask(batcher, model, "form")
        return cls(model, batcher, BatchForm(travels["form"]), travels)

    @staticmethod
    async def _ask(batcher: BatcherClient, model: str, what: str) -> Any:
        _, waiting = batcher.request(lambda message_id: PredictorQuestion(message_id, model, what))
        return await waiting

    async def infer(self, inputs: list[Tensor]) -> list[Tensor]:
        raise Unavailable(f"model '{self.model}': a worker sends no batch; its batcher does")

    async def ready(self) -> bool:
        try:
            return bool(await self._ask(self.batcher, self.model, "ready"))
        except GatewayError:  # the batcher is gone, or has just removed the model
            return False

    async def metadata(self) -> tuple[ModelSignature, list[str]] | None:
        try:
            described = await self._ask(self.batcher, self.model, "metadata")
        except GatewayError:
            return None
        if described is None:
            return None
        return ModelSignature.described(described), described["versions"]

    async def model_config(self) -> dict[str, Any] | None:
        config: dict[str, Any] | None = await self._ask(self.batcher, self.model, "config")
        return config


class RemoteViews:
    """A worker's views: every document is the batcher's (see `batcher.BatcherViews`)."""

    def __init__(self, batcher: BatcherClient) -> None:
        self.batcher = batcher

    async def _ask(self, name: str, *args: str) -> Any:
        _, waiting = self.batcher.request(lambda message_id: ViewQuestion(message_id, name, args))
        return await waiting

    async def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        document: dict[str, Any] = await self._ask("statistics", name, version)
        return document

    async def exposition(self) -> bytes:
        text: bytes = await self._ask("exposition")
        return text

    async def live(self) -> dict[str, Any]:
        snapshot: dict[str, Any] = await self._ask("live")
        return snapshot


class WorkerRole(Role):
    """A worker of `serve --workers N` (see `gateway.process.roles`): the batcher at `path` decides
    its batches and describes the gateway; it stops when the batcher has gone. Its drain is
    its service's close, which waits for its requests at the batcher."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self.batcher: BatcherClient | None = None

    @property
    def lost(self) -> asyncio.Event:
        return self.batcher.lost if self.batcher is not None else super().lost

    async def scheduler(self, loop: asyncio.AbstractEventLoop, telemetry: Telemetry) -> Scheduler:
        self.batcher = await BatcherClient.connect(self.path)
        return RemoteScheduler(self.batcher)

    async def backend(self, config: ModelConfig) -> Backend:
        assert self.batcher is not None, "a backend before the scheduler"
        return await RemoteBackend.of(config.name, self.batcher)

    def views(self, service: InferenceService) -> Views:
        assert self.batcher is not None, "views before the scheduler"
        self.batcher.answer["metrics"] = service.metrics.families  # its own counts, for the batcher's sum
        return RemoteViews(self.batcher)

    async def close(self) -> None:
        if self.batcher is not None:
            self.batcher.close()
