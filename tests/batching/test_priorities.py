"""Priority levels (Triton's semantics: `priority_levels`, 1 the highest, 0 the model's
`default_priority_level`): higher levels batch first, FIFO within a level, levels never
share a batch; under a deadline, lower levels queued do not delay a higher one's admission."""
from __future__ import annotations

import asyncio

import pytest

from gateway.batching.request import BatchRequest
from tests.batching.support import RecordingExecutor, rows, scheduler_with, stats_of, until_sent
from wire.errors import InvalidInput, Unavailable


async def test_higher_levels_batch_first_and_fifo_within_a_level():
    executor = RecordingExecutor(delay_s=0.005)
    scheduler = scheduler_with(executor, max_batch_size=1, priority_levels=3, default_priority_level=3)
    executor.release = asyncio.Event()
    blocker = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(100, 1))))
    await asyncio.sleep(0.01)  # at the predictor: everything else queues behind it
    order = [(1, 3), (2, 0), (3, 1), (4, 2), (5, 1), (6, 3)]  # (row, priority)
    waiting = [asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(row, 1), priority=priority)))
               for row, priority in order]
    await asyncio.sleep(0.01)
    executor.release.set()
    await asyncio.gather(blocker, *waiting)
    served = [int(batch[0, 0]) // 2 for batch in executor.batches[1:]]  # rows(n) starts at 2n
    assert served == [3, 5, 4, 1, 2, 6]  # level 1 (3, 5), level 2 (4), level 3 in arrival order (1, 2 by default, 6)


async def test_lower_levels_fill_only_the_room_higher_levels_leave():
    executor = RecordingExecutor(delay_s=0.01)
    scheduler = scheduler_with(executor, max_batch_size=4, priority_levels=2)
    executor.release = asyncio.Event()
    blocker = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(100, 1))))
    await asyncio.sleep(0.005)
    # Arrival order: rows 0..5 at levels 2, 1, 2, 1, 2, 1.
    waiting = [asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(i, 1), priority=2 - i % 2))) for i in range(6)]
    await asyncio.sleep(0.005)
    executor.release.set()
    await asyncio.gather(blocker, *waiting)
    served = [[int(row[0]) // 2 for row in batch] for batch in executor.batches[1:]]
    assert served == [[1, 3, 5, 0], [2, 4]]  # level 1 in arrival order, then the oldest of level 2


async def test_a_priority_beyond_the_levels_is_refused_naming_the_key():
    scheduler = scheduler_with(RecordingExecutor(), priority_levels=2)
    with pytest.raises(InvalidInput, match="batching.priority_levels"):
        await scheduler.submit(BatchRequest.arriving("m", rows(0, 1), priority=3))


async def test_without_levels_a_priority_changes_nothing():
    executor = RecordingExecutor()
    scheduler = scheduler_with(executor)
    result = await scheduler.submit(BatchRequest.arriving("m", rows(0, 1), priority=7))
    assert result.outputs[0].data.tolist() == [[0, 2]]


async def test_under_a_deadline_lower_levels_queued_do_not_refuse_a_higher_one():
    executor = RecordingExecutor(delay_s=0.02)
    scheduler = scheduler_with(executor, policy="deadline", slo_s=0.1, max_batch_size=2, max_hold_s=0,
                               priority_levels=2, default_priority_level=2)
    await asyncio.gather(*(scheduler.submit(BatchRequest.arriving("m", rows(i, 1))) for i in range(6)))  # learn the profile
    executor.release = asyncio.Event()
    # 12 low-level rows: about 6 batches of 20 ms ahead, past a 100 ms deadline (some are refused).
    backlog = [asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(i, 1), priority=2))) for i in range(12)]
    await asyncio.sleep(0)
    with pytest.raises(Unavailable):  # the low level's own backlog is already too long for it
        await scheduler.submit(BatchRequest.arriving("m", rows(50, 1), priority=2))
    urgent = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(60, 1), priority=1)))
    await asyncio.sleep(0)
    executor.release.set()
    assert (await urgent).outputs[0].data.tolist() == [[240, 242]]  # rows(60) is [120, 121], doubled
    await asyncio.gather(*backlog, return_exceptions=True)


async def test_a_full_queue_makes_room_for_a_higher_level_by_refusing_the_lowest_newest_first():
    from wire.errors import Overloaded

    executor = RecordingExecutor(delay_s=0.001)
    scheduler = scheduler_with(executor, max_batch_size=1, max_queue=4, priority_levels=3, default_priority_level=3)
    executor.release = asyncio.Event()
    blocker = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(100, 1))))
    await asyncio.sleep(0.005)
    queued = {name: asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(row, 1), priority=priority)))
              for name, row, priority in [("a2", 1, 2), ("b3", 2, 3), ("c3", 3, 3), ("d2", 4, 2)]}
    await asyncio.sleep(0)
    with pytest.raises(Overloaded):  # full, and nothing below level 3
        await scheduler.submit(BatchRequest.arriving("m", rows(5, 1), priority=3))
    urgent = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(6, 1), priority=1)))
    await asyncio.sleep(0)
    executor.release.set()
    await asyncio.gather(blocker, urgent)
    with pytest.raises(Overloaded, match="higher priority"):
        await queued["c3"]  # the lowest level, the newest of it
    for name in ("a2", "b3", "d2"):
        await queued[name]
    stats = stats_of(scheduler, "m")
    assert stats.refused == 2
    # Counted by level: the blocker and b3, c3 and the refused one are level 3.
    assert (stats.by_level[3].requests, stats.by_level[3].answered, stats.by_level[3].refused) == (4, 2, 2)
    assert (stats.by_level[2].requests, stats.by_level[2].answered) == (2, 2)
    assert (stats.by_level[1].requests, stats.by_level[1].answered) == (1, 1)


