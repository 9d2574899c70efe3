"""BatchScheduler: the batching package's public face: one queue per model, one event loop.

Semantics
---------
* Models are added (or re-tuned) and removed at run time; each has its own queue,
  executor and settings (see `queue` for what a queue guarantees), and may tell how many
  predictor replicas its executor has in rotation (`replicas`): its in-flight limit is per
  replica (batches still at replicas that left are counted apart), and its load signal
  (`load`) counts them.
* Removing a model stops its intake at once; what it has queued and in flight gets a grace
  period, the rest is answered Unavailable.
* Closing stops all intake (Unavailable); queued and in-flight work gets a grace period,
  which `hurry` ends early (a second SIGTERM); the rest is answered Unavailable.
* What a reader may know of a model is its `view` (`view.ModelView`): one consistent
  moment of its counters, queue, settings and load.
* Batch ids are unique per scheduler (a random prefix and a counter), for logs and traces.
* Tenants (`set_tenants`) are the scheduler's, across its models: a request of a tenant is
  held to its quotas before it is queued and counted in its usage (`tenants`), and its
  model's queue fills batches across the tenants queued (`fairness`). While tenants are
  declared, a request naming one that is not (a front door not yet reloaded) is refused.

Threading: all state lives on the scheduler's event loop. `submit` may be awaited from any
event loop in any thread and `submit_threadsafe` called from any thread; both hand the work
to the owner loop (`run_coroutine_threadsafe`) and never block. Everything else is called
on the owner loop.

This module knows nothing of HTTP, gRPC or predictor protocols: an executor is any async
callable that takes the merged input tensors and returns output tensors with one row per
input row.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import os
from collections.abc import Awaitable, Sequence
from typing import Protocol

from gateway.batching.config import BatchingConfig, TenantPolicy
from gateway.batching.executor import Executor, Replicas, one_replica
from gateway.batching.load import LoadSignal, replica_capacity
from gateway.batching.observer import NO_OBSERVER, BatchObserver
from gateway.batching.policies import names as policy_names
from gateway.batching.queue import ModelQueue
from gateway.batching.request import BatchRequest, BatchResult
from gateway.batching.tenant_quotas import Tenants
from gateway.batching.usage import TenantUsageSnapshot
from gateway.batching.view import ModelView
from wire.errors import CLIENT_CLOSED_REQUEST, GatewayError, ModelNotFound, Unauthenticated, Unavailable

__all__ = ["BatchRequest", "BatchResult", "BatchScheduler", "Executor", "Replicas", "Scheduler"]
# Tenants' usage copied per loop turn by `read_tenant_usage`: about 3.5 us each on the
# project's 2-core machine, so about 4 ms of the loop at a time.
USAGE_CHUNK = 1000

class Scheduler(Protocol):
    """What decides batches, as the service drives it: this process's `BatchScheduler`, or
    a worker's stand-in that hands each request to the batcher's (`gateway.process.workers.worker_role`).
    What a scheduler has counted is read through the service's views, not here."""

    def add_model(self, name: str, executor: Executor, config: BatchingConfig, form: str = "",
                  replicas: Replicas = one_replica) -> None:
        """Register (or re-tune) a model whose requests come in batch form `form`."""

    def replace_model(self, name: str, executor: Executor, config: BatchingConfig, grace_s: float,
                      form: str = "", replicas: Replicas = one_replica) -> None:
        """A new queue for new requests; what the old one holds finishes as it was admitted."""

    async def remove_model(self, name: str, grace_s: float) -> None:
        """Stop taking the model's requests; what it has gets `grace_s` to finish."""

    def set_tenants(self, policies: Sequence[TenantPolicy]) -> None:
        """The tenants declared from now on: their levels, weights and quotas."""

    async def submit(self, request: BatchRequest) -> BatchResult:
        """Queue a request and wait for its rows of its batch's result."""

    async def close(self, grace_s: float = 0.0) -> None:
        """Stop taking requests; what is left gets `grace_s`, then Unavailable."""

    def hurry(self) -> None:
        """End a `close` grace period now."""


