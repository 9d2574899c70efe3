"""Running one batch at the executor: the call itself, and bisection of a rejected batch.

An executor is any async callable that takes the merged input tensors and returns output
tensors with one row per input row (a backend's `infer`, a test's stub).

Semantics
---------
* One call per batch: its inputs are what the parts' row layout makes of them (one
  numpy.concatenate per input; padded to the batch's length, for a model that pads: see
  `layouts`), and its answer is checked by that layout beside one row per input row.
* A call still running when every member's deadline has passed is given up for its
  members (the queue answers each at its deadline: a hung predictor costs a request at
  most its deadline) and the latency profile learns at once that it took at least that
  long. The call itself is not cancelled then: the predictor is still computing it, so
  its slot stays taken until the predictor answers (its real time is learned too), for as
  long again at most, and only then is the call cancelled. Freeing the slot at the
  deadline would send the next batch to a predictor still busy with the abandoned one: it
  would wait behind it, look slower than it is, overrun in turn, and teach the profile a
  predictor several times slower than it is.
* The time learned is the predictor's: from when the call was written to when its answer
  had arrived, as the backend's transport stamps them (`wire.tracing.CallClock`), not the
  turns of this loop around the call, which grow with the gateway's own load; the loop's
  time around the call stands in where a transport stamps nothing.
* An answer with the wrong number of rows is BadPredictorAnswer; any other unexpected
  exception is logged and answered as an internal error: no request is ever lost.
* One request never fails the others in its batch: if the predictor rejects a merged
  batch as bad input (PredictorRejected), or its model code raises on it (HandlerFailed:
  TorchServe's answer to any exception in a handler, an undecodable upload among them),
  the batch is bisected, in the same slot, until the requests it fails are alone; only
  they get the error.

What each call did (its time, a bisection, an overrun) is told to the model's
`stats.ModelStats`, which counts it and teaches the latency profile.

This module must not know queues, policies or slots; nor HTTP, gRPC or predictor
protocols. It answers no request itself: it returns each group's outcome.
"""
from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Protocol

from gateway.batching.layouts import RowLayout
from gateway.batching.observer import NO_OBSERVATION, BatchObservation
from gateway.batching.request import Part
from gateway.batching.stats import ModelStats
from wire.errors import BadPredictorAnswer, DeadlineExceeded, GatewayError, HandlerFailed, PredictorRejected
from wire.tensors import Tensor
from wire.tracing import BatchContext, current_batch

log = logging.getLogger("gateway.batching.scheduler")  # the logger name operators already filter on

Executor = Callable[[list[Tensor]], Awaitable[list[Tensor]]]


class Replicas(Protocol):
    """An executor's predictor replicas, as a queue's slots read them (a model's backend).
    Both are called before every batch: they must be cheap."""

    def in_rotation(self) -> int:
        """Replicas in rotation now: a queue's slots are per replica in rotation."""

    def batches_leaving(self) -> int:
        """Batches still at replicas that have left the rotation: counted apart, they hold
        no slot of the replicas in rotation (a hung one must not stall the model)."""


class OneReplica:
    """A single predictor (and a test stub): one replica, always in rotation."""

    def in_rotation(self) -> int:
        return 1

    def batches_leaving(self) -> int:
        return 0


one_replica = OneReplica()

Outcome = list[Tensor] | GatewayError
"""A group's merged outputs, or the error to answer each of its requests with."""


async def execute(executor: Executor, parts: list[Part], batch_id: str, model: str, stats: ModelStats,
                  layout: RowLayout, observation: BatchObservation = NO_OBSERVATION,
                  ) -> list[tuple[list[Part], Outcome]]:
    """Run the live parts as one executor call. If the predictor rejects the merged batch
    as bad input, bisect it, so that only the offending request fails and the others
    still get their answers (log2(n) extra calls per bad request, in the same slot)."""
    live = [part for part in parts if part.live]
    if not live:
        return []
    outcome = await call(executor, live, batch_id, model, stats, layout, observation)
    if isinstance(outcome, (PredictorRejected, HandlerFailed)) and len({id(p.request) for p in live}) > 1:
        stats.bisected()
        middle = len(live) // 2
        return (await execute(executor, live[:middle], batch_id, model, stats, layout, observation)
                + await execute(executor, live[middle:], batch_id, model, stats, layout, observation))
    return [(live, outcome)]


