"""Prometheus metrics for GET /metrics.

Request counts by model, front end (the `protocol` label) and status, and each request's
duration, are recorded once per request, when its `gateway.lifecycle.Call` closes (the
service hands it here). Everything the scheduler knows is read when /metrics is scraped,
so batching pays nothing for metrics: batches, batch sizes, queue wait, predictor latency,
refusals and timeouts from each model's stats snapshot (`batching.stats.StatsSnapshot`),
queue depth and batches in flight from the scheduler. Each gateway has its own registry,
so several gateways can live in one process (tests do).

The bounds a model's figures are read against (`max_batch_size`, `max_queue`) and how many
of its predictor replicas are in rotation are read at scrape time too: the dashboard
(deploy/grafana) compares batch sizes with the largest, and the alerts (deploy/prometheus)
queue depth with its bound and replicas in rotation with their count.

The load signal an autoscaler targets (`batching.load`) is read at scrape time as well:
`gateway_predictor_capacity_rows_per_second`, `gateway_demand_rows_per_second`,
`gateway_predictor_replicas` and `gateway_predictor_load`; the capacity and the load have
no sample while the model's profile has seen no call.

Tenants' usage (`batching.usage`, the scheduler's `read_tenant_usage`) too, labelled by
the tenant's name, never a key or a digest of one: `gateway_tenant_*` (requests by status,
rows, tokens, time queued, refusals by reason, requests in the gateway now). A tenant has
these series once it has sent something; one that has sent nothing (and every tenant, with
none declared) has no sample, so a scrape is as large as the tenants that send, not the
tenants declared. Like every scheduler figure they are the batcher's under `--workers`: one
set of counts for the gateway.

A scrape (`Metrics.exposition`) reads on the loop and renders off it: the registry's
families, each model's view and the tenants' usage are copied on the loop (`Metrics.scrape`,
the tenants a chunk per loop turn), and the copy, a `Scrape`, which reads nothing live, is
turned into text in a thread (the tenants' families written as strings directly, with no
object per sample for the cyclic collector to walk: `_tenant_text`). However many tenants send, the loop is held a
chunk at a time, never for the whole text (under `--workers`, the batcher sums its workers'
counts in the thread too: `gateway.workers.batcher`).

It knows no front end and no predictor client: a replica set is recognised by what it keeps
(`healthy`, one flag per replica), not by its class.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from gateway.batching.instruments import HistogramSnapshot
from gateway.batching.load import LoadSignal
from gateway.batching.policies import departures as departure_reasons
from gateway.batching.scheduler import BatchScheduler
from gateway.batching.stats import StatsSnapshot
from gateway.batching.usage import TenantUsageSnapshot
from gateway.batching.view import ModelView
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
# their text (gateway.workers): (name, type, help, samples), each sample (name, labels, value
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
        with (`gateway.workers.batcher`; the scheduler's are the batcher's alone)."""
        return [(metric.name, metric.type, metric.documentation,
                 [(sample.name, sample.labels, floatToGoString(sample.value)) for sample in metric.samples])
                for metric in self.own]

    def scheduler_text(self) -> bytes:
        """The scheduler's families as Prometheus text (nothing in a worker): the models'
        through prometheus_client, the tenants' written directly (`_tenant_text`)."""
        figures = self.scheduler
        if figures is None:
            return b""
        views = figures.views
        models = [*_model_families(views, figures.replicas),
                  *_padding_families({view.name: view.stats for view in views}),
                  *_load_families({view.name: view.load for view in views}), _shared_family(figures.shared)]
        return generate_latest(_Listed(models)) + _tenant_text(figures.tenants).encode()


@dataclass(frozen=True, slots=True)
class _Listed:
    """Families already made, as prometheus_client's renderer reads a collector."""
    metrics: list[Metric]

    def collect(self) -> list[Metric]:
        return self.metrics


