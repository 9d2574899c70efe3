"""wire/ratelimits.py: a tenant's buckets as OpenAI's x-ratelimit-* headers, the reset in
OpenAI's (Go's) spelling, rounded up so that no client retries before it."""
from __future__ import annotations

import pytest

from wire.ratelimits import Bucket, QuotaState, duration, openai_headers


@pytest.mark.parametrize(("seconds", "spelled"), [
    (0, "0s"), (0.0204, "21ms"), (0.999, "999ms"), (1, "1s"), (1.5, "1.5s"), (59.25, "59.25s"),
    (60, "1m0s"), (360, "6m0s"), (3723, "1h2m3s"), (-1, "0s"),
])
def test_durations_as_openai_writes_them(seconds, spelled):
    assert duration(seconds) == spelled


def test_six_headers_with_both_quotas_three_with_one_none_without():
    both = QuotaState(Bucket(30, 29.7, 0.01), Bucket(600000, 5.2, 59.9913))
    assert openai_headers(both) == {
        "x-ratelimit-limit-requests": "30", "x-ratelimit-remaining-requests": "29",
        "x-ratelimit-reset-requests": "10ms", "x-ratelimit-limit-tokens": "600000",
        "x-ratelimit-remaining-tokens": "5", "x-ratelimit-reset-tokens": "59.992s"}
    assert set(openai_headers(QuotaState(tokens=Bucket(10, -3, 1)))) == {
        "x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"}
    assert openai_headers(QuotaState(tokens=Bucket(10, -3, 1)))["x-ratelimit-remaining-tokens"] == "0"
    assert openai_headers(None) == {}
