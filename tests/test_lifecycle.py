"""gateway/lifecycle.py: a request's Call keeps the tightest deadline it is given, and is
closed (counted and timed) exactly once, whatever paths reach its end."""
from __future__ import annotations

import time

from gateway.lifecycle import Call


def test_the_tightest_deadline_stands():
    call = Call("v1", "demo")
    call.tighten(None)
    assert call.timeout_s is None
    call.tighten(2.0)
    call.tighten(5.0)
    call.tighten(None)
    assert call.timeout_s == 2.0
    call.tighten(0.5)
    assert call.timeout_s == 0.5


def test_a_call_is_closed_once_with_its_first_outcome():
    closed: list[tuple[int | None, float]] = []
    call = Call("oip_grpc", "demo", lambda c: closed.append((c.status, c.elapsed_s)))
    time.sleep(0.01)
    call.close(400)
    call.close(200)  # a second path to the end (an error after an answer) changes nothing
    assert call.status == 400
    assert len(closed) == 1 and closed[0][0] == 400 and closed[0][1] >= 0.01
