"""Open Inference Protocol REST bodies: JSON tensors and the binary tensor extension.

Used by the HTTP front end (decode requests, encode responses) and by the OIP HTTP backend
client (encode requests, decode responses). With the binary extension the body is a JSON
header of `Inference-Header-Content-Length` bytes followed by the tensors' raw bytes in the
order their `binary_data_size` parameters appear; binary tensors are read as zero-copy views.

JSON carries a tensor only where it is exact: BF16 (no JSON form), floats holding NaN or
infinities, and BYTES that are not UTF-8 are sent binary even when JSON was asked for.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from gateway.codecs import raw
from gateway.codecs.limits import DEFAULT_LIMITS, Limits, element_count
from gateway.errors import InvalidInput
from gateway.tensors import NUMPY_DTYPES, RAW_ONLY, Tensor

HEADER_LENGTH = "Inference-Header-Content-Length"
_KIND_ALLOWED = {"b": "b", "i": "iu", "u": "iu", "f": "iuf"}


@dataclass(slots=True)
class RequestedOutput:
    name: str
    binary: bool | None = None  # None: follow the request-level default


@dataclass(slots=True)
class OipRequest:
    """An OIP inference request as decoded from either wire form (JSON or protobuf)."""
    inputs: list[Tensor]
    id: str = ""
    outputs: list[RequestedOutput] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)

    @property
    def binary_output_default(self) -> bool:
        return self.parameters.get("binary_data_output") is True


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


def loads(body: bytes | memoryview, what: str = "request body") -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"{what} is not valid JSON: {exc}") from None


def decode_request(body: bytes, json_length: int | None, limits: Limits = DEFAULT_LIMITS) -> OipRequest:
    header, binary = _split(body, json_length)
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
        flag = _parameters(item.get("parameters"), f"output '{item['name']}'").get("binary_data")
        outputs.append(RequestedOutput(item["name"], flag if isinstance(flag, bool) else None))
    return OipRequest(_decode_tensors(inputs_json, binary, limits, "inputs"), request_id, outputs, parameters)


def decode_response(body: bytes, json_length: int | None, limits: Limits = DEFAULT_LIMITS) -> tuple[list[Tensor], dict]:
    """Decode a predictor's OIP REST answer into output tensors and response parameters."""
    header, binary = _split(body, json_length)
    document = loads(header, "predictor response")
    if not isinstance(document, dict) or not isinstance(document.get("outputs"), list):
        raise InvalidInput("predictor response has no 'outputs' list")
    return _decode_tensors(document["outputs"], binary, limits, "outputs"), document.get("parameters") or {}


def encode_request(inputs: list[Tensor], request_id: str = "", binary: bool = False) -> tuple[bytes, int | None]:
    """Encode a request for an OIP predictor; with `binary`, tensors travel as raw bytes."""
    document: dict[str, Any] = {"inputs": [], "outputs": []}
    if request_id:
        document["id"] = request_id
    chunks: list[bytes] = []
    for tensor in inputs:
        document["inputs"].append(_encode_tensor(tensor, binary, chunks))
    if chunks:  # binary asked, or a tensor with no JSON form went binary: ask binary back too
        document["parameters"] = {"binary_data_output": True}
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
    chunks: list[bytes] = []
    for tensor in outputs:
        flag = wanted.get(tensor.name)
        binary = request.binary_output_default if flag is None else flag
        document["outputs"].append(_encode_tensor(tensor, binary, chunks))
    return _join(document, chunks)


# -- tensors ---------------------------------------------------------------------------

def _decode_tensors(items: list, binary: memoryview, limits: Limits, what: str) -> list[Tensor]:
    tensors, offset, names = [], 0, set()
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
        if datatype not in NUMPY_DTYPES or datatype == "JSON":
            raise InvalidInput(f"tensor '{name}': unknown datatype '{datatype}'")
        shape = item.get("shape")
        count = element_count(name, shape, limits)
        size = _parameters(item.get("parameters"), f"tensor '{name}'").get("binary_data_size")
        if size is not None:
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise InvalidInput(f"tensor '{name}': binary_data_size must be a non-negative integer")
            if offset + size > len(binary):
                raise InvalidInput(
                    f"tensor '{name}': binary_data_size {size} runs past the end of the binary data "
                    f"({len(binary) - offset} bytes left)"
                )
            data = raw.to_array(name, datatype, shape, count, binary[offset:offset + size])
            offset += size
        elif "data" in item:
            data = json_to_array(name, datatype, item["data"])
            if data.size != count:
                raise InvalidInput(
                    f"tensor '{name}': {data.size} elements given but shape {shape} needs {count}"
                )
            data = data.reshape(shape)
        else:
            raise InvalidInput(f"tensor '{name}' has neither 'data' nor a binary_data_size parameter")
        tensors.append(Tensor(name, datatype, data))
    if offset != len(binary):
        raise InvalidInput(f"{len(binary) - offset} bytes of binary data were not claimed by any tensor")
    return tensors


def json_to_array(name: str, datatype: str, data: Any) -> np.ndarray:
    """Strictly convert JSON values to an array of `datatype`, keeping their nested shape.

    Shared with the v1 codec. A value of the wrong kind (a string for FP32, 1.5 for INT32,
    300 for UINT8) is an error, never a silent cast.
    """
    if not isinstance(data, list):
        raise InvalidInput(f"tensor '{name}': 'data' must be a list")
    if datatype in RAW_ONLY:
        raise InvalidInput(f"tensor '{name}': {datatype} has no JSON form; send it in binary form "
                           f"(the binary tensor extension, or gRPC raw_input_contents)")
    try:
        values = np.asarray(data, dtype=object if datatype == "BYTES" else None)
    except ValueError:
        raise InvalidInput(f"tensor '{name}': data is ragged (nested lists of unequal length)") from None
    if datatype == "BYTES":
        out = np.empty(values.shape, dtype=object)
        flat_in, flat_out = values.reshape(-1), out.reshape(-1)
        for i, element in enumerate(flat_in):
            if isinstance(element, str):
                flat_out[i] = element.encode()
            elif isinstance(element, bytes):  # already decoded, e.g. a v1 {"b64": ...}
                flat_out[i] = element
            else:
                raise InvalidInput(f"tensor '{name}': BYTES elements in JSON must be strings")
        return out
    dtype = NUMPY_DTYPES.get(datatype)
    if dtype is None or datatype == "JSON":
        raise InvalidInput(f"tensor '{name}': datatype {datatype} cannot be given as JSON data")
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
    return values.astype(dtype, copy=False)


def _exact_integers(name: str, datatype: str, dtype: np.dtype, data: list) -> np.ndarray:
    values = np.asarray(data, dtype=object)
    info = np.iinfo(dtype)
    for value in values.reshape(-1):
        if type(value) is not int:  # a float, or a bool
            raise InvalidInput(f"tensor '{name}': data does not match datatype {datatype}")
        if value < info.min or value > info.max:
            raise InvalidInput(f"tensor '{name}': a value is out of range for {datatype}")
    return values.astype(dtype)


def _encode_tensor(tensor: Tensor, binary: bool, chunks: list[bytes]) -> dict[str, Any]:
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
        chunk = raw.from_array(tensor.data, tensor.datatype)
        chunks.append(chunk)
        entry["parameters"] = {"binary_data_size": len(chunk)}
    elif tensor.datatype == "FP16":
        entry["data"] = tensor.data.ravel().tolist()
    else:
        entry["data"] = np.ascontiguousarray(tensor.data).ravel()
    return entry


def _join(document: dict, chunks: list[bytes]) -> tuple[bytes, int | None]:
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
