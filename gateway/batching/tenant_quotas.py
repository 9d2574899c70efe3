"""Tenants at the scheduler: their policies, and their quotas, held for the whole gateway.

Semantics
---------
* The scheduler knows each tenant by name, with its `config.TenantPolicy` (`Tenants.update`,
  at start and on every reload). A request names its tenant (`BatchRequest.tenant`); a
  request of no tenant ("", when none are declared) or of one no longer declared has no
  quota and weight 1.
* **Quotas** are token buckets (`buckets`), each holding at most one period's worth:
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
  needs only the policy, so it is the same on every replica. `take_quota` answers True when
  the request was held by the store (what `give_back` and `answered` then return to it),
  False when here, or an awaitable of either when the store must be asked first.
* What the buckets hold when a request is let in or refused (`state`, a
  `wire.ratelimits.QuotaState`) is what the front ends tell clients (OpenAI's
  `x-ratelimit-*` headers).
* A reload keeps the level of each bucket whose tenant stays (capped at its new size); a
  new tenant's buckets start full.
* **Usage** (`usage.Usage`, which says what it counts) is kept beside the quotas: each
  refusal here by its quota's name, and what the scheduler tells `Tenants.usage` (let in,
  answered, refused by the queue, time queued); `snapshot` reads it beside each tenant's
  policy and its requests at once.

Nothing here is thread-safe: the scheduler's loop owns it. It knows no keys (the front
door's, `gateway.access.keys`), no HTTP, gRPC or predictor protocols, no queue, and no store
but its interface (`quotas`).
"""
from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Iterable

from gateway.batching.buckets import TenantQuota
from gateway.batching.config import TenantPolicy
from gateway.batching.quotas import REQUESTS, TOKENS, SharedQuotas
from gateway.batching.usage import TenantUsageSnapshot, Usage
from wire.errors import GatewayError, PayloadTooLarge, RateLimited, Unavailable
from wire.ratelimits import Bucket, QuotaState

NO_TENANT = TenantPolicy("")


