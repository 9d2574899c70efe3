"""OpenAI's Embeddings API bodies (`POST /v1/embeddings`, `GET /v1/models`), both directions.

A client's request is `{"model", "input", "encoding_format", "dimensions", "user"}`:
`input` is a string, a list of strings, a list of token ids, or a list of such lists; each
string (or token list) is one row. The answer is `{"object": "list", "data": [{"object":
"embedding", "index", "embedding"}], "model", "usage": {"prompt_tokens", "total_tokens"}}`,
one item per row in the request's order; with `encoding_format` "base64" each embedding is
the base64 of its little-endian float32 values (what OpenAI's own clients decode). Errors
are `{"error": {"message", "type", "param", "code"}}`.

The same wire format towards an OpenAI-compatible predictor (KServe's OpenAI endpoint,
Infinity, TEI's OpenAI route): `encode_request` sends a batch's texts as one call, and
`decode_answer` reads the vectors back by their `index`, in floats or base64, whichever
the predictor answers.

A codec raises `InvalidInput` for anything malformed, whichever side sent it. It knows
nothing of batching, tokenizers or models.
"""
from __future__ import annotations

import base64
import binascii
from typing import Any

import numpy as np
import orjson

from wire.codecs.json_data import check_json_size, loads
from wire.codecs.limits import DEFAULT_LIMITS, Limits
from wire.embeddings import ENCODING_FORMATS, EmbeddingsHead, EmbeddingsRequest
from wire.errors import InvalidInput

SEND_FEWER_TEXTS = "send the texts in several requests"  # OpenAI's API has no binary form
REQUEST_KEYS = frozenset({"model", "input", "encoding_format", "dimensions", "user"})
LITTLE_ENDIAN_F32 = np.dtype("<f4")
MAX_TOKEN_ID = 2 ** 32 - 1  # any vocabulary's ids fit in 32 bits (the largest, o200k_harmony's, is 201,087)

# OpenAI's error `type` by HTTP status: what its clients (and their retry logic) read.
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "invalid_request_error", 409: "conflict_error", 413: "invalid_request_error",
                415: "invalid_request_error", 422: "invalid_request_error", 429: "rate_limit_error",
                504: "timeout_error"}
_ERROR_CODES = {404: "model_not_found", 413: "request_too_large", 429: "rate_limit_exceeded", 504: "timeout"}


# -- the client's side -----------------------------------------------------------------------

def decode_request(body: bytes, limits: Limits = DEFAULT_LIMITS) -> EmbeddingsRequest:
    """A client's embeddings request, checked as OpenAI's API checks it."""
    return read_request(body, limits).decode()


def read_request(body: bytes, limits: Limits = DEFAULT_LIMITS) -> EmbeddingsHead:
    """A client's embeddings request in two steps: all but its inputs checked now, with the
    rows it declares (a string, or a flat list of token ids, is one row), and its inputs
    checked by the head's `decode`."""
    check_json_size(body, limits, remedy=SEND_FEWER_TEXTS)
    document = loads(body)
    if not isinstance(document, dict):
        raise InvalidInput('request body must be a JSON object: {"model": ..., "input": ...}')
    unknown = sorted(set(document) - REQUEST_KEYS)
    if unknown:
        raise InvalidInput(f"unrecognized request argument supplied: {', '.join(unknown)}")
    model = document.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidInput("'model' is required: the name of the embedding model, a non-empty string")
    encoding_format = document.get("encoding_format")
    if encoding_format is None:  # absent or null: OpenAI's default; 0, false or "" are not a format
        encoding_format = "float"
    elif not isinstance(encoding_format, str) or encoding_format not in ENCODING_FORMATS:
        raise InvalidInput(f"'encoding_format' must be one of {', '.join(ENCODING_FORMATS)}, "
                           f"got {orjson.dumps(encoding_format).decode()}")
    dimensions = document.get("dimensions")
    if dimensions is not None and (isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1):
        raise InvalidInput(f"'dimensions' must be a positive integer, got {dimensions!r}")
    user = document.get("user")
    if user is None:
        user = ""
    elif not isinstance(user, str):
        raise InvalidInput("'user' must be a string")
    value = document.get("input")
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise InvalidInput("'input' must be a non-empty string, a non-empty list of strings, "
                           "or a list of token ids")
    if len(value) > limits.max_instances:
        raise InvalidInput(f"'input' has {len(value)} items; at most {limits.max_instances} are taken in one request")

    def decode() -> EmbeddingsRequest:
        texts, token_ids = _inputs(value)
        return EmbeddingsRequest(model, texts, token_ids, encoding_format, dimensions, user)

    return EmbeddingsHead(model, 1 if _is_number(value[0]) else len(value), decode)


