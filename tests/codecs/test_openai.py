"""OpenAI's Embeddings API bodies (`wire.codecs.openai`): what a client may send, what it
gets back in each encoding, errors in OpenAI's shape, and a predictor's answers read back
by index in floats or base64."""
from __future__ import annotations

import base64

import numpy as np
import orjson
import pytest

from wire.codecs import openai
from wire.codecs.limits import Limits
from wire.errors import InvalidInput, PayloadTooLarge


def decode(document) -> openai.EmbeddingsRequest:
    return openai.decode_request(orjson.dumps(document))


def test_a_string_is_one_row_and_a_list_is_one_row_per_text():
    assert decode({"model": "m", "input": "hello"}).texts == ["hello"]
    request = decode({"model": "m", "input": ["a", "b", "c"], "encoding_format": "base64", "dimensions": 8,
                      "user": "u-1"})
    assert (request.texts, request.rows, request.encoding_format, request.dimensions, request.user) == \
        (["a", "b", "c"], 3, "base64", 8, "u-1")
    assert decode({"model": "m", "input": "x", "encoding_format": None}).encoding_format == "float"


def test_token_ids_are_rows_too_a_flat_list_being_one():
    assert decode({"model": "m", "input": [1, 2, 3]}).token_ids == [[1, 2, 3]]
    request = decode({"model": "m", "input": [[1, 2], [3]]})
    assert (request.token_ids, request.texts, request.rows) == ([[1, 2], [3]], [], 2)


@pytest.mark.parametrize("document, message", [
    ([], "must be a JSON object"),
    ({"input": "x"}, "'model' is required"),
    ({"model": "", "input": "x"}, "'model' is required"),
    ({"model": "m"}, "'input' must be"),
    ({"model": "m", "input": []}, "'input' must be"),
    ({"model": "m", "input": ""}, "input[0]' is an empty string"),
    ({"model": "m", "input": ["a", ""]}, "input[1]' is an empty string"),
    ({"model": "m", "input": ["a", 1]}, "mixes strings and token ids"),
    ({"model": "m", "input": [[1], []]}, "input[1]' must be a non-empty list"),
    ({"model": "m", "input": [[1, -2]]}, "non-negative integer token ids"),
    ({"model": "m", "input": [True]}, "mixes strings and token ids"),
    ({"model": "m", "input": {"text": "x"}}, "'input' must be"),
    ({"model": "m", "input": "x", "encoding_format": "int8"}, "'encoding_format' must be one of float, base64"),
    ({"model": "m", "input": "x", "encoding_format": 0}, "'encoding_format' must be one of float, base64, got 0"),
    ({"model": "m", "input": "x", "encoding_format": False}, "must be one of float, base64, got false"),
    ({"model": "m", "input": "x", "encoding_format": ""}, "must be one of float, base64, got \"\""),
    ({"model": "m", "input": [[1, 2.5]]}, "'input[0][1]' is 2.5: 'input[0]' must be a non-empty list"),
    ({"model": "m", "input": [7, 2 ** 32]}, "'input[1]' = 4294967296 is out of range"),
    ({"model": "m", "input": "x", "user": False}, "'user' must be a string"),
    ({"model": "m", "input": "x", "dimensions": 0}, "'dimensions' must be a positive integer"),
    ({"model": "m", "input": "x", "dimensions": True}, "'dimensions' must be a positive integer"),
    ({"model": "m", "input": "x", "user": 3}, "'user' must be a string"),
    ({"model": "m", "input": "x", "temperature": 1}, "unrecognized request argument supplied: temperature"),
])
def test_bad_requests_are_refused_saying_what_is_wrong(document, message):
    with pytest.raises(InvalidInput, match=message.replace("[", r"\[").replace("]", r"\]")):
        decode(document)


def test_a_token_id_past_64_bits_is_out_of_range_not_a_string():
    # JSON parsers read 2**64 as a float; it is an integer the client wrote, too large for an id.
    with pytest.raises(InvalidInput, match=r"'input\[0\]\[1\]' = 18446744073709551616 is out of range: "
                                           r"'input\[0\]' must be a non-empty list of non-negative integer "
                                           r"token ids \(at most 4294967295\)"):
        openai.decode_request(b'{"model": "m", "input": [[1, 18446744073709551616]]}')


