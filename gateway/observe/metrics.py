"""Prometheus metrics for GET /metrics: the registry of this process's own counts, and the
scrape.

Request counts by model, front end (the `protocol` label) and status, and each request's
duration, are recorded once per request, when its `gateway.lifecycle.Call` closes (the
service hands it here); the HTTP connection counts (`ConnectionStats`) and the trace spans
by outcome are read when /metrics is scraped. Everything the scheduler knows is read at
scrape time too, so batching pays nothing for metrics: each model's figures
(`gateway.observe.scheduler_metrics`) and the tenants' usage (`gateway.observe.tenant_metrics`). Each
gateway has its own registry, so several gateways can live in one process (tests do).

A scrape (`Metrics.exposition`) reads on the loop and renders off it: the registry's
families, each model's view and the tenants' usage are copied on the loop (`Metrics.scrape`,
the tenants a chunk per loop turn), and the copy, a `Scrape`, which reads nothing live, is
turned into text in a thread (the tenants' families written as strings directly, with no
object per sample for the cyclic collector to walk). However many tenants send, the loop is
held a chunk at a time, never for the whole text (under `--workers`, the batcher sums its
workers' counts in the thread too: `gateway.process.workers.batcher`).

It knows no front end and no predictor client: whether a model's replicas are in rotation
is asked of the callable `watch_scheduler` is given.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from gateway.batching.scheduler import BatchScheduler
from gateway.batching.usage import TenantUsageSnapshot
from gateway.batching.view import ModelView
from gateway.observe import scheduler_metrics, tenant_metrics
from wire.errors import CLIENT_CLOSED_REQUEST as CLIENT_CLOSED_REQUEST  # the front ends count a client gone by it here

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
REQUEST_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass(slots=True)
class ConnectionStats:
    """What the HTTP front end's connection layer holds now, and has accepted, refused or
    closed since start (`gateway.rest.connections` counts; /metrics exports)."""
    accepted: int = 0
    open: int = 0
    lingering: int = 0             # closed, still reading what the client sends: counted against the cap
    refused_over_capacity: int = 0
    accept_failures: int = 0
    timed_out: int = 0             # closed by the header, idle or body timeout
    bad_heads: int = 0             # answered 414 or 431


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._requests = Counter("gateway_requests", "Inference requests answered, by model, protocol and status code",
                                 ["model", "protocol", "code"], registry=self.registry)
        self._durations = Histogram("gateway_request_duration_seconds",
                                    "Inference requests from arrival to answer (or error), by model and protocol",
                                    ["model", "protocol"], buckets=REQUEST_BUCKETS_S, registry=self.registry)
        # Each label set's children, looked up once: prometheus_client's labels() validates
        # and locks on every call, a few microseconds on each request's path.
        self._counted: dict[tuple[str, str, str], Any] = {}
        self._timed: dict[tuple[str, str], Any] = {}
        self._scheduler: BatchScheduler | None = None
        self._replicas: Callable[[str], list[bool]] = lambda model: [True]

    def watch_scheduler(self, scheduler: BatchScheduler,
                        replicas: Callable[[str], list[bool]] = lambda model: [True]) -> None:
        """Export the figures of the scheduler that decides this process's batches (a
        worker has none: the batcher's are the gateway's). `replicas(model)`: whether each
        of the model's predictor replicas is in rotation, read when /metrics is scraped."""
        self._scheduler, self._replicas = scheduler, replicas

    def count_request(self, model: str, front_end: str, code: str, seconds: float) -> None:
        # The label keeps its published name, `protocol`: the protocol the client spoke.
        counted = self._counted.get((model, front_end, code))
        if counted is None:
            counted = self._counted[(model, front_end, code)] = self._requests.labels(model, front_end, code)
        counted.inc()
        timed = self._timed.get((model, front_end))
        if timed is None:
            timed = self._timed[(model, front_end)] = self._durations.labels(model, front_end)
        timed.observe(seconds)

    def watch_connections(self, stats: ConnectionStats) -> None:
        """Export the HTTP front end's connection counts, read when /metrics is scraped."""
        self.registry.register(_ConnectionCollector(stats))

    def watch_spans(self, counts: Callable[[], Mapping[str, int]]) -> None:
        """Export trace spans by outcome (exported, failed, dropped), read when /metrics is
        scraped: `counts` is the tracer's (gateway.telemetry)."""
        self.registry.register(_SpanCollector(counts))

    async def scrape(self) -> Scrape:
        """Everything /metrics says, copied now on the loop (see the module): the tenants'
        usage a chunk per loop turn, the rest at once (a few series per model)."""
        own = list(self.registry.collect())
        scheduler = self._scheduler
        if scheduler is None:
            return Scrape(own)
        views = scheduler.views()
        replicas = {view.name: self._replicas(view.name) for view in views}
        store = scheduler.tenants.store
        shared = None if store is None else store.mode == "shared"
        usage = await scheduler.read_tenant_usage()  # the loop runs between chunks: models' figures come first
        return Scrape(own, SchedulerFigures(views, replicas, usage, shared))

    async def exposition(self) -> bytes:
        """/metrics in Prometheus' text format: copied on the loop, rendered in a thread."""
        scrape = await self.scrape()
        return await asyncio.to_thread(scrape.render)

    def families(self) -> list[Family]:
        """This process's own counts (requests, connections, spans; not the scheduler's) as
        plain data, read now: a worker's part of the batcher's sum (see `Family`)."""
        return Scrape(list(self.registry.collect())).families()