# Per-model figures, read from each model's view at scrape time: name -> (help, how to read it).
_COUNTERS: dict[str, tuple[str, Callable[[StatsSnapshot], int]]] = {
    "gateway_batches": ("Batches sent to the predictor", lambda stats: stats.batches),
    "gateway_batched_instances": ("Rows sent to the predictor in batches", lambda stats: stats.instances),
    "gateway_refused": ("Requests refused because the queue was full", lambda stats: stats.refused),
    "gateway_refused_late": ("Requests refused at admission: predicted to miss their deadline",
                             lambda stats: stats.refused_late),
    "gateway_dropped": ("Queued requests dropped, never sent: they could no longer meet their deadline",
                        lambda stats: stats.dropped),
    "gateway_timeouts": ("Requests answered with a deadline error", lambda stats: stats.expired),
    "gateway_isolations": ("Merged batches the predictor rejected, bisected to isolate the bad request",
                           lambda stats: stats.isolations),
    "gateway_answered": ("Requests answered successfully, all within their deadline (late ones are timeouts)",
                         lambda stats: stats.answered),
}
_HISTOGRAMS: dict[str, tuple[str, Callable[[StatsSnapshot], HistogramSnapshot]]] = {
    "gateway_batch_size": ("Rows per batch", lambda stats: stats.batch_size),
    "gateway_queue_wait_seconds": ("Time a request (or part) waited in the queue", lambda stats: stats.queue_wait_s),
    "gateway_predictor_latency_seconds": ("Time the predictor took per call", lambda stats: stats.predictor_s),
}
# Gauges read from the view and the model's replicas (in rotation or not).
_GAUGES: dict[str, tuple[str, Callable[[ModelView, list[bool]], float]]] = {
    "gateway_queue_depth": ("Rows queued", lambda view, replicas: view.queued_rows),
    "gateway_queue_limit": ("Rows the model may queue (batching.max_queue): beyond it requests are refused",
                            lambda view, replicas: view.config.max_queue),
    "gateway_batch_size_limit": ("Rows a batch may hold (batching.max_batch_size): what a full batch is",
                                 lambda view, replicas: view.config.max_batch_size),
    "gateway_replicas": ("Predictor replicas of the model (1 for a single url)", lambda view, replicas: len(replicas)),
    "gateway_replicas_in_rotation": (
        "Predictor replicas batches are sent to: the others were unreachable and wait for their probe to pass",
        lambda view, replicas: sum(replicas)),
    "gateway_batches_in_flight": ("Batches at the predictor", lambda view, replicas: view.inflight),
    "gateway_batches_in_flight_limit": (
        "Batches the model may have at the predictor: max_inflight (or the value \"auto\" has learned) "
        "per replica in rotation",
        lambda view, replicas: view.inflight_limit),
}