def test_bodies_are_bounded_before_parsing_and_lists_by_the_instance_limit():
    with pytest.raises(PayloadTooLarge):
        openai.decode_request(b'{"model": "m", "input": "' + b"x" * 200 + b'"}', Limits(max_json_bytes=100))
    with pytest.raises(InvalidInput, match="'input' has 4 items; at most 3"):
        openai.decode_request(orjson.dumps({"model": "m", "input": list("abcd")}), Limits(max_instances=3))
    with pytest.raises(InvalidInput, match="not valid JSON"):
        openai.decode_request(b'{"model": ')


def test_the_answer_lists_each_row_by_index_with_usage_and_the_model_as_named():
    vectors = np.array([[0.5, -1.0], [0.25, 2.0]], dtype=np.float32)
    answer = orjson.loads(openai.encode_answer("My-Model", vectors, "float", 7))
    assert answer == {"object": "list", "model": "My-Model", "usage": {"prompt_tokens": 7, "total_tokens": 7},
                      "data": [{"object": "embedding", "index": 0, "embedding": [0.5, -1.0]},
                               {"object": "embedding", "index": 1, "embedding": [0.25, 2.0]}]}


def test_base64_is_little_endian_float32_as_openai_clients_decode_it():
    vectors = np.array([[0.1, -2.5, 3.0]], dtype=np.float32)
    answer = orjson.loads(openai.encode_answer("m", vectors, "base64", 3))
    raw = base64.b64decode(answer["data"][0]["embedding"])
    assert np.array_equal(np.frombuffer(raw, dtype="<f4"), vectors[0])


def test_errors_have_openai_shape_with_a_type_by_status():
    assert openai.error_document("no such model", 404) == {"error": {
        "message": "no such model", "type": "invalid_request_error", "param": None, "code": "model_not_found"}}
    assert openai.error_document("full", 429)["error"]["type"] == "rate_limit_error"
    assert openai.error_document("down", 503)["error"]["type"] == "server_error"
    assert openai.error_document("late", 504)["error"]["code"] == "timeout"


def test_a_batch_goes_to_the_predictor_as_one_call_asking_for_base64():
    assert orjson.loads(openai.encode_request("m", ["a", "b"])) == \
        {"model": "m", "input": ["a", "b"], "encoding_format": "base64"}
    assert orjson.loads(openai.encode_request("m", ["a"], dimensions=4))["dimensions"] == 4


def test_the_predictors_answer_is_read_by_index_in_floats_or_base64():
    second = base64.b64encode(np.array([3, 4], dtype="<f4").tobytes()).decode()
    body = orjson.dumps({"data": [{"index": 1, "embedding": second}, {"index": 0, "embedding": [1, 2]}]})
    assert openai.decode_answer(body, 2).tolist() == [[1, 2], [3, 4]]


@pytest.mark.parametrize("data, message", [
    ([{"index": 0, "embedding": [1.0]}], "1 embeddings in 'data' for 2 inputs"),
    ([{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [2.0]}], "no usable 'index'"),
    ([{"index": 0, "embedding": [1.0]}, {"index": 5, "embedding": [2.0]}], "no usable 'index'"),
    ([{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [2.0, 3.0]}], "differ in length"),
    ([{"index": 0, "embedding": "%%%"}, {"index": 1, "embedding": [2.0]}], "not valid base64"),
    ([{"index": 0, "embedding": "AAA="}, {"index": 1, "embedding": [2.0]}], "not float32 values"),
    ([{"index": 0, "embedding": ["a"]}, {"index": 1, "embedding": [2.0]}], "list of numbers or a base64"),
])
def test_an_unusable_predictor_answer_is_refused(data, message):
    with pytest.raises(InvalidInput, match=message):
        openai.decode_answer(orjson.dumps({"data": data}), 2)
