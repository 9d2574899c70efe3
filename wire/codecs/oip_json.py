"""Open Inference Protocol REST bodies: JSON tensors and the binary tensor extension.

Used by the HTTP front end (decode requests, encode responses) and by the OIP HTTP backend
client (encode requests, decode responses). With the binary extension the body is a JSON
header of `Inference-Header-Content-Length` bytes followed by the tensors' raw bytes in the
order their `binary_data_size` parameters appear; binary tensors are read as zero-copy views.

A request is read in two steps (`read_request`, see `wire.request.RequestHead`): the JSON
header, with every tensor's name, datatype, shape and `binary_data_size` checked against
the limits and the binary data's size; then the tensors' data, when the head's `decode` is
called. `decode_request` does both at once.

JSON carries a tensor only where it is exact: BF16 (no JSON form), floats holding NaN or
infinities, and BYTES that are not UTF-8 are sent binary even when JSON was asked for.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson

from wire.codecs import raw
from wire.codecs.json_data import check_json_size, json_to_array, loads, refuse_raw_only
from wire.codecs.limits import DEFAULT_LIMITS, Limits, element_count
from wire.errors import InvalidInput
from wire.request import OipRequest, RequestedOutput, RequestHead, refuse_shared_memory
from wire.tensors import RAW_ONLY, Tensor, TensorSpec, is_wire_datatype

HEADER_LENGTH = "Inference-Header-Content-Length"


def json_length(header_value: str | None) -> int | None:
    """The `Inference-Header-Content-Length` header's value: None means an all-JSON body."""
    if header_value is None:
        return None
    try:
        return int(header_value)
    except ValueError:
        raise InvalidInput(f"{HEADER_LENGTH} must be an integer, got '{header_value}'") from None


def body_headers(length: int | None) -> dict[str, str]:
    """The headers that describe a body `encode_*` returned with this JSON length."""
    if length is None:
        return {"Content-Type": "application/json"}
    return {"Content-Type": "application/octet-stream", HEADER_LENGTH: str(length)}


def decode_request(body: bytes, json_length: int | None, limits: Limits = DEFAULT_LIMITS) -> OipRequest:
    return read_request(body, json_length, limits).decode()


def read_request(body: bytes, json_length: int | None, limits: Limits = DEFAULT_LIMITS) -> RequestHead:
    """The request's head: its JSON header read and checked, no tensor's data decoded yet."""
    header, binary = _split(body, json_length)
    check_json_size(header, limits)
    document = loads(header)
    if not isinstance(document, dict):
        raise InvalidInput("request body must be a JSON object with an 'inputs' list")
    inputs_json = document.get("inputs")
    if not isinstance(inputs_json, list) or not inputs_json:
        raise InvalidInput("'inputs' must be a non-empty list of tensors")
    request_id = document.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidInput("'id' must be a string")
    parameters = _parameters(document.get("parameters"), "request")
    outputs = []
    outputs_json = document.get("outputs", [])
    if not isinstance(outputs_json, list):
        raise InvalidInput("'outputs' must be a list")
    for item in outputs_json:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise InvalidInput("each entry of 'outputs' must be an object with a string 'name'")
        output_parameters = _parameters(item.get("parameters"), f"output '{item['name']}'")
        refuse_shared_memory(f"output '{item['name']}'", output_parameters)
        flag = output_parameters.get("binary_data")
        outputs.append(RequestedOutput(item["name"], flag if isinstance(flag, bool) else None))
    for item in inputs_json:
        if isinstance(item, dict):
            refuse_shared_memory(f"input '{item.get('name')}'", _parameters(item.get("parameters"), "input"))
    heads = _read_heads(inputs_json, binary, limits, "inputs")
    return RequestHead([head.spec for head in heads], sum(head.bytes_elements for head in heads),
                       lambda: OipRequest(_decode_tensors(heads), request_id, outputs, parameters))


def decode_response(body: bytes, json_length: int | None, limits: Limits = DEFAULT_LIMITS) -> tuple[list[Tensor], dict]:
    """Decode a predictor's OIP REST answer into output tensors and response parameters."""
    header, binary = _split(body, json_length)
    document = loads(header, "predictor response")
    if not isinstance(document, dict) or not isinstance(document.get("outputs"), list):
        raise InvalidInput("predictor response has no 'outputs' list")
    return _decode_tensors(_read_heads(document["outputs"], binary, limits, "outputs")), document.get("parameters") or {}


def encode_request(inputs: list[Tensor], request_id: str = "", binary: bool = False,
                   parameters: Mapping[str, Any] | None = None) -> tuple[bytes, int | None]:
    """Encode a request for an OIP predictor; with `binary`, tensors travel as raw bytes."""
    document: dict[str, Any] = {"inputs": [], "outputs": []}
    if request_id:
        document["id"] = request_id
    chunks: list[bytes | memoryview] = []
    for tensor in inputs:
        document["inputs"].append(_encode_tensor(tensor, binary, chunks))
    if parameters:
        document["parameters"] = dict(parameters)
    if chunks:  # binary asked, or a tensor with no JSON form went binary: ask binary back too
        document.setdefault("parameters", {})["binary_data_output"] = True
    del document["outputs"]  # all outputs, in the predictor's own order
    return _join(document, chunks)


