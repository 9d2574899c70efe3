"""What the live page shows: a JSON snapshot of each model's batching, from its stats snapshot.

`snapshot(scheduler)` is a plain dict, ready for any JSON encoder: `GET /dashboard/data`
(`gateway.rest.dashboard`) serializes it and the page (`gateway/rest/static/`) polls it
about once a second. Counts are cumulative since the model was added; the page turns two
successive snapshots into rates with `server_time_unix_s`, so this module keeps no history
and costs nothing between polls. Times are in milliseconds.

The shape, per model (`models`, sorted by name):

- `name`, `policy`, `max_batch_size`, `max_queue`, `slo_ms` (null without one),
  `priority_levels` (0: none);
- `queue`: `rows` queued now, and `requests` they belong to;
- `load`: the load signal (`batching.load`): `load` (demand / (capacity x replicas); null
  while the capacity is unknown), `demand_rows_per_second`, `capacity_rows_per_second`
  (one replica's; null before the profile's first call) and `replicas` in rotation;
- `inflight`: `batches` at the predictor now, `limit` (the one they may have now: per
  replica, times the replicas in rotation), `auto` (whether `max_inflight = "auto"` learned
  it) and `ceiling` (auto's most per replica, else null);
- `batch_size`: the histogram of rows per batch, `bounds` (upper bounds, inclusive) and
  `counts` (per bucket, not cumulative; one more than the bounds: the last is above the
  last bound), `sum`, `count`; and `recent`: the sizes of the latest batches, oldest first;
- `departures`: why batches left the queue, each reason of `policies.departures()` with its count;
- `profile`: the learned latency ℓ(b) = `intercept_ms` + `per_row_ms` × b, from `calls`
  predictor calls, and `predicted` ([b, ms] for b from 1 to max_batch_size, at most
  `PROFILE_POINTS` of them); the coefficients are null and `predicted` empty before the first call;
- `observed`: what the profile learns from, per batch size seen: `batch_size`, `calls`
  (successful predictor calls) and `mean_ms` (their mean predictor time);
- `counts`: cumulative `requests`, `answered` (successfully), `refused` (queue full, or
  evicted for a higher level), `refused_late` (at admission: predicted to miss the
  deadline), `dropped` (from the queue, it could no longer meet its deadline), `expired`
  (its deadline passed), `batches`, `instances` (rows batched);
- `goodput`: null without `slo_ms`; else `slo_ms` and `answered_within_slo`, which is
  `counts.answered`: with `slo_ms` every request's deadline is at most `slo_ms` from its
  arrival at the scheduler, and a request still unanswered at its deadline is answered
  with an error and counted `expired`, never `answered` (`stats.LevelCounts`). So every
  answer counted is within its deadline, and goodput per second is answered per second;
- `padding`: null for a model that pads nothing; else `padded_elements`, `real_elements`
  and `waste` (padded / real: 1.0 is none);
- `levels`: per priority level (empty without levels), `level`, `requests`, `answered`,
  `refused` (all refusals), `dropped`, `expired`;
- `last_batch_unix_s`: when the latest batch left (null before the first).

And `tenants` (`batching.usage`), in the scheduler's order (declared tenants first), each
by its name alone, never a key nor a digest of one. Only tenants that have sent something
are listed: one that has sent nothing has no row (so thousands declared and a few sending
cost the few), and the list is empty, and the page shows no table, until one has:

- `name`; `declared` (false for a tenant a reload removed, whose counts remain);
  `priority` (0: the model's default level), `weight`, and `quotas`:
  `requests_per_second`, `tokens_per_minute`, `max_concurrent` (null: none);
- `in_flight`: its requests in the gateway now (let in, not yet answered);
- `requests`: cumulative, all outcomes, refusals included; `statuses`: the same by HTTP
  status (`"200"`, `"429"`, ...);
- `rows` and `tokens` let into the queue (tokens as `tokens_per_minute` counts them);
- `queue_wait`: the histogram of time queued, `bounds_ms` (upper bounds), `counts` (per
  bucket, one more than the bounds), `sum_ms`, `count`;
- `refusals`: requests refused before they were queued, by reason (the quota that refused
  them, or the queue's error).

It reads the scheduler on the scheduler's own loop (the HTTP front end shares it): each
model's figures from its `batching.stats.StatsSnapshot`, its queue and slots from the
scheduler, the tenants' usage a chunk per loop turn (`read_tenant_usage`); the document is
built from those copies in a thread, so a long tenants' table never holds the loop. It must
not know Tornado, HTTP or any front end, nor change anything it reads.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

from gateway.batching.policies import departures as departure_reasons
from gateway.batching.scheduler import BatchScheduler
from gateway.batching.usage import TenantUsageSnapshot
from gateway.batching.view import ModelView

RECENT_BATCHES = 120  # recent batch sizes sent per model: two minutes of a batch a second
PROFILE_POINTS = 256  # ℓ(b) points sent: enough for a line however large max_batch_size is


async def snapshot(scheduler: BatchScheduler, now_unix_s: float | None = None) -> dict[str, Any]:
    """Every model's batching now, and the usage of the tenants that have sent something.
    Call on the scheduler's loop: read there, built in a thread (see the module)."""
    now = time.time() if now_unix_s is None else now_unix_s
    views = scheduler.views()
    usage = await scheduler.read_tenant_usage()
    return await asyncio.to_thread(document, views, usage, now)


