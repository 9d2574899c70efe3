"""Quotas held together across gateway replicas in Redis (issue 47, `[shared]`,
`gateway/shared/store.py`): Debian's real `redis-server`, started here on a free port of 127.0.0.1
and stopped by PID (killed and started again in a test); each replica is a scheduler's
tenants (`gateway.batching.tenant_quotas.Tenants`) with a `RedisQuotas` store of its own, as each
gateway process holds one. Counts, never times: every bound below holds however slow the
machine is, because it is written with the time the test measured."""
from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator

import pytest

from gateway.batching.config import TenantPolicy
from gateway.batching.tenant_quotas import Tenants
from gateway.config.shared import SharedConfig
from gateway.shared.store import RedisQuotas
from tools.processes import RedisProcess, free_port
from wire.errors import PayloadTooLarge, RateLimited, Unavailable

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisProcess]:
    with RedisProcess().start() as server:
        yield server


@pytest.fixture
def prefix() -> str:
    return f"test-{os.urandom(4).hex()}"  # each test its own keys in the one server


class Replica:
    """One gateway replica's view of the quotas: its tenants, with its own store."""

    def __init__(self, tenants: Tenants, store: RedisQuotas) -> None:
        self.tenants, self.store = tenants, store

    async def take_quota(self, tenant: str, tokens: int = 1) -> bool:
        """True if let in; False if refused 429 (RateLimited)."""
        try:
            got = self.tenants.take_quota(tenant, tokens, asyncio.get_running_loop().time())
            if not isinstance(got, bool):
                await got
        except RateLimited:
            return False
        return True


@contextlib.asynccontextmanager
async def replicas(url: str, prefix: str, policies: list[TenantPolicy], count: int,
                   **keys: object) -> AsyncIterator[list[Replica]]:
    started: list[Replica] = []
    try:
        for _ in range(count):
            store = RedisQuotas(SharedConfig(url=url, key_prefix=prefix, **keys), asyncio.get_running_loop())  # type: ignore[arg-type]
            await store.start()
            tenants = Tenants()
            tenants.update(policies, asyncio.get_running_loop().time())
            tenants.share(store)
            started.append(Replica(tenants, store))
        yield started
    finally:
        for replica in started:
            await replica.store.close()


async def test_three_replicas_hold_one_requests_per_second_between_them(redis, prefix):
    """30 a second over three replicas: the requests they let in together stay within one
    bucket's bound (30 + 30 x the seconds it took) plus the slices they hold (3 each), where
    each alone would have let in 30 + its own refill (90 in all)."""
    policy = TenantPolicy("t", requests_per_second=30)
    async with replicas(redis.url, prefix, [policy], 3) as three:
        loop = asyncio.get_running_loop()
        started = loop.time()
        admitted = 0
        for n in range(150):  # round robin, as a load balancer spreads them
            admitted += await three[n % 3].take_quota("t")
        elapsed = loop.time() - started
    slices = 3 * 3  # replicas x max(1, 0.1 x 30)
    assert admitted <= 30 + 30 * elapsed + slices, (admitted, elapsed)
    assert admitted >= 30 - slices  # the bucket was full: what no slice stranded was let in


async def test_a_shared_rate_below_one_a_second_admits_one_request_every_one_over_the_rate(redis, prefix):
    """requests_per_second = 0.5 over two replicas: a shared bucket of one request, so the
    first is let in, and a refusal tells at most the 2 s one request takes to refill. Before:
    a bucket of half a request, which Redis never granted a whole one from: 0 let in."""
    policy = TenantPolicy("t", requests_per_second=0.5)
    async with replicas(redis.url, prefix, [policy], 2) as two:
        loop = asyncio.get_running_loop()
        started = loop.time()
        admitted, waits = 0, []
        for n in range(6):
            try:
                got = two[n % 2].tenants.take_quota("t", 1, loop.time())
                if not isinstance(got, bool):
                    await got
                admitted += 1
            except RateLimited as refused:
                waits.append(int(refused.http_headers["retry-after-ms"]))
        elapsed = loop.time() - started
    assert 1 <= admitted <= 1 + 0.5 * elapsed + 2 * 1, (admitted, elapsed)  # + a slice (one) per replica
    assert waits and all(1 <= wait <= 2000 for wait in waits), waits


async def test_64_concurrent_requests_never_take_more_tokens_than_the_bucket(redis, prefix):
    """tokens_per_minute = 600 and 64 requests of 50 tokens at once, spread over two replicas:
    the tokens let in stay within the bucket (600 + 10 a second of refill), overshoot 0."""
    policy = TenantPolicy("t", tokens_per_minute=600)
    async with replicas(redis.url, prefix, [policy], 2) as two:
        loop = asyncio.get_running_loop()
        started = loop.time()
        results = await asyncio.gather(*(two[n % 2].take_quota("t", 50) for n in range(64)))
        elapsed = loop.time() - started
    assert 50 * sum(results) <= 600 + 10 * elapsed, (sum(results), elapsed)
    assert sum(results) >= 600 // 50 - 2 * 1  # at most a slice (60 tokens) stranded per replica


async def test_a_request_over_the_whole_bucket_is_413_on_every_replica_without_asking_redis(redis, prefix):
    policy = TenantPolicy("t", tokens_per_minute=100)
    async with replicas(redis.url, prefix, [policy], 2) as two:
        for replica in two:
            with pytest.raises(PayloadTooLarge, match="tokens_per_minute"):
                replica.tenants.take_quota("t", 101, 0.0)
            assert replica.store.mode == "shared"


