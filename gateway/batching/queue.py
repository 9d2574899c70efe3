"""ModelQueue: one model's queue, its executor slots, and the lifecycle of its requests:
arrival, deadlines, cancellation, shipping batches and answering their requests,
abandoning on shutdown. What each of those means is the package's (`gateway.batching`,
Semantics); who may join is `admission`'s, what a row is the layout's (`layouts`), when to
ship the policy's (`policies`), and every event is told to `stats.ModelStats`: the queue
counts nothing itself.

All of it runs on the scheduler's event loop; nothing here is thread-safe. This module
must not know HTTP, gRPC or predictor protocols, nor any policy by name.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable

from gateway.batching import admission
from gateway.batching.backlog import Backlog
from gateway.batching.config import BatchingConfig
from gateway.batching.executor import Executor, Replicas, execute, one_replica
from gateway.batching.fairness import FairShare
from gateway.batching.instruments import DecayingRate
from gateway.batching.layouts import layout_for
from gateway.batching.observer import NO_OBSERVER, BatchObserver, log_batch
from gateway.batching.policies import departure, make_policy
from gateway.batching.request import BatchRequest, BatchResult, Part, QueuedRequest, answer_parts
from gateway.batching.slots import Slots
from gateway.batching.stats import ModelStats
from gateway.batching.tenant_quotas import Tenants
from gateway.batching.wakeups import Wakeups
from wire.errors import DeadlineExceeded, GatewayError, Unavailable, format_ms

log = logging.getLogger("gateway.batching.scheduler")  # the logger name operators already filter on


class ModelQueue:
    def __init__(self, name: str, executor: Executor, config: BatchingConfig, loop: asyncio.AbstractEventLoop,
                 next_batch_id: Callable[[], str], observer: BatchObserver = NO_OBSERVER, form: str = "",
                 replicas: Replicas = one_replica, tenants: Tenants | None = None) -> None:
        self.name = name
        self.executor = executor
        self.config = config
        self.policy = make_policy(config)
        self.layout = layout_for(config)  # what a row is: how requests are cut, merged and answered
        self.backlog = Backlog()  # what waits: parts in arrival order, and their rows by level and tenant
        self.tenants = tenants if tenants is not None else Tenants()  # the scheduler's: weights, levels, usage
        self.fair = FairShare(self.tenants.weight)  # this queue's round robins across tenants
        self.wakeups = Wakeups(loop, self.pump)  # the pumps due at the pass's end and at the policy's time
        self.stats = ModelStats(demand_rows=DecayingRate(config.demand_smoothing_s))
        self.form = form  # the batch form its requests come in (opaque here: see BatchScheduler.replace_model)
        self.abandoned = False
        self._loop = loop
        self._next_batch_id = next_batch_id
        self.observer = observer
        self.slots = Slots(config, replicas, loop)  # batches at the predictor, and how many may be

    @property
    def inflight(self) -> int:
        """Batches at the executor now."""
        return self.slots.taken

    @property
    def inflight_limit(self) -> int:
        """Batches this model may have at the executor now (see `slots`)."""
        return self.slots.limit

    def retune(self, executor: Executor, config: BatchingConfig, replicas: Replicas) -> None:
        """New settings for the same model. What the policy has learned is kept while the
        policy's name stays; a new name starts a fresh policy."""
        if config.policy == self.config.policy:
            self.policy.config = config
        else:
            self.policy = make_policy(config)
        self.slots.retune(config, replicas)
        self.executor, self.config = executor, config
        self.layout = layout_for(config)  # for new requests: those queued keep the layout that cut them
        self.stats.demand_rows.time_constant_s = config.demand_smoothing_s
        self.pump()

    @property
    def pending(self) -> deque[Part]:
        """Queued parts, oldest first (answered ones linger until skipped)."""
        return self.backlog.pending

    @property
    def queued_rows(self) -> int:
        """Rows of live requests not yet taken into a batch."""
        return self.backlog.queued_rows

    @property
    def busy(self) -> bool:
        """Anything queued (possibly already answered) or at the executor."""
        return bool(self.pending) or self.inflight > 0

    # -- arrival -----------------------------------------------------------------------

    def add(self, request: BatchRequest) -> asyncio.Future[BatchResult]:
        """Queue a request; its future is answered exactly once. Raises at once if the
        request is malformed, already past its deadline, or the queue is full."""
        inputs = request.inputs
        size = admission.rows(inputs)
        parameters = request.parameters  # part of what must agree for requests to share a batch
        layout = self.layout
        cut = layout.cut(inputs, request.lengths, tuple(sorted(parameters.items())) if parameters else ())
        tenant = request.tenant
        level = admission.level(self, request.priority, tenant)
        loop = self._loop
        now = loop.time()
        self.stats.arrived(level, size, now)
        deadline, budget = admission.judge(self, request, size, level, now)
        queued = QueuedRequest(cut.signatures[0], size, deadline, loop.create_future(), len(cut.pieces), layout,
                               request.client, now, parameters, level, cut.restore, tenant)
        self.stats.admitted(level, size, now)
        self.backlog.push(queued, admission.parts(self.config, queued, cut, now))  # each at its level
        queued.timer = loop.call_at(deadline, self._expire, queued, budget)
        queued.future.add_done_callback(lambda _f: self._finished(queued))
        self.policy.on_arrival(now)
        self._pump_after_pass()
        latest_start = self.policy.latest_start(self, size, deadline)
        if latest_start is not None:
            # Past it already (a probe admission let in): dropped unless this pass's pump,
            # due first, sends it. A timer due now could run first (uvloop's do).
            queued.start_timer = (loop.call_at(latest_start, self._drop_if_unsent, queued) if latest_start > now
                                  else loop.call_soon(self._drop_if_unsent, queued))
        return queued.future

    def _pump_after_pass(self) -> None:
        """Pump at the end of the loop's current pass (a full batch at once): see `wakeups`."""
        if self.queued_rows >= self.config.max_batch_size:
            self.pump()
        else:
            self.wakeups.after_pass()

    def _expire(self, request: QueuedRequest, timeout: float) -> None:
        if request.done:
            return
        self.stats.timed_out(request.level)
        where = "waiting for the predictor" if request.sent else "in the queue"
        request.fail(DeadlineExceeded(f"model '{self.name}': deadline of {timeout:g} s passed {where}"))

    def _finished(self, request: QueuedRequest) -> None:
        """Runs once per request however it ends: result, error, expiry or cancellation."""
        if request.timer is not None:
            request.timer.cancel()
        if request.start_timer is not None:
            request.start_timer.cancel()
        future = request.future
        succeeded = not future.cancelled() and future.exception() is None
        now = self._loop.time()
        self.stats.finished(request.level, succeeded, now - request.arrived)
        if succeeded:
            self.slots.answered(request.arrived, now)
        if request.queued_rows:
            self.backlog.unqueue(request)  # its queued parts are skipped lazily

    # -- shipping ----------------------------------------------------------------------

    def pump(self) -> None:
        """Ship every batch the policy allows into the free executor slots."""
        while (batch := self._next_batch()) is not None:
            self.slots.run(self._run_batches(*batch))

    def _next_batch(self) -> tuple[list[Part], str] | None:
        """The batch to ship into a free slot now, its slot taken; None when no slot is
        free, no live part waits, or the policy holds (its wake-up then set)."""
        slots = self.slots
        if slots.taken >= slots.limit:
            return None
        now = self._loop.time()
        if self.policy.drops_doomed:
            self._drop_doomed(now)
        if not self.backlog.skip_answered():
            return None
        until = self.policy.wait_until(self, now)
        if until is not None:
            self.wakeups.at(until)
            return None
        batch = self._take_batch(now)
        self.wakeups.woken = False  # only the first batch of a wake-up left because of it
        slots.take(self.queued_rows > 0)
        return batch

    def _take_batch(self, now: float) -> tuple[list[Part], str]:
        """The next batch's parts, and why it leaves now (a departure reason)."""
        # Never below the oldest part's size: the oldest always leaves (a part that could
        # not make its deadline even alone was dropped before this).
        leader = self.leader()
        assert leader is not None  # pump ships only when a live part waits
        policy_limit = self.policy.batch_limit(self, now)
        limit = max(policy_limit, leader.size)
        parts = leader.request.layout.take(self.pending, limit, leader, bool(self.config.priority_levels),
                                           self.fair if self.tenants.shared else None)
        for part in parts:
            part.request.sent = True
            self.backlog.took(part)
        return parts, departure(sum(part.size for part in parts), policy_limit, self.config.max_batch_size,
                                self.policy.timer_reason if self.wakeups.woken else None)

    def leader(self) -> Part | None:
        """The part the next batch forms around (see `backlog`); None if none is live."""
        return self.backlog.leader(bool(self.config.priority_levels))

    def rows_ahead(self, level: int) -> int:
        """Queued rows that a request of `level` waits behind: those of its level and higher."""
        return self.backlog.rows_ahead(level)

    def rows_per_second_above(self, level: int, now: float) -> float:
        """Rows per second recently admitted at levels higher than `level` (0 without levels)."""
        return sum(counts.admitted_rows.per_second(now) for above, counts in self.stats.by_level.items()
                   if above < level)

    def _drop_if_unsent(self, request: QueuedRequest) -> None:
        if request.done or request.sent:
            return
        left_s = request.deadline - self._loop.time()
        self._drop(request, f"it could no longer be answered within its deadline ({format_ms(max(left_s, 0))} "
                            f"were left)")

    def _drop(self, request: QueuedRequest, why: str) -> None:
        self.stats.dropped_unsent(request.level)
        request.fail(DeadlineExceeded(f"model '{self.name}': {why}; it was dropped before reaching the predictor"))

    def _drop_doomed(self, now: float) -> None:
        """Answer now, and never send, the queued requests the policy says cannot be
        answered in time: predictor time is not spent on answers nobody can use."""
        for part in self.pending:
            if part.live and not part.request.sent:
                why = self.policy.doomed(self, part, now)
                if why is not None:
                    self._drop(part.request, why)

    async def _run_batches(self, parts: list[Part], reason: str) -> None:
        """Run a batch and then, in the same task, the next batch its freed slot takes: a
        task of its own would start that call a loop turn later, after every client this
        batch woke, and at saturation that turn is the slot left idle."""
        batch: tuple[list[Part], str] | None = (parts, reason)
        while batch is not None:
            batch = await self._run_batch(*batch)

    async def _run_batch(self, parts: list[Part], reason: str) -> tuple[list[Part], str] | None:
        """Run one batch and answer its parts; returns the next batch, taken for its slot."""
        batch_id = self._next_batch_id()
        departed_unix_ns = time.time_ns()
        rows = sum(part.size for part in parts)
        layout = parts[0].request.layout  # parts share a signature, so a layout
        elements = layout.elements(parts)
        requests = list({id(part.request): part.request for part in parts}.values())
        observation = self.observer.batch_left(self.name, batch_id, [r.client for r in requests], rows, reason,
                                               *(elements or (0, 0)))
        started = self._loop.time()
        self.stats.batch_left(rows, reason, [started - part.enqueued_at for part in parts], elements)
        for part in parts:
            if part.request.tenant:
                self.tenants.usage.queued_for(part.request.tenant, started - part.enqueued_at)
        try:
            outcomes = await execute(self.executor, parts, batch_id, self.name, self.stats, layout, observation)
        except asyncio.CancelledError:
            for part in parts:
                part.request.fail(Unavailable("the gateway is shutting down"))
            observation.ended(len(requests))
            raise
        finally:
            now = self._loop.time()
            self.slots.given_back(now, rows)
            self.policy.on_delivery(now, len(requests), now - started)
        # Nothing awaits from here to the return: this batch's clients are answered (their
        # futures set: they wake in later turns), then the freed slot's next batch is taken,
        # and this task writes it before they wake.
        try:
            observation.ended(len({id(part.request) for group, outcome in outcomes
                                   if isinstance(outcome, GatewayError) for part in group}))
            answer_parts(outcomes, layout, batch_id, departed_unix_ns)
            if log.isEnabledFor(logging.DEBUG):
                log_batch(self.name, batch_id, rows, parts, outcomes)
        except BaseException:
            self.pump()  # the slot is free: a bug here must not leave the queue without batches
            raise
        follow = self._next_batch()
        self.pump()  # any other slot free now (a reload or a new replica may have added some)
        return follow

    # -- the end -------------------------------------------------------------------------

    async def abandon(self, error: GatewayError) -> None:
        """Answer everything still queued with `error`, cancel the batches in flight (their
        requests get Unavailable), and wait for them to wind up."""
        self.abandoned = True
        self.wakeups.cancel()
        while self.pending:
            self.pending.popleft().request.fail(error)
        await self.slots.cancel_all()