def _inputs(value: list[Any]) -> tuple[list[str], list[list[int]] | None]:
    """`input` (a non-empty list) as rows: texts, or token-id lists (a flat list of ids is one row)."""
    if all(isinstance(item, str) for item in value):
        for index, text in enumerate(value):
            if not text:
                raise InvalidInput(f"'input[{index}]' is an empty string: there is nothing to embed")
        return value, None
    if all(_is_number(item) for item in value):
        return [], [_token_ids(value, "input")]
    if all(isinstance(item, list) for item in value):
        return [], [_token_ids(row, f"input[{index}]") for index, row in enumerate(value)]
    raise InvalidInput("'input' mixes strings and token ids: send a list of strings, or a list of token-id lists")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _token_ids(row: list[Any], where: str) -> list[int]:
    """One row of token ids, each an integer from 0 to MAX_TOKEN_ID."""
    if row and all(type(token) is int for token in row) and min(row) >= 0 and max(row) <= MAX_TOKEN_ID:
        return row  # the common case, without a string built per row (the codec took a third of the time)
    rule = f"'{where}' must be a non-empty list of non-negative integer token ids (at most {MAX_TOKEN_ID})"
    if not row:
        raise InvalidInput(rule)
    for position, token in enumerate(row):
        if isinstance(token, int) and not isinstance(token, bool) and 0 <= token <= MAX_TOKEN_ID:
            continue
        if _is_number(token) and float(token).is_integer() and token > MAX_TOKEN_ID:
            # orjson reads an integer past 64 bits as a float: name it as the client wrote it
            raise InvalidInput(f"'{where}[{position}]' = {int(token)} is out of range: {rule}")
        raise InvalidInput(f"'{where}[{position}]' is {orjson.dumps(token).decode()}: {rule}")
    return row


def encode_answer(model: str, vectors: np.ndarray, encoding_format: str, prompt_tokens: int) -> bytes:
    """The client's answer: one item per row of `vectors` ([rows, dims]), in order."""
    if encoding_format == "base64":
        rows = np.ascontiguousarray(vectors, dtype=LITTLE_ENDIAN_F32)
        embeddings: list[Any] = [base64.b64encode(row.tobytes()).decode("ascii") for row in rows]
    else:
        embeddings = vectors.astype(np.float32, copy=False).tolist()
    data = [{"object": "embedding", "index": index, "embedding": embedding}
            for index, embedding in enumerate(embeddings)]
    return orjson.dumps({"object": "list", "data": data, "model": model,
                         "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}})


def encode_models(names: list[str], created: int, owned_by: str) -> bytes:
    """`GET /v1/models`: the models a client may name."""
    return orjson.dumps({"object": "list", "data": [model_document(name, created, owned_by) for name in names]})


def model_document(name: str, created: int, owned_by: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": owned_by}


def error_document(message: str, status: int) -> dict[str, Any]:
    """An error in OpenAI's shape: its clients raise the class its `type` and status name."""
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": _ERROR_CODES.get(status)}}


# -- the predictor's side --------------------------------------------------------------------

def encode_request(model: str, rows: list[str] | list[list[int]], dimensions: int | None = None) -> bytes:
    """One call for a whole batch: its texts (or token-id lists) as `input`, answered in
    base64 (a quarter of the JSON numbers' size, and decoded without parsing floats)."""
    document: dict[str, Any] = {"model": model, "input": rows, "encoding_format": "base64"}
    if dimensions is not None:
        document["dimensions"] = dimensions
    return orjson.dumps(document)


def decode_answer(body: bytes, rows: int) -> np.ndarray:
    """A predictor's answer as float32 [rows, dims], row i the item whose `index` is i;
    each embedding in floats or base64, whichever the predictor chose."""
    document = loads(body, "the predictor's answer")
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, list) or len(data) != rows:
        count = len(data) if isinstance(data, list) else "no"
        raise InvalidInput(f"the answer has {count} embeddings in 'data' for {rows} inputs")
    vectors: list[np.ndarray | None] = [None] * rows
    for position, item in enumerate(data):
        index = item.get("index", position) if isinstance(item, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < rows or vectors[index] is not None:
            raise InvalidInput(f"data[{position}] has no usable 'index' (each of 0..{rows - 1} once)")
        vectors[index] = _vector(item.get("embedding"), position)
    widths = {len(vector) for vector in vectors if vector is not None}
    if len(widths) != 1:
        raise InvalidInput(f"the embeddings differ in length: {sorted(widths)}")
    return np.stack(vectors)  # type: ignore[arg-type]  # every slot was filled above


def _vector(value: Any, position: int) -> np.ndarray:
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInput(f"data[{position}].embedding is not valid base64") from None
        if not raw or len(raw) % 4:
            raise InvalidInput(f"data[{position}].embedding is {len(raw)} bytes: not float32 values")
        return np.frombuffer(raw, dtype=LITTLE_ENDIAN_F32).astype(np.float32)
    if isinstance(value, list) and value and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value):
        return np.asarray(value, dtype=np.float32)
    raise InvalidInput(f"data[{position}].embedding must be a list of numbers or a base64 string")
