"""BatchingConfig: one model's batching settings (its `[models.batching]` TOML table).

Defaults live here and only here; `gateway.config` reads the TOML keys (milliseconds
where the key says `_ms`) into this dataclass and validates them. This module must not
know how the settings are used: the queue and the policies read them.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BatchingConfig:
    policy: str = "adaptive"     # the name of the policy (see gateway.batching.policies), as in TOML
    max_batch_size: int = 32     # hard cap on rows per executor call; larger requests are split
    max_latency_s: float = 0.5   # window: the most the oldest request waits for a full batch;
    #                              adaptive: also caps the learned hold (see policies.adaptive)
    max_inflight: int = 1        # batches of this model at the executor at once (when not auto)
    auto_inflight: bool = False  # max_inflight = "auto": learned per model (see batching.inflight)
    inflight_ceiling: int = 8    # auto: the most batches in flight it may try
    max_queue: int = 4096        # rows queued for this model beyond which requests are refused
    timeout_s: float = 60.0      # a request's deadline, from its arrival (a client may ask for less)
    max_hold_s: float = 0.01     # adaptive: the most a learned hold may delay a batch; 0 = never hold
    slo_s: float | None = None   # deadline: the answer's latency objective, and every request's deadline
    priority_levels: int = 0     # 0: one level for all; n: levels 1 (highest) .. n, FIFO within a level
    default_priority_level: int = 0  # the level of a request that names none (priority 0)
    max_batch_cost: int = 0      # padded elements (rows x padded length) per batch, tokens for texts; 0 = no limit
    #                              (see batching.padding)
    padding: PaddingConfig | None = None  # variable-length inputs: None = every length is its own signature
    demand_smoothing_s: float = 5.0  # the load signal's demand: its smoothing's time constant (see batching.load)


# -- variable-length inputs (see gateway.batching.padding for what they mean) ------------------

@dataclass(frozen=True, slots=True)
class PaddedInput:
    """An input whose dimension `dim` (never 0, the batch) may differ between requests."""
    name: str
    dim: int
    value: int | float | bool = 0  # what the gateway fills the padding with


@dataclass(frozen=True, slots=True)
class GeneratedInput:
    """An input the gateway fills for the model, never sent by a client: each row's real
    length (`kind` "length", shape [rows, 1]) or a 0/1 mask of it ("mask", [rows, padded])."""
    name: str
    datatype: str
    kind: str


@dataclass(frozen=True, slots=True)
class PaddingConfig:
    # Every padded input shares one length per row. None at all: the rows are texts, whose lengths
    # (tokens) the model layer measures and the request carries (gateway.embeddings).
    inputs: tuple[PaddedInput, ...]
    buckets: tuple[int, ...] = ()                  # ascending; () = pad to the longest member of the batch
    outputs: tuple[tuple[str, int], ...] = ()      # (output, its dim that follows the padded length)
    generated: tuple[GeneratedInput, ...] = ()
    # A batch's cost: rows x its longest padded length (a predictor that pads), or, `summed`,
    # the sum of its rows' own lengths (one that does not, e.g. packed sequences).
    summed: bool = False
    # Rows that are (query, document) pairs (a rerank model, gateway.batching.layouts.pairs):
    # the input holding each row's query ("" = not pairs), and whether a batch holds the pairs
    # of one query only (a predictor that takes one query per call).
    query_input: str = ""
    one_query: bool = False


# -- tenants (see gateway.batching.tenants for what the scheduler does with them) -------------

@dataclass(frozen=True, slots=True)
class TenantPolicy:
    """What the scheduler knows of one tenant (a `[[tenants]]` table): its name, never its
    keys; the priority level of its requests and its share among the tenants of a level; its
    quotas, held for the whole gateway at the scheduler (None: no limit)."""
    name: str
    priority: int = 0                         # its requests' level (0: the model's default); a request may ask lower
    weight: float = 1.0                       # its share of a batch among the tenants queued at one level
    requests_per_second: float | None = None  # a bucket of at most this many requests, refilled at this rate
    tokens_per_minute: float | None = None    # likewise in tokens (text models) or rows (tensor models)
    max_concurrent: int | None = None         # requests it may have in the scheduler at once
