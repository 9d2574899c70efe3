"""The tenants' quotas held together across gateway replicas, in Redis or Valkey (`[shared]`).

The scheduler's tenants (`gateway.batching.tenant_quotas`) ask a `batching.quotas.SharedQuotas`;
`RedisQuotas` is that store, on Redis's asyncio client (`redis` from PyPI: the optional
extra `shared`). The process's role starts it on the scheduler's loop and plugs it in.

How each quota is held
----------------------
* **Rate quotas, leased: no round trip per request.** A tenant's `requests_per_second` and
  `tokens_per_minute` buckets each live in one Redis hash (`<prefix>:bucket:<tenant>:<quota>`:
  its level and when it was last refilled), refilled by the Redis server's own clock in an
  atomic Lua script, so replicas' clocks never matter. A replica leases a *slice* of it
  (`slice` x the bucket; more when one request needs more) and serves from the slice in
  process; it leases the next in the background once half is spent, and gives back a slice
  left unused for a second. A request its slice cannot hold is refused at once while the
  bucket, as this replica last saw it and refilled since, cannot hold it either; else it
  waits for one lease. **Bound**: over any interval of T seconds the replicas together let
  in at most `capacity + rate x T` (the bucket's own bound, as in one process) plus what
  the slices held when the interval began: at most `replicas x slice x capacity` more.
* **`max_concurrent`, counted in Redis**: one hash per tenant (`<prefix>:slots:<tenant>`),
  one field per replica with its count, taken by a Lua script that refuses at the limit. Each
  replica holds a liveness key (`<prefix>:replica:<id>`) that expires after `slot_expiry`
  and is renewed three times within it; the script drops the fields of replicas whose key
  is gone. A replica that dies holds its slots at most `slot_expiry`. One round trip per
  request of such a tenant (the answer's release is not awaited).
* **When Redis cannot be reached** (a call fails, or takes longer than `timeout`: the first
  that does makes the store away, and nothing after asks Redis, so a request waits on an
  unreachable Redis at most `timeout`; on a live one, for at most one slot and, per rate
  quota, three leases, each asking for what every request waiting on it needs), the store is
  *away*: logged once, `mode` says so (`gateway_shared_quotas_available` 0 on /metrics), and
  with `on_unavailable = "local"` every replica holds each quota on its own (the scheduler's
  buckets, as without `[shared]`), with `"refuse"` tenants with quotas are refused 503. It
  asks Redis every half second; once it answers, this replica writes back its count of
  requests at once for every tenant (what releases missed meanwhile), and is shared again.

The Lua scripts it runs in Redis are `gateway.shared.scripts`. It knows no key of a tenant
and no HTTP; the url may hold a password and is never logged (`config.shared.redacted`).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
from collections.abc import Callable, Mapping
from typing import Any

from gateway.batching.quotas import Entered, Taken
from gateway.config.shared import SharedConfig, redacted
from gateway.shared.scripts import ENTER, GIVE, LEASE, LEAVE
from wire.errors import Unavailable
from wire.ratelimits import Bucket

log = logging.getLogger("gateway.shared.store")

SHARED, LOCAL, REFUSING = "shared", "local", "refusing"
PROBE_S = 0.5  # while away, how often Redis is asked whether it is back
IDLE_S = 1.0  # a slice unused this long is given back
LEASES_PER_REQUEST = 3  # a request short of its slice awaits at most this many leases (the one under way first)


class _Slice:
    """This replica's lease of one tenant's bucket: what it holds, and the bucket as last seen."""

    __slots__ = ("key", "capacity", "rate", "target", "local", "seen", "seen_at", "used_at", "leasing", "waiting")

    def __init__(self, key: str, capacity: float, rate: float, share: float) -> None:
        self.key = key
        self.capacity, self.rate = capacity, rate
        self.target = max(1.0, capacity * share)  # the slice it leases
        self.local = 0.0  # units leased, not yet spent
        self.seen = capacity  # the bucket's level after this replica's last call (assumed full before one)
        self.seen_at = -math.inf
        self.used_at = 0.0
        self.leasing: asyncio.Task[bool] | None = None
        self.waiting = 0.0  # units that requests waiting for a lease need: the next lease asks for them all

    def resize(self, capacity: float, rate: float, share: float) -> None:
        self.capacity, self.rate, self.target = capacity, rate, max(1.0, capacity * share)

    def projected(self, now: float) -> float:
        """The bucket's level as last seen, refilled since (others may have taken some)."""
        return min(self.capacity, self.seen + max(0.0, now - self.seen_at) * self.rate)


