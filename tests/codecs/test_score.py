"""wire/codecs/score.py: vLLM's score API towards a predictor, a batch's pairs in one call and
their scores read back by index."""
from __future__ import annotations

import numpy as np
import orjson
import pytest

from wire.codecs import score
from wire.errors import InvalidInput


def test_a_batch_s_pairs_travel_as_text_1_and_text_2_whatever_their_queries():
    assert orjson.loads(score.encode_request("m", ["q1", "q2"], ["a", "b"])) == {
        "model": "m", "text_1": ["q1", "q2"], "text_2": ["a", "b"]}


def test_the_scores_come_back_in_the_pairs_order_by_their_index():
    scores = score.decode_answer(orjson.dumps({"data": [{"index": 1, "score": 0.25}, {"index": 0, "score": 0.75}]}), 2)
    assert scores.dtype == np.float32 and scores.tolist() == [0.75, 0.25]


@pytest.mark.parametrize("answer, message", [
    ({"data": [{"index": 0, "score": 1}]}, "1 scores in 'data' for 2 documents"),
    ({"results": []}, "no scores in 'data'"),
    ({"data": [{"index": 0, "score": 1}, {"index": 0, "score": 1}]}, r"data\[1\] has no usable 'index'"),
    ({"data": [{"index": 0, "score": 1}, {"index": 1, "score": "high"}]}, r"data\[1\].score must be a finite number"),
])
def test_an_unusable_answer_is_refused_saying_why(answer, message):
    with pytest.raises(InvalidInput, match=message):
        score.decode_answer(orjson.dumps(answer), 2)
