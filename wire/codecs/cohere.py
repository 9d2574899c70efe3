"""Cohere's Rerank API bodies (`POST /v1/rerank`, `/v2/rerank`), both directions: a
client's, and a predictor's of Cohere's shape.

A client's request is `{"model", "query", "documents", "top_n", ...}`: v1 also takes
`return_documents`, `rank_fields` (which fields of an object document are ranked) and
`max_chunks_per_doc` (refused: the gateway does not chunk); v2 takes `max_tokens_per_doc`,
`priority` and `relevant_spans` (refused). Either takes the other's `return_documents` and
`max_tokens_per_doc`, as vLLM and Infinity do. A document is a string or an object with
`text`. The answer is `{"id", "results": [{"index", "relevance_score"[, "document"]}],
"meta"}`, best first; errors are `{"message": ...}` with the HTTP status, which Cohere's
clients raise as their own classes (404 `NotFoundError`, 400 `BadRequestError`, ...).

Towards a predictor: Cohere's own shape for a server that takes one query per call
(Infinity, vLLM's `/rerank`), answered by `results`' `index`. vLLM's score API is
`wire.codecs.score`'s.

A codec raises `InvalidInput` for anything malformed, whichever side sent it. It knows
nothing of batching, tokenizers or models.
"""
from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import orjson

from wire.codecs.json_data import check_json_size, loads, scores_by_index
from wire.codecs.limits import DEFAULT_LIMITS, Limits
from wire.errors import InvalidInput
from wire.rerank import DEFAULT_MAX_TOKENS_PER_DOC, RerankRequest

SEND_FEWER_DOCUMENTS = "send fewer documents in each request"  # Cohere's API has no binary form
_COMMON_KEYS = {"model", "query", "documents", "top_n", "return_documents", "max_tokens_per_doc"}
REQUEST_KEYS = {1: frozenset(_COMMON_KEYS | {"rank_fields", "max_chunks_per_doc"}),
                2: frozenset(_COMMON_KEYS | {"priority", "relevant_spans"})}


# -- the client's side -----------------------------------------------------------------------

def decode_request(body: bytes, version: int, limits: Limits = DEFAULT_LIMITS) -> RerankRequest:
    """A client's rerank request (`version` 1 or 2, the route's), checked as Cohere checks it.
    A key sent as null is taken as absent (Cohere's clients send what a caller passed)."""
    check_json_size(body, limits, remedy=SEND_FEWER_DOCUMENTS)
    document = loads(body)
    if not isinstance(document, dict):
        raise InvalidInput('request body must be a JSON object: {"model": ..., "query": ..., "documents": [...]}')
    unknown = sorted(set(document) - REQUEST_KEYS[version])
    if unknown:
        raise InvalidInput(f"unknown field(s) for /v{version}/rerank: {', '.join(unknown)}")
    given = {key: value for key, value in document.items() if value is not None}
    model = given.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidInput("'model' is required: the name of the rerank model, a non-empty string")
    query = given.get("query")
    if not isinstance(query, str) or not query:
        raise InvalidInput("'query' is required: a non-empty string")
    if "max_chunks_per_doc" in given:
        raise InvalidInput("'max_chunks_per_doc' is not supported: documents are not chunked; each is cut to "
                           "'max_tokens_per_doc' tokens")
    if "relevant_spans" in given:
        raise InvalidInput("'relevant_spans' is not supported")
    rank_fields = _rank_fields(given.get("rank_fields"))
    documents, originals = _documents(given.get("documents"), rank_fields, limits)
    top_n = _positive(given, "top_n")
    max_tokens = _positive(given, "max_tokens_per_doc")
    priority = given.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int) or priority < 0):
        raise InvalidInput(f"'priority' must be a non-negative integer, got {orjson.dumps(priority).decode()}")
    return_documents = given.get("return_documents", False)
    if not isinstance(return_documents, bool):
        raise InvalidInput("'return_documents' must be true or false")
    return RerankRequest(model, query, documents, top_n, return_documents,
                         max_tokens if max_tokens is not None else DEFAULT_MAX_TOKENS_PER_DOC, priority, version,
                         originals)


