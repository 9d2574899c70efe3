"""Open Inference Protocol protobuf messages <-> tensors.

Used by the gRPC front end (decode ModelInferRequest, encode ModelInferResponse) and by the
OIP gRPC backend client (the reverse). Outgoing tensors always use raw contents (one copy,
no per-element boxing); incoming ones may use raw contents (read as zero-copy views) or the
typed `contents` fields.

A request is read in two steps, as `wire.request.RequestHead` says (`read_request`): every
input's name, datatype and shape, checked against the limits and its raw contents' size;
then, when the head's `decode` is called, the values. `decode_request` does both at once.
Before either, a request's bytes are measured (`check_typed_size`): protobuf parses a
message's typed part a field at a time, holding the GIL, so that part is bounded apart.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from wire.codecs import raw
from wire.codecs.limits import DEFAULT_LIMITS, Limits, element_count
from wire.errors import InvalidInput, MessageTooLarge
from wire.generated.inference import grpc_service_pb2 as pb
from wire.request import OipRequest, RequestedOutput, RequestHead, refuse_shared_memory
from wire.tensors import NUMPY_DTYPES, Tensor, TensorSpec, is_wire_datatype

# Which typed field of InferTensorContents carries each datatype.
_CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents", "UINT16": "uint_contents", "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


_RAW_INPUTS = pb.ModelInferRequest.DESCRIPTOR.fields_by_name["raw_input_contents"].number
# Top-level fields of a large message measured before the rest counts as typed: a real request
# has a few per input (a tensor, its raw contents), and this many cost a few ms to walk.
MAX_MEASURED_FIELDS = 4096


def check_typed_size(data: bytes | memoryview, limits: Limits = DEFAULT_LIMITS) -> None:
    """Refuse, before protobuf parses it, a serialized ModelInferRequest whose typed part
    (every byte but its `raw_input_contents`: typed contents, parameters, names) is over
    `limits.max_typed_bytes` (MessageTooLarge). upb parses that part a field at a time and
    holds the GIL throughout, on whichever thread: 32 MB of 16 M empty `bytes_contents`
    held the event loop 0.6-1.4 s before the request could be looked at (issue 45). Raw
    contents are copied whole, so a large raw tensor costs little. Only the top-level fields
    are walked, at most `MAX_MEASURED_FIELDS` of them; what is past them, or past anything
    malformed, counts as typed (protobuf then says what is wrong with a message kept)."""
    size = len(data)
    if size <= limits.max_typed_bytes:
        return
    view = memoryview(data).cast("B")
    raw = pos = 0
    for _ in range(MAX_MEASURED_FIELDS):
        if pos >= size:
            break
        field = _field_end(view, pos)
        if field is None:
            break
        number, end = field
        if number == _RAW_INPUTS:
            raw += end - pos
        pos = end
    typed = size - raw
    if typed > limits.max_typed_bytes:
        raise MessageTooLarge(
            f"the message is {typed} bytes outside raw_input_contents, over max_typed_bytes "
            f"({limits.max_typed_bytes}): send large tensors as raw_input_contents")


def _field_end(view: memoryview, pos: int) -> tuple[int, int] | None:
    """(field number, where it ends) of the protobuf field at `pos`; None if it is malformed,
    a group, or runs past the end."""
    key = _varint(view, pos)
    if key is None:
        return None
    tag, pos = key
    wire_type = tag & 7
    if wire_type == 0:
        value = _varint(view, pos)
        end = None if value is None else value[1]
    elif wire_type == 1:
        end = pos + 8
    elif wire_type == 5:
        end = pos + 4
    elif wire_type == 2 and (length := _varint(view, pos)) is not None:
        end = length[1] + length[0]
    else:
        return None
    return None if end is None or end > len(view) else (tag >> 3, end)


def _varint(view: memoryview, pos: int) -> tuple[int, int] | None:
    value = 0
    for shift in range(0, 70, 7):
        if pos >= len(view):
            return None
        byte = view[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
    return None


def decode_request(message: pb.ModelInferRequest, limits: Limits = DEFAULT_LIMITS) -> OipRequest:
    return read_request(message, limits).decode()


def read_request(message: pb.ModelInferRequest, limits: Limits = DEFAULT_LIMITS) -> RequestHead:
    """The request's head: every input's header read and checked, no values decoded yet."""
    if not message.inputs:
        raise InvalidInput("the request has no inputs")
    for tensor in message.inputs:
        refuse_shared_memory(f"input '{tensor.name}'", tensor.parameters)
    for output in message.outputs:
        refuse_shared_memory(f"output '{output.name}'", output.parameters)
    heads = _read_heads(message.inputs, message.raw_input_contents, limits)
    outputs = [RequestedOutput(o.name) for o in message.outputs]
    parameters = parameters_to_dict(message.parameters)
    return RequestHead([spec for spec, _, _ in heads],
                       sum(count for spec, count, _ in heads if spec.datatype == "BYTES"),
                       lambda: OipRequest(_decode_tensors(heads, message.raw_input_contents), message.id, outputs,
                                          parameters))


def decode_response(message: pb.ModelInferResponse, limits: Limits = DEFAULT_LIMITS) -> list[Tensor]:
    return _decode_tensors(_read_heads(message.outputs, message.raw_output_contents, limits),
                           message.raw_output_contents)


def encode_request(inputs: list[Tensor], model_name: str, model_version: str = "", request_id: str = "",
                   typed: bool = False, parameters: Mapping[str, Any] | None = None) -> pb.ModelInferRequest:
    """Raw contents by default; `typed` puts the values in the typed `contents` fields
    instead, for predictors that ignore raw_input_contents (TorchServe 0.12)."""
    message = pb.ModelInferRequest(model_name=model_name, model_version=model_version, id=request_id)
    for key, value in (parameters or {}).items():
        set_parameter(message.parameters[key], value)
    for tensor in inputs:
        item = message.inputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        if typed:
            _array_to_typed(tensor, item.contents)
        else:
            message.raw_input_contents.append(raw.from_array(tensor.data, tensor.datatype))
    return message


def _array_to_typed(tensor: Tensor, contents: pb.InferTensorContents) -> None:
    field = _CONTENTS_FIELD.get(tensor.datatype)
    if field is None:
        raise InvalidInput(f"tensor '{tensor.name}': {tensor.datatype} has no typed contents field, "
                           f"and this predictor reads only typed contents")
    values = tensor.data.ravel()
    if tensor.datatype == "BYTES":
        getattr(contents, field).extend(v.encode() if isinstance(v, str) else bytes(v) for v in values)
    else:
        getattr(contents, field).extend(values.tolist())


def encode_response(
    model_name: str, model_version: str, request_id: str, outputs: list[Tensor], parameters: dict[str, Any]
) -> pb.ModelInferResponse:
    message = pb.ModelInferResponse(model_name=model_name, model_version=model_version, id=request_id)
    for key, value in parameters.items():
        set_parameter(message.parameters[key], value)
    for tensor in outputs:
        message.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        message.raw_output_contents.append(raw.from_array(tensor.data, tensor.datatype))
    return message


def parameters_to_dict(parameters: Any) -> dict[str, Any]:
    return {key: getattr(value, value.WhichOneof("parameter_choice") or "string_param")
            for key, value in parameters.items()}


def set_parameter(target: pb.InferParameter, value: Any) -> None:
    if isinstance(value, bool):
        target.bool_param = value
    elif isinstance(value, int):
        target.int64_param = value
    elif isinstance(value, float):
        target.double_param = value
    else:
        target.string_param = str(value)


# A tensor's header as read: its spec (the shape as declared), its element count, and the
# message entry whose typed contents hold its values (when there are no raw contents).
_Head = tuple[TensorSpec, int, Any]


def _read_heads(items: Any, raw_contents: Any, limits: Limits) -> list[_Head]:
    if raw_contents and len(raw_contents) != len(items):
        raise InvalidInput(
            f"{len(raw_contents)} raw contents entries for {len(items)} tensors: there must be one per tensor"
        )
    heads, names = [], set()
    for index, item in enumerate(items):
        name, datatype = item.name, item.datatype
        if not name:
            raise InvalidInput(f"tensor {index} has no name")
        if name in names:
            raise InvalidInput(f"tensor '{name}' appears twice")
        names.add(name)
        if not is_wire_datatype(datatype):
            raise InvalidInput(f"tensor '{name}': unknown datatype '{datatype}'")
        shape = list(item.shape)
        count = element_count(name, shape, limits)
        if raw_contents:
            if item.HasField("contents"):
                raise InvalidInput(f"tensor '{name}': both typed contents and raw contents are set")
            raw.check_size(name, datatype, shape, count, len(raw_contents[index]))
        elif datatype not in _CONTENTS_FIELD:
            raise InvalidInput(f"tensor '{name}': {datatype} has no typed contents field; "
                               f"send it as raw_input_contents")
        heads.append((TensorSpec(name, datatype, tuple(shape)), count, item))
    return heads


def _decode_tensors(heads: list[_Head], raw_contents: Any) -> list[Tensor]:
    tensors = []
    for index, (spec, count, item) in enumerate(heads):
        name, datatype, shape = spec.name, spec.datatype, list(spec.shape)
        if raw_contents:
            data = raw.to_array(name, datatype, shape, count, raw_contents[index])
        else:
            data = _typed_to_array(name, datatype, shape, count, item.contents)
        tensors.append(Tensor(name, datatype, data))
    return tensors


def _typed_to_array(name: str, datatype: str, shape: list[int], count: int, contents: pb.InferTensorContents) -> np.ndarray:
    field = _CONTENTS_FIELD[datatype]  # a datatype without one was refused with its head
    for other in _CONTENTS_FIELD.values():
        if other != field and len(getattr(contents, other)):
            raise InvalidInput(f"tensor '{name}': datatype {datatype} expects {field}, got {other}")
    values = getattr(contents, field)
    if len(values) != count:
        raise InvalidInput(f"tensor '{name}': {len(values)} elements in {field} but shape {shape} needs {count}")
    if datatype == "BYTES":
        out = np.empty(count, dtype=object)
        out[:] = list(values)
        return out.reshape(shape)
    dtype = NUMPY_DTYPES[datatype]
    if dtype.kind in "iu" and count:
        array = np.fromiter(values, dtype=np.int64 if dtype.kind == "i" else np.uint64, count=count)
        info = np.iinfo(dtype)
        if array.min() < info.min or array.max() > info.max:
            raise InvalidInput(f"tensor '{name}': a value is out of range for {datatype}")
        return array.astype(dtype).reshape(shape)
    return np.fromiter(values, dtype=dtype, count=count).reshape(shape)
