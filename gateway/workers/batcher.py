"""The batcher's side of the workers' channel: their requests go to the one scheduler.

Messages from a worker:
- `("submit", id, model, inputs, timeout_s, client, parameters, priority, lengths)`: a
  request in its model's batch form, as `BatchScheduler.submit` takes it. Answered
  `("result", id, BatchResult)` or `("error", id, GatewayError)`.
- `("cancel", id)`: its client has gone; the request is dropped if still queued.
- `("view", id, name, args)`: a document that must describe the whole gateway (`view`).
- `("answer", id, value)`: the worker's answer to the batcher's own question (`ask`).

When a worker's connection closes (it stopped, or died), its requests are cancelled:
their clients were connected to it, and are gone with it.

It knows the service (the batcher's, which holds the scheduler), the live snapshot and the
Prometheus text format; no front end.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Iterable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from gateway import live
from gateway.batching.request import NO_PARAMETERS, BatchRequest
from gateway.service import InferenceService
from gateway.workers.channel import Channel, ChannelClosed, Packed, pack, unpack
from wire.errors import GatewayError
from wire.tracing import NO_CONTEXT, ClientContext

log = logging.getLogger(__name__)
ASK_TIMEOUT_S = 5.0  # a worker that does not answer a view's question in time is left out of it


class _Worker:
    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.requests: dict[int, asyncio.Future[Any]] = {}
        self.questions: dict[int, asyncio.Future[Any]] = {}


class Batcher:
    """Serves the workers on a Unix socket at `path`, for `service` (the batcher's own)."""

    def __init__(self, service: InferenceService, path: str) -> None:
        self.service = service
        self.path = path
        self._workers: set[_Worker] = set()
        self._server: asyncio.AbstractServer | None = None
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._serve, self.path)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for worker in list(self._workers):
            worker.channel.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        worker = _Worker(Channel(reader, writer))
        self._workers.add(worker)
        try:
            while True:
                for message in await worker.channel.receive():
                    self._handle(worker, message)
        except ChannelClosed:
            pass
        finally:
            self._workers.discard(worker)
            for request in list(worker.requests.values()):
                request.cancel()  # its clients went with it
            for question in worker.questions.values():
                question.cancel()
            worker.channel.close()

    def _handle(self, worker: _Worker, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "submit":
            self._submit(worker, *message[1:])
        elif kind == "cancel":
            request = worker.requests.pop(message[1], None)
            if request is not None:
                request.cancel()
        elif kind == "view":
            self._spawn(self._view(worker, message[1], message[2], message[3]))
        elif kind == "answer":
            question = worker.questions.pop(message[1], None)
            if question is not None and not question.done():
                question.set_result(message[2])
        else:
            log.error("a worker sent an unknown message %r", kind)

    def _spawn(self, coroutine: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _submit(self, worker: _Worker, request_id: int, model: str, inputs: list[Packed],
                age_s: float, remaining_s: float | None, client: tuple[str, str] | None,
                parameters: dict[str, Any] | None, priority: int, lengths: Any) -> None:
        # The worker sends plain tuples (see remote.RemoteScheduler.submit), and gets them back.
        # Answered from the future's callback: no task per request.
        now = time.monotonic()
        try:
            future = self.service.scheduler.enqueue(BatchRequest(
                model, [unpack(tensor) for tensor in inputs], now - age_s,
                None if remaining_s is None else now + remaining_s, priority,
                ClientContext(*client) if client is not None else NO_CONTEXT, parameters or NO_PARAMETERS, lengths))
        except GatewayError as error:
            worker.channel.send(("error", request_id, error))
            return
        worker.requests[request_id] = future
        future.add_done_callback(lambda done: self._answer(worker, request_id, model, done))

    @staticmethod
    def _answer(worker: _Worker, request_id: int, model: str, future: asyncio.Future[Any]) -> None:
        worker.requests.pop(request_id, None)
        if worker.channel.closed or future.cancelled():
            return  # withdrawn by its worker, or the worker has gone
        error = future.exception()
        if error is None:
            result = future.result()
            reply: tuple[Any, ...] = ("result", request_id,
                                      ([pack(t) for t in result.outputs], result.batch_ids))
        elif isinstance(error, GatewayError):
            reply = ("error", request_id, error)
        else:  # a bug: the worker's client still gets an answer
            log.error("a request from a worker failed in the batcher", exc_info=error)
            reply = ("error", request_id, GatewayError(f"model '{model}': internal error in the batcher"))
        worker.channel.send(reply)

    async def _view(self, worker: _Worker, request_id: int, name: str, args: tuple[Any, ...]) -> None:
        try:
            reply: tuple[Any, ...] = ("view", request_id, await self.view(name, args))
        except GatewayError as error:
            reply = ("error", request_id, error)
        except Exception:
            log.exception("view %s failed in the batcher", name)
            reply = ("error", request_id, GatewayError(f"internal error while reading {name}"))
        if not worker.channel.closed:
            worker.channel.send(reply)

    async def view(self, name: str, args: tuple[Any, ...]) -> Any:
        """A document of the whole gateway: `statistics` (Triton's, for a model or all),
        `live` (the live page's snapshot) or `exposition` (/metrics: the scheduler's figures
        here, summed with every worker's request, connection and span counts)."""
        if name == "statistics":
            return self.service.model_statistics(*args)
        if name == "live":
            return live.snapshot(self.service.scheduler)
        if name == "exposition":
            parts = await asyncio.gather(*(self.ask(worker, "exposition") for worker in list(self._workers)),
                                         return_exceptions=True)
            return merge_expositions([self.service.metrics.exposition(),
                                      *(part for part in parts if isinstance(part, bytes))])
        raise GatewayError(f"unknown view {name!r}")

    async def ask(self, worker: _Worker, name: str) -> Any:
        """A worker's own part of a view (its local counts)."""
        question_id = next(self._ids)
        question: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        worker.questions[question_id] = question
        worker.channel.send(("ask", question_id, name))
        try:
            return await asyncio.wait_for(question, ASK_TIMEOUT_S)
        finally:
            worker.questions.pop(question_id, None)


def merge_expositions(texts: Iterable[bytes]) -> bytes:
    """Prometheus text expositions of the same families, as one: samples with the same name
    and labels are summed (counts, histogram buckets, open connections), but `_created`
    timestamps, of which the earliest is kept."""
    families: dict[str, tuple[str, str]] = {}  # name -> (type, help), in first-seen order
    samples: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text.decode()):
            families.setdefault(family.name, (family.type, family.documentation))
            merged = samples.setdefault(family.name, {})
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                if key not in merged:
                    merged[key] = sample.value
                elif sample.name.endswith("_created"):
                    merged[key] = min(merged[key], sample.value)
                else:
                    merged[key] += sample.value
    lines = []
    for name, (kind, documentation) in families.items():
        exposed = f"{name}_total" if kind == "counter" else name  # the parser strips _total from the family's name
        lines.append(f"# HELP {exposed} {_escape_help(documentation)}")
        lines.append(f"# TYPE {exposed} {kind}")
        for (sample_name, labels), value in samples[name].items():
            label_text = ",".join(f'{key}="{_escape_label(label)}"' for key, label in labels)
            lines.append(f"{sample_name}{{{label_text}}} {floatToGoString(value)}" if labels else
                         f"{sample_name} {floatToGoString(value)}")
    return ("\n".join(lines) + "\n").encode()


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

