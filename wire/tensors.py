"""Named tensors with a batch dimension first, and the rules every tensor follows.

Every front end decodes into `Tensor`s and every predictor client encodes from them, so
this module knows no wire format. The rules live here once: which datatypes travel on the
wire (`is_wire_datatype`), whether a shape fits a declared one (`shape_fits`), and how a
model's tensors are described in OIP metadata (`describe`).

`data` is always a numpy array whose first axis is the batch:
numeric datatypes use the matching numpy dtype, BYTES uses an object array of `bytes`, and
the internal datatype JSON (opaque KServe v1 instances for a predictor that takes them
as-is) uses an object array of decoded JSON values.

BF16 has no numpy dtype. The gateway never computes with tensor values, it only moves,
concatenates and slices them, so a BF16 tensor is carried as its 16-bit patterns: a
little-endian uint16 array whose `Tensor.datatype` says "BF16". The bits are never
converted, so every value (NaN payloads included) passes through exactly, and no runtime
dependency (ml_dtypes) is needed. The datatype string, not the dtype, is what tells BF16
from UINT16: requests of the two never share a batch (`signature_key`). BF16 has no JSON
representation and no typed gRPC contents field (`RAW_ONLY`): it travels only as raw bytes.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

JSON = "JSON"  # internal: one opaque JSON value per row, never sent as a tensor

# Open Inference Protocol datatype -> numpy dtype (little-endian, as on the wire).
NUMPY_DTYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype("<u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("<i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "BF16": np.dtype("<u2"),  # the raw bit patterns (see above)
    "BYTES": np.dtype(object),
    JSON: np.dtype(object),
}
# Datatypes with no JSON representation and no typed gRPC contents field: raw / binary bytes only.
RAW_ONLY = frozenset({"BF16"})


def is_wire_datatype(datatype: object) -> bool:
    """An Open Inference Protocol datatype a client or predictor may name (not internal JSON)."""
    return isinstance(datatype, str) and datatype in NUMPY_DTYPES and datatype != JSON


def shape_fits(declared: tuple[int, ...] | list[int], shape: tuple[int, ...] | list[int]) -> bool:
    """`shape` has the declared rank and matches every declared size (-1 matches any)."""
    return len(declared) == len(shape) and all(d in (-1, got) for d, got in zip(declared, shape, strict=True))


@dataclass(slots=True)
class Tensor:
    name: str
    datatype: str
    data: np.ndarray

    @property
    def shape(self) -> list[int]:
        return list(self.data.shape)


INSTANCES_TENSOR = "instances"  # the name of the one JSON tensor that carries opaque instances


def rows_tensor(rows: list[Any]) -> Tensor:
    """Opaque rows (KServe v1 instances, predictions) as one JSON tensor, one value per row."""
    data = np.empty(len(rows), dtype=object)
    for i, row in enumerate(rows):
        data[i] = row
    return Tensor(INSTANCES_TENSOR, JSON, data)


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """A tensor as a model declares it; -1 marks a variable dimension (batch first)."""
    name: str
    datatype: str
    shape: tuple[int, ...]

    def describe(self) -> dict[str, Any]:
        """This tensor as an entry of OIP model metadata."""
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


@dataclass(frozen=True, slots=True)
class ModelSignature:
    inputs: tuple[TensorSpec, ...] = field(default_factory=tuple)
    outputs: tuple[TensorSpec, ...] = field(default_factory=tuple)

    def describe(self) -> dict[str, list[dict[str, Any]]]:
        """The `inputs` and `outputs` entries of OIP model metadata."""
        return {"inputs": [spec.describe() for spec in self.inputs],
                "outputs": [spec.describe() for spec in self.outputs]}

    @classmethod
    def described(cls, document: Mapping[str, Any]) -> ModelSignature:
        """The signature OIP model metadata's `inputs` and `outputs` entries describe
        (`describe`'s inverse). Empty lists are an answer too: a model that describes no tensors."""
        def specs(side: str) -> tuple[TensorSpec, ...]:
            return tuple(TensorSpec(t["name"], t["datatype"], tuple(int(d) for d in t["shape"]))
                         for t in document.get(side) or [])
        return cls(specs("inputs"), specs("outputs"))


def signature_key(tensors: list[Tensor]) -> tuple:
    """What must agree for requests to share a batch: names, datatypes, non-batch dims."""
    return tuple((t.name, t.datatype, t.data.shape[1:]) for t in tensors)
