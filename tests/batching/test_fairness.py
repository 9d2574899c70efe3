"""gateway/batching/fairness.py: a batch filled across the tenants queued at one level by
weighted deficit round robin; with one tenant, batches are taken exactly as before."""
from __future__ import annotations

import asyncio
from collections import Counter, deque
from dataclasses import dataclass

from gateway.batching.config import TenantPolicy
from gateway.batching.fairness import FairShare
from gateway.batching.merge import take_oldest_group
from gateway.batching.request import BatchRequest
from tests.batching.support import RecordingExecutor, rows, scheduler_with


@dataclass
class Queued:
    name: str
    tenant: str
    size: int = 1
    elements: int = 1
    signature: str = "a"
    live: bool = True
    level: int = 0
    padded: int = 1


def queue_of(*tenants_and_sizes: tuple[str, int], **fields) -> deque[Queued]:
    return deque(Queued(f"{tenant}{i}", tenant, size, size, **fields) for i, (tenant, size) in enumerate(tenants_and_sizes))


def equal_weights(_tenant: str) -> float:
    return 1.0


def test_one_tenant_is_taken_as_without_fairness():
    pending = queue_of(("a", 2), ("a", 3), ("a", 1))
    same = deque(pending)
    fair = FairShare(equal_weights)
    assert take_oldest_group(pending, 4, fair=fair) == take_oldest_group(same, 4)


def test_a_batch_is_shared_between_two_tenants_whatever_their_arrival_order():
    # Tenant a queued 8 single rows before b's 8: first come first served would give a all of it.
    pending = queue_of(*[("a", 1)] * 8, *[("b", 1)] * 8)
    taken = take_oldest_group(pending, 8, fair=FairShare(equal_weights))
    assert Counter(part.tenant for part in taken) == {"a": 4, "b": 4}
    assert [p.name for p in taken if p.tenant == "a"] == ["a0", "a1", "a2", "a3"]  # FIFO within a tenant
    assert len(pending) == 8


def test_weights_share_a_backlog_in_proportion_over_many_batches():
    weights = {"a": 3.0, "b": 1.0}
    fair = FairShare(weights.__getitem__)
    pending = queue_of(*[("a", 1)] * 400, *[("b", 1)] * 400)
    sent: Counter[str] = Counter()
    for _ in range(50):  # 50 batches of 4 rows: both stay backlogged throughout
        sent.update(part.tenant for part in take_oldest_group(pending, 4, fair=fair))
    assert sent == {"a": 150, "b": 50}


def test_shares_are_counted_in_cost_not_in_parts():
    # a sends parts of 4 rows, b of 1: over batches of 8, each gets about half the rows.
    fair = FairShare(equal_weights)
    pending = queue_of(*[("a", 4)] * 50, *[("b", 1)] * 200)
    sent: Counter[str] = Counter()
    for _ in range(20):
        for part in take_oldest_group(pending, 8, fair=fair):
            sent[part.tenant] += part.size
    assert sent == {"a": 80, "b": 80}


def test_the_next_batch_resumes_the_round_where_the_last_one_stopped():
    fair = FairShare(equal_weights)
    pending = queue_of(*[(t, 1) for _ in range(6) for t in "abc"])
    first = take_oldest_group(pending, 2, fair=fair)
    second = take_oldest_group(pending, 2, fair=fair)
    # Each tenant's quantum is one row: a, b, then c, a: nobody is skipped at a batch's edge.
    assert [p.tenant for p in first + second] == ["a", "b", "c", "a"]


def test_an_idle_tenant_banks_no_credit():
    fair = FairShare(equal_weights)
    pending = queue_of(*[("a", 1)] * 20)
    for _ in range(5):
        take_oldest_group(pending, 2, fair=fair)  # b has nothing queued all this while
    pending.extend(Queued(f"b{i}", "b") for i in range(20))
    taken = take_oldest_group(pending, 4, fair=fair)
    assert Counter(p.tenant for p in taken) == {"a": 2, "b": 2}


def test_levels_stay_strict_and_each_is_shared_fairly():
    pending = deque([Queued("low-a", "a", level=2), Queued("high-a", "a", level=1), Queued("high-b", "b", level=1),
                     Queued("high-a2", "a", level=1), Queued("low-b", "b", level=2)])
    taken = take_oldest_group(pending, 4, by_level=True, fair=FairShare(equal_weights))
    assert [p.name for p in taken][:3] in (["high-a", "high-b", "high-a2"], ["high-b", "high-a", "high-a2"])
    assert taken[3].level == 2


def test_a_tenant_whose_oldest_part_does_not_fit_sends_nothing_after_it():
    pending = deque([Queued("b0", "b", 2, 2), Queued("a0", "a", 2, 2), Queued("a1", "a", 1, 1)])
    taken = take_oldest_group(pending, 3, fair=FairShare(equal_weights))
    assert [p.name for p in taken] == ["b0"]  # a1 would fit, but never overtakes a0
    assert [p.name for p in pending] == ["a0", "a1"]


# -- through a queue --------------------------------------------------------------------------


async def test_two_backlogged_tenants_share_the_predictor_equally_whatever_their_client_count():
    """12 clients of one tenant against 2 of another, each sending 4 rows, closed loop."""
    executor = RecordingExecutor(delay_s=0.002)
    scheduler = scheduler_with(executor, max_batch_size=8, max_latency_s=0.0)
    scheduler.set_tenants([TenantPolicy("many"), TenantPolicy("few")])
    answered: Counter[str] = Counter()
    stop = asyncio.Event()

    async def client(tenant: str) -> None:
        while not stop.is_set():
            await scheduler.submit(BatchRequest.arriving("m", rows(0, 4), tenant=tenant))
            answered[tenant] += 4

    clients = [asyncio.ensure_future(client("many")) for _ in range(12)]
    clients += [asyncio.ensure_future(client("few")) for _ in range(2)]
    while sum(answered.values()) < 2000:
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.gather(*clients)
    share = answered["few"] / sum(answered.values())
    assert 0.45 <= share <= 0.55, answered


async def test_without_tenants_declared_a_request_of_a_name_batches_first_come_first_served():
    executor = RecordingExecutor(delay_s=0.002)
    scheduler = scheduler_with(executor, max_batch_size=4)
    executor.release = asyncio.Event()
    blocker = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(100, 1))))
    await asyncio.sleep(0.005)
    waiting = [asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(i, 1), tenant=t)))
               for i, t in enumerate("aaaabbbb")]
    await asyncio.sleep(0.005)
    executor.release.set()
    await asyncio.gather(blocker, *waiting)
    served = [[int(row[0]) // 2 for row in batch] for batch in executor.batches[1:]]
    assert served == [[0, 1, 2, 3], [4, 5, 6, 7]]