class RedisQuotas:
    """`batching.quotas.SharedQuotas` over Redis (see the module)."""

    def __init__(self, config: SharedConfig, loop: asyncio.AbstractEventLoop | None = None,
                 replica: str | None = None) -> None:
        try:
            import redis.asyncio as aioredis
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff
        except ImportError as error:  # checked by the config already; here for a direct use
            raise RuntimeError("[shared] needs the `shared` extra: pip install 'batching-gateway[shared]'") from error
        self.config = config
        self._loop = loop or asyncio.get_event_loop()
        self.replica = replica or os.urandom(8).hex()
        prefix = config.key_prefix
        self._bucket_prefix, self._slots_prefix = f"{prefix}:bucket:", f"{prefix}:slots:"
        self._replica_prefix = f"{prefix}:replica:"
        # No retries of the client's own: a failed call makes the store away, and the probe brings it back.
        self._redis = aioredis.Redis.from_url(
            config.url, socket_timeout=config.timeout_s, socket_connect_timeout=config.timeout_s,
            retry=Retry(NoBackoff(), 0), health_check_interval=0)
        self._lease_script = self._redis.register_script(LEASE)
        self._give_script = self._redis.register_script(GIVE)
        self._enter_script = self._redis.register_script(ENTER)
        self._leave_script = self._redis.register_script(LEAVE)
        self._errors: tuple[type[BaseException], ...] = (aioredis.RedisError, OSError, asyncio.TimeoutError)
        self._mode = LOCAL if config.on_unavailable == "local" else REFUSING  # until Redis first answers
        self._slices: dict[tuple[str, str], _Slice] = {}
        self._held: dict[str, int] = {}  # slots this replica holds in Redis, by tenant
        self._concurrent: Callable[[], Mapping[str, int]] = dict
        self._background: set[asyncio.Task[Any]] = set()
        self._keeper: asyncio.Task[None] | None = None
        self._renewed_at = -math.inf
        self.outages = 0  # times it went away (a counter for tests and the bench)

    # -- life ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Ask Redis once (away if it does not answer: the keeper keeps asking), then keep
        this replica's liveness, give back idle slices, and bring it back after an absence."""
        await self._come_back()
        if self._mode != SHARED:
            self._went_away("at the start")
        self._keeper = self._loop.create_task(self._keep())

    async def close(self) -> None:
        """Give back what this replica leased and holds, best effort within the timeout each."""
        if self._keeper is not None:
            self._keeper.cancel()
        for task in list(self._background):
            task.cancel()
        if self._mode == SHARED:
            with contextlib.suppress(*self._errors):
                await self._call(self._forget())
        await self._redis.aclose()

    async def _forget(self) -> None:
        for piece in self._slices.values():
            if piece.local > 0:
                await self._give_script(keys=[piece.key], args=[piece.capacity, piece.rate, piece.local])
                piece.local = 0.0
        for tenant in self._held:
            await self._redis.hdel(self._slots_prefix + tenant, self.replica)
        await self._redis.delete(self._replica_prefix + self.replica)

    async def _keep(self) -> None:
        renew_s = self.config.slot_expiry_s / 3
        while True:
            await asyncio.sleep(min(PROBE_S, renew_s))
            try:
                if self._mode != SHARED:
                    await self._come_back()
                    continue
                now = self._loop.time()
                if now - self._renewed_at >= renew_s:
                    await self._call(self._alive())
                for piece in self._slices.values():
                    if piece.local > 0 and piece.leasing is None and now - piece.used_at >= IDLE_S:
                        units, piece.local = piece.local, 0.0
                        level = await self._call(self._give_script(keys=[piece.key],
                                                                   args=[piece.capacity, piece.rate, units]))
                        piece.seen, piece.seen_at = float(level), self._loop.time()
            except self._errors:
                self._went_away("")
            except Exception:  # noqa: BLE001 - the keeper must outlive anything; said once per kind
                log.exception("shared quotas: the keeper failed; it goes on")

    async def _alive(self) -> None:
        await self._redis.set(self._replica_prefix + self.replica, "1", px=int(self.config.slot_expiry_s * 1000))
        self._renewed_at = self._loop.time()

    async def _come_back(self) -> None:
        """Shared again if Redis answers: this replica alive, and its counts of requests at
        once written back (releases missed while it was away)."""
        try:
            await self._call(self._redis.ping())
            await self._call(self._alive())
            counts = dict(self._concurrent())
            for tenant in set(counts) | set(self._held):
                count = counts.get(tenant, 0)
                if count > 0:
                    await self._call(self._redis.hset(self._slots_prefix + tenant, self.replica, count))
                else:
                    await self._call(self._redis.hdel(self._slots_prefix + tenant, self.replica))
                self._held[tenant] = count
        except self._errors:
            return
        was = self._mode
        self._mode = SHARED
        if was != SHARED and self.outages:
            log.warning("shared quotas: %s answers again; quotas are held across the replicas again",
                        redacted(self.config.url))

    def _went_away(self, when: str) -> None:
        if self._mode != SHARED and when == "":
            return
        self._mode = LOCAL if self.config.on_unavailable == "local" else REFUSING
        self.outages += 1
        for piece in self._slices.values():  # what they held is lost to the bucket: less let in, never more
            piece.local, piece.seen_at = 0.0, -math.inf
        self._held.clear()
        meanwhile = ("each replica holds every quota on its own" if self._mode == LOCAL
                     else "tenants with quotas are refused 503")
        log.warning("shared quotas: %s cannot be reached%s; until it answers, %s",
                    redacted(self.config.url), f" {when}" if when else "", meanwhile)

    async def _call(self, awaitable: Any) -> Any:
        return await asyncio.wait_for(awaitable, self.config.timeout_s)

    def _spawn(self, awaitable: Any) -> asyncio.Task[Any]:
        task = self._loop.create_task(awaitable)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    # -- SharedQuotas -------------------------------------------------------------------------

    @property
    def mode(self) -> str:
        return self._mode

    def attach(self, concurrent: Callable[[], Mapping[str, int]]) -> None:
        self._concurrent = concurrent

    def _away(self) -> None:
        """What a call answers once the store is away: hold it here, or refuse."""
        if self._mode == REFUSING:
            raise Unavailable("the store that holds tenants' quotas across the gateway's replicas cannot be reached; "
                              "try again shortly")

    def _slice(self, tenant: str, quota: str, capacity: float, rate: float) -> _Slice:
        piece = self._slices.get((tenant, quota))
        if piece is None:
            piece = self._slices[(tenant, quota)] = _Slice(f"{self._bucket_prefix}{tenant}:{quota}", capacity, rate,
                                                           self.config.slice)
        elif piece.capacity != capacity or piece.rate != rate:
            piece.resize(capacity, rate, self.config.slice)
        return piece

    def take(self, tenant: str, quota: str, units: float, capacity: float, rate: float) -> Taken:
        if self._mode != SHARED:
            self._away()
            return None
        piece = self._slice(tenant, quota, capacity, rate)
        now = piece.used_at = self._loop.time()
        if piece.local >= units:
            piece.local -= units
            if piece.local < piece.target / 2 and piece.leasing is None:  # the next slice before this one runs out
                piece.leasing = self._spawn(self._lease(piece, 0.0, piece.waiting + piece.target - piece.local))
            return 0.0
        short = units - piece.local
        projected = piece.projected(now)
        if piece.leasing is None and projected < short:
            return (short - projected) / piece.rate  # refused as last seen: no round trip per refusal
        return self._spawn(self._lease_for(piece, units))

    async def _lease_for(self, piece: _Slice, units: float) -> float | None:
        """Take `units` once a lease (this request's, or one under way) brings them. A lease
        asks for what every request waiting on the slice needs (granted as far as the bucket
        holds, at least this request's), so that concurrent requests share one round trip."""
        piece.waiting += units
        try:
            for _ in range(LEASES_PER_REQUEST):
                if piece.leasing is None:
                    piece.leasing = self._spawn(self._lease(piece, units - piece.local,
                                                            piece.waiting - piece.local + piece.target))
                if not await asyncio.shield(piece.leasing) or self._mode != SHARED:
                    self._away()
                    return None
                if piece.local >= units:
                    piece.local -= units
                    return 0.0
                short = units - piece.local
                if piece.seen < short:  # Redis's own answer: the bucket cannot hold it yet
                    return (short - piece.seen) / piece.rate
            return max(units - piece.local - piece.projected(self._loop.time()), 1.0) / piece.rate
        finally:
            piece.waiting -= units

    async def _lease(self, piece: _Slice, need: float, want: float) -> bool:
        try:
            granted, level = await self._call(self._lease_script(
                keys=[piece.key], args=[piece.capacity, piece.rate, max(need, 0.0), max(want, 0.0)]))
        except self._errors:
            self._went_away("")
            return False
        finally:
            piece.leasing = None
        if self._mode != SHARED:
            return False
        piece.local += float(granted)
        piece.seen, piece.seen_at = float(level), self._loop.time()
        return True

    def give_back(self, tenant: str, quota: str, units: float) -> None:
        piece = self._slices.get((tenant, quota))
        if piece is not None and self._mode == SHARED:
            piece.local += units  # spent by the next request, or given back when idle

    def enter(self, tenant: str, limit: int) -> Entered:
        if self._mode != SHARED:
            self._away()
            return None
        return self._spawn(self._enter(tenant, limit))

    async def _enter(self, tenant: str, limit: int) -> bool | None:
        try:
            entered = await self._call(self._enter_script(
                keys=[self._slots_prefix + tenant], args=[self.replica, limit, self._replica_prefix]))
        except self._errors:
            self._went_away("")
            self._away()
            return None
        if self._mode != SHARED:
            self._away()
            return None
        if entered:
            self._held[tenant] = self._held.get(tenant, 0) + 1
        return bool(entered)

    def leave(self, tenant: str) -> None:
        held = self._held.get(tenant, 0)
        if held <= 0 or self._mode != SHARED:
            return  # counted while away: written back with the rest when the store returns
        self._held[tenant] = held - 1
        self._spawn(self._leave(tenant))

    async def _leave(self, tenant: str) -> None:
        try:
            await self._call(self._leave_script(keys=[self._slots_prefix + tenant], args=[self.replica]))
        except self._errors:
            self._went_away("")

    def bucket(self, tenant: str, quota: str, capacity: float, rate: float) -> Bucket | None:
        if self._mode != SHARED:
            return None
        piece = self._slices.get((tenant, quota))
        if piece is None:
            return Bucket(capacity, capacity, 0.0)
        remaining = min(capacity, piece.projected(self._loop.time()) + piece.local)
        return Bucket(capacity, remaining, (capacity - remaining) / rate)
