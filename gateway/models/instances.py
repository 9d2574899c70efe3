"""KServe v1 instances and typed tensors, both ways, by a model's signature.

For a model with one input an instance is one row of that input; with several inputs it is
an object `{input_name: row, ...}`. Predictions follow the same rule for outputs. BYTES
elements that are not UTF-8 travel as KServe v1's `{"b64": "<base64>"}`, so no byte is lost.

For a model with variable-length inputs, instances may be *ragged* along an input's declared
variable dimension: they are padded to the longest instance with the input's pad value,
and each instance's own length is kept (`padded_instances_to_tensors`), so that per-token
predictions are cut back to each instance's own length (`outputs_to_predictions` with
`trims`). Instances ragged anywhere else are refused, naming the dimension.

This is the one place these conversions live; it knows no wire format (bodies are the v1
codec's) and nothing of batching but its padding arithmetic (`batching.padding`: rows padded
to one length, and cut back to their own, written there once).
"""
from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

import numpy as np

from gateway.batching.padding import cut_back, pad_rows
from wire.codecs.json_data import json_to_array
from wire.errors import BadPredictorAnswer, InvalidInput
from wire.tensors import JSON, RAW_ONLY, Tensor, TensorSpec, shape_fits


def instances_to_tensors(instances: list[Any], inputs: tuple[TensorSpec, ...]) -> list[Tensor]:
    """Convert v1 instances to the model's input tensors (in the model's input order)."""
    columns = _columns(instances, inputs)
    return [_column(spec, columns[spec.name]) for spec in inputs]


def padded_instances_to_tensors(instances: list[Any], inputs: tuple[TensorSpec, ...],
                                padded: Mapping[str, tuple[int, Any]]) -> tuple[list[Tensor], np.ndarray]:
    """Convert v1 instances to the model's input tensors when `padded` inputs (name -> the
    variable dimension, batch first, and the pad value) may be ragged there; returns the
    tensors and each instance's own length, which every padded input must share."""
    columns = _columns(instances, inputs)
    tensors, lengths = [], None
    for spec in inputs:
        if spec.name not in padded:
            tensors.append(_column(spec, columns[spec.name]))
            continue
        dim, value = padded[spec.name]
        tensor, own = _padded_column(spec, columns[spec.name], dim, value)
        if lengths is not None and not np.array_equal(lengths, own):
            raise InvalidInput(f"input '{spec.name}': each instance's padded inputs must have one length; "
                               f"they differ ({lengths.tolist()} and {own.tolist()})")
        lengths = own
        tensors.append(tensor)
    assert lengths is not None  # `padded` names at least one of `inputs`
    return tensors, lengths


def _columns(instances: list[Any], inputs: tuple[TensorSpec, ...]) -> dict[str, list[Any]]:
    """Each input's rows: the instances themselves for one input, else their values by key."""
    if len(inputs) == 1:
        return {inputs[0].name: instances}
    columns: dict[str, list[Any]] = {spec.name: [] for spec in inputs}
    for index, instance in enumerate(instances):
        if not isinstance(instance, dict) or set(instance) != set(columns):
            raise InvalidInput(
                f"instance {index}: this model has inputs {sorted(columns)}; each instance must be "
                f"an object with exactly those keys"
            )
        for name, value in instance.items():
            columns[name].append(value)
    return columns


