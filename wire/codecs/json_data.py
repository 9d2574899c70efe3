"""Tensor data in JSON form, shared by the JSON wire formats: parsing a body, turning nested
JSON values into an exactly typed array (OIP JSON, KServe v1, TorchServe), and a
predictor's scores listed by their row's index (Cohere's rerank shape, vLLM's score API).

A value of the wrong kind (a string for FP32, 1.5 for INT32, 300 for UINT8) is an error,
never a silent cast.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import orjson

from wire.codecs.limits import Limits
from wire.errors import InvalidInput, PayloadTooLarge
from wire.tensors import NUMPY_DTYPES, RAW_ONLY, is_wire_datatype

_KIND_ALLOWED = {"b": "b", "i": "iu", "u": "iu", "f": "iuf"}


# What a client whose JSON is too large can do instead (a protocol with another way says its own).
SEND_BINARY = ("send tensors in binary form (OIP's binary tensor extension, Inference-Header-Content-Length, or "
               "gRPC), up to max_body_bytes")


def check_json_size(document: bytes | memoryview, limits: Limits, what: str = "request body",
                    remedy: str = SEND_BINARY) -> None:
    """Refuse, before parsing, a JSON document over `limits.max_json_bytes` (413): its Python
    objects would cost about 18 times its size, built on the event loop."""
    if len(document) > limits.max_json_bytes:
        raise json_too_large(len(document), limits, what, remedy)


def json_too_large(size: int, limits: Limits, what: str = "request body", remedy: str = SEND_BINARY) -> PayloadTooLarge:
    """The 413 of a JSON document of `size` bytes over `limits.max_json_bytes`."""
    return PayloadTooLarge(
        f"{what} holds {size} bytes of JSON, over the limit of {limits.max_json_bytes} ([limits] "
        f"max_json_bytes): {remedy}")


def loads(body: bytes | memoryview, what: str = "request body") -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"{what} is not valid JSON: {exc}") from None


def refuse_raw_only(name: str, datatype: str) -> None:
    """A datatype with no JSON form (BF16) given as JSON data is refused, naming the forms it has."""
    if datatype in RAW_ONLY:
        raise InvalidInput(f"tensor '{name}': {datatype} has no JSON form; send it in binary form "
                           f"(the binary tensor extension, or gRPC raw_input_contents)")


def json_to_array(name: str, datatype: str, data: Any) -> np.ndarray:
    """Strictly convert JSON values to an array of `datatype`, keeping their nested shape."""
    if not isinstance(data, list):
        raise InvalidInput(f"tensor '{name}': 'data' must be a list")
    refuse_raw_only(name, datatype)
    try:
        values = np.asarray(data, dtype=object if datatype == "BYTES" else None)
    except ValueError:
        raise InvalidInput(f"tensor '{name}': data is ragged (nested lists of unequal length)") from None
    if datatype == "BYTES":
        out = np.empty(values.shape, dtype=object)
        elements = values.reshape(-1).tolist()
        if all(type(element) is str for element in elements):  # the common case, in two C-speed passes
            out.reshape(-1)[:] = [element.encode() for element in elements]
            return out
        flat_out = out.reshape(-1)
        for i, element in enumerate(elements):
            if isinstance(element, str):
                flat_out[i] = element.encode()
            elif isinstance(element, bytes):  # already decoded, e.g. a v1 {"b64": ...}
                flat_out[i] = element
            else:
                raise InvalidInput(f"tensor '{name}': BYTES elements in JSON must be strings")
        return out
    if not is_wire_datatype(datatype):
        raise InvalidInput(f"tensor '{name}': datatype {datatype} cannot be given as JSON data")
    dtype = NUMPY_DTYPES[datatype]
    if values.size and dtype.kind in "iu" and values.dtype.kind in "fO":
        # Integers beyond int64 (UINT64 above 2**63) make numpy fall back to float64 or
        # object: read them as exact Python integers instead.
        return _exact_integers(name, datatype, dtype, data)
    if values.size and values.dtype.kind not in _KIND_ALLOWED.get(dtype.kind, ""):
        raise InvalidInput(f"tensor '{name}': data does not match datatype {datatype}")
    if dtype.kind in "iu" and values.size:
        info = np.iinfo(dtype)
        if values.min() < info.min or values.max() > info.max:
            raise InvalidInput(f"tensor '{name}': a value is out of range for {datatype}")
    with np.errstate(over="ignore"):  # an overflow is answered below, not warned about
        array = values.astype(dtype, copy=False)
    if dtype.kind == "f" and values.size and not np.isfinite(array).all():
        # JSON numbers are finite: an infinity here is a value too large for the datatype
        # (1e39 as FP32), which would otherwise reach the model as inf.
        raise InvalidInput(f"tensor '{name}': a value is out of range for {datatype}")
    return array


def _exact_integers(name: str, datatype: str, dtype: np.dtype, data: list) -> np.ndarray:
    values = np.asarray(data, dtype=object)
    info = np.iinfo(dtype)
    for value in values.reshape(-1):
        if type(value) is not int:  # a float, or a bool
            raise InvalidInput(f"tensor '{name}': data does not match datatype {datatype}")
        if value < info.min or value > info.max:
            raise InvalidInput(f"tensor '{name}': a value is out of range for {datatype}")
    return values.astype(dtype)


def scores_by_index(items: Any, rows: int, where: str, score_key: str) -> np.ndarray:
    """A predictor's `[{"index": i, <score_key>: x}, ...]` (at `where` in its answer) as
    float32 [rows], row i the item whose `index` is i: each index once, each score finite."""
    if not isinstance(items, list) or len(items) != rows:
        count = len(items) if isinstance(items, list) else "no"
        raise InvalidInput(f"the answer has {count} scores in '{where}' for {rows} documents")
    scores = np.full(rows, np.nan, dtype=np.float64)
    seen = np.zeros(rows, dtype=bool)
    for position, item in enumerate(items):
        index = item.get("index") if isinstance(item, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < rows or seen[index]:
            raise InvalidInput(f"{where}[{position}] has no usable 'index' (each of 0..{rows - 1} once)")
        score = item.get(score_key)
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            raise InvalidInput(f"{where}[{position}].{score_key} must be a finite number")
        scores[index], seen[index] = score, True
    return scores.astype(np.float32)
