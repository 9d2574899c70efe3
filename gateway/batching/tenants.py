"""Tenants at the scheduler: their quotas, held for the whole gateway, and their usage.

Semantics
---------
* The scheduler knows each tenant by name, with its `config.TenantPolicy` (`Tenants.update`,
  at start and on every reload). A request names its tenant (`BatchRequest.tenant`); a
  request of no tenant ("", when none are declared) or of one no longer declared has no
  quota and weight 1.
* **Quotas** are token buckets, each holding at most one period's worth:
  `requests_per_second` a bucket of that many requests (at least one: a rate of 0.5 lets
  one request in every 2 s, and a refusal says how long until the next) refilled at that
  rate, and
  `tokens_per_minute` one of that many tokens refilled at a sixtieth of it per second. A
  request costs one request and its tokens: a text model's tokens as the gateway counts
  them, a tensor model's rows (its row layout says which: `layouts`). `max_concurrent` is
  how many of its requests may be in the scheduler at once (admitted, not yet answered).
  A request over any of them is refused before it is queued, with `RateLimited` and the
  seconds until its buckets would hold it (at least 1); one that costs more tokens than a
  whole bucket holds could never pass, and is PayloadTooLarge (413) naming the key.
* A refused request takes nothing from the buckets, and one the queue refuses after its
  quota was checked (a full queue, a passed deadline) gives back what it took: a quota
  counts requests the gateway let in.
* Under `--workers`, the batcher's scheduler holds the one set of buckets: the quota is the
  gateway's, not a process's.
* **Across replicas** (`[shared]`), a `quotas.SharedQuotas` store plugged in (`store`) holds
  the buckets and the count of requests at once together with every replica that names it;
  the checks and their order stay these (at once, the size check, tokens, then a request),
  but each is asked of the store, which answers from this replica's leased slice at once
  or after a short round trip. While the store is away it either says to hold every quota
  here (these buckets, as without it) or refuses: `Unavailable` (503) for tenants with
  quotas. The size check (a request over a whole bucket, 413) never asks the store: it
  needs only the policy, so it is the same on every replica. `admit` answers True when the
  request was held by the store (what `give_back` and `answered` then return to it), False
  when here, or an awaitable of either when the store must be asked first.
* What the buckets hold when a request is let in or refused (`state`, a
  `wire.ratelimits.QuotaState`) is what the front ends tell clients (OpenAI's
  `x-ratelimit-*` headers).
* A reload keeps the level of each bucket whose tenant stays (capped at its new size); a
  new tenant's buckets start full.
* **Usage**, per tenant: requests by the HTTP status of their outcome, rows and tokens let
  in, time queued (a histogram, per part), and refusals by reason: a quota's name
  (`requests_per_second`, `tokens_per_minute`, `max_concurrent`), or the queue's
  (`queue_full`, `deadline`: passed or sure to be missed, `too_large`: more rows than the
  queue holds, `invalid`). Recorded here, on the scheduler's loop; read through `snapshot`.
  A tenant has usage once it has sent a request (its first reaches `admit`, or is counted
  by the queue); one that has sent nothing has none, and `snapshot` leaves it out: with
  thousands declared and a few sending, a reader pays for the few (`/metrics`, the live page).

Nothing here is thread-safe: the scheduler's loop owns it. It knows no keys (the front
door's, `gateway.tenants`), no HTTP, gRPC or predictor protocols, no queue, and no store
but its interface (`quotas`).
"""
from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, field

from gateway.batching.config import TenantPolicy
from gateway.batching.quotas import REQUESTS, TOKENS, SharedQuotas
from gateway.batching.stats import SECONDS_BOUNDS, Histogram, HistogramSnapshot
from wire.errors import (
    DeadlineExceeded,
    GatewayError,
    InvalidInput,
    Overloaded,
    PayloadTooLarge,
    RateLimited,
    Unavailable,
)
from wire.ratelimits import Bucket, QuotaState

NO_TENANT = TenantPolicy("")
# Why the queue refused a request of a tenant after its quotas let it through, by the error.
QUEUE_REFUSALS: dict[type[GatewayError], str] = {
    Overloaded: "queue_full", DeadlineExceeded: "deadline", PayloadTooLarge: "too_large", InvalidInput: "invalid",
}


