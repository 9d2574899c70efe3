"""The batcher's side of the workers' channel: their requests go to the one scheduler.

Messages from a worker (`channel`):
- `Submit`: a `BatchRequest`, queued as this process's own are. Answered with `Result`
  (its rows) or `Failure` (its `GatewayError`).
- `Cancel`: its client has gone; the request is dropped if still queued.
- `ViewQuestion`: a document that must describe the whole gateway (`BatcherViews`).
- `PredictorQuestion`: what this process's client of a model's predictor knows (its batch
  form, the signature and versions learned from it, its readiness, its Triton config),
  for a worker's `RemoteBackend`: workers build no predictor clients.
- `Reply`: the worker's answer to the batcher's own `Ask`.

When a worker's connection closes (it stopped, or died), its requests are cancelled:
their clients were connected to it, and are gone with it.

It knows the scheduler (the batcher's own), the views and the Prometheus text format; no
front end, no service.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Iterable
from typing import Any

from prometheus_client.utils import floatToGoString

from gateway.batching.request import BatchResult
from gateway.batching.scheduler import BatchScheduler
from gateway.observe.metrics import Family
from gateway.observe.views import LocalViews
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
from wire.errors import GatewayError, ModelNotFound

log = logging.getLogger(__name__)
ASK_TIMEOUT_S = 5.0  # a worker that does not answer a view's question in time is left out of it


class _Worker:
    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.requests: dict[int, asyncio.Future[BatchResult]] = {}
        self.questions: dict[int, asyncio.Future[Any]] = {}


class Batcher:
    """Serves the workers on a Unix socket at `path`: their requests into `scheduler`, their
    view questions to `views` (set once the service is built)."""

    def __init__(self, scheduler: BatchScheduler, path: str) -> None:
        self.scheduler = scheduler
        self.path = path
        self.views: BatcherViews | None = None
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

    def _handle(self, worker: _Worker, message: Message) -> None:
        if isinstance(message, Submit):
            self._submit(worker, message)
        elif isinstance(message, Cancel):
            request = worker.requests.pop(message.id, None)
            if request is not None:
                request.cancel()
        elif isinstance(message, ViewQuestion):
            self._spawn(self._answer_question(worker, message.id, message.name, self.view(message.name, message.args)))
        elif isinstance(message, PredictorQuestion):
            self._spawn(self._answer_question(worker, message.id, message.what,
                                              self.predictor(message.model, message.what)))
        elif isinstance(message, Reply):
            question = worker.questions.pop(message.id, None)
            if question is not None and not question.done():
                question.set_result(message.value)
        else:
            log.error("a worker sent an unexpected %s", type(message).__name__)

    def _spawn(self, coroutine: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _submit(self, worker: _Worker, message: Submit) -> None:
        # Answered from the future's callback: no task per request.
        try:
            future = self.scheduler.enqueue(message.request)
        except GatewayError as error:
            worker.channel.send(Failure(message.id, error))
            return
        worker.requests[message.id] = future
        model = message.request.model
        future.add_done_callback(lambda done: self._answer(worker, message.id, model, done))

    @staticmethod
    def _answer(worker: _Worker, request_id: int, model: str, future: asyncio.Future[BatchResult]) -> None:
        worker.requests.pop(request_id, None)
        if worker.channel.closed or future.cancelled():
            return  # withdrawn by its worker, or the worker has gone
        error = future.exception()
        if error is None:
            reply: Message = Result(request_id, future.result())
        elif isinstance(error, GatewayError):
            reply = Failure(request_id, error)
        else:  # a bug: the worker's client still gets an answer
            log.error("a request from a worker failed in the batcher", exc_info=error)
            reply = Failure(request_id, GatewayError(f"model '{model}': internal error in the batcher"))
        worker.channel.send(reply)

    async def _answer_question(self, worker: _Worker, question_id: int, name: str, answer: Awaitable[Any]) -> None:
        try:
            reply: Message = Reply(question_id, await answer)
        except GatewayError as error:
            reply = Failure(question_id, error)
        except Exception:
            log.exception("%s failed in the batcher", name)
            reply = Failure(question_id, GatewayError(f"internal error while reading {name}"))
        if not worker.channel.closed:
            worker.channel.send(reply)

    async def predictor(self, model: str, what: str) -> Any:
        """What this process's client of `model`'s predictor knows (see `worker_role.RemoteBackend`)."""
        assert self.views is not None, "a question before the service"
        served = self.views.local.models.get(model)
        if served is None:
            raise ModelNotFound.unknown(model)
        if what == "form":  # how its batches travel, and what its client can do
            return {"form": served.backend.batch_form.value, **served.backend.capabilities()}
        if what == "metadata":
            return None if served.signature is None else {**served.signature.describe(), "versions": served.versions}
        if what == "ready":
            return await served.ready()
        if what == "config":
            return await served.backend.model_config()
        raise GatewayError(f"unknown predictor question {what!r}")

    async def view(self, name: str, args: tuple[str, ...]) -> Any:
        """A document of the whole gateway, by its `Views` method's name."""
        assert self.views is not None, "a view before the service"
        if name == "statistics":
            return await self.views.statistics(*args)
        if name == "live":
            return await self.views.live()
        if name == "exposition":
            return await self.views.exposition()
        raise GatewayError(f"unknown view {name!r}")

    async def ask(self, worker: _Worker, name: str) -> Any:
        """A worker's own part of a view (its local counts)."""
        question_id = next(self._ids)
        question: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        worker.questions[question_id] = question
        worker.channel.send(Ask(question_id, name))
        try:
            return await asyncio.wait_for(question, ASK_TIMEOUT_S)
        finally:
            worker.questions.pop(question_id, None)

    async def workers_metrics(self) -> list[list[Family]]:
        """Every worker's own metric families (its request, connection and span counts); a
        worker that does not answer in time is left out."""
        parts = await asyncio.gather(*(self.ask(worker, "metrics") for worker in list(self._workers)),
                                     return_exceptions=True)
        return [part for part in parts if isinstance(part, list)]


