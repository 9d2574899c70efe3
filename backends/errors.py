"""How a predictor's failures become gateway errors (the predictor side of error mapping).

Its HTTP status or gRPC code says whether the predictor was unreachable, refused the
batch or failed; an answer it gave that cannot be used becomes `BadPredictorAnswer`, made
here only (`unusable`, and `reading_answer` around every decoding of an answer). The
statuses each error travels with are `wire.errors`' business, not this module's.

Messages name the model, never the predictor's address: error bodies go to clients.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import grpc
import orjson

from wire.errors import (
    BadPredictorAnswer,
    DeadlineExceeded,
    GatewayError,
    HandlerFailed,
    InvalidInput,
    PredictorFailed,
    PredictorRejected,
    Unavailable,
)

_MAX_DETAIL = 300


def from_http_status(model: str, status: int, body: bytes) -> GatewayError:
    detail = _detail(body)
    if status == 404:
        return Unavailable(f"model '{model}': the predictor does not serve it ({detail})")
    if status in (429, 503):
        return Unavailable(f"model '{model}': the predictor is unavailable ({status}: {detail})")
    if status == 504:
        return DeadlineExceeded(f"model '{model}': the predictor timed out ({detail})")
    if 400 <= status < 500:
        return PredictorRejected(f"model '{model}': the predictor rejected the batch ({status}: {detail})")
    return PredictorFailed(f"model '{model}': the predictor failed ({status}: {detail})")


def from_torchserve_status(model: str, status: int, body: bytes) -> GatewayError:
    """TorchServe's HTTP answers: an exception in the model's handler is a 503 (or 500)
    ``{"type": "InternalServerException", "message": "Prediction failed"}``, not an
    unavailable server: HandlerFailed, so one bad row does not fail its batch."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        document = None
    if status in (500, 503) and isinstance(document, dict) and document.get("type") == "InternalServerException" \
            and "Prediction failed" in str(document.get("message")):
        return HandlerFailed(f"model '{model}': the predictor's handler failed ({status}: {_detail(body)})")
    return from_http_status(model, status, body)


def from_grpc_error(model: str, error: grpc.aio.AioRpcError) -> GatewayError:
    code, detail = error.code(), (error.details() or "")[:_MAX_DETAIL]
    if code == grpc.StatusCode.UNAVAILABLE:
        return Unavailable(f"model '{model}': the predictor is unreachable")
    if code == grpc.StatusCode.NOT_FOUND:
        return Unavailable(f"model '{model}': the predictor does not serve it ({detail})")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return DeadlineExceeded(f"model '{model}': the predictor timed out")
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.OUT_OF_RANGE):
        return PredictorRejected(f"model '{model}': the predictor rejected the batch ({detail})")
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return Unavailable(f"model '{model}': the predictor is overloaded ({detail})")
    return PredictorFailed(f"model '{model}': the predictor failed ({code.name}: {detail})")


def unusable(model: str, problem: str) -> BadPredictorAnswer:
    """The predictor answered, but not with something the gateway can use."""
    return BadPredictorAnswer(f"model '{model}': the predictor's answer is unusable: {problem}")


@contextlib.contextmanager
def reading_answer(model: str) -> Iterator[None]:
    """Decode a predictor's answer inside this. The codecs serve both directions and call
    anything malformed InvalidInput, a client's fault; coming from a predictor, it is an
    unusable answer instead (502 / INTERNAL, not 400)."""
    try:
        yield
    except (InvalidInput, ValueError) as exc:
        problem = exc.message if isinstance(exc, InvalidInput) else str(exc)
        raise unusable(model, problem) from None


def _detail(body: bytes) -> str:
    """The predictor's own error text: {"error": "..."} (Triton, KServe), {"error": {"message":
    "..."}} (OpenAI's shape), {"detail": ...} or {"message": ...}; anything else as its JSON."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode("utf-8", errors="replace")[:_MAX_DETAIL] or "no detail"
    for _ in range(2):  # {"error": {"message": ...}}: one level down
        if not isinstance(document, dict):
            break
        document = next((document[key] for key in ("error", "detail", "message") if document.get(key)), document)
        if isinstance(document, str):
            break
    text = document if isinstance(document, str) else orjson.dumps(document).decode()
    return text[:_MAX_DETAIL] or "no detail"