def encode_response(
    model_name: str,
    model_version: str,
    request: OipRequest,
    outputs: list[Tensor],
    parameters: dict[str, Any],
) -> tuple[bytes, int | None]:
    """Encode the gateway's answer; each output is binary if its request asked for it."""
    wanted = {o.name: o.binary for o in request.outputs}
    document: dict[str, Any] = {"model_name": model_name, "outputs": []}
    if model_version:
        document["model_version"] = model_version
    if request.id:
        document["id"] = request.id
    if parameters:
        document["parameters"] = parameters
    chunks: list[bytes | memoryview] = []
    for tensor in outputs:
        flag = wanted.get(tensor.name)
        binary = request.binary_output_default if flag is None else flag
        document["outputs"].append(_encode_tensor(tensor, binary, chunks))
    return _join(document, chunks)


# -- tensors ---------------------------------------------------------------------------

class _Head:
    """One tensor's header, read and checked; its data not decoded yet."""
    __slots__ = ("spec", "count", "binary", "data")

    def __init__(self, spec: TensorSpec, count: int, binary: memoryview | None, data: Any) -> None:
        self.spec = spec
        self.count = count
        self.binary = binary  # its slice of the binary data, or None: its JSON `data`
        self.data = data

    @property
    def bytes_elements(self) -> int:
        return self.count if self.spec.datatype == "BYTES" else 0

    def decode(self) -> Tensor:
        name, datatype, shape = self.spec.name, self.spec.datatype, list(self.spec.shape)
        if self.binary is not None:
            return Tensor(name, datatype, raw.to_array(name, datatype, shape, self.count, self.binary))
        data = json_to_array(name, datatype, self.data)
        if data.size != self.count:
            raise InvalidInput(f"tensor '{name}': {data.size} elements given but shape {shape} needs {self.count}")
        return Tensor(name, datatype, data.reshape(shape))


def _read_heads(items: list, binary: memoryview, limits: Limits, what: str) -> list[_Head]:
    heads, offset, names = [], 0, set()
    for item in items:
        if not isinstance(item, dict):
            raise InvalidInput(f"each entry of '{what}' must be a JSON object")
        name = item.get("name")
        datatype = item.get("datatype")
        if not isinstance(name, str) or not name:
            raise InvalidInput(f"each entry of '{what}' needs a non-empty string 'name'")
        if name in names:
            raise InvalidInput(f"tensor '{name}' appears twice")
        names.add(name)
        if not isinstance(datatype, str):
            raise InvalidInput(f"tensor '{name}': 'datatype' must be a string")
        if not is_wire_datatype(datatype):
            raise InvalidInput(f"tensor '{name}': unknown datatype '{datatype}'")
        shape: Any = item.get("shape")  # a list of ints once element_count has checked it
        count = element_count(name, shape, limits)
        spec = TensorSpec(name, datatype, tuple(shape))
        size = _parameters(item.get("parameters"), f"tensor '{name}'").get("binary_data_size")
        if size is not None:
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise InvalidInput(f"tensor '{name}': binary_data_size must be a non-negative integer")
            if offset + size > len(binary):
                raise InvalidInput(
                    f"tensor '{name}': binary_data_size {size} runs past the end of the binary data "
                    f"({len(binary) - offset} bytes left)"
                )
            raw.check_size(name, datatype, shape, count, size)
            heads.append(_Head(spec, count, binary[offset:offset + size], None))
            offset += size
        elif "data" in item:
            refuse_raw_only(name, datatype)
            heads.append(_Head(spec, count, None, item["data"]))
        else:
            raise InvalidInput(f"tensor '{name}' has neither 'data' nor a binary_data_size parameter")
    if offset != len(binary):
        raise InvalidInput(f"{len(binary) - offset} bytes of binary data were not claimed by any tensor")
    return heads


def _decode_tensors(heads: list[_Head]) -> list[Tensor]:
    return [head.decode() for head in heads]


def _encode_tensor(tensor: Tensor, binary: bool, chunks: list[bytes | memoryview]) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": tensor.name, "datatype": tensor.datatype, "shape": tensor.shape}
    # JSON is used only where it carries the values exactly; otherwise this tensor travels
    # binary whatever was asked: BF16 (no JSON form), NaN and infinities (JSON has no such
    # numbers), BYTES that are not UTF-8 (below).
    if not binary and (tensor.datatype in RAW_ONLY
                       or (tensor.data.dtype.kind == "f" and not np.isfinite(tensor.data).all())):
        binary = True
    if not binary and tensor.datatype == "BYTES":
        try:
            entry["data"] = [element.decode() for element in tensor.data.ravel()]
            return entry
        except UnicodeDecodeError:
            binary = True  # not expressible as JSON strings: send these bytes raw
    if binary:
        chunk = raw.view(tensor.data, tensor.datatype)  # copied once, by the body's join
        chunks.append(chunk)
        entry["parameters"] = {"binary_data_size": len(chunk)}
    elif tensor.datatype == "FP16":
        entry["data"] = tensor.data.ravel().tolist()
    else:
        entry["data"] = np.ascontiguousarray(tensor.data).ravel()
    return entry


def _join(document: dict, chunks: list[bytes | memoryview]) -> tuple[bytes, int | None]:
    header = orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)
    if not chunks:
        return header, None
    return b"".join([header, *chunks]), len(header)


def _split(body: bytes, json_length: int | None) -> tuple[bytes | memoryview, memoryview]:
    view = memoryview(body)
    if json_length is None:
        return view, view[len(view):]
    if json_length < 0 or json_length > len(view):
        raise InvalidInput(f"{HEADER_LENGTH} is {json_length} but the body is {len(view)} bytes")
    return view[:json_length], view[json_length:]


def _parameters(value: Any, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidInput(f"{where}: 'parameters' must be a JSON object")
    return value
