"""The scenarios of `python -m tools.bench`: the one SCENARIOS table, name -> (function, description).

A scenario is a function of a `Context` (`tools.bench.harness`), one per module here. It
returns a dict: `title`, `setup` (prose), `tables` (each `title`, `columns`
[[key, header, format]], `rows`), `checks` (target vs measured), `runs` (every raw run)
and `plots` (data for tools.bench's PNGs, `tools.bench.report`).

It holds the table only: it imports every scenario module, and no scenario imports it (or
another scenario). The CLI reads it.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tools.bench.autoscale import autoscale
from tools.bench.cost import cost
from tools.bench.embeddings import embeddings
from tools.bench.goodput import goodput
from tools.bench.grpc_transports import grpc_transports
from tools.bench.harness import Context
from tools.bench.inflight import inflight
from tools.bench.kserve_docs import kserve_docs
from tools.bench.latency_curve import latency_curve
from tools.bench.loadgen_ceiling import loadgen_ceiling
from tools.bench.memory import memory
from tools.bench.overhead import overhead
from tools.bench.peers import peers
from tools.bench.perf_analyzer import perf_analyzer_scenario
from tools.bench.profile import profile
from tools.bench.rerank import rerank_scenario
from tools.bench.saturation import saturation
from tools.bench.shared_quotas import shared_quotas
from tools.bench.tenants import tenants_scenario
from tools.bench.torchserve import torchserve_scenario
from tools.bench.tracing import tracing
from tools.bench.triton import triton_scenario
from tools.bench.variable_length import variable_length
from tools.bench.workers import workers

SCENARIOS: dict[str, tuple[Callable[[Context], dict[str, Any]], str]] = {
    "kserve-docs": (kserve_docs, "5 clients, window vs adaptive vs direct (KServe's documented example)"),
    "saturation": (saturation, "128 clients on a 20 ms + 0.25 ms/instance predictor; HTTP and gRPC; inflight 1/2"),
    "cost": (cost, "the gateway's CPU per request vs minimal Tornado apps (RequestHandler, delegate) answering themselves"),
    "overhead": (overhead, "gateway vs minimal Tornado / grpc.aio servers; added latency at 1 client"),
    "profile": (profile, "where the gateway's CPU per request goes, by function (py-spy at the cost scenario's load)"),
    "grpc-transports": (grpc_transports, "the gateway's grpc.aio servicer vs grpc's synchronous server feeding the same loop"),
    "tracing": (tracing, "what OpenTelemetry tracing costs: off vs 1% vs 100% of requests traced"),
    "workers": (workers, "one gateway process vs --workers 2: gateway-bound, the seed scenario, saturation"),
    "latency-curve": (latency_curve, "p50/p99 vs req/s for direct, window and adaptive (plot)"),
    "memory": (memory, "RSS with 10,000 requests queued, and across 200,000 requests"),
    "loadgen-ceiling": (loadgen_ceiling, "the load generator's own cost per request against trivial servers"),
    "goodput": (goodput, "answers within a 200 ms SLO per second: adaptive, window, deadline, Triton's batcher"),
    "perf-analyzer": (perf_analyzer_scenario, "Triton's perf_analyzer as the load: HTTP, gRPC, streaming at 1 and 16"),
    "variable-length": (variable_length, "log-normal lengths 8..512: padding off vs pad to longest vs buckets"),
    "inflight": (inflight, 'max_inflight 1 vs 2 vs "auto" in front of predictors that want different values'),
    "torchserve": (torchserve_scenario, "TorchServe's own batching vs the gateway in front of it: a CNN on PNG uploads, an encoder"),
    "embeddings": (embeddings, "OpenAI embeddings: KServe alone vs the gateway in front of KServe and Triton vs Infinity"),
    "rerank": (rerank_scenario, "Cohere rerank, distinct queries: one query per call vs pairs batched across clients"),
    "triton": (triton_scenario, "the real Triton's dynamic batcher vs the gateway in front of it: 1, 5, 128 clients; added latency"),
    "tenants": (tenants_scenario, "one gateway shared by teams: noisy neighbour, fair shares, quotas, the cost of tenants"),
    "shared-quotas": (shared_quotas, "three replicas, one Redis ([shared]): rate, max_concurrent, Redis away, tokens, cost"),
    "peers": (peers, "the gateway untuned vs Triton's dynamic batcher (defaults, 2 ms delay) and MLServer: 5 and 64 clients"),
    "autoscale": (autoscale, "an HPA on CPU, queue/compute, gateway_predictor_load or an oracle scaling predictor replicas"),
}
