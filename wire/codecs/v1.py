"""KServe v1 bodies: `{"instances": [...]}` requests and `{"predictions": [...]}` answers.

A v1 request is `{"instances": [...]}`, one instance per row; the answer is
`{"predictions": [...], "batchId": "..."}`, one prediction per instance, in order. Both
directions live here: a client's request and a predictor's answer are decoded, a
predictor's request (`encode_request`) and a client's answer encoded. Instances travel
through the gateway as opaque JSON values, one per row of a JSON tensor
(`wire.tensors.rows_tensor`). Turning them into typed tensors, or back, depends on a
model's signature: that is the gateway's business (`gateway.models.instances`), not this codec's.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from wire.codecs.json_data import check_json_size, loads
from wire.codecs.limits import DEFAULT_LIMITS, Limits
from wire.errors import InvalidInput


def decode_request(body: bytes, limits: Limits = DEFAULT_LIMITS) -> list[Any]:
    check_json_size(body, limits)
    document = loads(body)
    if not isinstance(document, dict):
        raise InvalidInput('request body must be a JSON object: {"instances": [...]}')
    if "instances" not in document or document["instances"] is None:
        raise InvalidInput("request body has no 'instances' key")
    return check_instances(document["instances"], limits)


def check_instances(instances: Any, limits: Limits = DEFAULT_LIMITS) -> list[Any]:
    """An `instances` value must be a non-empty list within the instance limit."""
    if not isinstance(instances, list):
        raise InvalidInput("'instances' must be a list")
    if not instances:
        raise InvalidInput("'instances' is empty: send at least one instance")
    if len(instances) > limits.max_instances:
        raise InvalidInput(f"{len(instances)} instances exceed the limit of {limits.max_instances}")
    return instances


def encode_request(instances: list[Any] | np.ndarray) -> bytes:
    """A predictor's v1 request: `{"instances": [...]}` (a JSON tensor's rows as they are)."""
    rows = instances.tolist() if isinstance(instances, np.ndarray) else instances
    return orjson.dumps({"instances": rows}, option=orjson.OPT_SERIALIZE_NUMPY)


def encode_response(predictions: list[Any], batch_id: str) -> bytes:
    return orjson.dumps({"predictions": predictions, "batchId": batch_id}, option=orjson.OPT_SERIALIZE_NUMPY)


def decode_predictions(body: bytes, expected: int, *, bare_list: bool = False) -> list[Any]:
    """Read a v1 predictor's answer; it must hold exactly one prediction per instance sent.
    With `bare_list`, the list alone is an answer too (TorchServe's handlers may send it).
    Like every codec it calls anything malformed InvalidInput; whoever reads the answer
    knows whose fault that is (backends.errors.reading_answer)."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise InvalidInput("predictor answered with a body that is not JSON") from None
    predictions: Any
    if bare_list and isinstance(document, list):
        predictions = document
    else:
        predictions = document.get("predictions") if isinstance(document, dict) else None
    if not isinstance(predictions, list):
        raise InvalidInput("predictor answer has no 'predictions' list")
    if len(predictions) != expected:
        raise InvalidInput(f"predictor returned {len(predictions)} predictions for {expected} instances")
    return predictions
