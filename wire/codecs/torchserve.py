"""TorchServe's inference bodies, as TorchServe's clients send them to
``PUT``/``POST /predictions/<m>`` and to gRPC ``InferenceAPIsService/Predictions``.

A request is one of two things (`TorchServeRequest`):

* **JSON instances**, the gateway's JSON forms (KServe v1 semantics, `wire.codecs.v1`):
  ``{"instances": [i1, ...]}`` (several instances, answered ``{"predictions": [...]}``),
  ``{"data": i}`` or a JSON list ``i`` (one instance, answered with its prediction alone).
  A body is read this way when it is declared ``application/json``, or declares nothing
  (or ``application/x-www-form-urlencoded``, what ``curl -d`` declares) and parses as JSON;
  over gRPC, when the ``input`` map holds only ``data`` (or ``body``) and it parses as JSON.
* **An upload** (`wire.upload`), every other body, as TorchServe's own front end takes it:
  a raw body of any other content type (``curl -T kitten.jpg``, ``image/png``,
  ``application/octet-stream``, ``text/plain``) is one part ``body``; ``multipart/form-data``
  (``curl -F data=@kitten.jpg``) and url-encoded forms give one part per field; query
  parameters are parts too; over gRPC each ``input`` entry is a part. One upload is one row,
  answered with its prediction alone.

Multipart and url-encoded forms are parsed by the HTTP front end's form parser
(`gateway.rest.forms`, Tornado's own, bounded by `MAX_PARTS`), handed in as `parse_form`:
this module says what the fields are, on a body already bounded by ``max_body_bytes``. A
malformed form, a missing boundary, an empty body or too many parts is InvalidInput (400).

An answer of one row is TorchServe's: text when the prediction is a string, else JSON.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import orjson

from wire.codecs.json_data import check_json_size, loads
from wire.codecs.limits import DEFAULT_LIMITS, Limits
from wire.codecs.v1 import check_instances
from wire.errors import InvalidInput
from wire.upload import BODY, JSON_MEDIA_TYPE, Part, TorchServeRequest, Upload

FORMS = '{"instances": [...]}, {"data": <one instance>} or one instance as a JSON list'
MULTIPART = "multipart/form-data"
URLENCODED = "application/x-www-form-urlencoded"
# A row is one request's parameters; TorchServe's handlers read one or two. The bound keeps a
# body of a million empty fields from becoming a million dict entries.
MAX_PARTS = 64


class FormFields(NamedTuple):
    """A parsed form: each field's values as sent, each file's (bytes, declared media type)."""
    arguments: dict[str, list[bytes]]
    files: dict[str, list[tuple[bytes, str]]]


FormParser = Callable[[str, bytes], FormFields]
"""(Content-Type, body) -> the form's fields; raises InvalidInput for a malformed one."""


def _no_form_parser(content_type: str, body: bytes) -> FormFields:
    raise InvalidInput(f"a {media_type(content_type)} body is not taken here")

GRPC_BODY_KEYS = ("data", "body")  # the input entries TorchServe's handlers read
TEXT_ANSWER = "text/plain; charset=utf-8"
JSON_ANSWER = "application/json"