async def test_max_concurrent_across_three_replicas_lets_three_in_and_refuses_the_rest_at_once(redis, prefix):
    policy = TenantPolicy("t", max_concurrent=3)
    async with replicas(redis.url, prefix, [policy], 3) as three:
        results = await asyncio.gather(*(three[n % 3].take_quota("t") for n in range(9)))
        assert sum(results) == 3
        answered = next(n % 3 for n, ok in enumerate(results) if ok)
        three[answered].tenants.answered("t", 200)  # one answered: its slot is free again
        await asyncio.sleep(0)  # (the release is sent, not awaited)
        for _ in range(1000):  # the release is in flight: the next one is let in once it lands
            if await three[(answered + 1) % 3].take_quota("t"):
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("a freed slot was not taken by another replica")
        assert not await three[(answered + 2) % 3].take_quota("t")  # three in again


async def test_a_replica_that_dies_holds_its_slots_no_longer_than_its_expiry(redis, prefix):
    policy = TenantPolicy("t", max_concurrent=2)
    async with replicas(redis.url, prefix, [policy], 1, slot_expiry_s=1.0) as (survivor,):
        doomed = RedisQuotas(SharedConfig(url=redis.url, key_prefix=prefix, slot_expiry_s=1.0),
                             asyncio.get_running_loop())
        await doomed.start()
        tenants = Tenants()
        tenants.update([policy], 0.0)
        tenants.share(doomed)
        dying = Replica(tenants, doomed)
        assert await dying.take_quota("t") and await dying.take_quota("t")
        assert not await survivor.take_quota("t")
        # It dies with both requests in: no release, no renewal (its keeper stops with it).
        assert doomed._keeper is not None
        doomed._keeper.cancel()
        await doomed._redis.aclose()
        for _ in range(1000):  # its liveness key expires within slot_expiry (1 s); polled, not timed
            if await survivor.take_quota("t"):
                break
            await asyncio.sleep(0.02)
        else:
            pytest.fail("a dead replica's slots were never freed")
        assert await survivor.take_quota("t")
        assert not await survivor.take_quota("t")


async def test_redis_killed_then_started_again_local_quotas_meanwhile_then_shared(prefix):
    """on_unavailable = "local": with Redis gone, each replica keeps serving and holds the
    quota on its own (its own bucket: 5 of 5 a second, a tenant without quotas unlimited); the
    same server started again on the same port, it is shared again."""
    policies = [TenantPolicy("t", requests_per_second=5), TenantPolicy("free")]
    servers = [RedisProcess().start()]  # its own: this test kills it
    try:
        async with replicas(servers[0].url, prefix, policies, 1) as (replica,):
            assert await replica.take_quota("t") and replica.store.mode == "shared"
            servers[0].stop()
            loop = asyncio.get_running_loop()
            started = loop.time()
            results = [await replica.take_quota("t") for _ in range(20)]
            elapsed = loop.time() - started
            assert replica.store.mode == "local" and replica.store.outages == 1
            # Its own bucket (5, refilled at 5 a second), and what its slice held when Redis went (1).
            assert 5 <= sum(results) <= 5 + 5 * elapsed + 1
            assert all([await replica.take_quota("free") for _ in range(50)])  # no quota: never refused
            servers.append(RedisProcess(servers[0].redis_port).start())
            await until_shared(replica.store)
            assert replica.store.outages == 1
    finally:
        for server in servers:
            server.stop()


async def test_with_refuse_tenants_with_quotas_get_503_while_redis_is_away(prefix):
    policies = [TenantPolicy("t", requests_per_second=100), TenantPolicy("free")]
    servers = [RedisProcess().start()]
    try:
        async with replicas(servers[0].url, prefix, policies, 1, on_unavailable="refuse") as (replica,):
            assert await replica.take_quota("t")
            servers[0].stop()
            served = 0
            with pytest.raises(Unavailable):
                for _ in range(50):  # the slice it holds (10) serves on until a call to Redis fails
                    await replica.take_quota("t")
                    served += 1
            assert served <= 10 and replica.store.mode == "refusing"
            with pytest.raises(Unavailable):
                await replica.take_quota("t")
            assert await replica.take_quota("free")
            refusals = {usage.tenant: usage.refusals for usage in replica.tenants.snapshot()}
            assert refusals["t"] == {"shared_unavailable": 2} and refusals["free"] == {}
            servers.append(RedisProcess(servers[0].redis_port).start())
            await until_shared(replica.store)
            assert await replica.take_quota("t")
    finally:
        for server in servers:
            server.stop()


async def until_shared(store: RedisQuotas) -> None:
    """Poll (bounded in count) until the store is shared again: it asks Redis every 0.5 s."""
    for _ in range(1500):
        if store.mode == "shared":
            return
        await asyncio.sleep(0.02)
    pytest.fail(f"still {store.mode} long after Redis was back")


async def test_a_password_in_the_url_never_reaches_a_log_line(prefix, caplog):
    """The url is a secret when it holds a password: the store away at the start says which
    server, never who with what."""
    port = free_port()  # nothing listens there
    store = RedisQuotas(SharedConfig(url=f"redis://gateway:hunter2-pw@127.0.0.1:{port}/0", key_prefix=prefix),
                        asyncio.get_running_loop())
    with caplog.at_level("DEBUG"):
        await store.start()
        await store.close()
    assert store.mode == "local" and f"127.0.0.1:{port}" in caplog.text
    assert "hunter2" not in caplog.text and "gateway:" not in caplog.text.replace("gateway.shared.store", "")
