"""A worker's side of the batcher's channel: `RemoteScheduler` and the remote views.

A worker's service holds a `RemoteScheduler` where one process holds a `BatchScheduler`:
`submit` sends the request's tensors to the batcher and waits for its rows; a cancelled
wait (the client went) cancels it there. The models' batching settings are kept here for
what the worker reads of them; their queues, counts and learned profiles are the
batcher's alone, so `model_names` is empty here and every figure is read there, through
`BatcherClient.view`. When the batcher goes, every waiting request fails Unavailable and
`lost` is set: the worker stops (the supervisor is gone, or restarting everything).

It knows the channel and the scheduler's interface; no front end, no predictor.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

from gateway.batching.config import BatchingConfig
from gateway.batching.request import BatchRequest, BatchResult
from gateway.workers.channel import Channel, ChannelClosed, pack, unpack
from wire.errors import ModelNotFound, Unavailable
from wire.tracing import NO_CONTEXT

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
                for kind, message_id, *rest in await self.channel.receive():
                    if kind == "ask":
                        answer = self.answer.get(rest[0])
                        self.channel.send(("answer", message_id, answer() if answer is not None else None))
                        continue
                    waiting = self._waiting.pop(message_id, None)
                    if waiting is None or waiting.done():
                        continue  # cancelled meanwhile
                    if kind == "error":
                        waiting.set_exception(rest[0])
                    else:
                        waiting.set_result(rest[0])
        except ChannelClosed:
            log.error("the batcher has gone: this worker stops")
        finally:
            self.lost.set()
            for waiting in self._waiting.values():
                if not waiting.done():
                    waiting.set_exception(Unavailable("the gateway's batcher is gone; try again"))
            self._waiting.clear()

    def request(self, message: tuple[Any, ...]) -> tuple[int, asyncio.Future[Any]]:
        """Send `message` (its id inserted after its kind); the future of its answer."""
        if self.lost.is_set():
            raise Unavailable("the gateway's batcher is gone; try again")
        message_id = next(self._ids)
        waiting: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[message_id] = waiting
        self.channel.send((message[0], message_id, *message[1:]))
        return message_id, waiting

    async def view(self, name: str, *args: Any) -> Any:
        """A document of the whole gateway, from the batcher (see `batcher.Batcher.view`)."""
        _, waiting = self.request(("view", name, args))
        return await waiting

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
        self._configs: dict[str, BatchingConfig] = {}
        self._waiting = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def add_model(self, name: str, executor: Any, config: BatchingConfig) -> None:
        """Register (or re-tune) a model here: the batcher runs it (its own service adds it)."""
        self._configs[name] = config

    async def remove_model(self, name: str, grace_s: float) -> None:
        self._configs.pop(name, None)

    def model_names(self) -> list[str]:
        return []  # every figure of a model is the batcher's

    def batching_config(self, name: str) -> BatchingConfig:
        return self._configs[name]

    async def submit(self, request: BatchRequest) -> BatchResult:
        if request.model not in self._configs:
            raise ModelNotFound(f"model '{request.model}' is not served")
        # Plain tuples, not the dataclasses, and tensors packed (see channel.pack). Instants
        # do not cross processes: the request's age and its deadline's remaining budget do.
        now = time.monotonic()
        client = request.client
        message_id, waiting = self.batcher.request(
            ("submit", request.model, [pack(t) for t in request.inputs], now - request.arrived_s,
             None if request.deadline_s is None else request.deadline_s - now,
             (client.request_id, client.traceparent) if client is not NO_CONTEXT else None,
             dict(request.parameters) if request.parameters else None, request.priority, request.lengths))
        self._waiting += 1
        self._idle.clear()
        try:
            outputs, batch_ids = await waiting
            return BatchResult([unpack(output) for output in outputs], batch_ids)
        except asyncio.CancelledError:
            self.batcher.forget(message_id)
            if not self.batcher.lost.is_set():
                self.batcher.channel.send(("cancel", message_id))
            raise
        finally:
            self._waiting -= 1
            if not self._waiting:
                self._idle.set()

    async def close(self, grace_s: float) -> None:
        """Wait (at most `grace_s`) for this worker's requests at the batcher."""
        try:
            await asyncio.wait_for(self._idle.wait(), grace_s)
        except TimeoutError:
            log.warning("stopping with %d requests still at the batcher", self._waiting)

    def hurry(self) -> None:
        """The batcher answers what is left when it is told to hurry; nothing to do here."""