def _padded_column(spec: TensorSpec, rows: list[Any], dim: int, value: Any) -> tuple[Tensor, np.ndarray]:
    """Rows that may differ along `dim`, padded with `value` to the longest; their lengths."""
    one_row = TensorSpec(spec.name, spec.datatype, (1, *(-1,) * (len(spec.shape) - 1)))
    arrays = []
    for index, row in enumerate(rows):
        try:
            arrays.append(_column(one_row, [row]).data)
        except InvalidInput as exc:
            if "are ragged" not in exc.message:
                raise
            # Ragged within one instance: the declared dimension varies only from one instance to another.
            raise InvalidInput(f"input '{spec.name}': instance {index} is ragged within itself (nested lists of "
                               f"unequal length); only dimension {dim} (its pad.dim) may vary, from one instance "
                               f"to another") from None
    shapes = np.array([array.shape for array in arrays])
    if shapes.shape[1] != len(spec.shape):
        raise InvalidInput(f"input '{spec.name}': instances must have shape {list(spec.shape[1:])} "
                           f"(-1 is any size); got {[list(s[1:]) for s in shapes]}")
    ragged = [d for d in range(1, shapes.shape[1]) if d != dim and len(set(shapes[:, d])) > 1]
    if ragged:
        raise InvalidInput(f"input '{spec.name}': instances differ in length along dimension {ragged[0]}, which is "
                           f"not declared variable (only dimension {dim} is: pad.dim)")
    lengths = shapes[:, dim].astype(np.int64)
    if not lengths.all():
        raise InvalidInput(f"input '{spec.name}': instance {int(np.argmin(lengths))} has length 0 along its "
                           f"variable dimension")
    data = pad_rows(arrays, dim, int(lengths.max()), value)
    if not shape_fits(spec.shape[1:], data.shape[1:]):
        raise InvalidInput(f"input '{spec.name}': instances have shape {list(data.shape[1:])} but the model "
                           f"expects {list(spec.shape[1:])} (-1 is any size)")
    return Tensor(spec.name, spec.datatype, data), lengths


def _column(spec: TensorSpec, rows: list[Any]) -> Tensor:
    if spec.datatype == "BYTES":
        rows = [_decode_b64(spec.name, row) for row in rows]
    elif any(isinstance(row, dict) for row in rows):
        raise InvalidInput(
            f"this model takes tensor input '{spec.name}' ({spec.datatype}); an instance that is a "
            f"JSON object cannot be expressed as a row of it"
        )
    try:
        data = json_to_array(spec.name, spec.datatype, rows)
    except InvalidInput as exc:
        if "ragged" not in exc.message:
            raise
        raise InvalidInput(f"input '{spec.name}': instances are ragged (they differ in length), and no dimension of '{spec.name}' is "
                           f"declared variable (pad = {{ dim = 1, value = 0 }} in its [[models.inputs]])") from None
    if not shape_fits(spec.shape[1:], data.shape[1:]):
        raise InvalidInput(
            f"input '{spec.name}': instances have shape {list(data.shape[1:])} but the model "
            f"expects {list(spec.shape[1:])} (-1 is any size)"
        )
    return Tensor(spec.name, spec.datatype, data)


