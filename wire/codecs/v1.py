"""KServe v1 bodies: `{"instances": [...]}` requests and `{"predictions": [...]}` answers.

A v1 request is `{"instances": [...]}`, one instance per row; the answer is
`{"predictions": [...], "batchId": "..."}`, one prediction per instance, in order. Instances
travel through the gateway as opaque JSON values, one per row of a JSON tensor
(`rows_tensor`). Turning them into typed tensors, or back, depends on a model's signature:
that is the gateway's business (`gateway.instances`), not this codec's.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from wire.codecs.json_data import loads
from wire.codecs.limits import DEFAULT_LIMITS, Limits
from wire.errors import InvalidInput
from wire.tensors import JSON, Tensor

INSTANCES_TENSOR = "instances"  # the name of the one JSON tensor that carries opaque instances


def decode_request(body: bytes, limits: Limits = DEFAULT_LIMITS) -> list[Any]:
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


def rows_tensor(rows: list[Any]) -> Tensor:
    """Opaque instances as one JSON tensor (one object per row)."""
    data = np.empty(len(rows), dtype=object)
    for i, row in enumerate(rows):
        data[i] = row
    return Tensor(INSTANCES_TENSOR, JSON, data)
