"""BatchingConfig: one model's batching settings (its `[models.batching]` table).

Each setting a user writes is declared once, here, on its field (`gateway.config_keys.key`):
its TOML name, type, default, bounds and meaning; `gateway.config` reads the table with these
declarations (milliseconds where the key says `_ms`, seconds in the field) and the reference
page is written from them. This module must not know how the settings are used (the queue
and the policies read them), nor any TOML file or the config's parser.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.config_keys import Kind, key

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


# -- what a row is (see gateway.batching.layouts: each spec chooses its layout) ----------------

@dataclass(frozen=True, slots=True)
class PlainSpec:
    """Fixed-shape rows (and KServe v1 instances): every length is its own signature."""


@dataclass(frozen=True, slots=True)
class PaddedSpec:
    """Rows with a variable dimension, padded per batch: every padded input shares one
    length per row."""
    inputs: tuple[PaddedInput, ...]
    buckets: tuple[int, ...] = ()                  # ascending; () = pad to the longest member of the batch
    outputs: tuple[tuple[str, int], ...] = ()      # (output, its dim that follows the padded length)
    generated: tuple[GeneratedInput, ...] = ()
    # A batch's cost: rows x its longest padded length (a predictor that pads), or, `summed`,
    # the sum of its rows' own lengths (one that does not, e.g. packed sequences).
    summed: bool = False


@dataclass(frozen=True, slots=True)
class TextSpec:
    """One text a row, whose length is its tokens, measured by its model's kind and carried
    by the request (the gateway pads nothing): bucketed and costed as padded rows are."""
    buckets: tuple[int, ...] = ()
    summed: bool = False


@dataclass(frozen=True, slots=True)
class PairSpec(TextSpec):
    """One (query, document) pair a row: a text row (its lengths the query's and the
    document's tokens) whose query travels in `query_input`; `one_query`: a batch holds the
    pairs of one query only (a predictor that takes one query per call)."""
    query_input: str = ""
    one_query: bool = False


# What one row of a model's batch is: the one choice `layouts.layout_for` makes by type.
RowsSpec = PlainSpec | PaddedSpec | TextSpec | PairSpec
PLAIN = PlainSpec()


@dataclass(frozen=True, slots=True)
class BatchingConfig:
    # The name of the policy (see gateway.batching.policies); its choices and the key that
    # selects one are the policies' own, so the config reads it apart.
    policy: str = key(Kind.STRING, "adaptive", "window, adaptive or deadline (chosen by slo_ms).", apart=True)
    max_batch_size: int = key(Kind.INTEGER, 32, "Rows per predictor call; larger requests are split. Capped at the "
                              "predictor's own limit when it states one (a Triton model's max_batch_size).", minimum=1)
    timeout_s: float = key(Kind.NUMBER, 60.0, "A request's deadline from its arrival (a client may ask for less).",
                           minimum=0.001)
    # A number, or "auto" (auto_inflight: learned per model, see batching.inflight).
    max_inflight: int = key(Kind.INTEGER_OR_AUTO, 1, "Batches of this model at each predictor replica at once; "
                                                     "auto: learned.")
    demand_smoothing_s: float = key(Kind.NUMBER, 5000, "The load signal's demand (gateway_demand_rows_per_second): "
                                                       "the time constant of its exponential smoothing.",
                                    name="demand_smoothing_ms", per=1000, minimum=10)  # see batching.load
    inflight_ceiling: int = key(Kind.INTEGER, 8, 'max_inflight = "auto": the most it may try.', minimum=1,
                                apart=True)  # read with max_inflight, which it needs
    max_queue: int = key(Kind.INTEGER, 4096, "Rows queued beyond which requests are refused (429).", minimum=1)
    # 0: one level for all; n: levels 1 (highest) .. n, FIFO within a level.
    priority_levels: int = key(Kind.INTEGER, 0, "Priority levels, 1 the highest; 0: one level for all.", minimum=0)
    # Its bounds are the levels' (Triton's rule), so the config reads it apart.
    default_priority_level: int = key(Kind.INTEGER, 0, "The level of a request that names none.",
                                      shown="the lowest level", apart=True)
    # A request's rows past this share wait a level lower (see batching.admission.parts).
    long_request_rows: int = key(Kind.INTEGER, 64, "With priority_levels: a request's rows beyond this many wait one "
                                                   "level lower (below the lowest: behind it), so one long list "
                                                   "cannot hold everyone; 0: never.", minimum=0)
    max_latency_s: float = key(Kind.NUMBER, 500, "window: the most the oldest request waits for a full batch; "
                                                 "adaptive: caps the learned hold.",
                               name="max_latency_ms", per=1000, minimum=0)  # see policies.adaptive
    max_hold_s: float = key(Kind.NUMBER, 10, "adaptive: the most a learned hold may delay a batch; 0: never hold.",
                            name="max_hold_ms", per=1000, minimum=0)
    slo_s: float | None = key(Kind.NUMBER, None, "The deadline policy's latency objective, and every request's "
                                                 "deadline.", name="slo_ms", per=1000, minimum=0,
                              positive="must be positive")
    # Padded elements (rows x padded length) per batch, tokens for texts (see batching.padding);
    # read with the padding, which it needs.
    max_batch_cost: int = key(Kind.INTEGER, 0, "Padded elements (rows x padded length) per batch; 0: no limit.",
                              apart=True)
    auto_inflight: bool = False  # max_inflight = "auto"
    rows: RowsSpec = PLAIN  # what a row is: fixed-shape, padded, a text or a pair (set with the model's kind)


# -- tenants (see gateway.batching.tenant_quotas for what the scheduler does with them) -------------

# A tenant's weight and quotas: a positive, finite number, held as a float.
_POSITIVE: dict[str, Any] = {"positive": "must be a positive number, got {value}", "finite": True, "per": 1}
# The lowest requests_per_second: one request every 1,000 s (a 429's Retry-After is at most that).
MIN_REQUESTS_PER_SECOND = 0.001


@dataclass(frozen=True, slots=True)
class TenantPolicy:
    """What the scheduler knows of one tenant (a `[[tenants]]` table): its name, never its
    keys; the priority level of its requests and its share among the tenants of a level; its
    quotas, held for the whole gateway at the scheduler (None: no limit)."""
    name: str
    # Its requests' level (0: the model's default); a request may ask for a lower one.
    priority: int = key(Kind.INTEGER, 0, "The level of its requests where a model has priority_levels (1 the "
                                         "highest); a request may ask for a lower level, never a higher one.",
                        shown="the model's default", minimum=1)
    weight: float = key(Kind.NUMBER, 1.0, "Its share among the tenants queued at one level.", **_POSITIVE)
    # A bucket of at most this many requests (at least one, so a rate below 1 still admits one
    # request every 1/rate s), refilled at this rate. The minimum bounds the wait a 429 tells.
    requests_per_second: float | None = key(Kind.NUMBER, None, "Its quota of requests: a bucket of at most this many "
                                                               "(at least 1), refilled at this rate (0.5: one request "
                                                               "every 2 s); at least 0.001 (one every 1,000 s); over "
                                                               "it, 429 with Retry-After.",
                                            minimum=MIN_REQUESTS_PER_SECOND, **_POSITIVE)
    # Below one token a minute, no request that counts a token could ever pass.
    tokens_per_minute: float | None = key(Kind.NUMBER, None, "Its quota of tokens (text models; rows for tensor "
                                                             "models), a bucket of at most this many; at least 1.",
                                          minimum=1, **_POSITIVE)
    max_concurrent: int | None = key(Kind.INTEGER, None, "Its requests in the gateway at once; beyond, 429.",
                                     minimum=1)
