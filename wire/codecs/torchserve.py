"""TorchServe-style bodies, as TorchServe users send them to ``POST /predictions/<m>`` and
to gRPC ``InferenceAPIsService/Predictions`` (in ``input["data"]``).

A body is JSON, one of:

* ``{"instances": [i1, i2, ...]}``: several instances, answered ``{"predictions": [p1, p2, ...]}``;
* ``{"data": i}``: one instance, answered with its prediction alone;
* a JSON list ``i``: one instance (e.g. ``[1, 2, 3, 4]``), answered with its prediction alone.

Instances have KServe v1 semantics (``wire.codecs.v1``): they go through
``InferenceService.infer_instances`` and batch with every other client of the model.
"""
from __future__ import annotations

from typing import Any

import orjson

from wire.codecs.json_data import loads
from wire.codecs.limits import DEFAULT_LIMITS, Limits
from wire.codecs.v1 import check_instances
from wire.errors import InvalidInput

FORMS = '{"instances": [...]}, {"data": <one instance>} or one instance as a JSON list'


def decode_body(body: bytes | memoryview, limits: Limits = DEFAULT_LIMITS) -> tuple[list[Any], bool]:
    """Return (instances, single): `single` when the body was one instance."""
    document = loads(body)
    if isinstance(document, list):
        return [document], True
    if isinstance(document, dict):
        if "instances" in document:
            return check_instances(document["instances"], limits), False
        if "data" in document:
            return [document["data"]], True
    raise InvalidInput(f"the body must be JSON: {FORMS}")


def encode_answer(predictions: list[Any], single: bool) -> bytes:
    """TorchServe's answer: the one prediction alone, or ``{"predictions": [...]}``."""
    return orjson.dumps(predictions[0] if single else {"predictions": predictions},
                        option=orjson.OPT_SERIALIZE_NUMPY)
