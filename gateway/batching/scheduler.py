"""The batch scheduler: per-model queues that merge requests into batches for one executor.

Semantics
---------
* A request is a list of tensors sharing a first (batch) dimension of `size` rows, plus a
  deadline. Requests merge only with requests of the same model and *signature* (input
  names, datatypes and non-batch dimensions), in arrival order.
* `max_batch_size` is a hard cap. A request larger than it is split into parts of at most
  that size; the parts travel in separate batches and the answer is reassembled in order.
* At most `max_inflight` batches per model are at the executor at once. When one returns,
  its slot is freed and the next batch is shipped *before* the finished batch's requests
  are woken, so the predictor never idles behind our own bookkeeping.
* Policy `adaptive` (default): a batch ships as soon as a slot is free. Light traffic pays
  no batching delay; under load, requests pile up while all slots are busy and leave
  together. One refinement, learned per model (see _ReturnTracker): when the clients just
  answered reliably come straight back and the predictor call is long next to their
  return delay, a free slot waits for them, at most `max_hold_s`, so they leave with the
  requests already queued instead of a call behind them. Policy `window` (KServe's batcher): a batch ships when it holds
  `max_batch_size` rows or its oldest request has waited `max_latency`.
* One request never fails the others in its batch: if the predictor rejects a merged
  batch as bad input, the batch is bisected (in the same slot) until the requests it
  rejects are alone; only they get the error.
* Every request has a deadline. A request whose deadline passes while queued is answered
  with DeadlineExceeded and never sent; one whose batch is at the executor is answered at
  its deadline too, and the executor call itself is abandoned once every member's deadline
  has passed, so a hung predictor costs each request at most its deadline.
* The queue is bounded (`max_queue` rows per model): beyond it a request is refused at once
  with Overloaded. A request whose caller goes away (its awaiting task is cancelled) is
  dropped from the queue and its rows are never sent.

Threading: all state lives on the scheduler's event loop. `submit` may be awaited from any
event loop in any thread and `submit_threadsafe` called from any thread; both hand the work
to the owner loop with `call_soon_threadsafe` and never block.

This module knows nothing of HTTP, gRPC or predictor protocols: an executor is any async
callable that takes the merged input tensors and returns output tensors with one row per
input row.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import os
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np

from gateway.batching.stats import ModelStats
from wire.errors import (
    BadPredictorAnswer,
    DeadlineExceeded,
    GatewayError,
    InvalidInput,
    ModelNotFound,
    Overloaded,
    PredictorRejected,
    Unavailable,
)
from wire.tensors import Tensor, signature_key
from wire.tracing import NO_CONTEXT, BatchContext, ClientContext, current_batch

log = logging.getLogger(__name__)

Executor = Callable[[list[Tensor]], Awaitable[list[Tensor]]]
POLICIES = ("adaptive", "window")


@dataclass(frozen=True, slots=True)
class BatchingPolicy:
    policy: str = "adaptive"
    max_batch_size: int = 32
    max_latency_s: float = 0.5
    max_inflight: int = 1
    max_queue: int = 4096
    timeout_s: float = 60.0
    max_hold_s: float = 0.01  # adaptive: the most a learned hold may delay a batch; 0 = never hold


@dataclass(slots=True)
class BatchResult:
    outputs: list[Tensor]
    batch_ids: list[str]  # one per batch the request travelled in (more than one if split)


class _Request:
    __slots__ = ("signature", "size", "deadline", "future", "timer", "queued_rows",
                 "parts_left", "part_outputs", "batch_ids", "sent", "client")

    def __init__(self, signature: tuple, size: int, deadline: float, future: asyncio.Future, parts: int,
                 client: ClientContext = NO_CONTEXT) -> None:
        self.client = client
        self.signature = signature
        self.size = size
        self.deadline = deadline
        self.future = future
        self.timer: asyncio.TimerHandle | None = None
        self.queued_rows = size
        self.parts_left = parts
        self.part_outputs: list[list[Tensor] | None] = [None] * parts
        self.batch_ids: list[str] = []
        self.sent = False


class _Part:
    """A whole request, or one max_batch_size slice of a larger one."""
    __slots__ = ("request", "index", "inputs", "size", "enqueued_at")

    def __init__(self, request: _Request, index: int, inputs: list[Tensor], size: int, now: float) -> None:
        self.request = request
        self.index = index
        self.inputs = inputs
        self.size = size
        self.enqueued_at = now


class _ReturnTracker:
    """Learns whether the clients of an answered batch come straight back, and how soon.

    Closed-loop clients (each sends its next request when answered) otherwise split into
    two groups that alternate at the predictor, each request waiting for two calls. After
    each delivery of n requests, the tracker counts the arrivals that follow within
    max_hold_s and smooths two figures: the share of answered clients that return, and
    their delay. `hold_until` then proposes holding a free slot until the expected
    returns are in, only when (a) most clients do return, (b) some have not yet, and
    (c) the hold, about 1.5 x the usual return delay, is shorter than a predictor call,
    so it costs the queued requests less than it spares the returning ones. Open-loop
    or sparse traffic never qualifies.
    """
    SMOOTHING = 0.2

    def __init__(self) -> None:
        self.delivered_at = float("-inf")
        self.delivered = 0        # requests in the last delivered batch
        self.returned = 0         # arrivals counted since then
        self.share = 0.0          # smoothed share of answered requests that came back
        self.delay: float | None = None        # smoothed return delay, seconds
        self.predictor_s: float | None = None  # smoothed predictor call time, seconds

    def on_arrival(self, now: float, max_hold_s: float) -> None:
        since = now - self.delivered_at
        if self.returned < self.delivered and since <= max_hold_s:
            self.returned += 1
            self.delay = since if self.delay is None else self.delay + self.SMOOTHING * (since - self.delay)

    def on_delivery(self, now: float, requests: int, predictor_s: float) -> None:
        if self.delivered:
            self.share += self.SMOOTHING * (self.returned / self.delivered - self.share)
        self.predictor_s = predictor_s if self.predictor_s is None else (
            self.predictor_s + self.SMOOTHING * (predictor_s - self.predictor_s))
        self.delivered_at, self.delivered, self.returned = now, requests, 0

    def hold_until(self, now: float, max_hold_s: float) -> float | None:
        if self.delay is None or self.predictor_s is None or self.share < 0.5:
            return None
        window = min(max_hold_s, 1.5 * self.delay + 0.0005)
        # Holding w delays the queued requests by w and spares the returning ones a whole
        # predictor call: worth it only while w is shorter than that call.
        if window >= self.predictor_s or self.returned >= round(self.delivered * self.share):
            return None
        until = self.delivered_at + window
        return until if now < until else None


class _ModelQueue:
    def __init__(self, name: str, executor: Executor, policy: BatchingPolicy) -> None:
        self.name = name
        self.executor = executor
        self.policy = policy
        self.pending: deque[_Part] = deque()
        self.queued_rows = 0
        self.inflight = 0
        self.wake: asyncio.TimerHandle | None = None
        self.tasks: set[asyncio.Task] = set()
        self.stats = ModelStats()
        self.returns = _ReturnTracker()


class BatchScheduler:
    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop or asyncio.get_event_loop()
        self._queues: dict[str, _ModelQueue] = {}
        self._batch_counter = itertools.count(1)
        self._batch_prefix = os.urandom(4).hex()
        self._closed = False
        self._hurry = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    # -- models ----------------------------------------------------------------------

    def add_model(self, name: str, executor: Executor, policy: BatchingPolicy) -> None:
        """Register (or re-tune) a model. Call on the scheduler's loop."""
        if policy.policy not in POLICIES:
            raise ValueError(f"unknown batching policy {policy.policy!r}")
        existing = self._queues.get(name)
        if existing is not None:
            existing.executor, existing.policy = executor, policy
            self._pump(existing)
            return
        self._queues[name] = _ModelQueue(name, executor, policy)

    async def remove_model(self, name: str, grace_s: float) -> None:
        """Stop taking requests for a model; let what it has queued and in flight finish
        within `grace_s`, answer the rest Unavailable, and forget it."""
        queue = self._queues.pop(name, None)
        if queue is None:
            return
        deadline = self._loop.time() + grace_s
        while (queue.pending or queue.inflight) and self._loop.time() < deadline:
            await asyncio.sleep(0.01)
        self._abandon(queue, Unavailable(f"model '{name}' was removed from the gateway"))
        if queue.tasks:
            await asyncio.gather(*queue.tasks, return_exceptions=True)

    def has_model(self, name: str) -> bool:
        return name in self._queues

    def stats(self, name: str) -> ModelStats:
        return self._queues[name].stats

    def queue_depth(self, name: str) -> int:
        return self._queues[name].queued_rows

    def inflight(self, name: str) -> int:
        return self._queues[name].inflight

    def model_names(self) -> list[str]:
        return list(self._queues)

    # -- submitting --------------------------------------------------------------------

    async def submit(self, model: str, inputs: list[Tensor], timeout_s: float | None = None,
                     client: ClientContext = NO_CONTEXT) -> BatchResult:
        """Queue a request and wait for its rows of the batch result. Safe from any loop."""
        if asyncio.get_running_loop() is self._loop:
            return await self._submit(model, inputs, timeout_s, client)
        return await asyncio.wrap_future(self.submit_threadsafe(model, inputs, timeout_s, client))

    def submit_threadsafe(self, model: str, inputs: list[Tensor], timeout_s: float | None = None,
                          client: ClientContext = NO_CONTEXT) -> concurrent.futures.Future:
        """Queue a request from any thread; returns a concurrent future of its BatchResult."""
        return asyncio.run_coroutine_threadsafe(self._submit(model, inputs, timeout_s, client), self._loop)

    async def _submit(self, model: str, inputs: list[Tensor], timeout_s: float | None,
                      client: ClientContext = NO_CONTEXT) -> BatchResult:
        queue = self._queues.get(model)
        if queue is None:
            raise ModelNotFound(f"model '{model}' is not served by this gateway")
        if self._closed:
            raise Unavailable("the gateway is shutting down")
        if not inputs:
            raise InvalidInput("the request has no inputs")
        size = len(inputs[0].data)
        if size == 0 or any(len(t.data) != size for t in inputs):
            raise InvalidInput("every input must have the same, non-zero, batch dimension")
        policy = queue.policy
        queue.stats.requests += 1
        if queue.queued_rows + size > policy.max_queue:
            queue.stats.refused += 1
            raise Overloaded(
                f"model '{model}' has {queue.queued_rows} instances queued (limit {policy.max_queue}); try again later"
            )
        loop = self._loop
        now = loop.time()
        timeout = policy.timeout_s if timeout_s is None else min(timeout_s, policy.timeout_s)
        step = policy.max_batch_size
        request = _Request(signature_key(inputs), size, now + timeout, loop.create_future(), -(-size // step),
                           client)
        if size <= step:
            queue.pending.append(_Part(request, 0, inputs, size, now))
        else:
            for index, start in enumerate(range(0, size, step)):
                part_inputs = [Tensor(t.name, t.datatype, t.data[start:start + step]) for t in inputs]
                queue.pending.append(_Part(request, index, part_inputs, min(step, size - start), now))
        queue.queued_rows += size
        request.timer = loop.call_at(request.deadline, self._expire, queue, request, timeout)
        request.future.add_done_callback(lambda _f: self._finished(queue, request))
        queue.returns.on_arrival(now, policy.max_hold_s)
        self._pump(queue)
        return await request.future

    # -- scheduling ------------------------------------------------------------------

    def _pump(self, queue: _ModelQueue) -> None:
        """Ship every batch the policy allows into the free executor slots."""
        policy = queue.policy
        while queue.inflight < policy.max_inflight:
            pending = queue.pending
            while pending and pending[0].request.future.done():
                pending.popleft()
            if not pending:
                return
            if policy.policy == "window" and not self._window_closed(queue):
                return
            if policy.policy == "adaptive" and policy.max_hold_s > 0 and queue.queued_rows < policy.max_batch_size:
                until = queue.returns.hold_until(self._loop.time(), min(policy.max_hold_s, policy.max_latency_s))
                if until is not None:
                    queue.stats.holds += 1
                    self._wake_at(queue, until)
                    return
            parts = self._take_batch(queue)
            queue.inflight += 1
            task = self._loop.create_task(self._run_batch(queue, parts))
            queue.tasks.add(task)
            task.add_done_callback(queue.tasks.discard)

    def _window_closed(self, queue: _ModelQueue) -> bool:
        """KServe semantics: full, or the oldest request has waited max_latency."""
        oldest = queue.pending[0]
        opens_until = oldest.enqueued_at + queue.policy.max_latency_s
        if self._loop.time() >= opens_until:
            return True
        signature, rows = oldest.request.signature, 0
        for part in queue.pending:
            if part.request.signature == signature and not part.request.future.done():
                rows += part.size
                if rows >= queue.policy.max_batch_size:
                    return True
        self._wake_at(queue, opens_until)
        return False

    def _wake_at(self, queue: _ModelQueue, when: float) -> None:
        """Pump the queue again at `when` (keeping an earlier wake-up if one is set)."""
        if queue.wake is None or queue.wake.when() > when:
            if queue.wake is not None:
                queue.wake.cancel()
            queue.wake = self._loop.call_at(when, self._on_wake, queue)

    def _on_wake(self, queue: _ModelQueue) -> None:
        queue.wake = None
        self._pump(queue)

    def _take_batch(self, queue: _ModelQueue) -> list[_Part]:
        """Take the oldest live request's signature group, oldest first, up to the cap."""
        pending, limit = queue.pending, queue.policy.max_batch_size
        signature = pending[0].request.signature
        taken: list[_Part] = []
        skipped: list[_Part] = []
        rows = 0
        while pending and rows < limit:
            part = pending.popleft()
            request = part.request
            if request.future.done():
                continue
            if request.signature != signature or rows + part.size > limit:
                skipped.append(part)
                continue
            taken.append(part)
            rows += part.size
            request.queued_rows -= part.size
            request.sent = True
            queue.queued_rows -= part.size
        pending.extendleft(reversed(skipped))
        return taken

    async def _run_batch(self, queue: _ModelQueue, parts: list[_Part]) -> None:
        batch_id = f"{self._batch_prefix}-{next(self._batch_counter)}"
        rows = sum(part.size for part in parts)
        queue.stats.batches += 1
        queue.stats.instances += rows
        queue.stats.recent_batch_sizes.append(rows)
        queue.stats.batch_size.observe(rows)
        now = self._loop.time()
        for part in parts:
            queue.stats.queue_wait_s.observe(now - part.enqueued_at)
        started = self._loop.time()
        try:
            outcomes = await self._execute(queue, parts, batch_id)
        except asyncio.CancelledError:
            _fail(parts, Unavailable("the gateway is shutting down"))
            raise
        finally:
            queue.inflight -= 1
            now = self._loop.time()
            queue.returns.on_delivery(now, len({id(part.request) for part in parts}), now - started)
            self._pump(queue)  # ship (or hold) the next batch before waking this one's clients
        for group, outcome in outcomes:
            if isinstance(outcome, GatewayError):
                _fail(group, outcome)
            else:
                self._deliver(group, outcome, batch_id)
        if log.isEnabledFor(logging.DEBUG):
            failed = [type(o).__name__ for _, o in outcomes if isinstance(o, GatewayError)]
            log.debug("batch %s model=%s rows=%d requests=%d outcome=%s", batch_id, queue.name, rows, len(parts),
                      ",".join(failed) or "ok",
                      extra={"batch_id": batch_id, "model": queue.name, "rows": rows,
                             "request_ids": [p.request.client.request_id for p in parts if p.request.client.request_id][:32],
                             "outcome": failed or "ok"})

    async def _execute(self, queue: _ModelQueue, parts: list[_Part],
                       batch_id: str) -> list[tuple[list[_Part], list[Tensor] | GatewayError]]:
        """Run the parts as one executor call. If the predictor rejects the merged batch as
        bad input, bisect it, so that only the offending request fails and the others
        still get their answers (log2(n) extra calls per bad request, in the same slot)."""
        live = [part for part in parts if not part.request.future.done()]
        if not live:
            return []
        outcome = await self._call(queue, live, batch_id)
        if isinstance(outcome, PredictorRejected) and len({id(p.request) for p in live}) > 1:
            queue.stats.isolations += 1
            middle = len(live) // 2
            return (await self._execute(queue, live[:middle], batch_id)
                    + await self._execute(queue, live[middle:], batch_id))
        return [(live, outcome)]

    async def _call(self, queue: _ModelQueue, parts: list[_Part], batch_id: str) -> list[Tensor] | GatewayError:
        """One executor call; every failure comes back as the GatewayError to answer."""
        rows = sum(part.size for part in parts)
        # The backend reads the batch's ids and trace from here (see wire.tracing).
        token = current_batch.set(BatchContext(batch_id, tuple(part.request.client for part in parts)))
        try:
            inputs = _concatenate([part.inputs for part in parts])
            started = self._loop.time()
            # timeout_at, not wait_for: no extra task, so the call starts in this loop turn.
            async with asyncio.timeout_at(max(part.request.deadline for part in parts)):
                outputs = await queue.executor(inputs)
            queue.stats.predictor_s.observe(self._loop.time() - started)
            for tensor in outputs:
                if len(tensor.data) != rows:
                    raise BadPredictorAnswer(
                        f"predictor returned {len(tensor.data)} rows of '{tensor.name}' for a batch of {rows}"
                    )
            return outputs
        except GatewayError as exc:
            return exc
        except TimeoutError:
            return DeadlineExceeded(f"model '{queue.name}': the predictor did not answer within the deadline")
        except Exception:  # a bug or an unexpected predictor failure: never lose the requests
            log.exception("a batch for model %s failed", queue.name)
            return GatewayError(f"model '{queue.name}': internal error while running the batch")
        finally:
            current_batch.reset(token)

    def _deliver(self, parts: list[_Part], outputs: list[Tensor], batch_id: str) -> None:
        offset = 0
        for part in parts:
            request, end = part.request, offset + part.size
            if not request.future.done():
                sliced = [Tensor(t.name, t.datatype, t.data[offset:end]) for t in outputs]
                request.part_outputs[part.index] = sliced
                request.batch_ids.append(batch_id)
                request.parts_left -= 1
                if request.parts_left == 0:
                    merged = request.part_outputs[0] if len(request.part_outputs) == 1 else _concatenate(request.part_outputs)
                    request.future.set_result(BatchResult(merged, request.batch_ids))
            offset = end

    # -- request lifecycle ----------------------------------------------------------------

    def _expire(self, queue: _ModelQueue, request: _Request, timeout: float) -> None:
        if request.future.done():
            return
        queue.stats.expired += 1
        where = "waiting for the predictor" if request.sent else "in the queue"
        request.future.set_exception(DeadlineExceeded(
            f"model '{queue.name}': deadline of {timeout:g} s passed {where}"
        ))

    def _finished(self, queue: _ModelQueue, request: _Request) -> None:
        """Runs once per request however it ends: result, error, expiry or cancellation."""
        if request.timer is not None:
            request.timer.cancel()
        if request.queued_rows:
            queue.queued_rows -= request.queued_rows  # its queued parts are skipped lazily
            request.queued_rows = 0

    # -- shutdown ------------------------------------------------------------------------

    async def close(self, grace_s: float = 0.0) -> None:
        """Stop accepting; give queued and in-flight work `grace_s` to finish (or until
        `hurry` is called), then answer whatever is left with Unavailable."""
        self._closed = True
        deadline = self._loop.time() + grace_s
        while (not self._hurry and self._loop.time() < deadline
               and any(q.pending or q.inflight for q in self._queues.values())):
            await asyncio.sleep(0.01)
        for queue in self._queues.values():
            self._abandon(queue, Unavailable("the gateway is shutting down"))
            if queue.tasks:
                await asyncio.gather(*queue.tasks, return_exceptions=True)

    @staticmethod
    def _abandon(queue: _ModelQueue, error: GatewayError) -> None:
        """Answer everything still queued with `error` and cancel batches in flight."""
        if queue.wake is not None:
            queue.wake.cancel()
        while queue.pending:
            future = queue.pending.popleft().request.future
            if not future.done():
                future.set_exception(error)
        for task in list(queue.tasks):
            task.cancel()

    def hurry(self) -> None:
        """End a `close` grace period now (a second SIGTERM)."""
        self._hurry = True


def _fail(parts: list[_Part], error: GatewayError) -> None:
    for part in parts:
        if not part.request.future.done():
            part.request.future.set_exception(error)


def _concatenate(groups: list[list[Tensor]]) -> list[Tensor]:
    """One numpy.concatenate per input across the groups (or the group itself if alone)."""
    if len(groups) == 1:
        return groups[0]
    return [
        Tensor(first.name, first.datatype, np.concatenate([group[i].data for group in groups]))
        for i, first in enumerate(groups[0])
    ]
