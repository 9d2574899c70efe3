"""A tenant's usage at the scheduler: what its requests did, counted since the gateway started.

Per tenant: requests by the HTTP status of their outcome, rows and tokens let in, time
queued (a histogram, per part), and refusals by reason: a quota's name
(`requests_per_second`, `tokens_per_minute`, `max_concurrent`, `shared_unavailable`), or the
queue's (`queue_full`, `deadline`: passed or sure to be missed, `too_large`: more rows than
the queue holds, `invalid`). Recorded on the scheduler's loop (`Usage`); read through
`tenant_quotas.Tenants.snapshot`. A tenant has usage once it has sent a request (its first
reaches the quotas, or is counted by the queue); one that has sent nothing has none, and is
left out of the snapshots: with thousands declared and a few sending, a reader pays for the
few (`/metrics`, the live page).

Nothing here is thread-safe: the scheduler's loop owns it. It knows no quota, no queue and
no keys.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from gateway.batching.config import TenantPolicy
from gateway.batching.instruments import SECONDS_BOUNDS, Histogram, HistogramSnapshot
from wire.errors import DeadlineExceeded, GatewayError, InvalidInput, Overloaded, PayloadTooLarge

# Why the queue refused a request of a tenant after its quotas let it through, by the error.
QUEUE_REFUSALS: dict[type[GatewayError], str] = {
    Overloaded: "queue_full", DeadlineExceeded: "deadline", PayloadTooLarge: "too_large", InvalidInput: "invalid",
}


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


class Usage:
    """Every tenant's usage that has sent something, by name, in the order they first came."""

    def __init__(self) -> None:
        self.by_tenant: dict[str, TenantUsage] = {}

    def of(self, tenant: str) -> TenantUsage:
        """The tenant's usage, started empty when it sends its first request."""
        usage = self.by_tenant.get(tenant)
        if usage is None:
            usage = self.by_tenant[tenant] = TenantUsage()
        return usage

    def let_in(self, tenant: str, rows: int, tokens: int) -> None:
        usage = self.of(tenant)
        usage.rows += rows
        usage.tokens += tokens

    def answered(self, tenant: str, status: int) -> None:
        """A request let in has its answer, of HTTP `status`."""
        self.of(tenant).statuses[status] += 1

    def refused_by_queue(self, tenant: str, error: GatewayError) -> None:
        """A request of `tenant` the queue refused (after its quotas let it in), by why."""
        reason = next((name for kind, name in QUEUE_REFUSALS.items() if isinstance(error, kind)), "other")
        self.refused(tenant, reason, error.http_status)

    def refused(self, tenant: str, reason: str, status: int) -> None:
        """A request of `tenant` refused before it was queued, for `reason`."""
        usage = self.of(tenant)
        usage.refusals[reason] += 1
        usage.statuses[status] += 1

    def queued_for(self, tenant: str, seconds: float) -> None:
        self.of(tenant).queue_wait_s.observe(seconds)
