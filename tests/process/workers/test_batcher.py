"""The batcher's side of the workers' channel (gateway/process/workers/batcher.py): /metrics of
several processes, as plain metric families, summed into one exposition."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.parser import text_string_to_metric_families

from gateway.observe.metrics import Scrape
from gateway.process.workers.batcher import merge_families


def process_metrics(requests: int, connections: int, waits: list[float]):
    registry = CollectorRegistry()
    counter = Counter("gateway_requests", "Requests", ["code"], registry=registry)
    counter.labels("200").inc(requests)
    Gauge("gateway_http_connections", "Open", registry=registry).set(connections)
    histogram = Histogram("gateway_queue_wait_seconds", "Wait", buckets=(0.01, 0.1), registry=registry)
    for wait in waits:
        histogram.observe(wait)
    return Scrape(list(registry.collect())).families()


def samples(text: bytes) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text.decode()) for s in family.samples}


def test_expositions_of_several_processes_sum_into_one():
    merged = samples(merge_families([process_metrics(3, 1, [0.005]), process_metrics(4, 2, [0.05, 0.5])]))
    assert merged[("gateway_requests_total", (("code", "200"),))] == 7
    assert merged[("gateway_http_connections", ())] == 3
    assert merged[("gateway_queue_wait_seconds_bucket", (("le", "0.01"),))] == 1
    assert merged[("gateway_queue_wait_seconds_bucket", (("le", "+Inf"),))] == 3
    assert merged[("gateway_queue_wait_seconds_count", ())] == 3


def test_the_merged_exposition_keeps_each_familys_type_and_help():
    text = merge_families([process_metrics(1, 0, []), process_metrics(1, 0, [])]).decode()
    assert "# TYPE gateway_requests_total counter" in text and "# HELP gateway_requests_total Requests" in text
    assert "# TYPE gateway_queue_wait_seconds histogram" in text
