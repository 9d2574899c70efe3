"""The raw tensor byte layout shared by the OIP binary extension and gRPC raw contents.

Numeric tensors are flattened row-major little-endian values and are read as zero-copy
numpy views of the received bytes. BYTES elements are each a 4-byte little-endian length
followed by that many bytes.

What a tensor's header declares is checked against its payload's size before anything is
allocated (`check_size`): a numeric tensor's bytes are exactly its elements', and a BYTES
tensor of N elements needs at least 4N bytes (every element has its length), so a shape
that declares more elements than its bytes can hold is refused from the header alone.

BYTES are decoded without a Python step per element where the layout allows it: when every
element has the same length (empty strings, fixed-size records), one vectorised read of
the length prefixes checks them all and the elements are cut out by numpy, in slices of
`SLICE` elements so that a thread doing it lets the event loop in between. Other BYTES are
walked element by element; whoever decodes a large one (`gateway.service` decides) does it
off the event loop. This module knows no model and no event loop.
"""
from __future__ import annotations

import struct

import numpy as np

from wire.errors import InvalidInput
from wire.tensors import NUMPY_DTYPES, is_wire_datatype

_LENGTH = struct.Struct("<I")
LENGTH_BYTES = _LENGTH.size
# Elements cut out per numpy call on the uniform path: each call holds the GIL throughout.
SLICE = 1 << 16


def check_size(name: str, datatype: str, shape: list[int], count: int, size: int) -> None:
    """Refuse a tensor whose `size` payload bytes cannot hold the `count` elements its
    header declares: from the header alone, before any element is read or allocated."""
    if datatype == "BYTES":
        if count * LENGTH_BYTES > size:
            raise InvalidInput(
                f"input '{name}': shape {shape} declares {count} BYTES elements but its {size} bytes of data hold "
                f"at most {size // LENGTH_BYTES} (each element starts with a {LENGTH_BYTES}-byte length)"
            )
        return
    if not is_wire_datatype(datatype):
        raise InvalidInput(f"input '{name}': unsupported datatype '{datatype}' in raw form")
    expected = count * NUMPY_DTYPES[datatype].itemsize
    if size != expected:
        raise InvalidInput(
            f"input '{name}': raw data is {size} bytes but shape {shape} of {datatype} needs {expected}"
        )


def to_array(name: str, datatype: str, shape: list[int], count: int, raw: bytes | memoryview) -> np.ndarray:
    """Decode `raw` as a tensor of `count` elements (already validated against limits)."""
    check_size(name, datatype, shape, count, len(raw))
    if datatype == "BYTES":
        return _bytes_elements(name, raw, count).reshape(shape)
    return np.frombuffer(raw, dtype=NUMPY_DTYPES[datatype], count=count).reshape(shape)


def _bytes_elements(name: str, raw: bytes | memoryview, count: int) -> np.ndarray:
    view = memoryview(raw).cast("B")
    out = np.empty(count, dtype=object)
    if count and _uniform(view, count, out):
        return out
    data = view.tobytes()  # one copy: slicing `bytes` is the cheapest way to make each element
    end, offset = len(data), 0
    elements: list[bytes] = []
    append, unpack = elements.append, _LENGTH.unpack_from
    for i in range(count):
        if offset + LENGTH_BYTES > end:
            raise InvalidInput(f"input '{name}': BYTES data ends inside element {i}'s length")
        (length,) = unpack(data, offset)
        offset += LENGTH_BYTES
        if offset + length > end:
            raise InvalidInput(f"input '{name}': BYTES element {i} claims {length} bytes past the end")
        append(data[offset:offset + length])
        offset += length
    if offset != end:
        raise InvalidInput(f"input '{name}': {end - offset} bytes left over after {count} BYTES elements")
    out[:] = elements
    return out


def _uniform(view: memoryview, count: int, out: np.ndarray) -> bool:
    """Fill `out` if every element has the first one's length (one vectorised check of the
    length prefixes); False, with `out` untouched, if they differ."""
    (length,) = _LENGTH.unpack_from(view, 0)
    stride = LENGTH_BYTES + length
    if count * stride != len(view):
        return False
    lengths = np.ndarray((count,), dtype="<u4", buffer=view, strides=(stride,))
    if not (lengths == length).all():
        return False
    if length == 0:
        for start in range(0, count, SLICE):
            out[start:start + SLICE] = b""
        return True
    # Each element as one opaque record of its bytes: tolist() gives them as `bytes`.
    elements = np.ndarray((count,), dtype=f"V{length}", buffer=view, offset=LENGTH_BYTES, strides=(stride,))
    for start in range(0, count, SLICE):
        out[start:start + SLICE] = elements[start:start + SLICE].tolist()
    return True


def from_array(data: np.ndarray, datatype: str) -> bytes:
    """Encode a tensor's elements in raw form."""
    chunk = view(data, datatype)
    return chunk if isinstance(chunk, bytes) else chunk.tobytes()


def view(data: np.ndarray, datatype: str) -> bytes | memoryview:
    """A tensor's elements in raw form for a caller that copies them once anyway (a join, a
    write): a numeric tensor's as a view of its array (no copy when it is contiguous and
    little-endian already); BYTES encoded."""
    if datatype != "BYTES":
        return np.ascontiguousarray(data, dtype=NUMPY_DTYPES[datatype]).data.cast("B")
    parts = []
    for element in data.ravel():
        if isinstance(element, str):
            element = element.encode()
        parts.append(_LENGTH.pack(len(element)))
        parts.append(element)
    return b"".join(parts)