async def test_under_a_deadline_a_level_the_levels_above_leave_nothing_to_is_refused_at_once_not_left_to_expire():
    """Strict priorities starve a lower level while the higher levels keep the predictor
    busy; under `slo_ms` such a level is refused at admission (503, naming the rates), never
    queued to wait out its deadline; once the higher levels stop, it is admitted again."""
    from wire.errors import DeadlineExceeded, Overloaded

    executor = RecordingExecutor(delay_s=0.02)
    scheduler = scheduler_with(executor, policy="deadline", slo_s=0.2, max_batch_size=4, max_hold_s=0,
                               priority_levels=2, default_priority_level=2)
    stop = asyncio.Event()

    async def urgent_client(client: int) -> None:  # closed loop at level 1: 8 clients, batches of 4
        while not stop.is_set():
            try:
                await scheduler.submit(BatchRequest.arriving("m", rows(client, 1), priority=1))
            except (Unavailable, Overloaded, DeadlineExceeded):
                await asyncio.sleep(0.005)

    urgent = [asyncio.ensure_future(urgent_client(i)) for i in range(8)]
    await asyncio.sleep(0.5)  # the profile and the level's rate are learned
    outcomes = []
    for i in range(20):
        try:
            await scheduler.submit(BatchRequest.arriving("m", rows(1000 + i, 1), priority=2))
            outcomes.append("answered")
        except Unavailable:
            outcomes.append("refused")
        except DeadlineExceeded:
            outcomes.append("expired")
        await asyncio.sleep(0.03)
    stop.set()
    await asyncio.gather(*urgent)
    low_rows_sent = sum(int((batch[:, 0] >= 2000).sum()) for batch in executor.batches)  # rows(1000) starts at 2000
    assert outcomes.count("refused") >= 15 and "expired" not in outcomes, outcomes
    assert low_rows_sent == outcomes.count("answered")  # a refused request never reached the predictor
    counts = stats_of(scheduler, "m").by_level[2]
    assert counts.expired == counts.dropped == 0
    for _ in range(100):  # the higher level is gone: within a few seconds its rate has decayed
        try:
            await scheduler.submit(BatchRequest.arriving("m", rows(2000, 1), priority=2))
            break
        except Unavailable:
            await asyncio.sleep(0.05)
    else:
        raise AssertionError("level 2 was still refused 5 s after level 1 stopped")


@pytest.mark.parametrize(("levels", "share", "short_leaves_in"), [
    (2, 8, 3),    # the long list's first 8 rows (two batches) at its level, the rest one lower: then the short one
    (0, 8, 11),   # no levels: FIFO, behind the whole list (ten full batches)
    (2, 0, 11),   # levels, but no share: FIFO within the level, as before
])
async def test_a_long_requests_rows_beyond_its_share_wait_a_level_lower_than_a_short_request_behind_it(
        levels, share, short_leaves_in):
    """A 1-text client waited up to 477 ms behind one client's 4,096-text list of its own
    level: with levels, a request's parts that begin past `long_request_rows` of its rows
    wait a level lower (from the lowest level, behind it), so a short request queued after
    the list leaves as soon as the list's share has; the list still fills what room is left."""
    executor = RecordingExecutor(delay_s=0.001)
    scheduler = scheduler_with(executor, max_batch_size=4, priority_levels=levels, default_priority_level=levels,
                               long_request_rows=share)  # every request at the lowest level, as the config reads it
    executor.release = asyncio.Event()
    blocker = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(500, 1))))
    await until_sent(executor)  # at the predictor: everything else queues behind it
    long = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(0, 40))))  # ten parts of 4
    cancelled = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(200, 40))))
    await asyncio.sleep(0)
    short = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(100, 1))))
    await asyncio.sleep(0)
    cancelled.cancel()  # a long request gone before it was sent: its rows leave every count
    executor.release.set()
    assert (await long).outputs[0].data.tolist() == (rows(0, 40)[0].data * 2).tolist()
    assert (await short).outputs[0].data.tolist() == [[400, 402]]
    await blocker
    batches = [[int(row[0]) // 2 for row in batch] for batch in executor.batches[1:]]
    assert batches.index([100]) + 1 == short_leaves_in, batches
    assert sum(len(batch) for batch in batches) == 41  # the cancelled request never reached the predictor
    backlog = scheduler._queues["m"].backlog
    assert backlog.queued_rows == 0 and set(backlog.rows_by_level.values()) <= {0}
    await scheduler.close()