class TokenBucket:
    """At most `capacity` units, refilled at `rate` per second (a loop time is handed in)."""

    __slots__ = ("capacity", "rate", "level", "at")

    def __init__(self, capacity: float, rate: float, now: float) -> None:
        self.capacity, self.rate = capacity, rate
        self.level, self.at = capacity, now

    def refill(self, now: float) -> float:
        """The units held now."""
        if now > self.at:
            self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
            self.at = now
        return self.level

    def wait_s(self, units: float, now: float) -> float:
        """Seconds until `units` are held (0 if they are now)."""
        return max(units - self.refill(now), 0.0) / self.rate

    def take(self, units: float, now: float) -> float:
        """Take `units` if they are held now (0.0); else take nothing and say how many
        seconds until they would be."""
        wait_s = self.wait_s(units, now)
        if not wait_s:
            self.level -= units
        return wait_s

    def state(self, now: float) -> Bucket:
        """What it holds now, as a client is told (`wire.ratelimits`)."""
        level = self.refill(now)
        return Bucket(self.capacity, level, (self.capacity - level) / self.rate)

    def resized(self, capacity: float, rate: float, now: float) -> TokenBucket:
        """This bucket at a new size and rate, keeping what it holds (up to the new size)."""
        bucket = TokenBucket(capacity, rate, now)
        bucket.level = min(self.refill(now), capacity)
        return bucket


@dataclass(slots=True)
class TenantUsage:
    """What one tenant's requests did, counted since the gateway started."""
    statuses: Counter[int] = field(default_factory=Counter)  # requests by their outcome's HTTP status
    rows: int = 0
    tokens: int = 0
    queue_wait_s: Histogram = field(default_factory=lambda: Histogram(SECONDS_BOUNDS))
    refusals: Counter[str] = field(default_factory=Counter)  # by reason: requests_per_second, overloaded, ...


@dataclass(frozen=True, slots=True)
class TenantUsageSnapshot:
    """A tenant's usage at one moment (see `TenantUsage`), beside its policy now (the
    policy of no tenant when a reload removed it: `declared` is then False)."""
    tenant: str
    policy: TenantPolicy
    declared: bool
    statuses: dict[int, int]
    rows: int
    tokens: int
    queue_wait_s: HistogramSnapshot
    refusals: dict[str, int]
    concurrent: int


class _Quota:
    """One tenant's buckets and count of requests in the scheduler."""

    __slots__ = ("policy", "requests", "tokens", "concurrent", "max_concurrent")

    def __init__(self, policy: TenantPolicy, now: float, before: _Quota | None = None) -> None:
        self.policy = policy
        # A bucket smaller than one request would never hold one: it holds one, refilled at its rate.
        self.requests: TokenBucket | None = self._bucket(policy.requests_per_second, 1.0, now,
                                                         before.requests if before is not None else None, minimum=1.0)
        self.tokens: TokenBucket | None = self._bucket(policy.tokens_per_minute, 60.0, now,
                                                       before.tokens if before is not None else None)
        self.concurrent: int = before.concurrent if before is not None else 0
        self.max_concurrent = policy.max_concurrent if policy.max_concurrent is not None else math.inf

    def steps(self, tokens: int) -> list[tuple[str, float, float, float]]:
        """The rate quotas a request takes from, in order: (quota, units, capacity, rate)."""
        out = []
        if self.tokens is not None:
            out.append((TOKENS, float(tokens), self.tokens.capacity, self.tokens.rate))
        if self.requests is not None:
            out.append((REQUESTS, 1.0, self.requests.capacity, self.requests.rate))
        return out

    @staticmethod
    def _bucket(per_period: float | None, period_s: float, now: float,
                before: TokenBucket | None, minimum: float = 0.0) -> TokenBucket | None:
        if per_period is None:
            return None
        capacity = max(per_period, minimum)
        if before is None:
            return TokenBucket(capacity, per_period / period_s, now)
        return before.resized(capacity, per_period / period_s, now)