def _model_families(views: list[ModelView], replicas: Mapping[str, list[bool]]) -> Iterator[Metric]:
    """Each model's counters, histograms, gauges, departures, levels and learned profile."""
    counters = [(CounterMetricFamily(name, text, labels=["model"]), read) for name, (text, read) in _COUNTERS.items()]
    histograms = [(HistogramMetricFamily(name, text, labels=["model"]), read)
                  for name, (text, read) in _HISTOGRAMS.items()]
    gauges = [(GaugeMetricFamily(name, text, labels=["model"]), read) for name, (text, read) in _GAUGES.items()]
    departures = CounterMetricFamily("gateway_batch_departures",
                                     f"Batches by why they left the queue: {', '.join(departure_reasons())}",
                                     labels=["model", "reason"])
    level_requests = CounterMetricFamily("gateway_priority_requests", "Requests received, by priority level",
                                         labels=["model", "level"])
    level_outcomes = CounterMetricFamily(
        "gateway_priority_outcomes",
        "Requests by priority level and what became of them: answered, refused, dropped or expired",
        labels=["model", "level", "outcome"])
    intercept = GaugeMetricFamily("gateway_predictor_profile_intercept_seconds",
                                  "Learned predictor time of a batch, fixed part: l(b) = intercept + per_row * b",
                                  labels=["model"])
    per_row = GaugeMetricFamily("gateway_predictor_profile_per_row_seconds",
                                "Learned predictor time of a batch, per row: l(b) = intercept + per_row * b",
                                labels=["model"])
    for view in views:
        model, stats, in_rotation = view.name, view.stats, replicas[view.name]
        for counter, count in counters:
            counter.add_metric([model], count(stats))
        for family, histogram_of in histograms:
            histogram = histogram_of(stats)
            family.add_metric([model], histogram.cumulative(), histogram.sum)
        for gauge, read in gauges:
            gauge.add_metric([model], read(view, in_rotation))
        for reason in departure_reasons():
            departures.add_metric([model, reason], stats.departures.get(reason, 0))
        for level in stats.levels:
            level_requests.add_metric([model, str(level.level)], level.requests)
            for outcome, number in level.outcomes.items():
                level_outcomes.add_metric([model, str(level.level), outcome], number)
        if stats.profile is not None:
            intercept.add_metric([model], stats.profile[0])
            per_row.add_metric([model], stats.profile[1])
    yield from (family for family, _ in counters)
    yield from (family for family, _ in histograms)
    yield from (family for family, _ in gauges)
    yield from (departures, level_requests, level_outcomes, intercept, per_row)


def _shared_family(shared: bool | None) -> Metric:
    """Whether the tenants' quotas are held across the replicas now ([shared]; no sample without it)."""
    family = GaugeMetricFamily(
        "gateway_shared_quotas_available",
        "1 while the [shared] store holds the tenants' quotas across the gateway's replicas; 0 while it cannot be "
        "reached (each replica then holds them on its own, or refuses, as on_unavailable says)")
    if shared is not None:
        family.add_metric([], 1.0 if shared else 0.0)
    return family


# The tenants' families, in the order they are written: (name, type, help).
_TENANT_FAMILIES = {
    "requests": ("gateway_tenant_requests", "counter",
                 "A tenant's requests by the HTTP status of their outcome, its quota's refusals (429) included"),
    "rows": ("gateway_tenant_rows", "counter", "Rows of a tenant's requests let into the queue"),
    "tokens": ("gateway_tenant_tokens", "counter",
               "Tokens of a tenant's requests let into the queue, as its tokens_per_minute counts them "
               "(a text model's tokens, a tensor model's rows)"),
    "queued": ("gateway_tenant_queue_wait_seconds", "histogram",
               "Time a tenant's request (or part) waited in the queue"),
    "refusals": ("gateway_tenant_refusals", "counter",
                 "A tenant's requests refused before they were queued, by reason: the quota refused "
                 "(requests_per_second, tokens_per_minute, max_concurrent) or why the queue refused it "
                 "(queue_full, deadline, too_large, invalid)"),
    "in_flight": ("gateway_tenant_requests_in_flight", "gauge",
                  "A tenant's requests in the gateway now: let in, not yet answered (what max_concurrent caps)"),
}


