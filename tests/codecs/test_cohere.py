"""wire/codecs/cohere.py: Cohere's rerank bodies, both directions, and Cohere's shape
towards a predictor."""
from __future__ import annotations

import numpy as np
import orjson
import pytest

from wire.codecs import cohere
from wire.errors import InvalidInput
from wire.rerank import DEFAULT_MAX_TOKENS_PER_DOC


def body(**document) -> bytes:
    return orjson.dumps({"model": "m", "query": "q", "documents": ["a", "b"], **document})


def test_a_request_takes_strings_and_objects_and_nulls_as_absent():
    request = cohere.decode_request(body(documents=["a", {"text": "b", "id": 7}], top_n=None,
                                         return_documents=None, rank_fields=None), 1)
    assert request.documents == ["a", "b"] and request.originals == ["a", {"text": "b", "id": 7}]
    assert request.top_n is None and request.return_documents is False
    assert request.max_tokens_per_doc == DEFAULT_MAX_TOKENS_PER_DOC and request.version == 1
    request = cohere.decode_request(body(max_tokens_per_doc=64, priority=2, top_n=1), 2)
    assert (request.max_tokens_per_doc, request.priority, request.top_n) == (64, 2, 1)


def test_rank_fields_make_field_lines_in_their_order():
    request = cohere.decode_request(body(documents=[{"title": "T", "text": "x", "year": 1999}],
                                         rank_fields=["year", "title"]), 1)
    assert request.documents == ["year: 1999\ntitle: T"]


def test_the_answer_is_sorted_best_first_ties_in_order_cut_to_top_n_with_documents():
    request = cohere.decode_request(body(documents=["a", {"text": "b", "id": 1}, "c"], top_n=2,
                                         return_documents=True), 1)
    answer = orjson.loads(cohere.encode_answer(request, np.array([0.5, 0.9, 0.9], np.float32), 12))
    assert [(r["index"], r["document"]) for r in answer["results"]] == [(1, {"text": "b", "id": 1}),
                                                                         (2, {"text": "c"})]
    assert answer["meta"] == {"api_version": {"version": "1"}, "billed_units": {"search_units": 1},
                              "tokens": {"input_tokens": 12}}
    assert cohere.error_document("nope") == {"message": "nope"}


@pytest.mark.parametrize(("document", "message"), [
    ({"documents": []}, "'documents' is empty"),
    ({"documents": [{"text": 3}]}, "without a 'text' string"),
    ({"documents": ["a"], "top_n": -1}, "'top_n' must be a positive integer, got -1"),
    ({"documents": ["a"], "priority": 1.5}, "'priority' must be a non-negative integer"),
    ({"model": ""}, "'model' is required"),
])
def test_malformed_requests_are_refused_saying_why(document, message):
    with pytest.raises(InvalidInput, match=message.replace("(", r"\(").replace(")", r"\)")):
        cohere.decode_request(body(**document), 2)


def test_the_predictor_shape_both_ways():
    assert orjson.loads(cohere.encode_rerank_request("m", "q", ["a"]))["top_n"] == 1
    scores = cohere.decode_rerank_answer(orjson.dumps({"results": [{"index": 0, "relevance_score": 1}]}), 1)
    assert scores.dtype == np.float32 and scores.tolist() == [1.0]
    with pytest.raises(InvalidInput, match="no usable 'index'"):
        cohere.decode_rerank_answer(orjson.dumps({"results": [{"index": 2, "relevance_score": 1}]}), 1)
