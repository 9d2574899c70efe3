"""Every OIP datatype round-trips EXACTLY through each codec alone (no gateway, no
predictor): `raw` (the byte layout of the binary extension and gRPC raw contents),
`oip_json` (JSON and binary, requests and responses), `oip_grpc` (raw and typed contents,
through serialized protobuf bytes). Where a form cannot carry a
datatype (BF16 in JSON or typed contents, FP16 in typed contents), the codec refuses it
with InvalidInput naming the problem, or, when it is the gateway's own choice of form,
sends that tensor binary instead."""
from __future__ import annotations

import json

import numpy as np
import orjson
import pytest

from tests.datatypes import DATATYPES, JSON_DATATYPES, assert_exact, binary_sample, json_data, json_sample
from wire.codecs import oip_grpc, oip_json, raw
from wire.errors import InvalidInput
from wire.generated.inference import grpc_service_pb2 as pb
from wire.tensors import Tensor

TYPED = [dt for dt in DATATYPES if dt not in ("FP16", "BF16")]  # the datatypes with a typed contents field


def tensors(sample) -> list[Tensor]:
    """One tensor per datatype, all in one request: several inputs of mixed types at once."""
    return [Tensor(f"IN_{dt}", dt, sample(dt)) for dt in DATATYPES if sample is binary_sample or dt != "BF16"]


def assert_same(got: list[Tensor], sent: list[Tensor]) -> None:
    assert [(t.name, t.datatype) for t in got] == [(t.name, t.datatype) for t in sent]
    for g, s in zip(got, sent, strict=True):
        assert_exact(g.data, s.data, s.datatype)


# -- raw --------------------------------------------------------------------------------

@pytest.mark.parametrize("datatype", DATATYPES)
def test_raw_round_trip(datatype):
    sent = binary_sample(datatype)
    encoded = raw.from_array(sent, datatype)
    assert_exact(raw.to_array("x", datatype, list(sent.shape), sent.size, encoded), sent, datatype)


def test_raw_bytes_layout_is_a_4_byte_little_endian_length_then_the_bytes():
    data = np.empty((1, 3), dtype=object)
    data[0] = [b"", b"\xff", b"ab"]
    assert raw.from_array(data, "BYTES") == b"\x00\x00\x00\x00" b"\x01\x00\x00\x00\xff" b"\x02\x00\x00\x00ab"


def test_raw_bf16_is_its_16_bit_patterns_little_endian():
    data = np.array([[0x3F80, 0x7FC1]], dtype=np.uint16)  # 1.0, a NaN with a payload
    assert raw.from_array(data, "BF16") == b"\x80\x3f\xc1\x7f"


# -- oip_json ---------------------------------------------------------------------------

@pytest.mark.parametrize("datatype", DATATYPES)
def test_oip_binary_request_and_response_round_trip(datatype):
    sent = [Tensor("IN", datatype, binary_sample(datatype))]
    body, length = oip_json.encode_request(sent, binary=True)
    request = oip_json.decode_request(body, length)
    assert_same(request.inputs, sent)
    body, length = oip_json.encode_response("m", "", request, sent, {})
    assert length is not None  # the request asked binary_data_output
    outputs, _ = oip_json.decode_response(body, length)
    assert_same(outputs, sent)


@pytest.mark.parametrize("datatype", JSON_DATATYPES)
def test_oip_json_request_and_response_round_trip(datatype):
    sent = [Tensor("IN", datatype, json_sample(datatype))]
    body, length = oip_json.encode_request(sent, binary=False)
    assert length is None, "JSON-expressible values must stay JSON"
    request = oip_json.decode_request(body, None)
    assert_same(request.inputs, sent)
    body, length = oip_json.encode_response("m", "", request, sent, {})
    assert length is None
    outputs, _ = oip_json.decode_response(body, None)
    assert_same(outputs, sent)


@pytest.mark.parametrize("datatype", JSON_DATATYPES)
def test_oip_json_data_as_a_client_writes_it(datatype):
    sample = json_sample(datatype)
    document = {"inputs": [{"name": "IN", "datatype": datatype, "shape": list(sample.shape),
                            "data": json_data(sample, datatype)}]}
    (tensor,) = oip_json.decode_request(orjson.dumps(document), None).inputs
    assert_exact(tensor.data, sample, datatype)


def test_every_datatype_in_one_binary_request():
    sent = tensors(binary_sample)
    body, length = oip_json.encode_request(sent, binary=True)
    assert_same(oip_json.decode_request(body, length).inputs, sent)


def test_oip_json_refuses_bf16_data():
    document = {"inputs": [{"name": "IN", "datatype": "BF16", "shape": [1, 2], "data": [1.0, 2.0]}]}
    with pytest.raises(InvalidInput, match="BF16 has no JSON form"):
        oip_json.decode_request(orjson.dumps(document), None)