# A metric family as plain data, so that several processes' can be summed without parsing
# their text (gateway.process.workers): (name, type, help, samples), each sample (name, labels, value
# as the text format writes it: NaN and infinities survive JSON).
Family = tuple[str, str, str, list[tuple[str, dict[str, str], str]]]


@dataclass(frozen=True, slots=True)
class SchedulerFigures:
    """The scheduler's figures at one scrape, copied on its loop."""
    views: list[ModelView]
    replicas: Mapping[str, list[bool]]  # by model: whether each of its predictor replicas is in rotation
    tenants: list[TenantUsageSnapshot]  # those that have sent something
    shared: bool | None  # the [shared] store holds the tenants' quotas now; None: no store


@dataclass(frozen=True, slots=True)
class Scrape:
    """What one scrape says, copied on the loop (`Metrics.scrape`): the registry's families
    as collected, and the scheduler's figures (None in a worker). It reads nothing live, so
    its text, where the work of a large exposition is, is written in any thread."""
    own: list[Metric]
    scheduler: SchedulerFigures | None = None

    def render(self) -> bytes:
        """The Prometheus text exposition: the registry's families, then the scheduler's."""
        return generate_latest(_Listed(self.own)) + self.scheduler_text()

    def families(self) -> list[Family]:
        """The registry's families as plain data (see `Family`): what a worker's are summed
        with (`gateway.process.workers.batcher`; the scheduler's are the batcher's alone)."""
        return [(metric.name, metric.type, metric.documentation,
                 [(sample.name, sample.labels, floatToGoString(sample.value)) for sample in metric.samples])
                for metric in self.own]

    def scheduler_text(self) -> bytes:
        """The scheduler's families as Prometheus text (nothing in a worker): the models'
        through prometheus_client (`gateway.observe.scheduler_metrics`), the tenants' written
        directly (`gateway.observe.tenant_metrics`)."""
        figures = self.scheduler
        if figures is None:
            return b""
        models = scheduler_metrics.families(figures.views, figures.replicas, figures.shared)
        return generate_latest(_Listed(models)) + tenant_metrics.text(figures.tenants).encode()


@dataclass(frozen=True, slots=True)
class _Listed:
    """Families already made, as prometheus_client's renderer reads a collector."""
    metrics: list[Metric]

    def collect(self) -> list[Metric]:
        return self.metrics


class _SpanCollector:
    def __init__(self, counts: Callable[[], Mapping[str, int]]) -> None:
        self.counts = counts

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        spans = CounterMetricFamily("gateway_trace_spans", "Trace spans by outcome: exported, failed (the collector "
                                    "refused them or could not be reached) or dropped (the export queue was full)",
                                    labels=["outcome"])
        for outcome, count in sorted(self.counts().items()):
            spans.add_metric([outcome], count)
        yield spans


class _ConnectionCollector:
    def __init__(self, stats: ConnectionStats) -> None:
        self.stats = stats

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        stats = self.stats
        yield GaugeMetricFamily("gateway_http_connections", "HTTP client connections open", value=stats.open)
        # Beside the requests, how often clients keep their connections (nginx's `accepts`).
        yield CounterMetricFamily("gateway_http_connections_accepted", "HTTP client connections accepted and served",
                                  value=stats.accepted)
        yield GaugeMetricFamily("gateway_http_connections_lingering",
                                "HTTP connections closed after an early answer, still reading what their client "
                                "sends (counted against server.max_connections)", value=stats.lingering)
        refused = CounterMetricFamily("gateway_http_connections_refused", "HTTP connections refused at accept",
                                      labels=["reason"])
        refused.add_metric(["max_connections"], stats.refused_over_capacity)
        refused.add_metric(["accept_failed"], stats.accept_failures)
        yield refused
        yield CounterMetricFamily("gateway_http_connections_timed_out",
                                  "HTTP connections closed by the header, idle or body timeout", value=stats.timed_out)
        yield CounterMetricFamily("gateway_http_bad_request_heads", "HTTP requests refused 414 or 431",
                                  value=stats.bad_heads)