def _tenant_text(usage: list[TenantUsageSnapshot]) -> str:
    """Each tenant's usage (gateway.batching.usage) by its name, as Prometheus text: the
    families are always described, with samples only for the tenants that have sent
    something (those `usage` holds). The one part of a scrape that grows with the tenants,
    so it is written as strings directly, the text prometheus_client writes (labels sorted
    by name): no Metric and Sample objects, whose millions would run the cyclic collector,
    which stops every thread, the loop's too, for tens of milliseconds at a time."""
    number = floatToGoString
    names = [(tenant, _escape_label(tenant.tenant)) for tenant in usage]
    out: list[str] = []

    def head(family: str) -> str:
        name, kind, text = _TENANT_FAMILIES[family]
        exposed = f"{name}_total" if kind == "counter" else name
        out.append(f"# HELP {exposed} {_escape_help(text)}\n# TYPE {exposed} {kind}\n")
        return exposed

    exposed = head("requests")
    out.extend(f'{exposed}{{code="{status}",tenant="{name}"}} {number(count)}\n'
               for tenant, name in names for status, count in sorted(tenant.statuses.items()))
    exposed = head("rows")
    out.extend(f'{exposed}{{tenant="{name}"}} {number(tenant.rows)}\n' for tenant, name in names)
    exposed = head("tokens")
    out.extend(f'{exposed}{{tenant="{name}"}} {number(tenant.tokens)}\n' for tenant, name in names)
    exposed = head("queued")
    for tenant, name in names:
        waited = tenant.queue_wait_s.cumulative()
        out.extend(f'{exposed}_bucket{{le="{bound}",tenant="{name}"}} {number(count)}\n' for bound, count in waited)
        out.append(f'{exposed}_count{{tenant="{name}"}} {number(waited[-1][1])}\n'
                   f'{exposed}_sum{{tenant="{name}"}} {number(tenant.queue_wait_s.sum)}\n')
    exposed = head("refusals")
    out.extend(f'{exposed}{{reason="{_escape_label(reason)}",tenant="{name}"}} {number(count)}\n'
               for tenant, name in names for reason, count in sorted(tenant.refusals.items()))
    exposed = head("in_flight")
    out.extend(f'{exposed}{{tenant="{name}"}} {number(tenant.concurrent)}\n' for tenant, name in names)
    return "".join(out)


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _load_families(signals: Mapping[str, LoadSignal]) -> Iterator[Metric]:
    """The load signal (gateway.batching.load), per model."""
    capacity = GaugeMetricFamily(
        "gateway_predictor_capacity_rows_per_second",
        "Rows per second one predictor replica sustains at the model's batch limit and in-flight setting "
        "(within slo_ms when set), from the learned profile; no sample before its first call", labels=["model"])
    demand = GaugeMetricFamily("gateway_demand_rows_per_second",
                               "Rows arriving for the model, admitted and refused, exponentially smoothed",
                               labels=["model"])
    replicas = GaugeMetricFamily("gateway_predictor_replicas", "Predictor replicas in rotation", labels=["model"])
    load = GaugeMetricFamily(
        "gateway_predictor_load",
        "Demand / (capacity x replicas): the share of the predictor fleet the demand uses, what an autoscaler "
        "targets (e.g. 0.7); no sample before the profile's first call", labels=["model"])
    for model, signal in signals.items():
        demand.add_metric([model], signal.demand_rows_per_second)
        replicas.add_metric([model], signal.replicas)
        if signal.capacity_rows_per_second is not None:
            capacity.add_metric([model], signal.capacity_rows_per_second)
        if signal.load is not None:
            load.add_metric([model], signal.load)
    yield from (capacity, demand, replicas, load)


def _padding_families(snapshots: Mapping[str, StatsSnapshot]) -> Iterator[Metric]:
    """Variable-length inputs (gateway.batching.padding), for the models that padded a batch."""
    padded = CounterMetricFamily("gateway_padded_elements",
                                 "Elements along the padded length sent to the predictor: rows x padded length",
                                 labels=["model"])
    real = CounterMetricFamily("gateway_real_elements", "Elements along the padded length that were the rows' own",
                               labels=["model"])
    waste = GaugeMetricFamily("gateway_padding_waste_ratio",
                              "Padded elements / real elements since start (1.0 = no padding)", labels=["model"])
    cost = HistogramMetricFamily("gateway_batch_cost", "Padded elements per batch (what max_batch_cost caps)",
                                 labels=["model"])
    for model, stats in snapshots.items():
        if stats.padding is None:
            continue
        padded.add_metric([model], stats.padding.padded_elements)
        real.add_metric([model], stats.padding.real_elements)
        waste.add_metric([model], stats.padding.waste)
        cost.add_metric([model], stats.padding.cost.cumulative(), stats.padding.cost.sum)
    yield from (padded, real, waste, cost)


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
