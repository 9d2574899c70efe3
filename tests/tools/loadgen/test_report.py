"""tools.loadgen.report: a Result's summary, its merge across processes and its wire form."""
from __future__ import annotations

import pytest

from tools.loadgen.config import Config
from tools.loadgen.report import Result


def test_result_summary_and_merge():
    config = Config(target="http://127.0.0.1:1/", requests=4)
    a, b = Result(config, elapsed_s=2.0), Result(config, elapsed_s=1.0)
    a.latencies.extend([0.01, 0.02, 0.03])
    a.statuses = {"200": 2, "404": 1}
    a.errors = {"HTTP 404: nope": 1}
    a.sent = 3
    b.latencies.extend([0.04])
    b.statuses = {"200": 1}
    b.transport_errors, b.sent = 1, 2
    b.errors = {"connection refused": 1}
    merged = Result.merge(config, [a, b])
    assert merged.sent == 5 and merged.answered == 4 and merged.finished == 5 and merged.ok == 3
    assert merged.statuses == {"200": 3, "404": 1}
    assert merged.errors == {"HTTP 404: nope": 1, "connection refused": 1}
    assert merged.elapsed_s == 2.0 and merged.rps == 2.5
    assert merged.percentiles_ms()["50"] == pytest.approx(20.0)
    assert (merged.summary()["fastest_ms"] == pytest.approx(10.0)
            and merged.summary()["slowest_ms"] == pytest.approx(40.0))
    wire = Result.from_wire(config, merged.to_wire())
    assert list(wire.latencies) == list(merged.latencies) and wire.statuses == merged.statuses
