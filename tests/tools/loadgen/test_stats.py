"""tools.loadgen.stats: nearest-rank percentiles and hey's histogram on known inputs."""
from __future__ import annotations

import math

from tools.loadgen.stats import histogram, percentile, percentiles


def test_percentiles_by_nearest_rank_on_known_inputs():
    values = list(range(1, 101))  # 1..100
    got = percentiles(reversed(values))  # order of input does not matter
    assert got == {"10": 10, "25": 25, "50": 50, "75": 75, "90": 90, "95": 95, "99": 99, "99.9": 100}
    thousand = list(range(1, 1001))
    assert percentile(thousand, 99.9) == 999
    assert percentile(thousand, 50) == 500
    assert percentile([7.0], 10) == 7.0 and percentile([7.0], 99.9) == 7.0
    assert percentile([1, 2, 3, 4], 50) == 2 and percentile([1, 2, 3, 4], 75) == 3
    assert math.isnan(percentile([], 50))


def test_histogram_marks_span_fastest_to_slowest_and_count_everything():
    values = [0.0, 0.1, 0.25, 0.5, 0.99, 1.0]
    bars = histogram(values, buckets=10)
    assert len(bars) == 11
    assert bars[0][0] == 0.0 and bars[-1][0] == 1.0
    assert sum(count for _, count in bars) == len(values)
    counts = dict((round(mark, 2), count) for mark, count in bars)
    assert counts[0.0] == 1 and counts[0.1] == 1 and counts[0.3] == 1 and counts[0.5] == 1 and counts[1.0] == 2
    assert histogram([0.2, 0.2]) == [(0.2, 2)]
    assert histogram([]) == []