async def call(executor: Executor, parts: list[Part], batch_id: str, model: str, stats: ModelStats,
               layout: RowLayout, observation: BatchObservation = NO_OBSERVATION) -> Outcome:
    """One executor call; every failure comes back as the GatewayError to answer."""
    loop = asyncio.get_running_loop()
    rows = sum(part.size for part in parts)
    token = None
    try:
        inputs = layout.batch_inputs(parts)
        started = loop.time()
        with observation.predictor_call(rows) as traceparent:
            # The backend reads the batch's ids and trace from here (see wire.tracing).
            batch = BatchContext(batch_id, tuple(part.request.client for part in parts),
                                 parts[0].request.parameters,  # the same for every part
                                 traceparent)
            token = current_batch.set(batch)
            outputs = await _within(executor(inputs), max(part.request.deadline for part in parts), started,
                                    rows, stats)
        if outputs is None:
            return DeadlineExceeded(f"model '{model}': the predictor did not answer within the deadline")
        # The predictor's time as its transport stamped it, where it can: loop.time() around
        # the call also counts this loop's turns before the call is written and after its
        # answer is read, which grow with the queue and would understate the capacity.
        stamped = batch.clock.seconds
        elapsed = stamped if stamped is not None else loop.time() - started
        stats.call_returned(elapsed)
        for tensor in outputs:
            if len(tensor.data) != rows:
                raise BadPredictorAnswer(
                    f"predictor returned {len(tensor.data)} rows of '{tensor.name}' for a batch of {rows}"
                )
        layout.check_outputs(outputs, parts)
        stats.call_answered(rows, elapsed, len({id(part.request) for part in parts}), loop.time())
        return outputs
    except GatewayError as exc:
        return exc
    except Exception:  # a bug or an unexpected predictor failure: never lose the requests
        log.exception("a batch for model %s failed", model)
        return GatewayError(f"model '{model}': internal error while running the batch")
    finally:
        if token is not None:
            current_batch.reset(token)


async def _within(running: Awaitable[list[Tensor]], deadline: float, started: float, rows: int,
                  stats: ModelStats) -> list[Tensor] | None:
    """The call's outputs, or None if its members' deadline passed first (see the module:
    the slot is held while the predictor may still be computing, as long again at most).

    The call is awaited in this task, not wrapped in one of its own: a task would start the
    call a loop turn later and hand its answer back a turn after it arrived, and at
    saturation, where each turn answers a whole batch's clients, those turns are time the
    predictor's slot sits idle (8-12 points of the ideal throughput, measured). The
    deadline is a timer beside the await instead."""
    loop = asyncio.get_running_loop()
    overran_at: float | None = None

    def overrun() -> None:
        # It would have taken longer, which the profile must learn now (else a predictor
        # that slowed down would be predicted fast until its calls returned).
        nonlocal overran_at
        overran_at = loop.time()
        stats.call_overran(rows, overran_at - started, overran_at)

    if deadline == math.inf:  # no deadline at all (see BatchRequest.deadline_within)
        return await running
    deadline = max(deadline, loop.time())
    timer = loop.call_at(deadline, overrun)
    # The members' deadline, then as long again while the predictor may still compute.
    scope = asyncio.timeout_at(deadline + (deadline - started))
    try:
        async with scope:
            outputs = await running
    except Exception as error:
        if overran_at is not None or (isinstance(error, TimeoutError) and scope.expired()):
            return None  # given up at the deadline, or failed after it: its members were answered then
        raise  # the call's own failure (a transport's timeout among them), before the deadline
    finally:
        timer.cancel()
    if overran_at is None:
        return outputs
    stats.call_answered_late(rows, loop.time() - started)
    return None
