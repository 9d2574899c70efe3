"""InflightTuner: `max_inflight = "auto"`, the number of batches in flight, learned per model.

Why learned: the best number depends on the predictor and on the load, so users cannot
set it. A second batch in flight hides the gateway's own time between calls from a
one-slot predictor (more throughput with many clients), uses the extra slots of a
predictor that has them, and halves the batches of a few closed-loop clients in front of
a predictor that runs calls one at a time (less throughput). In the spirit of TF Serving's
AdaptiveSharedBatchScheduler, the tuner hill-climbs on what clients feel.

Semantics
---------
* The objective is the mean latency of successfully answered requests, from arrival to
  answer. With closed-loop clients it is clients / throughput; with a full queue it is
  queue / throughput; under light load it is the latency itself. Lower is better in all
  three, so one number serves every regime.
* Time is cut into epochs: an epoch ends once `EPOCH_BATCHES` batches, and `EPOCH_ROUNDS`
  rounds of the level's slots (4 x level batches), have returned and `EPOCH_REQUESTS`
  requests that arrived during it have been answered: shorter epochs catch the batches at
  different phases and measured ±20% apart at the same level. Requests that arrived
  before an epoch began are not counted in it, so each epoch measures one level.
* The tuner starts at 1 and stays at its level for `PROBE_EVERY` epochs; then it tries a
  neighbour (one more, then one fewer, alternately; never below 1 or above the ceiling)
  for up to `PROBE_EPOCHS` epochs and compares each with the baseline: the mean of the
  last two epochs at the level. The neighbour wins only when every one of its epochs has
  a latency lower by more than `MARGIN` (one noisy epoch is not enough); a win keeps
  climbing in the same direction at once, a loss returns to the level at the first epoch
  that is not better. Ties therefore keep fewer batches in flight, the cheaper choice for
  a predictor shared with others.
* Probing costs: a losing neighbour serves one epoch worse. So each loss doubles the
  epochs until the next probe, up to `PROBE_EVERY_MAX`, and a win resets it: once the
  level is right, about one epoch in 33 is spent on a probe.
* The margin is small on purpose: a neighbour that is really worse by a lot is never
  mistaken for a better one, and one that differs by little costs little if it is.
* When two epochs in a row at the level differ from the baseline by more than `CHANGE`
  (the load or the predictor changed; one such epoch may be noise), the interval resets
  and the tuner probes downwards at once: a predictor that slows down under concurrency, or loses slots, is left within a
  few epochs. A change of load between two epochs can mislead one comparison; the next
  probes correct it.

Plain arithmetic on the times it is given: it must not know the event loop, the queue or
the executor. The queue reports batches and answers and reads `level`.
"""
from __future__ import annotations

EPOCH_BATCHES = 8     # batches returned before an epoch may end ...
EPOCH_ROUNDS = 4      # ... and rounds of the level's slots (batches / level)
EPOCH_REQUESTS = 128  # answered requests (arrived within the epoch) before it may end
PROBE_EVERY = 3       # epochs at a level before the first probe, and after a win
PROBE_EVERY_MAX = 32  # ... growing to this after losses
PROBE_EPOCHS = 2      # epochs a neighbour must win, each of them, to be kept
MARGIN = 0.02         # a neighbour must cut the mean latency by more than this fraction
CHANGE = 0.25         # two epochs at the level this far from the baseline: conditions changed


class InflightTuner:
    __slots__ = ("ceiling", "level", "_home", "_direction", "_baseline", "_last", "_changes", "_stable",
                 "_interval", "_wins", "_won", "_started", "_batches", "_answered", "_latency_sum", "probes", "moves")

    def __init__(self, ceiling: int, now: float = 0.0) -> None:
        if ceiling < 1:
            raise ValueError("the ceiling of batches in flight must be at least 1")
        self.ceiling = ceiling
        self.level = self._home = 1  # batches the queue may have in flight now; the best level known
        #                              (`level` differs from `_home` only during a probe)
        self._direction = 1     # the next probe's direction
        self._baseline: float | None = None  # mean latency of the last two epochs at home
        self._last: float | None = None      # the last epoch at home
        self._changes = 0       # epochs in a row at home far from the baseline
        self._stable = 0        # epochs at home since the last probe
        self._interval = PROBE_EVERY  # epochs at home before the next probe
        self._wins = 0          # epochs the current probe has won so far ...
        self._won = 0.0         # ... and their latencies, summed
        self.probes = 0         # probes tried, and levels moved to: for tests and debugging
        self.moves = 0
        self._begin(now)

    @property
    def probing(self) -> bool:
        return self.level != self._home

    def set_ceiling(self, ceiling: int) -> None:
        """A new ceiling (the model was re-tuned); what was learned below it stays."""
        if ceiling < 1:
            raise ValueError("the ceiling of batches in flight must be at least 1")
        self.ceiling = ceiling
        self._home = min(self._home, ceiling)
        self.level = min(self.level, ceiling)

    def on_answered(self, arrived: float, now: float) -> None:
        """A request that arrived at `arrived` was answered successfully at `now`."""
        if arrived >= self._started:
            self._answered += 1
            self._latency_sum += now - arrived

    def on_batch_returned(self, now: float) -> None:
        """A batch came back from the executor (whatever its outcome); may end the epoch."""
        self._batches += 1
        if (self._batches >= max(EPOCH_BATCHES, EPOCH_ROUNDS * self.level)
                and self._answered >= EPOCH_REQUESTS):
            self._end_epoch(self._latency_sum / self._answered, now)

    def _end_epoch(self, latency: float, now: float) -> None:
        if not self.probing:
            far = self._baseline is not None and abs(latency / self._baseline - 1.0) > CHANGE
            self._changes = self._changes + 1 if far else 0
            self._baseline = latency if self._last is None else (self._last + latency) / 2
            self._last = latency
            self._stable += 1
            changed = self._changes >= 2
            if changed:
                self._interval, self._direction, self._changes = PROBE_EVERY, -1, 0
            if changed or self._stable >= self._interval:
                self._probe()
        elif self._baseline is not None and latency < self._baseline * (1.0 - MARGIN):
            self._wins += 1
            self._won += latency
            if self._wins >= PROBE_EPOCHS:
                # The neighbour wins: it is the new level, its epochs the baseline; go on that way.
                self._home, self._baseline, self._last = self.level, self._won / self._wins, latency
                self.moves += 1
                self._interval = PROBE_EVERY
                self._probe()
        else:
            self.level, self._stable = self._home, 0
            self._direction = -self._direction
            self._interval = min(2 * self._interval, PROBE_EVERY_MAX)
        self._begin(now)

    def _probe(self) -> None:
        """Try the neighbour in the current direction, or the other one at an edge."""
        candidate = self._home + self._direction
        if not 1 <= candidate <= self.ceiling:
            self._direction = -self._direction
            candidate = self._home + self._direction
        if not 1 <= candidate <= self.ceiling:  # ceiling 1: nothing to try
            self._stable = 0
            return
        self.level, self._wins, self._won = candidate, 0, 0.0
        self.probes += 1

    def _begin(self, now: float) -> None:
        self._started, self._batches, self._answered, self._latency_sum = now, 0, 0, 0.0
