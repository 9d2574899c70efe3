"""The token buckets a tenant's quotas are held in at the scheduler (`TokenBucket`), and one
tenant's buckets with its count of requests in the scheduler (`TenantQuota`).

A bucket holds at most one period's worth, refilled at its rate: `requests_per_second` a
bucket of that many requests (at least one) refilled at that rate, `tokens_per_minute` one
of that many tokens refilled at a sixtieth of it per second. A reload keeps the level of
each bucket whose tenant stays (capped at its new size); a new tenant's buckets start full.

Plain arithmetic on loop times handed in: it knows no event loop, no store, no tenant's
usage and no error.
"""
from __future__ import annotations

import math

from gateway.batching.config import TenantPolicy
from gateway.batching.quotas import REQUESTS, TOKENS
from wire.ratelimits import Bucket


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


class TenantQuota:
    """One tenant's buckets and count of requests in the scheduler."""

    __slots__ = ("policy", "requests", "tokens", "concurrent", "max_concurrent")

    def __init__(self, policy: TenantPolicy, now: float, before: TenantQuota | None = None) -> None:
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
