"""A model's latency profile, learned online: ℓ(b), the predictor time of a batch of b rows.

Semantics:
- ℓ(b) = intercept + per_row × b, fitted by least squares over every successful predictor
  call, each weighted by its recency: a call `HALF_LIFE` calls old counts half as much as
  the latest. So the profile follows a predictor that speeds up or slows down (a new model
  version, a noisy neighbour) within a few hundred batches, and forgets the old regime.
- With calls of one batch size only, the slope cannot be known: the profile is flat
  (per_row 0, intercept the recent mean). Neither coefficient is ever negative: a fit that
  says so is noise, and a negative cost would make a scheduler promise the impossible.
- `predict(b)` is None until the first call is observed.

Recording is a handful of float operations per batch (five running sums, decayed), on the
scheduler's loop. The deadline-aware scheduling of requests reads this profile; /metrics
exports it. It must not know the event loop, the queue or any front end.
"""
from __future__ import annotations

HALF_LIFE = 200.0  # calls
_DECAY = 0.5 ** (1.0 / HALF_LIFE)
_FLAT = 1e-9  # below this spread of batch sizes (weighted variance), no slope is fitted


class LatencyProfile:
    __slots__ = ("_weight", "_rows", "_rows_sq", "_seconds", "_rows_seconds", "calls")

    def __init__(self) -> None:
        # Recency-weighted sums: Σw, Σw·b, Σw·b², Σw·ℓ, Σw·b·ℓ.
        self._weight = self._rows = self._rows_sq = self._seconds = self._rows_seconds = 0.0
        self.calls = 0

    def observe(self, rows: int, seconds: float) -> None:
        """A batch of `rows` rows took `seconds` at the predictor."""
        self._weight = self._weight * _DECAY + 1.0
        self._rows = self._rows * _DECAY + rows
        self._rows_sq = self._rows_sq * _DECAY + rows * rows
        self._seconds = self._seconds * _DECAY + seconds
        self._rows_seconds = self._rows_seconds * _DECAY + rows * seconds
        self.calls += 1

    @property
    def coefficients(self) -> tuple[float, float] | None:
        """(intercept, per_row) in seconds, or None before the first call."""
        if self.calls == 0:
            return None
        weight, rows = self._weight, self._rows
        mean_rows, mean_seconds = rows / weight, self._seconds / weight
        spread = self._rows_sq / weight - mean_rows * mean_rows
        per_row = 0.0
        if spread > _FLAT:
            per_row = max(0.0, (self._rows_seconds / weight - mean_rows * mean_seconds) / spread)
        intercept = mean_seconds - per_row * mean_rows
        if intercept < 0.0:  # the line through the data crosses zero: cost is all per row
            intercept, per_row = 0.0, self._rows_seconds / self._rows_sq
        return intercept, per_row

    def predict(self, rows: int) -> float | None:
        """ℓ(rows) in seconds, or None before the first call."""
        coefficients = self.coefficients
        if coefficients is None:
            return None
        intercept, per_row = coefficients
        return intercept + per_row * rows
