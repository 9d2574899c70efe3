"""The scheduler's figures as /metrics families, read from each model's view at scrape time
(`batching.view.ModelView`): batches, batch sizes, queue wait, predictor latency, refusals
and timeouts from its stats snapshot (`batching.stats.StatsSnapshot`), queue depth and
batches in flight, departures, priority levels, the learned profile, padding, and whether
the `[shared]` store holds the tenants' quotas now.

The bounds a model's figures are read against (`max_batch_size`, `max_queue`) and how many
of its predictor replicas are in rotation are read at scrape time too: the dashboard
(deploy/grafana) compares batch sizes with the largest, and the alerts (deploy/prometheus)
queue depth with its bound and replicas in rotation with their count.

The load signal an autoscaler targets (`batching.load`) is read at scrape time as well:
`gateway_predictor_capacity_rows_per_second`, `gateway_demand_rows_per_second`,
`gateway_predictor_replicas` and `gateway_predictor_load`; the capacity and the load have
no sample while the model's profile has seen no call.

It makes prometheus_client's families from copies (`gateway.observe.metrics.Scrape` renders them,
in any thread) and reads nothing live; it knows no front end, no predictor client and no
tenant (the tenants' families are `gateway.observe.tenant_metrics`).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from gateway.batching.instruments import HistogramSnapshot
from gateway.batching.load import LoadSignal
from gateway.batching.policies import departures as departure_reasons
from gateway.batching.stats import StatsSnapshot
from gateway.batching.view import ModelView


def families(views: list[ModelView], replicas: Mapping[str, list[bool]], shared: bool | None) -> list[Metric]:
    """Every family of the scheduler's but the tenants': each model's, then the shared
    store's. `replicas`: by model, whether each of its predictor replicas is in rotation;
    `shared`: the [shared] store holds the quotas now (None: there is no store)."""
    return [*_model_families(views, replicas), *_padding_families({view.name: view.stats for view in views}),
            *_load_families({view.name: view.load for view in views}), _shared_family(shared)]


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
