"""wire/errors.py: how a message words what it repeats. Durations are told to clients in
milliseconds that never read "0 ms" (this test was in tests/test_request.py while `format_ms`
lived in wire/request.py)."""
from __future__ import annotations

import pytest

from wire.errors import format_ms


@pytest.mark.parametrize("seconds, text", [(0.0004, "0.4 ms"), (0.0000123, "0.012 ms"), (0, "0 ms"),
                                           (0.0123, "12 ms"), (1.5, "1500 ms"), (0.009, "9 ms")])
def test_durations_below_a_millisecond_are_not_reported_as_zero(seconds, text):
    assert format_ms(seconds) == text