class Tenants:
    """The tenants a scheduler serves: policies, quotas and usage (see the module)."""

    def __init__(self) -> None:
        self.policies: dict[str, TenantPolicy] = {}
        self._order: dict[str, int] = {}  # each declared tenant's place, for `active`'s order
        self._quotas: dict[str, TenantQuota] = {}
        self.usage = Usage()  # what each tenant that has sent something did
        self.store: SharedQuotas | None = None  # quotas held with other replicas ([shared]); None: here

    def share(self, store: SharedQuotas) -> None:
        """Hold the quotas together with other replicas through `store` from now on."""
        self.store = store
        store.attach(lambda: {name: quota.concurrent for name, quota in self._quotas.items()})

    def update(self, policies: Iterable[TenantPolicy], now: float) -> None:
        """The declared tenants from now on (at start, and on every reload)."""
        self.policies = {policy.name: policy for policy in policies}
        self._order = {name: place for place, name in enumerate(self.policies)}
        self._quotas = {name: TenantQuota(policy, now, self._quotas.get(name)) for name, policy in self.policies.items()}

    @property
    def shared(self) -> bool:
        """More than one tenant is declared: batches are filled across them by their weights."""
        return len(self.policies) > 1

    def policy(self, tenant: str) -> TenantPolicy:
        return self.policies.get(tenant, NO_TENANT)

    def weight(self, tenant: str) -> float:
        return self.policies.get(tenant, NO_TENANT).weight

    # -- quotas ---------------------------------------------------------------------------

    def take_quota(self, tenant: str, tokens: int, now: float) -> bool | Awaitable[bool]:
        """Take one request and `tokens` from the tenant's buckets, and count it in; raise
        RateLimited (counted as a refusal) when it is over a quota. True: the shared store
        held it; False: held here (or no quota); an awaitable of either (or of the refusal)
        when the store must be asked first."""
        self.usage.of(tenant)  # it has sent something: it has usage (and series) from now on
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
                    return self._take_shared(tenant, quota, tokens, store, now)
                except Unavailable as error:  # the store went away, and its policy is to refuse
                    raise self._refused(tenant, "shared_unavailable", error) from None
            if mode == "refusing":
                raise self._refused(tenant, "shared_unavailable", Unavailable(
                    f"tenant '{tenant}' has quotas, and the store that holds them across the gateway's replicas "
                    "cannot be reached; try again shortly"))
        self._take_here(tenant, quota, tokens, now)
        return False

    def _take_here(self, tenant: str, quota: TenantQuota, tokens: int, now: float) -> bool:
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

    def _take_shared(self, tenant: str, quota: TenantQuota, tokens: int, store: SharedQuotas,
                      now: float) -> bool | Awaitable[bool]:
        """The rate quotas from this replica's slices at once when they hold the request (no
        round trip: the common case); else, and always for `max_concurrent`, which is counted
        in the store, a task that asks it."""
        if quota.max_concurrent < math.inf:
            return asyncio.ensure_future(self._take_later(tenant, quota, tokens, store, now, [], 0, None, False))
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
                    return self._take_here(tenant, quota, tokens, now)
                raise self._over(tenant, step[0], self._limit(quota, step[0]), got, now)
            return asyncio.ensure_future(self._take_later(tenant, quota, tokens, store, now, taken, index, got, True))
        quota.concurrent += 1
        return True

    async def _take_later(self, tenant: str, quota: TenantQuota, tokens: int, store: SharedQuotas, now: float,
                           taken: list[tuple[str, float, float, float]], index: int,
                           pending: Awaitable[float | None] | None, entered: bool) -> bool:
        """`_take_shared` once the store must be asked: the slot first (max_concurrent),
        then the rate quotas from `index` on (`pending`: the answer already asked for)."""
        try:
            return await self._ask(tenant, quota, tokens, store, taken, index, pending, entered)
        except Unavailable as error:  # the store went away meanwhile, and its policy is to refuse
            raise self._refused(tenant, "shared_unavailable", error) from None

    async def _ask(self, tenant: str, quota: TenantQuota, tokens: int, store: SharedQuotas,
                   taken: list[tuple[str, float, float, float]], index: int,
                   pending: Awaitable[float | None] | None, entered: bool) -> bool:
        loop = asyncio.get_running_loop()
        if not entered:
            answer = store.enter(tenant, int(quota.max_concurrent))
            if answer is not None and not isinstance(answer, bool):
                answer = await answer
            if answer is None:
                return self._take_here(tenant, quota, tokens, loop.time())
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
                return self._take_here(tenant, quota, tokens, loop.time())
            raise self._over(tenant, step[0], self._limit(quota, step[0]), got, loop.time())
        quota.concurrent += 1
        return True

    @staticmethod
    def _undo(store: SharedQuotas, tenant: str, taken: list[tuple[str, float, float, float]]) -> None:
        for quota_name, units, _, _ in taken:
            store.give_back(tenant, quota_name, units)

    @staticmethod
    def _limit(quota: TenantQuota, name: str) -> float | None:
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
        """Undo `take_quota` for a request the queue refused after it (`shared`: what it answered)."""
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
        self.usage.answered(tenant, status)

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
        self.usage.refused(tenant, reason, error.http_status)
        return error

    # -- usage ----------------------------------------------------------------------------

    def active(self) -> list[str]:
        """The tenants that have sent something (the others have no usage), declared tenants
        first in their declared order, then those a reload removed, in the order they came:
        sorted among themselves, never looked for among every declared tenant."""
        order, last = self._order, len(self._order)
        return sorted(self.usage.by_tenant, key=lambda name: order.get(name, last))

    def snapshot(self, names: Iterable[str] | None = None) -> list[TenantUsageSnapshot]:
        """The usage now of `names` (by default every tenant that has sent something, in
        `active`'s order; a tenant that has sent nothing has none, and is left out)."""
        out = []
        for name in self.active() if names is None else names:
            usage = self.usage.by_tenant.get(name)
            if usage is None:
                continue
            quota = self._quotas.get(name)
            out.append(TenantUsageSnapshot(name, self.policy(name), name in self.policies, dict(usage.statuses),
                                           usage.rows, usage.tokens,
                                           usage.queue_wait_s.snapshot(), dict(usage.refusals),
                                           quota.concurrent if quota is not None else 0))
        return out
