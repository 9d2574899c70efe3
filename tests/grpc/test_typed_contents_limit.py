"""A gRPC inference message's typed part is bounded before protobuf parses it (issue 45, item 7).

protobuf's C parser reads a message's typed contents a field at a time and holds the GIL
for the whole parse, whichever thread runs it: an uncompressed 32 MB `ModelInferRequest` of
16 M empty `bytes_contents` held the event loop 0.6-1.4 s in the parse alone (other clients
waited 0.8-2.4 s end to end). Now everything outside `raw_input_contents` is measured from
the serialized bytes (`wire.codecs.oip_grpc.check_typed_size`, a walk of the top-level
fields only) and a message over `[limits] max_typed_bytes` is refused RESOURCE_EXHAUSTED
before it is parsed; raw contents, copied whole by the parser, stay bounded by
`max_body_bytes` only. What is asserted: codes, messages and what reached the model, never
a duration.
"""
from __future__ import annotations

import grpc
import numpy as np
import pytest
from google.protobuf.internal.encoder import _VarintBytes

from tests.harness import config_for, running_gateway
from wire.codecs import oip_grpc
from wire.codecs.limits import DEFAULT_LIMITS, Limits
from wire.errors import MessageTooLarge
from wire.generated.inference import grpc_service_pb2 as pb

BYTES_MODEL = {"name": "strings", "backend": "simulated",
               "inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [-1, -1]}]}
_INPUTS = pb.ModelInferRequest.DESCRIPTOR.fields_by_name["inputs"].number
_CONTENTS = pb.ModelInferRequest.InferInputTensor.DESCRIPTOR.fields_by_name["contents"].number
_BYTES_CONTENTS = pb.InferTensorContents.DESCRIPTOR.fields_by_name["bytes_contents"].number


def _field(number: int, payload: bytes) -> bytes:
    return _VarintBytes(number << 3 | 2) + _VarintBytes(len(payload)) + payload


def empty_strings_message(count: int, model: str = "strings") -> bytes:
    """A serialized ModelInferRequest of `count` empty typed BYTES elements (2 bytes each),
    written as bytes: building it through protobuf costs seconds for 16 M of them."""
    head = pb.ModelInferRequest(model_name=model)
    head.inputs.add(name="INPUT0", datatype="BYTES", shape=[1, count])
    tensor = head.inputs[0].SerializeToString()
    contents = _field(_BYTES_CONTENTS, b"") * count
    message = pb.ModelInferRequest(model_name=model).SerializeToString()
    return message + _field(_INPUTS, tensor + _field(_CONTENTS, contents))


def test_the_hostile_message_is_what_the_probe_sent():
    data = empty_strings_message(1000)
    parsed = pb.ModelInferRequest.FromString(data)
    assert list(parsed.inputs[0].shape) == [1, 1000]
    assert list(parsed.inputs[0].contents.bytes_contents) == [b""] * 1000


def test_a_message_with_more_typed_bytes_than_max_typed_bytes_is_refused_from_its_size():
    limits = Limits(max_typed_bytes=4096)
    with pytest.raises(MessageTooLarge, match="over max_typed_bytes .4096.: send large tensors as raw_input_contents"):
        oip_grpc.check_typed_size(empty_strings_message(4096), limits)
    oip_grpc.check_typed_size(empty_strings_message(1000), limits)  # 2 KB: parsed as before


def test_raw_input_contents_do_not_count_as_typed_bytes():
    limits = Limits(max_typed_bytes=4096)
    message = pb.ModelInferRequest(model_name="demo")
    message.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 2**18])
    message.raw_input_contents.append(np.zeros(2**18, np.float32).tobytes())
    oip_grpc.check_typed_size(message.SerializeToString(), limits)  # 1 MiB raw, a few bytes typed
    message.inputs[0].contents.fp32_contents.extend([0.0] * 2048)  # 8 KiB typed besides
    with pytest.raises(MessageTooLarge):
        oip_grpc.check_typed_size(message.SerializeToString(), limits)


def test_what_lies_past_the_measured_fields_counts_as_typed():
    """An attacker's many top-level fields are walked no further than MAX_MEASURED_FIELDS:
    raw contents hidden behind them count as typed, so the walk stays short."""
    limits = Limits(max_typed_bytes=1 << 16)
    message = pb.ModelInferRequest(model_name="demo")
    for _ in range(oip_grpc.MAX_MEASURED_FIELDS):
        message.outputs.add()
    message.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 2**16])
    message.raw_input_contents.append(np.zeros(2**16, np.float32).tobytes())
    with pytest.raises(MessageTooLarge):
        oip_grpc.check_typed_size(message.SerializeToString(), limits)


def test_a_truncated_message_is_left_to_protobuf():
    data = empty_strings_message(4096)[:-3]
    with pytest.raises(MessageTooLarge):  # its typed bytes are still over the limit
        oip_grpc.check_typed_size(data, Limits(max_typed_bytes=4096))
    oip_grpc.check_typed_size(data, Limits(max_typed_bytes=1 << 20))  # under it: protobuf says what is wrong


def _unary(channel: grpc.Channel):
    return channel.unary_unary("/inference.GRPCInferenceService/ModelInfer", request_serializer=lambda data: data,
                               response_deserializer=pb.ModelInferResponse.FromString)


def test_a_32_mb_message_of_16_m_empty_strings_is_refused_before_protobuf_parses_it():
    """The probe's message, as sent (uncompressed), with the default limits, to a model that
    takes BYTES: before, it was parsed on the event loop, decoded and handed to the model
    (which refused it INVALID_ARGUMENT, after other clients had waited up to 2.4 s)."""
    data = empty_strings_message(16 * 1024 * 1024)
    assert len(data) < DEFAULT_LIMITS.max_body_bytes  # received: only its typed part is over a limit
    with running_gateway(config_for(BYTES_MODEL)) as gw, grpc.insecure_channel(gw.grpc_address, options=[
            ("grpc.max_send_message_length", -1)]) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            _unary(channel)(data, timeout=120)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value.details()
        assert "max_typed_bytes" in refused.value.details() and "raw_input_contents" in refused.value.details()
        # The same strings as raw contents are served: only the typed form is bounded.
        ok = pb.ModelInferRequest(model_name="strings")
        ok.inputs.add(name="INPUT0", datatype="BYTES", shape=[1, 3])
        ok.raw_input_contents.append(b"\0\0\0\0" * 3)
        with pytest.raises(grpc.RpcError) as answered:
            _unary(channel)(ok.SerializeToString(), timeout=30)
        # The simulated model computes on numbers only: its own refusal shows the request reached it.
        assert answered.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "must be numeric" in answered.value.details()


def test_a_stream_message_over_max_typed_bytes_is_answered_in_band_and_the_stream_goes_on():
    with running_gateway(config_for(BYTES_MODEL, {"name": "demo", "backend": "simulated"},
                                    max_typed_bytes=65536)) as gw, grpc.insecure_channel(gw.grpc_address) as channel:
        stream = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer",
                                       request_serializer=lambda data: data,
                                       response_deserializer=pb.ModelStreamInferResponse.FromString)
        good = pb.ModelInferRequest(model_name="demo", id="good")
        good.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 2]).contents.fp32_contents.extend([1, 2])
        answers = list(stream(iter([empty_strings_message(65536), good.SerializeToString()]), timeout=60))
    assert len(answers) == 2
    assert "max_typed_bytes" in answers[0].error_message
    assert answers[1].error_message == "" and answers[1].infer_response.id == "good"
