"""gateway/batching/tenant_quotas.py, buckets.py and usage.py: quotas held at the scheduler
(token buckets, requests at once), a tenant's priority level, and its usage; plus the
queue's shedding by share."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

from gateway.batching.buckets import TokenBucket
from gateway.batching.config import MIN_REQUESTS_PER_SECOND, BatchingConfig, TenantPolicy, TextSpec
from gateway.batching.request import BatchRequest
from gateway.batching.scheduler import BatchScheduler
from gateway.batching.tenant_quotas import Tenants
from gateway.observe import metrics
from tests.batching.support import RecordingExecutor, rows, scheduler_with, until_sent
from wire.errors import CLIENT_CLOSED_REQUEST, Overloaded, PayloadTooLarge, RateLimited
from wire.tensors import Tensor


def test_a_bucket_holds_one_period_and_refills_at_its_rate():
    bucket = TokenBucket(capacity=10, rate=10, now=0.0)
    assert bucket.refill(5.0) == 10  # never more than a period's worth
    bucket.level = 0
    assert bucket.wait_s(5, 5.0) == pytest.approx(0.5)
    assert bucket.refill(5.2) == pytest.approx(2)


def test_requests_per_second_allows_a_burst_of_that_many_then_says_when_to_retry():
    tenants = Tenants()
    tenants.update([TenantPolicy("t", requests_per_second=3)], now=0.0)
    for _ in range(3):
        tenants.take_quota("t", 1, now=0.0)
    with pytest.raises(RateLimited, match="requests_per_second = 3") as refused:
        tenants.take_quota("t", 1, now=0.0)
    assert refused.value.retry_after_s == 1 and refused.value.http_headers == {
        "Retry-After": "1", "retry-after-ms": "334", "x-ratelimit-limit-requests": "3",
        "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1s"}
    tenants.take_quota("t", 1, now=0.34)  # a third of a second refills one request
    assert tenants.snapshot()[0].refusals == {"requests_per_second": 1}


def test_a_rate_below_one_a_second_admits_one_request_every_one_over_the_rate_and_says_how_long():
    """requests_per_second = 0.5 is one request every 2 s: a bucket of one request (never
    less), refilled at half a request a second. Before: a bucket of half a request, which
    never held one; every request was refused, each told to retry in 1 s."""
    tenants = Tenants()
    tenants.update([TenantPolicy("t", requests_per_second=0.5)], now=0.0)
    tenants.take_quota("t", 1, now=0.0)
    with pytest.raises(RateLimited, match=r"requests_per_second = 0.5\); try again in 2 s") as refused:
        tenants.take_quota("t", 1, now=0.5)
    assert refused.value.http_headers == {
        "Retry-After": "2", "retry-after-ms": "1500", "x-ratelimit-limit-requests": "1",
        "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1.5s"}
    with pytest.raises(RateLimited) as refused:
        tenants.take_quota("t", 1, now=1.5)
    assert refused.value.http_headers["retry-after-ms"] == "500"
    tenants.take_quota("t", 1, now=2.0)  # as the first refusal said: 1.5 s after it
    with pytest.raises(RateLimited):
        tenants.take_quota("t", 1, now=2.0)
    tenants.take_quota("t", 1, now=4.0)
    assert tenants.snapshot()[0].refusals == {"requests_per_second": 3}


def test_the_slowest_rate_the_config_takes_tells_a_retry_within_its_thousand_seconds():
    """The config's minimum (0.001) bounds the wait a 429 tells: 1,000 s. Before: a rate of
    1e-300 was taken and told clients to retry in a number of 301 digits."""
    tenants = Tenants()
    tenants.update([TenantPolicy("t", requests_per_second=MIN_REQUESTS_PER_SECOND)], now=0.0)
    tenants.take_quota("t", 1, now=0.0)
    with pytest.raises(RateLimited) as refused:
        tenants.take_quota("t", 1, now=0.0)
    assert refused.value.http_headers["Retry-After"] == "1000"
    assert RateLimited("over", 1e300).http_headers["Retry-After"] == "3600"  # any longer wait: an hour, said
    assert RateLimited("over", float("nan")).http_headers["retry-after-ms"] == "3600000"


def test_tokens_per_minute_counts_tokens_and_a_request_over_a_whole_minute_is_413():
    tenants = Tenants()
    tenants.update([TenantPolicy("t", tokens_per_minute=600)], now=0.0)
    tenants.take_quota("t", 500, now=0.0)
    with pytest.raises(RateLimited) as refused:
        tenants.take_quota("t", 200, now=0.0)  # 100 short: 10 s at 10 tokens a second
    assert refused.value.retry_after_s == 10
    with pytest.raises(PayloadTooLarge, match="tokens_per_minute = 600"):
        tenants.take_quota("t", 601, now=100.0)


def test_max_concurrent_counts_requests_until_answered():
    tenants = Tenants()
    tenants.update([TenantPolicy("t", max_concurrent=2)], now=0.0)
    tenants.take_quota("t", 1, 0.0)
    tenants.take_quota("t", 1, 0.0)
    with pytest.raises(RateLimited, match="max_concurrent"):
        tenants.take_quota("t", 1, 0.0)
    tenants.answered("t", 200)
    tenants.take_quota("t", 1, 0.0)


def test_a_reload_keeps_what_the_buckets_hold_and_new_tenants_start_full():
    tenants = Tenants()
    tenants.update([TenantPolicy("t", requests_per_second=2)], now=0.0)
    tenants.take_quota("t", 1, 0.0)
    tenants.take_quota("t", 1, 0.0)
    tenants.update([TenantPolicy("t", requests_per_second=5), TenantPolicy("new", requests_per_second=1)], now=0.0)
    with pytest.raises(RateLimited):
        tenants.take_quota("t", 1, 0.0)  # still empty: the reload gave nothing back
    tenants.take_quota("new", 1, 0.0)


def test_an_undeclared_tenant_has_no_quota():
    tenants = Tenants()
    tenants.update([TenantPolicy("t", requests_per_second=1)], now=0.0)
    for _ in range(5):
        tenants.take_quota("gone", 1, 0.0)


# -- at the scheduler -------------------------------------------------------------------------


async def test_a_request_over_its_quota_is_refused_before_it_is_queued_and_counted():
    executor = RecordingExecutor()
    scheduler = scheduler_with(executor)
    scheduler.set_tenants([TenantPolicy("t", requests_per_second=2)])
    for i in range(2):
        await scheduler.submit(BatchRequest.arriving("m", rows(i, 1), tenant="t"))
    with pytest.raises(RateLimited):
        await scheduler.submit(BatchRequest.arriving("m", rows(9, 1), tenant="t"))
    assert len(executor.batches) == 2
    (usage,) = scheduler.tenant_usage()
    assert (usage.tenant, usage.statuses, usage.rows, usage.refusals) == ("t", {200: 2, 429: 1}, 2,
                                                                           {"requests_per_second": 1})
    assert usage.queue_wait_s.count == 2 and usage.concurrent == 0


async def test_a_request_whose_client_went_away_counts_in_its_tenants_usage_as_the_status_it_is_closed_with():
    executor = RecordingExecutor()
    executor.release = asyncio.Event()  # the batch stays at the executor until the client has gone
    scheduler = scheduler_with(executor)
    scheduler.set_tenants([TenantPolicy("t")])
    gone = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(0, 1), tenant="t")))
    await until_sent(executor)
    gone.cancel()
    executor.release.set()
    with pytest.raises(asyncio.CancelledError):
        await gone
    for _ in range(100):  # the scheduler's own future is cancelled a loop turn after the client's
        if scheduler.tenant_usage()[0].statuses:
            break
        await asyncio.sleep(0)
    assert scheduler.tenant_usage()[0].statuses == {CLIENT_CLOSED_REQUEST: 1}
    assert CLIENT_CLOSED_REQUEST == metrics.CLIENT_CLOSED_REQUEST == 499  # one name, the front ends' too


async def test_a_request_the_queue_refuses_gives_its_quota_back():
    scheduler = scheduler_with(RecordingExecutor(), max_queue=2)
    scheduler.set_tenants([TenantPolicy("t", requests_per_second=1)])
    with pytest.raises(PayloadTooLarge):  # more rows than the queue holds
        await scheduler.submit(BatchRequest.arriving("m", rows(0, 3), tenant="t"))
    await scheduler.submit(BatchRequest.arriving("m", rows(0, 1), tenant="t"))
    assert scheduler.tenant_usage()[0].refusals == {"too_large": 1}


async def test_a_text_models_quota_counts_tokens_and_a_tensor_models_rows():
    loop = asyncio.get_running_loop()
    scheduler = BatchScheduler(loop)
    scheduler.add_model("texts", RecordingExecutor(), BatchingConfig(max_batch_cost=1000,
                                                                     rows=TextSpec()))
    scheduler.add_model("m", RecordingExecutor(), BatchingConfig())
    scheduler.set_tenants([TenantPolicy("t", tokens_per_minute=100)])
    texts = [Tensor("TEXT", "BYTES", np.array([b"a", b"b"], dtype=np.object_))]
    await scheduler.submit(BatchRequest.arriving("texts", texts, lengths=np.array([40, 50]), tenant="t"))
    await scheduler.submit(BatchRequest.arriving("m", rows(0, 5), tenant="t"))
    with pytest.raises(RateLimited):
        await scheduler.submit(BatchRequest.arriving("m", rows(0, 6), tenant="t"))  # 95 taken, 6 more rows
    assert scheduler.tenant_usage()[0].tokens == 95


async def test_a_tenants_priority_is_its_requests_level_and_they_may_ask_lower_never_higher():
    executor = RecordingExecutor()
    scheduler = scheduler_with(executor, max_batch_size=1, priority_levels=3, default_priority_level=3)
    scheduler.set_tenants([TenantPolicy("bulk", priority=2), TenantPolicy("interactive", priority=1)])
    executor.release = asyncio.Event()
    blocker = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(100, 1))))
    await asyncio.sleep(0.01)
    order = [(1, "bulk", 1), (2, "bulk", 3), (3, "interactive", 0), (4, "bulk", 0)]  # (row, tenant, priority asked)
    waiting = [asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(row, 1), priority=priority,
                                                                            tenant=tenant)))
               for row, tenant, priority in order]
    await asyncio.sleep(0.01)
    executor.release.set()
    await asyncio.gather(blocker, *waiting)
    served = [int(batch[0, 0]) // 2 for batch in executor.batches[1:]]
    assert served == [3, 1, 4, 2]  # interactive at 1; bulk asking 1 gets its own 2; asking 3 gets 3


async def test_a_full_queue_sheds_the_tenant_furthest_over_its_share_first():
    executor = RecordingExecutor()
    scheduler = scheduler_with(executor, max_batch_size=1, max_queue=6)
    scheduler.set_tenants([TenantPolicy("flood"), TenantPolicy("trickle")])
    executor.release = asyncio.Event()
    blocker = asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(100, 1))))
    await asyncio.sleep(0.01)
    flood = [asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(i, 1), tenant="flood")))
             for i in range(5)]
    trickle = [asyncio.ensure_future(scheduler.submit(BatchRequest.arriving("m", rows(10 + i, 1), tenant="trickle")))
               for i in range(3)]
    await asyncio.sleep(0.01)
    executor.release.set()
    done = await asyncio.gather(blocker, *flood, *trickle, return_exceptions=True)
    refused = [i for i, outcome in enumerate(done[1:]) if isinstance(outcome, Overloaded)]
    assert refused == [3, 4]  # the flood's two newest made room; the trickle lost nothing
