"""A model's declared tensors, `[[models.inputs]]` and `[[models.outputs]]`, and its
variable-length inputs: `pad` and `generate` of an input, `follows_pad` of an output, with
`buckets` and `max_batch_cost` of its `[models.batching]`, into `BatchingConfig.rows` (a `PaddedSpec`)
(gateway.batching.padding says what they mean).

Each key is declared once, in its table here (their values land in wire's TensorSpec and
batching's PaddedInput, which know no config; a default of theirs is read from them). It
knows no predictor protocol.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from gateway.batching.config import BatchingConfig, GeneratedInput, PaddedInput, PaddedSpec
from gateway.config.batching import PADDING_KEYS, TOKEN_KEYS, buckets, padded_cost
from gateway.config_keys import ConfigError, Key, Kind, Table, default_of, read, value
from wire.tensors import NUMPY_DTYPES, TensorSpec, is_wire_datatype

GENERATED_KINDS = ("length", "mask")
_SHAPE = Key("shape", Kind.INTEGERS, "Batch first; -1 for any size.", (-1, -1))

INPUTS = Table("models[].inputs[]", "[[models.inputs]]", (
    Key("name", Kind.STRING, "The input's name.", required=True),
    Key("datatype", Kind.STRING, "An OIP datatype: BOOL, INT8..UINT64, FP16, BF16, FP32, FP64 or BYTES.",
        required=True),
    _SHAPE,
    Key("pad", Kind.TABLE, "A variable dimension, padded by the gateway: { dim = 1, value = 0 }."),
    Key("generate", Kind.STRING, "An input the gateway fills: length (each row's, [-1, 1]) or mask ([-1, -1]).",
        choices=GENERATED_KINDS, apart=True),
))
PAD = Table("models[].inputs[].pad", "pad = { ... } of an input", (
    Key("dim", Kind.INTEGER, "The dimension that varies (never 0, the batch).", 1, minimum=1),
    Key("value", Kind.NUMBER_OR_BOOLEAN, "What the padding is filled with.", default_of(PaddedInput, "value")),
))
OUTPUTS = Table("models[].outputs[]", "[[models.outputs]]", (
    Key("name", Kind.STRING, "The output's name.", required=True),
    Key("datatype", Kind.STRING, "An OIP datatype.", required=True),
    _SHAPE,
    Key("follows_pad", Kind.INTEGER, "The output's dimension that follows the padded length: cut back to each "
                                     "request's own.", minimum=1, apart=True),
))


def tensor_specs(raw: Any, where: str, table: Table) -> tuple[TensorSpec, ...]:
    """`[[models.inputs]]` or `[[models.outputs]]` (`table`); pad, generate and follows_pad
    are read by `padding`."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(where, "must be an array of tables with name, datatype and shape")
    specs = []
    for index, item in enumerate(raw):
        item_key = f"{where}[{index}]"
        if not isinstance(item, dict):
            raise ConfigError(item_key, "must be a table with name, datatype and shape")
        values = read(table, item, item_key)
        if not is_wire_datatype(values["datatype"]):
            raise ConfigError(f"{item_key}.datatype", f"unknown datatype '{values['datatype']}'")
        shape = item.get("shape", list(_SHAPE.default))
        if not isinstance(shape, list) or not shape or not all(isinstance(d, int) and d >= -1 for d in shape):
            raise ConfigError(f"{item_key}.shape", "must be a list of integers (-1 for any size), batch first")
        specs.append(TensorSpec(values["name"], values["datatype"], tuple(shape)))
    return tuple(specs)