def _positive(document: dict, key: str) -> int | None:
    value = document.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"'{key}' must be a positive integer, got {orjson.dumps(value).decode()}")
    return value


def _rank_fields(value: Any) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(name, str) and name for name in value):
        raise InvalidInput("'rank_fields' must be a non-empty list of field names")
    return value


def _documents(value: Any, rank_fields: list[str] | None, limits: Limits) -> tuple[list[str], list[Any]]:
    """Each document's text (an object's `text`, or its `rank_fields` as `field: value` lines,
    Cohere's form), and each as sent."""
    if not isinstance(value, list):
        raise InvalidInput("'documents' is required: a list of strings or of objects with 'text'")
    if not value:
        raise InvalidInput("'documents' is empty: send at least one document to rank")
    if len(value) > limits.max_instances:
        raise InvalidInput(f"'documents' has {len(value)} items; at most {limits.max_instances} are taken in one "
                           f"request")
    texts = []
    for index, item in enumerate(value):
        if isinstance(item, str):
            text = item
        elif isinstance(item, dict):
            text = _object_text(item, rank_fields, index)
        else:
            raise InvalidInput(f"'documents[{index}]' must be a string or an object with 'text', "
                               f"got {type(item).__name__}")
        if not text:
            raise InvalidInput(f"'documents[{index}]' is empty: there is nothing to rank")
        texts.append(text)
    return texts, value


def _object_text(item: dict, rank_fields: list[str] | None, index: int) -> str:
    if rank_fields is None:
        text = item.get("text")
        if not isinstance(text, str):
            raise InvalidInput(f"'documents[{index}]' is an object without a 'text' string (or name its fields "
                               f"with 'rank_fields')")
        return text
    lines = []
    for name in rank_fields:
        field_value = item.get(name)
        if field_value is None:
            continue
        if not isinstance(field_value, (str, int, float)) or isinstance(field_value, bool):
            raise InvalidInput(f"'documents[{index}].{name}' must be a string or a number to be ranked")
        lines.append(f"{name}: {field_value}")
    if not lines:
        raise InvalidInput(f"'documents[{index}]' has none of the 'rank_fields' {rank_fields}")
    return "\n".join(lines)


def ranking(scores: np.ndarray, top_n: int | None) -> np.ndarray:
    """The documents' indices, best score first (ties in the client's order), cut to top_n."""
    order = np.argsort(-scores, kind="stable")
    return order if top_n is None else order[:top_n]


def encode_answer(request: RerankRequest, scores: np.ndarray, tokens: int) -> bytes:
    """The client's answer: `scores` [rows] in the request's order, sorted, cut to top_n."""
    results = []
    for index in ranking(scores, request.top_n).tolist():
        item: dict[str, Any] = {"index": index, "relevance_score": float(scores[index])}
        if request.return_documents:
            original = request.originals[index] if request.originals else request.documents[index]
            item["document"] = original if isinstance(original, dict) else {"text": original}
        results.append(item)
    meta = {"api_version": {"version": str(request.version)}, "billed_units": {"search_units": 1},
            "tokens": {"input_tokens": tokens}}
    return orjson.dumps({"id": str(uuid.uuid4()), "results": results, "meta": meta})


def error_document(message: str) -> dict[str, Any]:
    """An error in Cohere's shape: the status says what kind, the message what was wrong."""
    return {"message": message}


# -- the predictor's side --------------------------------------------------------------------

def encode_rerank_request(model: str, query: str, documents: list[str]) -> bytes:
    """Cohere's shape, one query per call: every document scored, none echoed back."""
    return orjson.dumps({"model": model, "query": query, "documents": documents, "top_n": len(documents),
                         "return_documents": False})


def decode_rerank_answer(body: bytes, rows: int) -> np.ndarray:
    """A Cohere-shaped answer as float32 [rows], row i the result whose `index` is i."""
    document = loads(body, "the predictor's answer")
    results = document.get("results") if isinstance(document, dict) else None
    return scores_by_index(results, rows, "results", "relevance_score")

