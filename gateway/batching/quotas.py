"""The seam between a tenant's quotas as this scheduler holds them and quotas held together
with other gateway replicas (`[shared]`: `gateway.shared.store`, over Redis).

`SharedQuotas` is what the scheduler's tenants (`tenants.Tenants`) ask, for a tenant with
quotas, when one is plugged in; without it every quota is held here, in this process's
token buckets, as before. It answers in one of three ways, and the tenants take each as it
comes:

* a number at once: 0.0, taken; more, refused, the seconds until it would be held (a rate
  quota served from the slice of the bucket this replica leased: no round trip);
* an awaitable of the same, when it must ask the store first (a slice leased, a slot counted);
* None: the store cannot be reached and its policy is to hold every quota here meanwhile
  (`on_unavailable = "local"`); the tenants then use their own buckets. A store whose policy
  is to refuse raises `Unavailable` instead.

It knows no Redis, no network and no keys: the store behind it is chosen and started by
the process's role, never here.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from wire.ratelimits import Bucket

REQUESTS = "requests_per_second"
TOKENS = "tokens_per_minute"

# A rate quota's answer: taken (0.0), refused for that many seconds, or, later, either.
Taken = float | Awaitable[float | None] | None
Entered = bool | Awaitable[bool | None] | None


class SharedQuotas(Protocol):
    """Quotas held together with other replicas (see the module)."""

    @property
    def mode(self) -> str:
        """"shared" (held together), "local" (the store is away: held here) or "refusing"
        (the store is away: tenants with quotas are refused)."""

    def attach(self, concurrent: Callable[[], Mapping[str, int]]) -> None:
        """How many requests each tenant has in this process now: what the store writes
        back for this replica when it returns after an absence."""

    def take(self, tenant: str, quota: str, units: float, capacity: float, rate: float) -> Taken:
        """Take `units` from the tenant's bucket `quota` (`capacity`, refilled at `rate` a second)."""

    def give_back(self, tenant: str, quota: str, units: float) -> None:
        """Units taken for a request that was then refused: they were never spent."""

    def enter(self, tenant: str, limit: int) -> Entered:
        """One more of the tenant's requests across the replicas, if fewer than `limit` are in."""

    def leave(self, tenant: str) -> None:
        """One of the tenant's requests that `enter` counted has its answer."""

    def bucket(self, tenant: str, quota: str, capacity: float, rate: float) -> Bucket | None:
        """What the tenant's bucket holds, as this replica last saw it (None: not shared now)."""
