"""A tenant's quotas as a client is told of them: what its buckets hold at one moment
(`QuotaState`), and that state in OpenAI's six `x-ratelimit-*` headers (`openai_headers`),
with their reset written as OpenAI writes it (`duration`: `1s`, `6m0s`, `20ms`).

OpenAI's clients and dashboards read those headers on every answer; a refusal's own
`Retry-After` and `retry-after-ms` are the error's (`wire.errors.RateLimited`). This module
knows no tenant's key, no scheduler and no web framework: only numbers and their spelling.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Bucket:
    """One quota's bucket at one moment: its size, what it holds, and the seconds until it
    is full again at its rate."""
    limit: float
    remaining: float
    reset_s: float


@dataclass(frozen=True, slots=True)
class QuotaState:
    """A tenant's `requests_per_second` and `tokens_per_minute` buckets (None: no such quota)."""
    requests: Bucket | None = None
    tokens: Bucket | None = None


def duration(seconds: float) -> str:
    """A duration as OpenAI's `x-ratelimit-reset-*` headers spell it (Go's notation):
    `0s`, `20ms`, `1s`, `1.5s`, `6m0s`, `1h2m3s`. Rounded up to the millisecond, so a
    client never retries before it."""
    ms = max(0, math.ceil(seconds * 1000 - 1e-6))
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    whole, fraction = divmod(rest, 1000)
    secs = f"{whole}.{fraction:03d}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{secs}"
    if minutes:
        return f"{minutes}m{secs}"
    return secs


def openai_headers(state: QuotaState | None) -> dict[str, str]:
    """OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` for `state` (none
    without a state). The limit is the bucket's size, the remaining what it holds now as a
    whole number, the reset the time until it is full."""
    if state is None:
        return {}
    headers: dict[str, str] = {}
    for kind, bucket in (("requests", state.requests), ("tokens", state.tokens)):
        if bucket is not None:
            headers[f"x-ratelimit-limit-{kind}"] = f"{bucket.limit:.0f}"
            headers[f"x-ratelimit-remaining-{kind}"] = str(max(0, math.floor(bucket.remaining)))
            headers[f"x-ratelimit-reset-{kind}"] = duration(bucket.reset_s)
    return headers
