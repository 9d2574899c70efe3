"""wire/request.py: what a client gives of its deadline and priority, read the same way on
every protocol."""
from __future__ import annotations

import pytest

from wire.errors import InvalidInput
from wire.request import OipRequest, priority_from_header
from wire.tensors import Tensor


def request(**parameters) -> OipRequest:
    import numpy as np

    return OipRequest([Tensor("INPUT0", "FP32", np.zeros((1, 1), np.float32))], parameters=parameters)


def test_timeout_and_priority_parameters_are_refused_alike_when_null_or_wrong():
    assert request().timeout_s is None and request().priority == 0
    assert request(timeout=2_000).timeout_s == 0.002 and request(priority=2).priority == 2
    for parameters in ({"timeout": None}, {"timeout": -1}, {"timeout": 1.5}, {"timeout": True}):
        with pytest.raises(InvalidInput, match="'timeout'"):
            _ = request(**parameters).timeout_s
    for parameters in ({"priority": None}, {"priority": -1}, {"priority": "1"}):
        with pytest.raises(InvalidInput, match="'priority'"):
            _ = request(**parameters).priority


def test_the_priority_header_is_a_non_negative_integer():
    assert priority_from_header(None) == 0 and priority_from_header(" 3 ") == 3
    for value in ("high", "-1", "1.5", ""):
        with pytest.raises(InvalidInput, match="X-Request-Priority"):
            priority_from_header(value)
