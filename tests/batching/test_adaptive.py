"""Policy `adaptive`: a free slot ships at once; the learned hold lets closed-loop clients
stop alternating in two groups, and nothing else is ever held."""
from __future__ import annotations

import asyncio

import numpy as np

from gateway.batching.config import BatchingConfig
from gateway.batching.scheduler import BatchScheduler
from tests.batching.support import RecordingExecutor, rows, scheduler_with
from wire.tensors import Tensor


def one_row(value: float) -> list[Tensor]:
    return [Tensor("INPUT0", "FP32", np.full((1, 1), value, np.float32))]


async def run_closed_loop(clients: int, call_s: float, think_s: float, rounds: int, **policy) -> tuple[list[int], int]:
    sizes: list[int] = []

    async def executor(inputs):
        sizes.append(len(inputs[0].data))
        await asyncio.sleep(call_s)
        return [Tensor("OUTPUT0", "FP32", inputs[0].data * 2)]

    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("m", executor, BatchingConfig(**policy))

    async def client(index: int):
        for round_ in range(rounds):
            result = await scheduler.submit("m", one_row(index * 1000 + round_))
            assert result.outputs[0].data[0, 0] == 2 * (index * 1000 + round_)
            await asyncio.sleep(think_s)  # the client's own turnaround before its next request

    await asyncio.gather(*(client(i) for i in range(clients)))
    return sizes, scheduler.stats("m").holds


async def test_closed_loop_clients_come_to_share_every_batch():
    sizes, holds = await run_closed_loop(5, call_s=0.006, think_s=0.001, rounds=60, max_hold_s=0.01)
    settled = sizes[len(sizes) // 2:]
    assert holds > 0
    assert np.mean(settled) >= 4.0, settled  # instead of alternating groups of 1 and 4


async def test_without_the_hold_the_clients_alternate():
    sizes, holds = await run_closed_loop(5, call_s=0.006, think_s=0.001, rounds=60, max_hold_s=0)
    assert holds == 0
    assert np.mean(sizes[len(sizes) // 2:]) < 4.0


async def test_a_lone_client_is_never_held():
    sizes, holds = await run_closed_loop(1, call_s=0.006, think_s=0.001, rounds=30, max_hold_s=0.01)
    assert holds == 0 and set(sizes) == {1}


async def test_a_free_predictor_is_never_waited_for():
    # With calls cheaper than the clients' return delay, holding cannot pay for itself.
    _, holds = await run_closed_loop(5, call_s=0.0, think_s=0.003, rounds=40, max_hold_s=0.01)
    assert holds == 0


async def test_clients_that_do_not_come_back_are_not_waited_for():
    # Sparse arrivals: answered clients never return within the hold limit.
    _, holds = await run_closed_loop(3, call_s=0.006, think_s=0.05, rounds=8, max_hold_s=0.01)
    assert holds == 0


async def test_a_lone_request_ships_at_once_under_adaptive():
    executor = RecordingExecutor(delay_s=0)
    scheduler = scheduler_with(executor, policy="adaptive", max_latency_s=5.0)
    result = await asyncio.wait_for(scheduler.submit("m", rows(0, 1)), 1.0)
    np.testing.assert_array_equal(result.outputs[0].data, rows(0, 1)[0].data * 2)
    assert len(executor.batches) == 1


async def test_requests_arriving_while_the_slot_is_busy_leave_together():
    executor = RecordingExecutor(delay_s=0.05)
    scheduler = scheduler_with(executor, max_batch_size=32)
    first = asyncio.ensure_future(scheduler.submit("m", rows(0, 1)))
    await asyncio.sleep(0.01)  # the first batch is now at the executor
    rest = [asyncio.ensure_future(scheduler.submit("m", rows(i, 1))) for i in range(1, 11)]
    results = await asyncio.gather(first, *rest)
    assert [len(b) for b in executor.batches] == [1, 10]
    assert len({r.batch_ids[0] for r in results[1:]}) == 1
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result.outputs[0].data, rows(i, 1)[0].data * 2)
