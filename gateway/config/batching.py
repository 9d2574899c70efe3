"""The `[models.batching]` table: how a model's requests are batched.

Its keys are declared on BatchingConfig's fields (`gateway.batching.config`), but for those
that land in its padding (`buckets`, `max_batch_tokens`, `token_cost`), declared here; a
policy may add keys of its own (`policies.settings`). The rules between keys are the
functions here: the policy a key selects, `max_inflight = "auto"` and its ceiling, the
default priority level within the levels, and a text model's token budget. Padded inputs'
keys are read with the inputs (`gateway.config.tensors`).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from gateway.batching import policies
from gateway.batching.config import BatchingConfig, TextSpec
from gateway.config_keys import ConfigError, Key, Kind, Table, declared, fields, read, value

DEFAULT_MAX_BATCH_TOKENS = 16384  # TEI's default: 32 rows of 512 tokens
TOKEN_COSTS = ("longest", "sum")

BATCHING = Table("models[].batching", "[models.batching]", (
    *declared(BatchingConfig),
    Key("buckets", Kind.INTEGERS, "Ascending lengths: padded requests (or texts, in tokens) merge within one bucket."),
    Key("max_batch_tokens", Kind.INTEGER, "An embedding model's tokens per batch (a rerank model's: query plus "
                                          "document, each pair; with api = \"rerank\", the query once a batch).",
        DEFAULT_MAX_BATCH_TOKENS, minimum=1, apart=True),
    Key("token_cost", Kind.STRING, "How a batch of texts costs its tokens: longest (rows x the longest, a predictor "
                                   "that pads) or sum.", TOKEN_COSTS[0], choices=TOKEN_COSTS, apart=True),
))
PADDING_KEYS = frozenset({"buckets", "max_batch_cost"})  # read with the padded inputs
TOKEN_KEYS = frozenset({"max_batch_tokens", "token_cost"})  # read by token_budget


def batching(raw: dict, where: str) -> BatchingConfig:
    """The keys every policy shares and each policy's own (a key a policy declares beyond
    the table, `policies.Setting`, is in milliseconds); the padding and token keys are read
    apart, with what they need."""
    own = policies.settings()  # a policy's own keys: no field declares them (tests/test_config_keys.py)
    values = read(BATCHING, raw, where, also=own.keys())
    for setting in own.values():
        if setting.key in raw:
            positive = "must be positive" if setting.positive else ""
            duration = Key(setting.key, Kind.NUMBER, "", minimum=0, per=1000, positive=positive)
            values[setting.field] = value(duration, raw, where)
    # Triton's rule: the default level is one of the levels; here the lowest unless set.
    levels = values["priority_levels"]
    values["default_priority_level"] = value(replace(BATCHING["default_priority_level"], default=levels,
                                                     minimum=1 if levels else 0, maximum=levels), raw, where)
    values["policy"] = _policy(raw, where)
    # max_inflight is a number, or "auto" (learned, up to inflight_ceiling).
    inflight: Any = raw.get("max_inflight")
    auto = inflight == "auto"
    if isinstance(inflight, str) and not auto:
        raise ConfigError(f"{where}.max_inflight", f'must be an integer >= 1 or "auto", got {inflight!r}')
    if "inflight_ceiling" in raw and not auto:
        raise ConfigError(f"{where}.inflight_ceiling", 'applies only to max_inflight = "auto"')
    fixed = replace(BATCHING["max_inflight"], kind=Kind.INTEGER, minimum=1)
    values["max_inflight"] = fixed.value if auto else value(fixed, raw, where)
    values["inflight_ceiling"] = value(BATCHING["inflight_ceiling"], raw, where)
    return BatchingConfig(**fields(BatchingConfig, values), auto_inflight=auto)


def _policy(raw: dict, where: str) -> str:
    """A setting that selects a policy (slo_ms: the deadline policy) chooses it, and that
    policy cannot run without it."""
    selected_by = policies.selected_by()
    chosen = [name for setting_key, name in selected_by.items() if setting_key in raw]
    declared_policy = BATCHING["policy"]
    policy = value(replace(declared_policy, choices=policies.names(), default=chosen[0] if chosen
                           else declared_policy.default), raw, where)
    for setting_key, name in selected_by.items():
        if (policy == name) != (setting_key in raw):
            raise ConfigError(f"{where}.{setting_key}" if setting_key in raw else f"{where}.policy",
                              f"policy \"{name}\" and {setting_key} go together: set {setting_key} to use it")
    return policy


def token_budget(raw: dict, where: str, batching: BatchingConfig) -> BatchingConfig:
    """`max_batch_tokens`, `token_cost` and `buckets` of an embedding or rerank model's
    [models.batching] (`where`): each text (or pair) is a row whose length is its tokens
    (gateway.batching.padding)."""
    if "max_batch_cost" in raw:
        raise ConfigError(f"{where}.max_batch_cost", "an embedding or rerank model's batch is limited in "
                                                     "tokens: use max_batch_tokens")
    lengths = buckets(raw, where)
    tokens = value(BATCHING["max_batch_tokens"], raw, where)
    summed = value(BATCHING["token_cost"], raw, where) == "sum"
    return replace(batching, max_batch_cost=tokens, rows=TextSpec(buckets=lengths, summed=summed))


def padded_cost(raw: dict, where: str, batching: BatchingConfig) -> int:
    """`max_batch_cost` of a model with padded inputs: at least 1 when given."""
    if "max_batch_cost" not in raw:
        return batching.max_batch_cost
    return value(replace(BATCHING["max_batch_cost"], minimum=1), raw, where)


def buckets(raw: dict, where: str) -> tuple[int, ...]:
    found = raw.get("buckets", [])
    if (not isinstance(found, list) or not all(isinstance(b, int) and not isinstance(b, bool) and b >= 1
                                               for b in found) or found != sorted(set(found))):
        raise ConfigError(f"{where}.buckets", f"must be a list of ascending lengths >= 1, got {found!r}")
    return tuple(found)