def document(views: list[ModelView], usage: list[TenantUsageSnapshot], now_unix_s: float) -> dict[str, Any]:
    """`snapshot`'s document from the copies read on the loop: reads nothing live, any thread."""
    return {
        "server_time_unix_s": now_unix_s,
        "departure_reasons": list(departure_reasons()),
        "models": [model_snapshot(view) for view in views],
        "tenants": tenants_snapshot(usage),
    }


def tenants_snapshot(tenants: list[TenantUsageSnapshot]) -> list[dict[str, Any]]:
    """The `tenants` entry of `snapshot` (the module docstring says what each field holds)."""
    out = []
    for usage in tenants:
        policy, waited = usage.policy, usage.queue_wait_s
        out.append({
            "name": usage.tenant, "declared": usage.declared,
            "priority": policy.priority, "weight": policy.weight,
            "quotas": {"requests_per_second": policy.requests_per_second,
                       "tokens_per_minute": policy.tokens_per_minute, "max_concurrent": policy.max_concurrent},
            "in_flight": usage.concurrent,
            "requests": sum(usage.statuses.values()),
            "statuses": {str(status): count for status, count in sorted(usage.statuses.items())},
            "rows": usage.rows, "tokens": usage.tokens,
            "queue_wait": {"bounds_ms": [bound * 1000 for bound in waited.bounds], "counts": list(waited.counts),
                           "sum_ms": waited.sum * 1000, "count": waited.count},
            "refusals": dict(sorted(usage.refusals.items())),
        })
    return out


def model_snapshot(view: ModelView) -> dict[str, Any]:
    """One model's entry of `snapshot` (the module docstring says what each field holds)."""
    stats, config, signal = view.stats, view.config, view.load
    return {
        "name": view.name,
        "policy": config.policy,
        "max_batch_size": config.max_batch_size,
        "max_queue": config.max_queue,
        "slo_ms": None if config.slo_s is None else config.slo_s * 1000,
        "priority_levels": config.priority_levels,
        "queue": {"rows": view.queued_rows, "requests": view.queued_requests},
        "load": {"load": signal.load, "demand_rows_per_second": signal.demand_rows_per_second,
                 "capacity_rows_per_second": signal.capacity_rows_per_second, "replicas": signal.replicas},
        "inflight": {"batches": view.inflight, "limit": view.inflight_limit,
                     "auto": config.auto_inflight, "ceiling": config.inflight_ceiling if config.auto_inflight else None},
        "batch_size": {"bounds": list(stats.batch_size.bounds), "counts": list(stats.batch_size.counts),
                       "sum": stats.batch_size.sum, "count": stats.batch_size.count,
                       "recent": list(stats.recent_batch_sizes[-RECENT_BATCHES:])},
        "departures": {reason: stats.departures.get(reason, 0) for reason in departure_reasons()},
        "profile": _profile(stats.profile, stats.profile_calls, config.max_batch_size),
        "observed": [{"batch_size": size, "calls": durations.count, "mean_ms": durations.seconds / durations.count * 1000}
                     for size, durations in stats.by_batch_size.items() if durations.count],
        "counts": {"requests": stats.requests, "answered": stats.answered, "refused": stats.refused,
                   "refused_late": stats.refused_late, "dropped": stats.dropped, "expired": stats.expired,
                   "batches": stats.batches, "instances": stats.instances},
        "goodput": None if config.slo_s is None else {"slo_ms": config.slo_s * 1000,
                                                      "answered_within_slo": stats.answered},
        "padding": None if stats.padding is None else {
            "padded_elements": stats.padding.padded_elements, "real_elements": stats.padding.real_elements,
            "waste": stats.padding.waste},
        "levels": [{"level": level.level, "requests": level.requests, **level.outcomes} for level in stats.levels],
        "last_batch_unix_s": stats.last_batch_unix_s or None,
    }


def _profile(coefficients: tuple[float, float] | None, calls: int, max_batch_size: int) -> dict[str, Any]:
    """ℓ(b) as the page draws it, from its (intercept, per_row) in seconds and the calls it learned from."""
    if coefficients is None:
        return {"intercept_ms": None, "per_row_ms": None, "calls": calls, "predicted": []}
    intercept, per_row = coefficients
    # Every batch size when there are few; else evenly spaced ones, both ends included (a line needs no more).
    step = max(1, -(-max_batch_size // PROFILE_POINTS))
    sizes = sorted({*range(1, max_batch_size + 1, step), max_batch_size})
    return {"intercept_ms": intercept * 1000, "per_row_ms": per_row * 1000, "calls": calls,
            "predicted": [[size, (intercept + per_row * size) * 1000] for size in sizes]}
