"""TorchServe's Predictions client: the answer forms it reads (no server needed)."""
from __future__ import annotations

import pytest

from backends.torchserve_grpc import decode_predictions
from wire.errors import BadPredictorAnswer


def test_predictions_answer_forms():
    assert decode_predictions("m", b'{"predictions": [[2], [4]]}', 2) == [[2], [4]]
    assert decode_predictions("m", b"[[2], [4]]", 2) == [[2], [4]]
    with pytest.raises(BadPredictorAnswer, match="1 predictions for 2"):
        decode_predictions("m", b"[[2]]", 2)
    with pytest.raises(BadPredictorAnswer, match="not JSON"):
        decode_predictions("m", b"\x00", 1)


@pytest.mark.parametrize("payload", [b'{"predictions": {"a": 1}}', b'"text"', b"{}"])
def test_what_is_no_list_of_predictions_is_unusable_and_names_the_model(payload):
    with pytest.raises(BadPredictorAnswer, match="model 'm': the predictor's answer is unusable"):
        decode_predictions("m", payload, 1)