class BatchScheduler:
    def __init__(self, loop: asyncio.AbstractEventLoop | None = None, observer: BatchObserver = NO_OBSERVER) -> None:
        self._loop = loop or asyncio.get_event_loop()
        self.observer = observer  # told of every batch (a tracer: see batching.observer)
        self._queues: dict[str, ModelQueue] = {}
        self._batch_counter = itertools.count(1)
        self._batch_prefix = os.urandom(4).hex()
        self._closed = False
        self._hurry = False
        self._retiring: dict[ModelQueue, asyncio.Task[None]] = {}  # replaced queues finishing what they hold
        self.tenants = Tenants()  # quotas and usage, for every model's queue

    # -- models ----------------------------------------------------------------------

    def add_model(self, name: str, executor: Executor, config: BatchingConfig, form: str = "",
                  replicas: Replicas = one_replica) -> None:
        """Register (or re-tune) a model. Call on the scheduler's loop. `form`: an opaque name
        of the batch form its requests come in (see `replace_model`); `replicas`: the
        executor's predictor replicas (how many are in rotation now, and the batches still
        at those that left)."""
        if config.policy not in policy_names():
            raise ValueError(f"unknown batching policy {config.policy!r}")
        existing = self._queues.get(name)
        if existing is not None:
            existing.retune(executor, config, replicas)
            return
        self._queues[name] = ModelQueue(name, executor, config, self._loop, self._next_batch_id, self.observer, form,
                                        replicas, self.tenants)

    def replace_model(self, name: str, executor: Executor, config: BatchingConfig, grace_s: float,
                      form: str = "", replicas: Replicas = one_replica) -> None:
        """A new queue for a model whose executor changed what it takes (a new predictor, a
        new batch form): new requests go to it, while what the old queue holds finishes on
        the old executor within `grace_s`, as the form it was admitted in. Its counts carry on.
        Until then, a request that arrives in the old queue's form (converted before the
        change was known: a worker's) joins the old queue."""
        old = self._queues.pop(name, None)
        self.add_model(name, executor, config, form, replicas)
        if old is not None:
            self._queues[name].stats = old.stats  # its counts carry on, at the new settings
            old.stats.demand_rows.time_constant_s = config.demand_smoothing_s
            retiring = self._loop.create_task(self._drain(old, grace_s, Unavailable(
                f"model '{name}' was replaced before this request could be sent")))
            self._retiring[old] = retiring
            retiring.add_done_callback(lambda _: self._retiring.pop(old, None))

    async def remove_model(self, name: str, grace_s: float) -> None:
        """Stop taking requests for a model; let what it has queued and in flight finish
        within `grace_s`, answer the rest Unavailable, and forget it."""
        queue = self._queues.pop(name, None)
        if queue is not None:
            await self._drain(queue, grace_s, Unavailable(f"model '{name}' was removed from the gateway"))

    async def _drain(self, queue: ModelQueue, grace_s: float, error: Unavailable) -> None:
        deadline = self._loop.time() + grace_s
        while queue.busy and self._loop.time() < deadline:
            await asyncio.sleep(0.01)
        await queue.abandon(error)

    def set_tenants(self, policies: Sequence[TenantPolicy]) -> None:
        """The tenants declared from now on (at start and on every reload; on the scheduler's
        loop): requests already queued keep their levels, buckets keep what they hold."""
        self.tenants.update(policies, self._loop.time())

    def tenant_usage(self) -> list[TenantUsageSnapshot]:
        """The usage now of every tenant that has sent something (see `tenants`), at once."""
        return self.tenants.snapshot()

    async def read_tenant_usage(self) -> list[TenantUsageSnapshot]:
        """`tenant_usage`, read USAGE_CHUNK tenants at a time with the loop let run between
        them: thousands of tenants sending never hold it for one reader (`/metrics`, the live
        page). Each tenant's figures are of one moment; two tenants' may be a chunk apart."""
        names = self.tenants.active()
        usage = self.tenants.snapshot(names[:USAGE_CHUNK])
        for start in range(USAGE_CHUNK, len(names), USAGE_CHUNK):
            await asyncio.sleep(0)
            usage += self.tenants.snapshot(names[start:start + USAGE_CHUNK])
        return usage

    def view(self, name: str) -> ModelView:
        """Everything a reader may know of the model's batching now (see `view`)."""
        queue = self._queues[name]
        stats = queue.stats.snapshot(self._loop.time())
        config = queue.config
        capacity = queue.slots.measured_capacity()  # saturated: what the fleet returned, else its cost's
        if capacity is None:
            capacity = replica_capacity(stats.profile, config.max_batch_size, queue.slots.per_replica, config.slo_s)
        # A request split into parts is one request; parts of answered requests wait to be skipped.
        requests = len({id(part.request) for part in queue.pending if part.live})
        return ModelView(name, config, stats, queue.queued_rows, requests, queue.inflight, queue.inflight_limit,
                         queue.slots.per_replica,
                         LoadSignal(capacity, stats.demand_rows_per_second, queue.slots.replicas.in_rotation()))

    def views(self) -> list[ModelView]:
        """Every model's view now, by name."""
        return [self.view(name) for name in sorted(self._queues)]

    def model_names(self) -> list[str]:
        return list(self._queues)

    def _next_batch_id(self) -> str:
        return f"{self._batch_prefix}-{next(self._batch_counter)}"

    # -- submitting --------------------------------------------------------------------

    async def submit(self, request: BatchRequest) -> BatchResult:
        """Queue a request and wait for its rows of the batch result. Safe from any loop.
        Requests merge only with requests of the same signature and `parameters`; with
        priority levels (Triton's `priority`: 1 is the highest, 0 the model's default) a
        batch is filled highest level first."""
        if asyncio.get_running_loop() is self._loop:
            # The queue's own future, awaited here: no frame of ours between (a queued request holds each).
            return await self._add(request)
        return await asyncio.wrap_future(self.submit_threadsafe(request))

    def enqueue(self, request: BatchRequest) -> asyncio.Future[BatchResult]:
        """`submit` without a coroutine, on the scheduler's own loop: the future of the
        request's rows (cancelling it withdraws the request). For a caller that answers
        from a callback (the workers' batcher), one task fewer per request."""
        return self._add(request)

    def submit_threadsafe(self, request: BatchRequest) -> concurrent.futures.Future[BatchResult]:
        """Queue a request from any thread; returns a concurrent future of its BatchResult."""
        return asyncio.run_coroutine_threadsafe(self._submit(request), self._loop)

    async def _submit(self, request: BatchRequest) -> BatchResult:
        return await self._add(request)

    def _add(self, request: BatchRequest) -> asyncio.Future[BatchResult]:
        """Queue the request in its model's queue; a tenant's request is first held to its
        quotas (given back if the queue refuses it) and counted in its usage."""
        queue = self._queue(request)
        tenant = request.tenant
        if not tenant:
            return queue.add(request)
        if self.tenants.policies and tenant not in self.tenants.policies:
            # Named by a front door older than these tenants (a worker reloads after the batcher):
            # refused, never served with no quota.
            raise Unauthenticated(f"tenant '{tenant}' is no longer declared: a reload removed or renamed it")
        tokens = queue.layout.tokens(request.rows, request.lengths)
        shared = self.tenants.take_quota(tenant, tokens, self._loop.time())
        if isinstance(shared, bool):
            return self._admitted(queue, request, tokens, shared)
        return self._once_admitted(shared, request, tokens)

    def _admitted(self, queue: ModelQueue, request: BatchRequest, tokens: int, shared: bool) -> asyncio.Future[BatchResult]:
        """Queue a tenant's request its quotas let in (`shared`: held by the shared store)."""
        tenants, tenant = self.tenants, request.tenant
        try:
            future = queue.add(request)
        except GatewayError as error:
            tenants.give_back(tenant, tokens, shared)
            tenants.usage.refused_by_queue(tenant, error)
            raise
        tenants.usage.let_in(tenant, request.rows, tokens)
        state = tenants.state(tenant, self._loop.time())  # what its client is told of its quotas

        def answered(done: asyncio.Future[BatchResult]) -> None:
            # Runs before the awaiting caller resumes (callbacks run in the order they were added).
            if state is not None and not done.cancelled() and done.exception() is None:
                done.result().quota = state
            tenants.answered(tenant, _status(done))

        future.add_done_callback(answered)
        return future

    def _once_admitted(self, admission: Awaitable[bool], request: BatchRequest,
                       tokens: int) -> asyncio.Future[BatchResult]:
        """The request's future when its quotas must first be asked of the shared store
        (bounded by the store's timeout): queued once they let it in, refused if not; if its
        client goes away meanwhile, what it took is given back."""
        outer: asyncio.Future[BatchResult] = self._loop.create_future()
        asking = asyncio.ensure_future(admission)

        def decided(done: asyncio.Future[bool]) -> None:
            if done.cancelled():
                if not outer.done():
                    outer.cancel()
                return
            error = done.exception()
            if error is not None:
                if not outer.done():
                    outer.set_exception(error)
                return
            shared = done.result()
            if outer.done():  # its client went away while the store was asked
                self.tenants.give_back(request.tenant, tokens, shared)
                return
            try:
                queue = self._queue(request)  # again: the gateway may have begun to close meanwhile
            except GatewayError as refused:
                self.tenants.give_back(request.tenant, tokens, shared)
                outer.set_exception(refused)
                return
            try:
                inner = self._admitted(queue, request, tokens, shared)  # gives back what it took if refused
            except GatewayError as refused:
                outer.set_exception(refused)
                return
            _chain(inner, outer)

        asking.add_done_callback(decided)
        return outer

    def _queue(self, request: BatchRequest) -> ModelQueue:
        """The queue of the request's model and form, if it takes requests now."""
        queue = self._queues.get(request.model)
        if queue is None:
            raise ModelNotFound.unknown(request.model)
        if self._closed:
            raise Unavailable("the gateway is shutting down")
        if request.form and queue.form and request.form != queue.form:
            replaced = next((old for old in self._retiring if old.name == request.model and old.form == request.form
                             and not old.abandoned), None)
            if replaced is None:
                raise Unavailable(f"model '{request.model}' changed its batch form as this request arrived; retry it")
            return replaced
        return queue

    # -- shutdown ------------------------------------------------------------------------

    async def close(self, grace_s: float = 0.0) -> None:
        """Stop accepting; give queued and in-flight work `grace_s` to finish (or until
        `hurry` is called), then answer whatever is left with Unavailable."""
        self._closed = True
        deadline = self._loop.time() + grace_s
        queues = [*self._queues.values(), *self._retiring]
        while not self._hurry and self._loop.time() < deadline and any(q.busy for q in queues):
            await asyncio.sleep(0.01)
        for queue in queues:
            await queue.abandon(Unavailable("the gateway is shutting down"))

    def hurry(self) -> None:
        """End a `close` grace period now (a second SIGTERM)."""
        self._hurry = True


def _chain(inner: asyncio.Future[BatchResult], outer: asyncio.Future[BatchResult]) -> None:
    """`outer` answered as `inner` is; `outer` cancelled (its client gone) cancels `inner`."""
    def copy(done: asyncio.Future[BatchResult]) -> None:
        if outer.done():
            return
        if done.cancelled():
            outer.cancel()
        elif done.exception() is not None:
            outer.set_exception(done.exception())  # type: ignore[arg-type]
        else:
            outer.set_result(done.result())

    inner.add_done_callback(copy)
    outer.add_done_callback(lambda done: inner.cancel() if done.cancelled() else None)


def _status(answered: asyncio.Future[BatchResult]) -> int:
    """The HTTP status of a request's outcome, as its tenant's usage counts it."""
    if answered.cancelled():
        return CLIENT_CLOSED_REQUEST  # its client went away
    error = answered.exception()
    if error is None:
        return 200
    return error.http_status if isinstance(error, GatewayError) else 500
