"""Statistics over latencies: nearest-rank percentiles and hey's histogram.

Pure functions over sequences of numbers. It must not know what the numbers are (requests,
configs, results) nor how they are shown.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

PERCENTILES = (10, 25, 50, 75, 90, 95, 99, 99.9)
HISTOGRAM_BUCKETS = 10


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest rank: the smallest value with at least p% of the values at or below it."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    rank = max(1, math.ceil(round(p / 100.0 * n, 9)))
    return float(sorted_values[min(rank, n) - 1])


def percentile_key(p: float) -> str:
    """How a percentile is named in reports and JSON: `50`, `99.9`."""
    return f"{p:g}"


def percentiles(values: Iterable[float], ps: tuple[float, ...] = PERCENTILES) -> dict[str, float]:
    ordered = sorted(values)
    return {percentile_key(p): percentile(ordered, p) for p in ps}


def histogram(values: Sequence[float], buckets: int = HISTOGRAM_BUCKETS) -> list[tuple[float, int]]:
    """hey's histogram: `buckets + 1` marks evenly spaced from fastest to slowest; each
    value is counted at the first mark at or above it."""
    if len(values) == 0:
        return []
    lo, hi = min(values), max(values)
    if hi == lo:
        return [(lo, len(values))]
    step = (hi - lo) / buckets
    marks = [lo + step * i for i in range(buckets)] + [hi]
    counts = [0] * len(marks)
    try:
        import numpy as np
        index = np.searchsorted(np.asarray(marks), np.asarray(values, dtype=float), side="left")
        np.clip(index, 0, len(marks) - 1, out=index)
        for i, c in enumerate(np.bincount(index, minlength=len(marks))):
            counts[i] = int(c)
    except ImportError:  # pragma: no cover - numpy is a dependency
        import bisect
        for v in values:
            counts[min(bisect.bisect_left(marks, v), len(marks) - 1)] += 1
    return list(zip(marks, counts, strict=True))
