"""Wakeups: when a model's queue weighs its batches again, besides on arrival and return.

* At the end of the loop's current pass (`after_pass`): a request arriving to less than a
  full batch is weighed there, not inside `ModelQueue.add`, so the requests the loop reads
  in one pass (clients answered together, coming back together) are in the queue when the
  policy decides, and leave together. It costs a lone request one loop turn; over HTTP, at
  a closed loop the gateway's own CPU limits, it doubled the batches (docs/performance.md).
* At the time the policy asked to wait until (`at`), keeping an earlier one if one is set;
  while that pump runs, `woken` says so (a batch it ships left because a hold or a window
  ended).

It runs on the scheduler's event loop and knows only its handles and the pump it calls:
no queue, policy or request.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable


class Wakeups:
    """One queue's pending pumps: at the end of the loop's pass, and at the policy's time."""

    __slots__ = ("_loop", "_pump", "handle", "when", "woken", "_pass_end")

    def __init__(self, loop: asyncio.AbstractEventLoop, pump: Callable[[], None]) -> None:
        self._loop, self._pump = loop, pump
        self.handle: asyncio.Handle | None = None  # the policy's wake-up, due at `when`
        self.when = 0.0
        self.woken = False  # the pump running is the policy's own wake-up (a hold or window ended)
        self._pass_end: asyncio.Handle | None = None  # the pump due at the end of the loop's pass

    def after_pass(self) -> None:
        """Pump at the end of the loop's current pass (once, however many ask)."""
        if self._pass_end is None:
            self._pass_end = self._loop.call_soon(self._on_pass_end)

    def _on_pass_end(self) -> None:
        self._pass_end = None
        self._pump()

    def at(self, when: float) -> None:
        """Pump again at `when` (keeping an earlier wake-up if one is set)."""
        # The time is kept beside the handle: uvloop answers call_at with a time already
        # past with a plain Handle, which has no when().
        if self.handle is None or self.when > when:
            if self.handle is not None:
                self.handle.cancel()
            self.handle, self.when = self._loop.call_at(when, self._on_wake), when

    def _on_wake(self) -> None:
        self.handle = None
        self.woken = True
        try:
            self._pump()
        finally:
            self.woken = False

    def cancel(self) -> None:
        """No pump is due any more (the queue is abandoned)."""
        for handle in (self.handle, self._pass_end):
            if handle is not None:
                handle.cancel()