@pytest.mark.parametrize("datatype, why", [("BF16", "no JSON form"), ("FP32", "NaN and infinities"),
                                           ("FP16", "NaN and infinities"), ("BYTES", "not UTF-8")])
def test_a_tensor_json_cannot_carry_exactly_goes_binary_even_in_json_mode(datatype, why):
    sent = [Tensor("IN", datatype, binary_sample(datatype)), Tensor("OK", "INT32", binary_sample("INT32"))]
    body, length = oip_json.encode_request(sent, binary=False)
    assert length is not None, why
    header = orjson.loads(body[:length])
    assert "binary_data_size" in header["inputs"][0]["parameters"] and "data" in header["inputs"][1]
    assert header["parameters"] == {"binary_data_output": True}  # the answer may echo it: ask binary back
    assert_same(oip_json.decode_request(body, length).inputs, sent)


def test_a_json_client_gets_bf16_outputs_in_binary_form():
    request = oip_json.decode_request(orjson.dumps(
        {"inputs": [{"name": "IN", "datatype": "INT8", "shape": [1, 1], "data": [1]}]}), None)
    sent = [Tensor("OUT", "BF16", binary_sample("BF16"))]
    body, length = oip_json.encode_response("m", "", request, sent, {})
    assert length is not None
    assert_same(oip_json.decode_response(body, length)[0], sent)


@pytest.mark.parametrize("datatype", ["UINT64", "INT64"])
def test_json_integers_beyond_float_precision_are_exact(datatype):
    info = np.iinfo(np.uint64 if datatype == "UINT64" else np.int64)
    body = b'{"inputs":[{"name":"IN","datatype":"%s","shape":[1,3],"data":[%d,%d,%d]}]}' % (
        datatype.encode(), info.max, info.max - 1, info.min)
    (tensor,) = oip_json.decode_request(body, None).inputs
    assert tensor.data.tolist() == [[info.max, info.max - 1, info.min]]


@pytest.mark.parametrize("data, message", [([2 ** 64], "does not match"), ([-1, 2 ** 64 - 1], "out of range"),
                                           ([1.5, 2 ** 64 - 1], "does not match")])
def test_uint64_json_outside_the_type_is_refused(data, message):
    document = {"inputs": [{"name": "IN", "datatype": "UINT64", "shape": [1, len(data)], "data": data}]}
    # orjson cannot write integers beyond 64 bits; the stdlib writes them as a client might.
    with pytest.raises(InvalidInput, match=message):
        oip_json.decode_request(json.dumps(document).encode(), None)


# -- oip_grpc ---------------------------------------------------------------------------

def _wire(message):
    return type(message).FromString(message.SerializeToString())


@pytest.mark.parametrize("datatype", DATATYPES)
def test_oip_grpc_raw_request_and_response_round_trip(datatype):
    sent = [Tensor("IN", datatype, binary_sample(datatype))]
    request = oip_grpc.decode_request(_wire(oip_grpc.encode_request(sent, "m")))
    assert_same(request.inputs, sent)
    response = _wire(oip_grpc.encode_response("m", "", "", sent, {}))
    assert_same(oip_grpc.decode_response(response), sent)


@pytest.mark.parametrize("datatype", TYPED)
def test_oip_grpc_typed_contents_round_trip(datatype):
    # Typed fields carry the JSON-safe sample (float NaN payloads are not promised there).
    sent = [Tensor("IN", datatype, json_sample(datatype))]
    message = _wire(oip_grpc.encode_request(sent, "m", typed=True))
    assert not message.raw_input_contents and message.inputs[0].HasField("contents")
    assert_same(oip_grpc.decode_request(message).inputs, sent)


def test_every_datatype_in_one_grpc_request():
    sent = tensors(binary_sample)
    assert_same(oip_grpc.decode_request(_wire(oip_grpc.encode_request(sent, "m"))).inputs, sent)


@pytest.mark.parametrize("datatype", ["BF16", "FP16"])
def test_typed_contents_cannot_carry_bf16_or_fp16(datatype):
    message = pb.ModelInferRequest(model_name="m")
    item = message.inputs.add(name="IN", datatype=datatype, shape=[1, 2])
    item.contents.fp32_contents.extend([1.0, 2.0])
    with pytest.raises(InvalidInput, match=f"{datatype} has no typed contents field; send it as raw_input_contents"):
        oip_grpc.decode_request(message)
    with pytest.raises(InvalidInput, match="no typed contents field"):
        oip_grpc.encode_request([Tensor("IN", datatype, binary_sample(datatype))], "m", typed=True)
