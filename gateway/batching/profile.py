"""A model's latency profile, learned online: ℓ(b), the predictor time of a batch of b rows
(from when the call is written to when its answer has arrived, where the transport says: see
`executor`).

Semantics:
- ℓ(b) = intercept + per_row × b, fitted by least squares over every successful predictor
  call, each weighted by its recency: a call `HALF_LIFE` calls old counts half as much as
  the latest. So the profile follows a predictor that speeds up or slows down (a new model
  version, a noisy neighbour) within a few hundred batches, and forgets the old regime.
- With calls of one batch size only, the slope cannot be known: the profile is flat
  (per_row 0, intercept the recent mean). Neither coefficient is ever negative: a fit that
  says so is noise, and a negative cost would make a scheduler promise the impossible.
- `predict(b)` is None until the first call is observed.
- A call abandoned at its members' deadline without an answer (`overran`) says the
  predictor is slower than the profile thought, by an unknown amount: if it ran at least
  as long as predicted, everything learned before it counts as one call, and it is learned
  as `SURPRISE` times the time it ran. So a predictor that slows down past its deadlines is
  predicted slow within a call or two (not after hundreds), and deadline-aware admission
  refuses at once. A call abandoned sooner than predicted (a client's own short deadline)
  teaches nothing. After an overrun, the first answered call that is `SURPRISE` times
  faster than predicted means the slow spell is over: the history again counts as one call.

Recording is a handful of float operations per batch (five running sums, decayed), on the
scheduler's loop. The deadline-aware scheduling of requests reads this profile; /metrics
exports it. It must not know the event loop, the queue or any front end.
"""
from __future__ import annotations

HALF_LIFE = 200.0  # calls
SURPRISE = 2.0     # how far off the prediction a call must be, after an overrun, to change the regime
_DECAY = 0.5 ** (1.0 / HALF_LIFE)
_FLAT = 1e-9  # below this spread of batch sizes (weighted variance), no slope is fitted


class LatencyProfile:
    __slots__ = ("_weight", "_rows", "_rows_sq", "_seconds", "_rows_seconds", "calls", "_after_overrun")

    def __init__(self) -> None:
        # Recency-weighted sums: Σw, Σw·b, Σw·b², Σw·ℓ, Σw·b·ℓ.
        self._weight = self._rows = self._rows_sq = self._seconds = self._rows_seconds = 0.0
        self.calls = 0
        self._after_overrun = False  # the profile was raised by an overrun and no call has answered since

    def observe(self, rows: int, seconds: float) -> None:
        """A batch of `rows` rows took `seconds` at the predictor."""
        if self._after_overrun:
            predicted = self.predict(rows)
            if predicted is not None and seconds * SURPRISE < predicted:
                self._forget()  # the slow spell the overruns taught is over
            self._after_overrun = False
        self._add(rows, seconds)

    def overran(self, rows: int, seconds: float) -> None:
        """A batch of `rows` rows was abandoned after `seconds` at the predictor, unanswered."""
        predicted = self.predict(rows)
        if predicted is not None and seconds < predicted:
            return  # abandoned before it was due (a client's short deadline): it says nothing
        self._forget()
        self._add(rows, SURPRISE * seconds)  # it would have taken longer: at least this, as far as we know
        self._after_overrun = True

    def _forget(self) -> None:
        """Everything learned so far counts as one call (its means kept, its weight gone)."""
        if self._weight > 1.0:
            scale = 1.0 / self._weight
            self._weight, self._rows, self._rows_sq = 1.0, self._rows * scale, self._rows_sq * scale
            self._seconds, self._rows_seconds = self._seconds * scale, self._rows_seconds * scale

    def _add(self, rows: int, seconds: float) -> None:
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