class BatcherViews:
    """The batcher's views (`gateway.observe.views.Views`), for its own front ends and its workers':
    the scheduler's figures are its own; /metrics adds every worker's own counts."""

    def __init__(self, local: LocalViews, batcher: Batcher) -> None:
        self.local = local
        self.batcher = batcher

    async def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        return await self.local.statistics(name, version)

    async def exposition(self) -> bytes:
        # Copied on the loop (`Metrics.scrape`), then summed and written in a thread: however many
        # tenants send, the batcher's loop never holds the whole text. The workers have counts of
        # their own only (requests, connections, spans): the scheduler's families are the batcher's.
        scrape = await self.local.metrics.scrape()
        workers = await self.batcher.workers_metrics()
        return await asyncio.to_thread(lambda: merge_families([scrape.families(), *workers]) + scrape.scheduler_text())

    async def live(self) -> dict[str, Any]:
        return await self.local.live()


def merge_families(processes: Iterable[list[Family]]) -> bytes:
    """Several processes' metric families (`gateway.observe.metrics.Metrics.families`), as one Prometheus
    text exposition: samples with the same name and labels are summed (counts, histogram
    buckets, open connections), but `_created` timestamps, of which the earliest is kept.
    Plain data in: no text is parsed (the parser cost a scrape 3 ms of the batcher's CPU)."""
    kinds: dict[str, tuple[str, str]] = {}  # name -> (type, help), in first-seen order
    samples: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for process in processes:
        for name, kind, documentation, family_samples in process:
            kinds.setdefault(name, (kind, documentation))
            merged = samples.setdefault(name, {})
            for sample_name, labels, text in family_samples:
                key = (sample_name, tuple(sorted(labels.items())))
                value = float(text)
                if key not in merged:
                    merged[key] = value
                elif sample_name.endswith("_created"):
                    merged[key] = min(merged[key], value)
                else:
                    merged[key] += value
    lines = []
    for name, (kind, documentation) in kinds.items():
        exposed = f"{name}_total" if kind == "counter" else name  # a counter family's name lacks _total
        lines.append(f"# HELP {exposed} {_escape_help(documentation)}")
        lines.append(f"# TYPE {exposed} {kind}")
        for (sample_name, label_pairs), value in samples[name].items():
            label_text = ",".join(f'{key}="{_escape_label(label)}"' for key, label in label_pairs)
            lines.append(f"{sample_name}{{{label_text}}} {floatToGoString(value)}" if label_pairs else
                         f"{sample_name} {floatToGoString(value)}")
    return ("\n".join(lines) + "\n").encode()


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

