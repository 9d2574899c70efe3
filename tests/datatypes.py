"""Sample tensors for every Open Inference Protocol datatype, at the edges of each type,
and an exact (bit-for-bit) comparison. Shared by the codec round-trip tests and the
round trips through the gateway to a real Triton.

`binary_sample(dt)` is what raw / binary forms must carry exactly: min and max of every
integer type; NaN (with a payload), +-inf, -0.0, the largest and the smallest subnormal
of every float type; empty strings, NUL bytes and non-UTF-8 bytes for BYTES. BF16 is the
gateway's carrier, a uint16 array of bit patterns. `json_sample(dt)` keeps to what JSON
can express (finite numbers, UTF-8 text); BF16 has no JSON form at all.
"""
from __future__ import annotations

import numpy as np

DATATYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
             "FP16", "FP32", "FP64", "BF16", "BYTES")
JSON_DATATYPES = tuple(dt for dt in DATATYPES if dt != "BF16")
INTEGERS = {"UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
            "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64}
FLOATS = {"FP16": (np.float16, np.uint16), "FP32": (np.float32, np.uint32), "FP64": (np.float64, np.uint64)}
# bfloat16 bit patterns: quiet NaN, NaN with a payload, +inf, -inf, -0.0, largest finite,
# smallest subnormal, 1.0 (0x3F80), -2.5 (0xC020).
BF16_BITS = [0x7FC0, 0x7FC1, 0x7F80, 0xFF80, 0x8000, 0x7F7F, 0x0001, 0x3F80, 0xC020]


def binary_sample(datatype: str, rows: int = 2) -> np.ndarray:
    """A [rows, n] tensor of edge values of `datatype`, as the gateway carries it."""
    if datatype == "BOOL":
        row = np.array([True, False, True], dtype=np.bool_)
    elif datatype in INTEGERS:
        info = np.iinfo(INTEGERS[datatype])
        row = np.array([info.min, info.max, 0, 1, info.max - 1], dtype=INTEGERS[datatype])
    elif datatype in FLOATS:
        dtype, bits = FLOATS[datatype]
        finfo = np.finfo(dtype)
        row = np.array([np.nan, np.inf, -np.inf, -0.0, finfo.max, finfo.smallest_subnormal, -1.5], dtype=dtype)
        # A NaN with a payload: the bits must survive, not just "some NaN".
        payload = np.array([(np.iinfo(bits).max >> 1) ^ 1], dtype=bits).view(dtype)  # 0x7f..fe
        row = np.concatenate([row, payload])
    elif datatype == "BF16":
        row = np.array(BF16_BITS, dtype=np.uint16)
    elif datatype == "BYTES":
        row = np.empty(5, dtype=object)
        row[:] = [b"", b"\xff\xfe\x00\x80", b"text", b"trailing nul\x00", "é".encode()]
    else:
        raise ValueError(datatype)
    return _rows(row, rows)


def json_sample(datatype: str, rows: int = 2) -> np.ndarray:
    """A [rows, n] tensor of `datatype` whose values JSON can carry exactly."""
    if datatype in FLOATS:
        dtype = FLOATS[datatype][0]
        finfo = np.finfo(dtype)
        row = np.array([finfo.max, -finfo.max, finfo.smallest_subnormal, -0.0, 0.1, 1 / 3], dtype=dtype)
    elif datatype == "BYTES":
        row = np.empty(4, dtype=object)
        row[:] = [b"", "é and ü".encode(), b"text", b"a\x00b"]
    elif datatype == "BF16":
        raise ValueError("BF16 has no JSON form")
    else:
        return binary_sample(datatype, rows)
    return _rows(row, rows)


def _rows(row: np.ndarray, rows: int) -> np.ndarray:
    # Different rows: row i is the sample rolled by i, so a row mix-up shows.
    out = np.empty((rows, len(row)), dtype=row.dtype)
    for i in range(rows):
        out[i] = np.roll(row, i)
    return out


def json_data(array: np.ndarray, datatype: str) -> list:
    """The tensor as OIP JSON `data` (flattened): numbers, booleans or UTF-8 strings."""
    if datatype == "BYTES":
        return [element.decode() for element in array.ravel()]
    return array.ravel().tolist()


def assert_exact(got: np.ndarray, expected: np.ndarray, what: str = "") -> None:
    """Same shape and the same bits (or the same byte strings, for BYTES)."""
    assert list(got.shape) == list(expected.shape), f"{what}: shape {got.shape} != {expected.shape}"
    if expected.dtype == object:
        assert [bytes(x) for x in got.ravel()] == list(expected.ravel()), f"{what}: {got!r} != {expected!r}"
        return
    got = np.ascontiguousarray(got)
    assert got.dtype.itemsize == expected.dtype.itemsize, f"{what}: dtype {got.dtype} != {expected.dtype}"
    assert got.tobytes() == np.ascontiguousarray(expected).tobytes(), f"{what}: {got!r} != {expected!r}"
