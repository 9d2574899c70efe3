"""Slots: how many batches of one model may be at its predictor now, and how many are.

Semantics
---------
* A replica in rotation has `max_inflight` slots, or, with "auto", as many as
  `inflight.InflightTuner` has learned for it; the model's limit is that many on every
  replica in rotation (on one while none is: the executor tries them all the same).
* A batch still at a replica that has left the rotation holds none of those slots: it is
  counted apart until it returns, so a hung replica removed from the list never stalls
  the model.
* The tuner learns from each batch's return and each answered request; new settings keep
  what it has learned while "auto" stays, with the new ceiling.
* Each batch runs in a task the slots hold by reference until it ends; abandoning the
  model cancels them all and waits for them to wind up.
* They measure the capacity while saturated (`load.SaturatedThroughput`): a batch that
  returns with every slot busy until then extends the spell; one taken that leaves no row
  waiting (the queue tells `take`), or a slot still free once the loop's turn in which it
  was given back is over (the queue takes the freed slot's next batch in that very turn
  when one waits), ends it.

Both the replica counts are read on every check of the limit, so they must be cheap (see
`executor.Replicas`). This module must not know requests, queues or policies: the queue
takes a slot before a batch leaves and gives it back when the batch returns.
"""
from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from gateway.batching.config import BatchingConfig
from gateway.batching.executor import Replicas
from gateway.batching.inflight import InflightTuner
from gateway.batching.load import SaturatedThroughput


class Slots:
    def __init__(self, config: BatchingConfig, replicas: Replicas, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.taken = 0  # batches at the executor
        self.replicas = replicas  # the executor's predictor replicas: how many in rotation now, ...
        self.max_inflight = config.max_inflight
        self.tuner = InflightTuner(config.inflight_ceiling, loop.time()) if config.auto_inflight else None
        self.tasks: set[asyncio.Task] = set()  # the batches' tasks, held by reference
        self.saturated = SaturatedThroughput(config.demand_smoothing_s)  # the capacity, measured
        self._idle_check: asyncio.Handle | None = None  # at the end of a turn a slot was given back in

    @property
    def per_replica(self) -> int:
        """Batches one predictor replica may have in flight: `max_inflight`, or its learned value."""
        return self.tuner.level if self.tuner is not None else self.max_inflight

    @property
    def limit(self) -> int:
        """Batches the model may have at the executor now (see the module)."""
        replicas = self.replicas
        return self.per_replica * max(replicas.in_rotation(), 1) + replicas.batches_leaving()

    def retune(self, config: BatchingConfig, replicas: Replicas) -> None:
        """New settings and replicas for the same model: what the tuner learned stays."""
        if not config.auto_inflight:
            self.tuner = None
        elif self.tuner is None:
            self.tuner = InflightTuner(config.inflight_ceiling, self._loop.time())
        else:
            self.tuner.set_ceiling(config.inflight_ceiling)
        self.max_inflight, self.replicas = config.max_inflight, replicas
        self.saturated.time_constant_s = config.demand_smoothing_s

    def take(self, backlogged: bool) -> None:
        """A batch took a slot; `backlogged`: rows still wait behind it (the queue did not
        empty into it)."""
        self.taken += 1
        if not backlogged:
            self.saturated.broke()

    def given_back(self, now: float, rows: int) -> None:
        """A batch of `rows` returned from the executor (answered, failed or given up) at `now`."""
        limit = self.limit
        if self.taken >= limit:
            self.saturated.returned(now, rows, limit)
        else:
            self.saturated.broke()
        self.taken -= 1
        if self.saturated.open and self._idle_check is None:
            self._idle_check = self._loop.call_soon(self._idled)
        if self.tuner is not None:
            self.tuner.on_batch_returned(now)

    def _idled(self) -> None:
        """The turn a slot was given back in is over: if it is free still, the slots idle."""
        self._idle_check = None
        if self.taken < self.limit:
            self.saturated.broke()

    def measured_capacity(self) -> float | None:
        """One replica's rows per second as the saturated slots returned them (see `load`);
        None while they are not saturated, or not for long enough."""
        fleet = self.saturated.per_second(self.limit)
        return None if fleet is None else fleet / max(self.replicas.in_rotation(), 1)

    def answered(self, arrived: float, now: float) -> None:
        """A request that arrived at `arrived` got its answer at `now` (what auto learns from)."""
        if self.tuner is not None:
            self.tuner.on_answered(arrived, now)

    def run(self, batches: Coroutine[Any, Any, None]) -> None:
        """Run a slot's batches in a task of their own, held until it ends."""
        task = self._loop.create_task(batches)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def cancel_all(self) -> None:
        """Cancel every batch's task and wait for them to wind up."""
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