def _decode_b64(name: str, value: Any) -> Any:
    """KServe v1's convention for binary data: {"b64": "<base64>"} stands for raw bytes."""
    if isinstance(value, list):
        return [_decode_b64(name, item) for item in value]
    if isinstance(value, dict):
        if set(value) != {"b64"} or not isinstance(value["b64"], str):
            raise InvalidInput(f"input '{name}': a binary instance must be {{\"b64\": \"<base64>\"}}")
        try:
            return base64.b64decode(value["b64"], validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInput(f"input '{name}': 'b64' is not valid base64") from None
    return value


def tensors_to_instances(tensors: list[Tensor], trims: Mapping[str, tuple[int, np.ndarray]] | None = None) -> list[Any]:
    """Tensors as v1 instances: rows of the single input, or one object per row for several.
    `trims` (name -> dimension, each row's length) cuts those tensors' rows back to their own
    lengths along that dimension: per-token outputs of ragged instances."""
    trims = trims or {}
    columns = [(t.name, _trimmed_rows(t, *trims[t.name]) if t.name in trims else _rows(t)) for t in tensors]
    if len(tensors) == 1:
        return columns[0][1]
    return [{name: rows[i] for name, rows in columns} for i in range(len(columns[0][1]))]


def _trimmed_rows(tensor: Tensor, dim: int, lengths: np.ndarray) -> list[Any]:
    return [_rows(Tensor(tensor.name, tensor.datatype, cut_back(tensor.data[index:index + 1], dim, int(length))))[0]
            for index, length in enumerate(lengths)]


def outputs_to_predictions(outputs: list[Tensor], trims: Mapping[str, tuple[int, np.ndarray]] | None = None) -> list[Any]:
    """A tensor predictor's outputs as v1 predictions (same shape rule as instances)."""
    if len(outputs) == 1 and outputs[0].datatype == JSON:
        return outputs[0].data.tolist()
    return tensors_to_instances(outputs, trims)


def predictions_to_outputs(rows: list[Any], outputs: tuple[TensorSpec, ...]) -> list[Tensor]:
    """A v1 predictor's predictions as output tensors, by the model's declared outputs, or
    by KServe's convention when none are declared (`conventional_outputs`)."""
    if not outputs:
        return conventional_outputs(rows)
    try:
        if len(outputs) == 1:
            return [_column(outputs[0], rows)]
        return [_column(spec, [row[spec.name] for row in rows]) for spec in outputs]
    except (InvalidInput, KeyError, TypeError) as exc:
        raise BadPredictorAnswer(f"predictions do not match the model's declared outputs: {exc}") from None


CONVENTIONAL_OUTPUT = "output-0"
# The datatype KServe gives the numpy array of a model's predictions (kserve.utils `from_np_dtype`).
_DATATYPE_OF_KIND = {"b": "BOOL", "i": "INT64", "u": "UINT64", "f": "FP64", "U": "BYTES"}


def conventional_outputs(rows: list[Any]) -> list[Tensor]:
    """Predictions nobody described, as KServe itself returns a v1-style model's result to an
    OIP client: one output `output-0` whose datatype follows the values; or, when every
    prediction is an object, one output per key (a pandas-style result: one column each)."""
    if rows and all(isinstance(row, dict) for row in rows):
        names = list(rows[0])
        if any(list(row) != names for row in rows):
            raise BadPredictorAnswer("the predictions are objects with different keys, so they are not tensors")
        return [_inferred_column(name, [row[name] for row in rows]) for name in names]
    return [_inferred_column(CONVENTIONAL_OUTPUT, rows)]


def _inferred_column(name: str, rows: list[Any]) -> Tensor:
    datatype = _inferred_datatype(rows)
    if datatype is None:
        raise BadPredictorAnswer(
            f"the predictions for '{name}' are not one tensor (ragged or mixed values); declare "
            f"the model's outputs ([[models.outputs]]) if they are, or use a v1 client")
    return Tensor(name, datatype, json_to_array(name, datatype, rows))


def _inferred_datatype(rows: list[Any]) -> str | None:
    """The datatype KServe would give these JSON values; None if they are not one tensor."""
    try:
        kind = np.asarray(rows).dtype.kind
    except ValueError:
        kind = "O"  # ragged
    return _DATATYPE_OF_KIND.get(kind)


UNNAMED_INPUT = "input-0"  # KServe's and MLServer's name for the input of a model that describes none


def unnamed_instances_to_tensors(instances: list[Any]) -> list[Tensor]:
    """Instances for a tensor model that describes no inputs, by the twin of KServe's
    `output-0` convention: one input `input-0`, its datatype taken from the values."""
    datatype = _inferred_datatype(instances)
    if datatype is None:
        raise InvalidInput(
            f"the model describes no inputs, so the instances travel as one tensor '{UNNAMED_INPUT}', and these are "
            f"not one tensor (ragged, objects or mixed values); declare the model's inputs ([[models.inputs]] with "
            f"name, datatype and shape), or send an OIP request")
    return [Tensor(UNNAMED_INPUT, datatype, json_to_array(UNNAMED_INPUT, datatype, instances))]


def _rows(tensor: Tensor) -> list[Any]:
    if tensor.datatype in RAW_ONLY:
        raise InvalidInput(
            f"tensor '{tensor.name}' is {tensor.datatype}, which has no JSON form, and v1 instances and "
            f"predictions are JSON: use an OIP client with the binary tensor extension and a tensor predictor")
    if tensor.datatype == "BYTES":
        return [_bytes_row(row) for row in tensor.data]
    return tensor.data.tolist()


def _bytes_row(row: Any) -> Any:
    """A BYTES element as JSON: its text if it is UTF-8, else KServe v1's {"b64": ...}
    (what `_decode_b64` reads back), so no byte is ever replaced or lost."""
    if isinstance(row, np.ndarray):
        return [_bytes_row(element) for element in row]
    if isinstance(row, bytes):
        try:
            return row.decode("utf-8")
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(row).decode("ascii")}
    return row