def padding(raw: dict, key: str, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec],
            batching_raw: dict, batching: BatchingConfig) -> BatchingConfig:
    """`pad` and `generate` of [[models.inputs]], `follows_pad` of [[models.outputs]],
    `buckets` and `max_batch_cost` of [models.batching], into `batching.rows`."""
    padded, generated = [], []
    for index, (spec, item) in enumerate(zip(inputs, raw.get("inputs") or [], strict=True)):
        item_key = f"{key}.inputs[{index}]"
        if "pad" in item:
            padded.append(_padded_input(spec, item["pad"], f"{item_key}.pad"))
        if "generate" in item:
            generated.append(_generated_input(spec, item, item_key))
    follows = []
    for index, (spec, item) in enumerate(zip(outputs, raw.get("outputs") or [], strict=True)):
        if "follows_pad" in item:
            dim = value(OUTPUTS["follows_pad"], item, f"{key}.outputs[{index}]")
            if len(spec.shape) <= dim or spec.shape[dim] != -1:
                raise ConfigError(f"{key}.outputs[{index}].follows_pad",
                                  f"dimension {dim} of shape {list(spec.shape)} must be -1: it is the padded length")
            follows.append((spec.name, dim))
    for name in sorted(TOKEN_KEYS & batching_raw.keys()):
        raise ConfigError(f"{key}.batching.{name}", "applies to an embedding model: add its [models.embeddings] table "
                                                    "(or, to a rerank model, its [models.rerank] table)")
    used = [f"{key}.batching.{name}" for name in sorted(PADDING_KEYS & batching_raw.keys())]
    used += [f"{key}.inputs[].generate"] * bool(generated) + [f"{key}.outputs[].follows_pad"] * bool(follows)
    if not padded:
        if used:
            raise ConfigError(used[0], "needs an input with a variable dimension: pad = { dim = 1, value = 0 } "
                                       "in its [[models.inputs]]")
        return batching
    lengths = buckets(batching_raw, f"{key}.batching")
    cost = padded_cost(batching_raw, f"{key}.batching", batching)
    rows = PaddedSpec(inputs=tuple(padded), buckets=lengths, outputs=tuple(follows), generated=tuple(generated))
    return replace(batching, max_batch_cost=cost, rows=rows)


def _padded_input(spec: TensorSpec, raw: Any, key: str) -> PaddedInput:
    if not isinstance(raw, dict):
        raise ConfigError(key, "must be a table: pad = { dim = 1, value = 0 }")
    dim = read(PAD, raw, key)["dim"]
    if len(spec.shape) <= dim or spec.shape[dim] != -1:
        raise ConfigError(f"{key}.dim", f"dimension {dim} of shape {list(spec.shape)} must be -1 (batch first): "
                                        f"it is the one that varies")
    if spec.datatype in ("BYTES", "BF16"):
        raise ConfigError(key, f"{spec.datatype} inputs cannot be padded")
    fill = raw.get("value", PAD["value"].default)
    integer = spec.datatype.startswith(("INT", "UINT"))
    fits = (isinstance(fill, bool) if spec.datatype == "BOOL" else
            isinstance(fill, int) and not isinstance(fill, bool) if integer else
            isinstance(fill, (int, float)) and not isinstance(fill, bool))
    if fits and integer:
        info = np.iinfo(NUMPY_DTYPES[spec.datatype])
        fits = info.min <= fill <= info.max
    if not fits:
        raise ConfigError(f"{key}.value", f"must be a value of {spec.datatype}, got {fill!r}")
    return PaddedInput(spec.name, dim, fill)


def _generated_input(spec: TensorSpec, item: dict, item_key: str) -> GeneratedInput:
    kind = value(INPUTS["generate"], item, item_key)
    key = f"{item_key}.generate"
    if "pad" in item:
        raise ConfigError(key, "a generated input is not padded: the gateway fills it")
    if spec.datatype in ("BYTES", "BF16"):
        raise ConfigError(key, f"a {kind} cannot be {spec.datatype}: use INT32, INT64, FP32 or BOOL")
    expected = (-1, 1) if kind == "length" else (-1, -1)
    if spec.shape != expected:
        raise ConfigError(key, f"a generated {kind} has shape {list(expected)} (batch first); "
                               f"declare shape = {list(expected)}, got {list(spec.shape)}")
    return GeneratedInput(spec.name, spec.datatype, kind)
