"""`wire.codecs.raw` BYTES, and the request heads the OIP codecs read before any payload:
a declared count checked against the payload's size from the header alone, the uniform
fast path (one vectorised read of the length prefixes) agreeing with the element walk, and
both binary forms reading a request's head without decoding a tensor."""
from __future__ import annotations

import struct

import numpy as np
import orjson
import pytest

from wire.codecs import oip_grpc, oip_json, raw
from wire.errors import InvalidInput
from wire.generated.inference import grpc_service_pb2 as pb


def encoded(*elements: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(element)) + element for element in elements)


@pytest.mark.parametrize("elements", [
    [b""] * 5,                                      # uniform: empty
    [b"abc"] * (raw.SLICE + 3),                     # uniform, over more than one slice
    [b"a\0", b"\0\0", b"b\0"],                      # uniform, trailing NULs kept
    [b"xy", b"", b"abcd"],                          # the stride fits, the lengths differ: walked
    [b"a", b"bc", b"", b"\xff" * 300],              # mixed
    [b"only"],
    [],
], ids=["empty", "uniform-many", "nul-ending", "stride-fits", "mixed", "one", "none"])
def test_bytes_decode_every_element_exactly(elements):
    got = raw.to_array("x", "BYTES", [len(elements)], len(elements), encoded(*elements))
    assert got.dtype == object and got.shape == (len(elements),)
    assert list(got) == elements and all(type(element) is bytes for element in got)


def test_bytes_read_from_a_view_of_a_larger_body():
    body = b"head" + encoded(b"ab", b"cd") + b"tail"
    got = raw.to_array("x", "BYTES", [1, 2], 2, memoryview(body)[4:-4])
    assert got.tolist() == [[b"ab", b"cd"]]


def test_a_count_its_bytes_cannot_hold_is_refused_from_the_sizes_alone():
    with pytest.raises(InvalidInput, match=r"declares 1000 BYTES elements but its 40 bytes of data hold at most 10"):
        raw.check_size("x", "BYTES", [1, 1000], 1000, 40)
    raw.check_size("x", "BYTES", [1, 10], 10, 40)  # ten empty elements fit exactly
    with pytest.raises(InvalidInput, match="needs 8"):
        raw.check_size("x", "FP32", [1, 2], 2, 7)


@pytest.mark.parametrize("data, message", [
    (encoded(b"ab") + struct.pack("<I", 99) + b"abcdefgh", "past the end"),
    (encoded(b"ab", b"cd") + b"x", "left over"),
    (encoded(b"ab") + b"\0\0\0\0\0\0", "left over"),
], ids=["length-lies", "leftover", "leftover-uniform-looking"])
def test_malformed_bytes_are_refused_naming_the_problem(data, message):
    with pytest.raises(InvalidInput, match=message):
        raw.to_array("x", "BYTES", [2], 2, data)


def hostile_header(count: int, size: int) -> bytes:
    return orjson.dumps({"inputs": [{"name": "IN", "datatype": "BYTES", "shape": [1, count],
                                     "parameters": {"binary_data_size": size}}]})


def test_a_binary_request_head_is_read_without_decoding_its_payload():
    count = 1000
    header = hostile_header(count, 4 * count)
    head = oip_json.read_request(header + bytes(4 * count), len(header))
    assert [(spec.name, spec.datatype, spec.shape) for spec in head.inputs] == [("IN", "BYTES", (1, count))]
    assert head.bytes_elements == count
    assert head.decode().inputs[0].data.shape == (1, count)


def test_a_binary_request_whose_count_cannot_fit_is_refused_with_its_head():
    header = hostile_header(1000, 40)
    with pytest.raises(InvalidInput, match="hold at most 10"):
        oip_json.read_request(header + bytes(40), len(header))


def test_a_grpc_request_head_is_read_without_decoding_its_raw_contents():
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="IN", datatype="BYTES", shape=[1, 3])
    message.raw_input_contents.append(encoded(b"a", b"b", b"c"))
    message.inputs.add(name="N", datatype="FP32", shape=[1, 2])
    message.raw_input_contents.append(np.array([1, 2], dtype="<f4").tobytes())
    head = oip_grpc.read_request(message)
    assert [(spec.name, spec.datatype, spec.shape) for spec in head.inputs] == [("IN", "BYTES", (1, 3)),
                                                                                ("N", "FP32", (1, 2))]
    assert head.bytes_elements == 3
    assert head.decode().inputs[0].data.tolist() == [[b"a", b"b", b"c"]]
    message.raw_input_contents[0] = b"\0" * 8
    with pytest.raises(InvalidInput, match="hold at most 2"):
        oip_grpc.read_request(message)


@pytest.mark.parametrize("datatype, data", [
    ("FP32", np.arange(6, dtype="<f4").reshape(2, 3)),
    ("INT64", np.arange(6, dtype=">i8").reshape(3, 2)),          # big-endian: converted
    ("FP32", np.arange(12, dtype="<f4").reshape(3, 4)[:, ::2]),   # not contiguous: copied
    ("BYTES", np.array([[b"a", b""], [b"bc", b"d"]], dtype=object)),
])
def test_view_is_the_raw_layout_without_a_copy_where_it_can_be(datatype, data):
    chunk = raw.view(data, datatype)
    assert bytes(chunk) == raw.from_array(data, datatype)
    assert isinstance(raw.from_array(data, datatype), bytes)
    shared = isinstance(chunk, memoryview) and data.flags.c_contiguous and data.dtype.byteorder in "<="
    assert (isinstance(chunk, memoryview) and np.shares_memory(np.frombuffer(chunk, np.uint8), data)) == shared
