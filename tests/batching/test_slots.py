"""Slots (gateway.batching.slots): how many batches of a model may be at its predictor,
per replica in rotation, with batches at leaving replicas counted apart; the tasks that
run them."""
from __future__ import annotations

import asyncio

import pytest

from gateway.batching.config import BatchingConfig
from gateway.batching.slots import Slots


class Fleet:
    """Replicas as a backend reports them: in rotation, and batches still at leaving ones."""

    def __init__(self, in_rotation: int, leaving: int = 0) -> None:
        self.rotation, self.leaving = in_rotation, leaving

    def in_rotation(self) -> int:
        return self.rotation

    def batches_leaving(self) -> int:
        return self.leaving


async def test_the_limit_is_max_inflight_on_every_replica_in_rotation():
    fleet = Fleet(3)
    slots = Slots(BatchingConfig(max_inflight=2), fleet, asyncio.get_running_loop())
    assert (slots.per_replica, slots.limit) == (2, 6)
    fleet.rotation = 1  # two replicas left the rotation: their slots go with them
    assert slots.limit == 2


async def test_with_no_replica_in_rotation_the_slots_of_one_remain():
    slots = Slots(BatchingConfig(max_inflight=2), Fleet(0), asyncio.get_running_loop())
    assert slots.limit == 2  # the executor tries them all the same


async def test_batches_at_leaving_replicas_hold_no_slot_of_those_in_rotation():
    fleet = Fleet(1, leaving=1)  # a hung replica, removed, still holds a batch
    slots = Slots(BatchingConfig(max_inflight=1), fleet, asyncio.get_running_loop())
    slots.taken = 1  # the hung batch is still counted as taken ...
    assert slots.taken < slots.limit  # ... yet the replica in rotation has its slot free


async def test_auto_starts_at_one_and_a_retune_keeps_what_it_learned():
    loop = asyncio.get_running_loop()
    auto = BatchingConfig(auto_inflight=True, inflight_ceiling=8)
    slots = Slots(auto, Fleet(1), loop)
    assert slots.per_replica == 1
    assert slots.tuner is not None
    slots.tuner.level = 3  # as if learned
    slots.retune(BatchingConfig(auto_inflight=True, inflight_ceiling=2), Fleet(2))
    assert (slots.per_replica, slots.limit) == (2, 4)  # kept, within the new ceiling
    slots.retune(BatchingConfig(max_inflight=5), Fleet(1))
    assert (slots.tuner, slots.per_replica) == (None, 5)


async def test_a_returned_batch_gives_its_slot_back():
    slots = Slots(BatchingConfig(max_inflight=1), Fleet(1), asyncio.get_running_loop())
    slots.taken = 1
    slots.given_back(asyncio.get_running_loop().time(), 4)
    assert slots.taken == 0


async def test_cancel_all_cancels_every_batch_task_and_waits_for_it_to_wind_up():
    slots = Slots(BatchingConfig(), Fleet(1), asyncio.get_running_loop())
    wound_up = []

    async def batch() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            wound_up.append(True)

    slots.run(batch())
    slots.run(batch())
    await asyncio.sleep(0)
    assert len(slots.tasks) == 2
    await slots.cancel_all()
    assert wound_up == [True, True]
    await asyncio.sleep(0)
    assert not slots.tasks  # a finished task is not held


@pytest.mark.parametrize("ceiling", [1, 4])
async def test_auto_never_exceeds_its_ceiling(ceiling: int):
    slots = Slots(BatchingConfig(auto_inflight=True, inflight_ceiling=ceiling), Fleet(1), asyncio.get_running_loop())
    assert slots.tuner is not None and slots.tuner.ceiling == ceiling
    assert 1 <= slots.per_replica <= ceiling
