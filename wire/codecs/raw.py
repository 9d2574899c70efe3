"""The raw tensor byte layout shared by the OIP binary extension and gRPC raw contents.

Numeric tensors are flattened row-major little-endian values and are read as zero-copy
numpy views of the received bytes. BYTES elements are each a 4-byte little-endian length
followed by that many bytes.
"""
from __future__ import annotations

import struct

import numpy as np

from wire.errors import InvalidInput
from wire.tensors import NUMPY_DTYPES, is_wire_datatype

_LENGTH = struct.Struct("<I")


def to_array(name: str, datatype: str, shape: list[int], count: int, raw: bytes | memoryview) -> np.ndarray:
    """Decode `raw` as a tensor of `count` elements (already validated against limits)."""
    if datatype == "BYTES":
        return _bytes_elements(name, raw, count).reshape(shape)
    if not is_wire_datatype(datatype):
        raise InvalidInput(f"input '{name}': unsupported datatype '{datatype}' in raw form")
    dtype = NUMPY_DTYPES[datatype]
    expected = count * dtype.itemsize
    if len(raw) != expected:
        raise InvalidInput(
            f"input '{name}': raw data is {len(raw)} bytes but shape {shape} of {datatype} "
            f"needs {expected}"
        )
    return np.frombuffer(raw, dtype=dtype, count=count).reshape(shape)


def _bytes_elements(name: str, raw: bytes | memoryview, count: int) -> np.ndarray:
    view = memoryview(raw)
    out = np.empty(count, dtype=object)
    offset, end = 0, len(view)
    for i in range(count):
        if offset + 4 > end:
            raise InvalidInput(f"input '{name}': BYTES data ends inside element {i}'s length")
        (length,) = _LENGTH.unpack_from(view, offset)
        offset += 4
        if offset + length > end:
            raise InvalidInput(f"input '{name}': BYTES element {i} claims {length} bytes past the end")
        out[i] = bytes(view[offset:offset + length])
        offset += length
    if offset != end:
        raise InvalidInput(f"input '{name}': {end - offset} bytes left over after {count} BYTES elements")
    return out


def from_array(data: np.ndarray, datatype: str) -> bytes:
    """Encode a tensor's elements in raw form."""
    if datatype == "BYTES":
        parts = []
        for element in data.ravel():
            if isinstance(element, str):
                element = element.encode()
            parts.append(_LENGTH.pack(len(element)))
            parts.append(element)
        return b"".join(parts)
    dtype = NUMPY_DTYPES[datatype]
    return np.ascontiguousarray(data, dtype=dtype).tobytes()
