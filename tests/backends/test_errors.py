"""A predictor's unusable answers: the codecs' InvalidInput becomes BadPredictorAnswer
naming the model, in one place, whatever the client."""
from __future__ import annotations

import pytest

from backends import errors
from wire.codecs import v1
from wire.errors import BadPredictorAnswer, HandlerFailed, InvalidInput, PredictorFailed, Unavailable


def test_a_malformed_answer_is_unusable_not_the_client_s_fault():
    with pytest.raises(BadPredictorAnswer) as caught, errors.reading_answer("m"):
        v1.decode_predictions(b'{"predictions": [1]}', 2)
    assert caught.value.message == ("model 'm': the predictor's answer is unusable: "
                                    "predictor returned 1 predictions for 2 instances")
    assert (caught.value.http_status, caught.value.grpc_code) == (502, "INTERNAL")


@pytest.mark.parametrize("body, problem", [
    (b"<html>surprise</html>", "not JSON"),
    (b'{"outputs": []}', "no 'predictions' list"),
    (b"[1]", "no 'predictions' list"),  # a bare list only where a client accepts one
])
def test_v1_answers_the_codec_cannot_read(body, problem):
    with pytest.raises(InvalidInput, match=problem):
        v1.decode_predictions(body, 1)
    with pytest.raises(BadPredictorAnswer, match=f"model 'm': the predictor's answer is unusable: .*{problem}"), \
            errors.reading_answer("m"):
        v1.decode_predictions(body, 1)


def test_other_errors_pass_through():
    with pytest.raises(Unavailable), errors.reading_answer("m"):
        raise Unavailable("gone")
    with errors.reading_answer("m"):
        assert v1.decode_predictions(b"[[2]]", 1, bare_list=True) == [[2]]


def test_torchserves_handler_exception_is_a_handler_failure_not_an_unavailable_server():
    body = b'{"code": 503, "type": "InternalServerException", "message": "Prediction failed"}'
    error = errors.from_torchserve_status("image", 503, body)
    assert isinstance(error, HandlerFailed) and error.http_status == 502 and "handler failed" in error.message
    # Anything else is read as any predictor's status.
    busy = b'{"code": 503, "type": "ServiceUnavailableException", "message": "Model \\"image\\" has no worker"}'
    assert type(errors.from_torchserve_status("image", 503, busy)) is Unavailable
    assert type(errors.from_torchserve_status("image", 500, b"oops")) is PredictorFailed
