"""The engine interface: what the runner asks of a protocol client.

An engine sends one request at a time per slot and reports each answer as an `Answer`; the
runner owns the loop, the timing and the counting. Also the few helpers the engines share
to phrase errors alike. It must not know about the runner, statistics or reports.
"""
from __future__ import annotations

import asyncio
import re
from abc import ABC, abstractmethod
from typing import Any

USER_AGENT = "batching-gateway-loadgen/1"

# One request's outcome: (status, bytes received, error message).
# - status: "200", "404" (HTTP) or "OK", "NOT_FOUND" (gRPC); None when no answer came at all
#   (a transport failure), which the runner counts without a latency;
# - error: None for a success, else a short message counted in the error distribution
#   (HTTP >= 400 with a snippet of the body, gRPC non-OK with its details, transport failures).
Answer = tuple[str | None, int, str | None]


class Slot:
    """Per-worker state of an engine (its connection, or its gRPC callable)."""
    __slots__ = ("connection", "index")

    def __init__(self, index: int) -> None:
        self.connection: Any = None
        self.index = index


class Engine(ABC):
    """A protocol client as the runner drives it, on the run's event loop:

    `start()` once, then `new_slot(i)` per worker (closed loop) or per request in flight
    (open loop), `call(slot)` any number of times, `release(slot)` when a slot is done,
    and `close()` once at the end."""

    @abstractmethod
    async def start(self) -> None:
        """Open what the run shares (sessions, channels); called once before any call."""

    def new_slot(self, index: int) -> Slot:
        """State for one worker; `index` counts from 0."""
        return Slot(index)

    @abstractmethod
    async def call(self, slot: Slot) -> Answer:
        """Send one request and wait for its answer; never raises for a failed request
        (cancellation aside): failures are answers too."""

    def release(self, slot: Slot) -> None:  # noqa: B027 - most engines keep nothing per slot
        """The slot will not be used again: drop what it holds (e.g. its connection)."""

    @abstractmethod
    async def close(self) -> None:
        """Close what `start` opened; called once after the last call."""


def body_snippet(body: bytes) -> str:
    """The start of an error body, on one line, for the error distribution."""
    text = body[:160].decode("utf-8", "replace")
    return re.sub(r"\s+", " ", text).strip()


def transport_error(exc: BaseException, timeout: float) -> str:
    """A request that got no answer, as an error message."""
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return f"timeout: no answer within {timeout:g} s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:200]
