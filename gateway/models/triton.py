"""Triton's model configuration and statistics extensions, as the gateway reports them.

Triton's own tools ask for these before anything else: perf_analyzer reads a model's
configuration to learn its batch size and tensors, and its statistics to split latency
into queue and compute time. Both documents are built here, once, as Triton's JSON
(its HTTP API); the gRPC front end parses the same dicts into Triton's protobuf messages.

- The configuration is the gateway's view of the model: the gateway's `max_batch_size`,
  `dynamic_batching` present (the gateway batches), inputs and outputs with their dims
  without the batch dimension, never decoupled. For a Triton predictor it starts from the
  predictor's own configuration and overlays only those.
- The statistics come from the model's stats snapshot (`batching.stats.StatsSnapshot`):
  `inference_count` is rows, `execution_count` batches, `queue` the time requests waited
  in the gateway's queue, `compute_infer` the predictor's time (per request, as Triton
  counts it), `batch_stats` per batch size; every key Triton returns is present.

It knows served models and scheduler stats, never a front end or a wire format.
"""
from __future__ import annotations

from typing import Any

from gateway.batching.instruments import Durations
from gateway.batching.stats import StatsSnapshot
from gateway.models.base import ServedModel, predictor_batch_limit
from wire.tensors import TensorSpec

EXTENSIONS = ("model_configuration", "statistics")
_NS = 1_000_000_000


def model_config(served: ServedModel, predictor_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The model's configuration as Triton's JSON document."""
    batching = served.batching  # its max_batch_size capped at the predictor's own
    config = dict(predictor_config or {})
    if config.get("input"):
        # Copies: the predictor's configuration is the model's, kept from one request to the next.
        for side in ("input", "output"):
            if side in config:
                config[side] = [dict(entry) for entry in config[side]]
        if predictor_batch_limit(config) is None:
            # A predictor that does not batch lists the batch dimension in its dims; the
            # gateway batches, so its dims are the rest.
            for entry in (*config["input"], *config.get("output", [])):
                entry["dims"] = list(entry.get("dims", []))[1:]
    else:
        config["input"] = [_tensor(spec, is_input=True) for spec in served.described_inputs]
        config["output"] = [_tensor(spec, is_input=False) for spec in served.described_outputs]
    config.update({
        "name": served.name,
        "max_batch_size": batching.max_batch_size,
        "dynamic_batching": {
            "preferred_batch_size": [],
            "max_queue_delay_microseconds": int(batching.max_latency_s * 1_000_000),
            "preserve_ordering": False,
            "priority_levels": 0,
            "default_priority_level": 0,
        },
        "model_transaction_policy": {"decoupled": False},
    })
    config.pop("sequence_batching", None)  # one scheduling choice: the gateway's
    config.pop("ensemble_scheduling", None)
    config.setdefault("platform", "")
    config.setdefault("backend", served.config.predictor.server)
    config.setdefault("parameters", {})
    return config


def _tensor(spec: TensorSpec, *, is_input: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": spec.name, "data_type": _config_datatype(spec.datatype),
                             "dims": list(spec.shape[1:])}
    if is_input:
        entry.update(format="FORMAT_NONE", optional=False)
    return entry


def _config_datatype(datatype: str) -> str:
    # Model configuration spells datatypes TYPE_*, with BYTES as TYPE_STRING.
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def model_statistics(served: ServedModel, figures: StatsSnapshot) -> dict[str, Any]:
    """One entry of Triton's `model_stats`, from the model's stats snapshot."""
    zero = _duration(Durations())
    queue = figures.queue_wait_s
    # Triton counts compute per request (perf_analyzer requires the three counts to agree);
    # the gateway's compute is the predictor call, which includes the predictor's own I/O.
    computed = figures.computed
    no_time = _duration(Durations(computed.count, 0.0))
    return {
        "name": served.name,
        "version": served.versions[0] if served.versions and served.versions[0].isdigit() else "1",
        "last_inference": int(figures.last_batch_unix_s * 1000),
        "inference_count": figures.instances,
        "execution_count": figures.batches,
        "inference_stats": {
            "success": _duration(figures.succeeded),
            "fail": _duration(figures.failed),
            "queue": _duration(Durations(queue.count, queue.sum)),
            "compute_input": no_time,
            "compute_infer": _duration(computed),
            "compute_output": no_time,
            "cache_hit": zero,
            "cache_miss": zero,
        },
        "response_stats": {},
        "batch_stats": [
            {"batch_size": size, "compute_input": _duration(Durations(durations.count, 0.0)),
             "compute_infer": _duration(durations), "compute_output": _duration(Durations(durations.count, 0.0))}
            for size, durations in figures.by_batch_size.items()
        ],
        "memory_usage": [],
    }


def _duration(durations: Durations) -> dict[str, int]:
    return {"count": durations.count, "ns": int(durations.seconds * _NS)}