class Tenants:
    """The tenants a scheduler serves: policies, quotas and usage (see the module)."""

    def __init__(self) -> None:
        self.policies: dict[str, TenantPolicy] = {}
        self._order: dict[str, int] = {}  # each declared tenant's place, for `active`'s order
        self._quotas: dict[str, _Quota] = {}
        self.usage: dict[str, TenantUsage] = {}
        self.store: SharedQuotas | None = None  # quotas held with other replicas ([shared]); None: here

    def share(self, store: SharedQuotas) -> None:
        """Hold the quotas together with other replicas through `store` from now on."""
        self.store = store
        store.attach(lambda: {name: quota.concurrent for name, quota in self._quotas.items()})

    def update(self, policies: Iterable[TenantPolicy], now: float) -> None:
        """The declared tenants from now on (at start, and on every reload)."""
        self.policies = {policy.name: policy for policy in policies}
        self._order = {name: place for place, name in enumerate(self.policies)}
        self._quotas = {name: _Quota(policy, now, self._quotas.get(name)) for name, policy in self.policies.items()}

    @property
    def shared(self) -> bool:
        """More than one tenant is declared: batches are filled across them by their weights."""
        return len(self.policies) > 1

    def policy(self, tenant: str) -> TenantPolicy:
        return self.policies.get(tenant, NO_TENANT)

    def weight(self, tenant: str) -> float:
        return self.policies.get(tenant, NO_TENANT).weight

    # -- quotas ---------------------------------------------------------------------------

    def admit(self, tenant: str, tokens: int, now: float) -> bool | Awaitable[bool]:
        """Take one request and `tokens` from the tenant's buckets, and count it in; raise
        RateLimited (counted as a refusal) when it is over a quota. True: the shared store
        held it; False: held here (or no quota); an awaitable of either (or of the refusal)
        when the store must be asked first."""
        if tenant not in self.usage:  # it has sent something: it has usage (and series) from now on
            self.usage[tenant] = TenantUsage()
        quota = self._quotas.get(tenant)
        if quota is None:
            return False
        bucket = quota.tokens
        if bucket is not None and tokens > bucket.capacity:
            # The policy alone decides it, so every replica answers it alike, and no client retries a 413.
            raise self._refused(tenant, "tokens_per_minute", PayloadTooLarge(
                f"the request counts {tokens} tokens, more than tenant '{tenant}' may send in a minute "
                f"(tokens_per_minute = {quota.policy.tokens_per_minute:g}): send it in smaller requests"))
        store = self.store
        if store is not None and (bucket is not None or quota.requests is not None or quota.max_concurrent < math.inf):
            mode = store.mode
            if mode == "shared":
                try:
                    return self._admit_shared(tenant, quota, tokens, store, now)
                except Unavailable as error:  # the store went away, and its policy is to refuse
                    raise self._refused(tenant, "shared_unavailable", error) from None
            if mode == "refusing":
                raise self._refused(tenant, "shared_unavailable", Unavailable(
                    f"tenant '{tenant}' has quotas, and the store that holds them across the gateway's replicas "
                    "cannot be reached; try again shortly"))
        self._admit_here(tenant, quota, tokens, now)
        return False

    def _admit_here(self, tenant: str, quota: _Quota, tokens: int, now: float) -> bool:
        if quota.concurrent >= quota.max_concurrent:
            raise self._refused(tenant, "max_concurrent", self._too_many(tenant, quota.concurrent))
        requests, bucket = quota.requests, quota.tokens
        if bucket is not None:
            wait_s = bucket.take(tokens, now)
            if wait_s:
                raise self._over(tenant, "tokens_per_minute", quota.policy.tokens_per_minute, wait_s, now)
        if requests is not None:
            wait_s = requests.take(1, now)
            if wait_s:
                if bucket is not None:
                    bucket.level += tokens  # both or neither
                raise self._over(tenant, "requests_per_second", quota.policy.requests_per_second, wait_s, now)
        quota.concurrent += 1
        return False

    def _admit_shared(self, tenant: str, quota: _Quota, tokens: int, store: SharedQuotas,
                      now: float) -> bool | Awaitable[bool]:
        """The rate quotas from this replica's slices at once when they hold the request (no
        round trip: the common case); else, and always for `max_concurrent`, which is counted
        in the store, a task that asks it."""
        if quota.max_concurrent < math.inf:
            return asyncio.ensure_future(self._admit_later(tenant, quota, tokens, store, now, [], 0, None, False))
        steps = quota.steps(tokens)
        taken: list[tuple[str, float, float, float]] = []
        for index, step in enumerate(steps):
            got = store.take(tenant, *step)
            if got == 0.0:
                taken.append(step)
                continue
            if got is None or isinstance(got, float):
                self._undo(store, tenant, taken)
                if got is None:  # the store went away: held here meanwhile
                    return self._admit_here(tenant, quota, tokens, now)
                raise self._over(tenant, step[0], self._limit(quota, step[0]), got, now)
            return asyncio.ensure_future(self._admit_later(tenant, quota, tokens, store, now, taken, index, got, True))
        quota.concurrent += 1
        return True

    async def _admit_later(self, tenant: str, quota: _Quota, tokens: int, store: SharedQuotas, now: float,
                           taken: list[tuple[str, float, float, float]], index: int,
                           pending: Awaitable[float | None] | None, entered: bool) -> bool:
        """`_admit_shared` once the store must be asked: the slot first (max_concurrent),
        then the rate quotas from `index` on (`pending`: the answer already asked for)."""
        try:
            return await self._ask(tenant, quota, tokens, store, taken, index, pending, entered)
        except Unavailable as error:  # the store went away meanwhile, and its policy is to refuse
            raise self._refused(tenant, "shared_unavailable", error) from None

    async def _ask(self, tenant: str, quota: _Quota, tokens: int, store: SharedQuotas,
                   taken: list[tuple[str, float, float, float]], index: int,
                   pending: Awaitable[float | None] | None, entered: bool) -> bool:
        loop = asyncio.get_running_loop()
        if not entered:
            answer = store.enter(tenant, int(quota.max_concurrent))
            if answer is not None and not isinstance(answer, bool):
                answer = await answer
            if answer is None:
                return self._admit_here(tenant, quota, tokens, loop.time())
            if not answer:
                raise self._refused(tenant, "max_concurrent", self._too_many(tenant, int(quota.max_concurrent)))
            entered = quota.max_concurrent < math.inf
        steps = quota.steps(tokens)
        for position in range(index, len(steps)):
            step = steps[position]
            got = pending if pending is not None and position == index else store.take(tenant, *step)
            if got is not None and not isinstance(got, float):
                got = await got
            if got == 0.0:
                taken.append(step)
                continue
            self._undo(store, tenant, taken)
            if entered and quota.max_concurrent < math.inf:
                store.leave(tenant)
            if got is None:  # the store went away meanwhile: held here
                return self._admit_here(tenant, quota, tokens, loop.time())
            raise self._over(tenant, step[0], self._limit(quota, step[0]), got, loop.time())
        quota.concurrent += 1
        return True

    @staticmethod
    def _undo(store: SharedQuotas, tenant: str, taken: list[tuple[str, float, float, float]]) -> None:
        for quota_name, units, _, _ in taken:
            store.give_back(tenant, quota_name, units)

    @staticmethod
    def _limit(quota: _Quota, name: str) -> float | None:
        return quota.policy.requests_per_second if name == REQUESTS else quota.policy.tokens_per_minute

    @staticmethod
    def _too_many(tenant: str, concurrent: int) -> RateLimited:
        return RateLimited(f"tenant '{tenant}' has {concurrent} requests in the gateway, its limit (max_concurrent); "
                           "try again when one is answered")

    def _over(self, tenant: str, quota: str, limit: float | None, wait_s: float, now: float) -> GatewayError:
        return self._refused(tenant, quota, RateLimited(
            f"tenant '{tenant}' is over its quota ({quota} = {limit:g}); try again in {math.ceil(wait_s)} s", wait_s,
            self.state(tenant, now)))

    def give_back(self, tenant: str, tokens: int, shared: bool = False) -> None:
        """Undo `admit` for a request the queue refused after it (`shared`: what admit answered)."""
        quota = self._quotas.get(tenant)
        if quota is None:
            return
        store = self.store
        if shared and store is not None:
            self._undo(store, tenant, quota.steps(tokens))
            if quota.max_concurrent < math.inf:
                store.leave(tenant)
        else:
            if quota.requests is not None:
                quota.requests.level = min(quota.requests.capacity, quota.requests.level + 1)
            if quota.tokens is not None:
                quota.tokens.level = min(quota.tokens.capacity, quota.tokens.level + tokens)
        quota.concurrent = max(quota.concurrent - 1, 0)

    def answered(self, tenant: str, status: int) -> None:
        """A request let in has its answer (`status`: its HTTP status) and leaves. Its slot
        goes back to the shared store however it was let in: one let in here while the store
        was away was written back to it with the rest when it returned (the store knows
        which of its slots it holds)."""
        quota = self._quotas.get(tenant)
        if quota is not None and quota.concurrent:  # one declared by a reload after its request came in counted none
            quota.concurrent -= 1
            if self.store is not None and quota.max_concurrent < math.inf:
                self.store.leave(tenant)
        (self.usage.get(tenant) or self._usage(tenant)).statuses[status] += 1

    def state(self, tenant: str, now: float) -> QuotaState | None:
        """What the tenant's rate buckets hold now (None: it has none): the shared store's
        as this replica last saw them, or these."""
        quota = self._quotas.get(tenant)
        if quota is None or (quota.requests is None and quota.tokens is None):
            return None
        store = self.store if self.store is not None and self.store.mode == "shared" else None
        buckets: list[Bucket | None] = []
        for name, bucket in ((REQUESTS, quota.requests), (TOKENS, quota.tokens)):
            if bucket is None:
                buckets.append(None)
                continue
            seen = store.bucket(tenant, name, bucket.capacity, bucket.rate) if store is not None else None
            buckets.append(seen if seen is not None else bucket.state(now))
        return QuotaState(buckets[0], buckets[1])

    def _refused(self, tenant: str, reason: str, error: GatewayError) -> GatewayError:
        self.refused(tenant, reason, error.http_status)
        return error

    # -- usage ----------------------------------------------------------------------------

    def let_in(self, tenant: str, rows: int, tokens: int) -> None:
        usage = self.usage.get(tenant) or self._usage(tenant)
        usage.rows += rows
        usage.tokens += tokens

    def refused_by_queue(self, tenant: str, error: GatewayError) -> None:
        """A request of `tenant` the queue refused (after its quotas let it in), by why."""
        reason = next((name for kind, name in QUEUE_REFUSALS.items() if isinstance(error, kind)), "other")
        self.refused(tenant, reason, error.http_status)

    def refused(self, tenant: str, reason: str, status: int) -> None:
        """A request of `tenant` refused before it was queued, for `reason`."""
        usage = self._usage(tenant)
        usage.refusals[reason] += 1
        usage.statuses[status] += 1

    def queued_for(self, tenant: str, seconds: float) -> None:
        (self.usage.get(tenant) or self._usage(tenant)).queue_wait_s.observe(seconds)

    def _usage(self, tenant: str) -> TenantUsage:
        usage = self.usage.get(tenant)
        if usage is None:
            usage = self.usage[tenant] = TenantUsage()
        return usage

    def active(self) -> list[str]:
        """The tenants that have sent something (the others have no usage), declared tenants
        first in their declared order, then those a reload removed, in the order they came:
        sorted among themselves, never looked for among every declared tenant."""
        order, last = self._order, len(self._order)
        return sorted(self.usage, key=lambda name: order.get(name, last))

    def snapshot(self, names: Iterable[str] | None = None) -> list[TenantUsageSnapshot]:
        """The usage now of `names` (by default every tenant that has sent something, in
        `active`'s order; a tenant that has sent nothing has none, and is left out)."""
        out = []
        for name in self.active() if names is None else names:
            usage = self.usage.get(name)
            if usage is None:
                continue
            quota = self._quotas.get(name)
            out.append(TenantUsageSnapshot(name, self.policy(name), name in self.policies, dict(usage.statuses),
                                           usage.rows, usage.tokens,
                                           usage.queue_wait_s.snapshot(), dict(usage.refusals),
                                           quota.concurrent if quota is not None else 0))
        return out