def media_type(content_type: str | None) -> str:
    """``Image/PNG; q=1`` -> ``image/png``; "" when none was declared."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def decode_http(body: bytes, content_type: str | None, query: Mapping[str, list[bytes]] | None = None,
                limits: Limits = DEFAULT_LIMITS, parse_form: FormParser = _no_form_parser) -> TorchServeRequest:
    """A ``/predictions`` body with its Content-Type header and the URL's query arguments;
    `parse_form` reads a form's fields (the HTTP front end's parser)."""
    media = media_type(content_type)
    if media == JSON_MEDIA_TYPE:
        check_json_size(body, limits)
        return _json_forms(loads(body), limits)
    # An undeclared body too large for JSON is not tried as JSON: it is an upload. So is one
    # that is JSON but none of its forms (a file holding `42`), as TorchServe hands it over.
    if media in ("", URLENCODED) and len(body) <= limits.max_json_bytes:
        try:
            document = orjson.loads(body)
        except orjson.JSONDecodeError:
            pass  # not JSON: an upload, as TorchServe takes it
        else:
            if _is_json_form(document):
                return _json_forms(document, limits)
    if media in (MULTIPART, URLENCODED):
        parts = _form_parts(parse_form(content_type or "", body), content_type or "", limits)
    else:
        if not body:
            raise InvalidInput("the request has no body: send the file (curl -T <file>) or a JSON body")
        parts = {BODY: Part(body, media)}
    return TorchServeRequest(upload=_with_query(parts, query or {}))


def decode_grpc(entries: Mapping[str, bytes], limits: Limits = DEFAULT_LIMITS) -> TorchServeRequest:
    """A gRPC ``Predictions`` ``input`` map: JSON forms in ``data`` (or ``body``) alone, else
    an upload of every entry (gRPC declares no media types: TorchServe hands bytes)."""
    if not entries:
        raise InvalidInput("the request's input map is empty: put the body in input['data']")
    if len(entries) > MAX_PARTS:
        raise InvalidInput(f"the request's input map has {len(entries)} entries; at most {MAX_PARTS} are accepted")
    if len(entries) == 1:
        key, body = next(iter(entries.items()))
        if key in GRPC_BODY_KEYS and len(body) <= limits.max_json_bytes:
            try:
                document = orjson.loads(body)
            except orjson.JSONDecodeError:
                pass
            else:
                if _is_json_form(document):
                    return _json_forms(document, limits)
    return TorchServeRequest(upload={key: Part(value) for key, value in entries.items()})


def _is_json_form(document: Any) -> bool:
    return isinstance(document, list) or (isinstance(document, dict) and ("instances" in document or "data" in document))


def _json_forms(document: Any, limits: Limits) -> TorchServeRequest:
    if isinstance(document, list):
        return TorchServeRequest(instances=[document])
    if isinstance(document, dict):
        if "instances" in document:
            return TorchServeRequest(instances=check_instances(document["instances"], limits), single=False)
        if "data" in document:
            return TorchServeRequest(instances=[document["data"]])
    raise InvalidInput(f"the body must be JSON: {FORMS}")


def _form_parts(form: FormFields, content_type: str, limits: Limits) -> Upload:
    parts: Upload = {}
    # A field sent twice keeps its last value, as TorchServe's parameter map does.
    for name, values in form.arguments.items():
        parts[name] = Part(values[-1])
    for name, uploads in form.files.items():
        data, declared = uploads[-1]
        parts[name] = Part(data, media_type(declared))
        if parts[name].media_type == JSON_MEDIA_TYPE:  # parsed before it is queued: within max_json_bytes
            check_json_size(parts[name].data, limits, f"part '{name}'")
    if not parts:
        raise InvalidInput(f"the {media_type(content_type)} body has no fields")
    return parts


def _with_query(parts: Upload, query: Mapping[str, list[bytes]]) -> Upload:
    """Query parameters are parameters too (TorchServe adds them first); a part wins."""
    if len(parts) + len(query) > MAX_PARTS:
        raise InvalidInput(f"the request has {len(parts) + len(query)} parameters; at most {MAX_PARTS} are accepted")
    merged = {name: Part(values[-1]) for name, values in query.items() if values}
    merged.update(parts)
    return merged


def encode_answer(predictions: list[Any], single: bool) -> tuple[bytes, str]:
    """TorchServe's answer and its content type: ``{"predictions": [...]}`` for the instances
    form; one prediction alone otherwise, as text when it is a string (TorchServe sends a
    handler's string as it is), else as JSON."""
    if not single:
        return orjson.dumps({"predictions": predictions}, option=orjson.OPT_SERIALIZE_NUMPY), JSON_ANSWER
    prediction = predictions[0]
    if isinstance(prediction, str):
        return prediction.encode("utf-8"), TEXT_ANSWER
    return orjson.dumps(prediction, option=orjson.OPT_SERIALIZE_NUMPY), JSON_ANSWER
