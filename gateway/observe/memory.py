"""Giving memory back to the system after large messages: each gateway process trims
glibc's allocator once its resident memory has grown, at most once a second.

Why: a large message (a 12 MiB gRPC `ModelInfer`, a big HTTP body, the tensors a worker
sends the batcher under `--workers`) passes through many buffers: gRPC's receive slices,
the message's bytes, the decoded arrays, the answer. When they are freed, glibc's malloc
keeps the memory for reuse instead of returning it: its mmap threshold rises to the size of
the largest block freed (so the next 12 MiB buffers come from the heap, not from mmap), and
the many slices left free inside the heaps of gRPC's threads' arenas are never given back
while anything above them is in use. Measured (`python -m tools.large_message_rss`): 40
distinct 12 MiB messages took a process from 70 to 160-215 MiB, and 200 to 360 MiB, and it
stayed there (both processes of `--workers 2`: 390-430 MiB in all after 40), so a pod with a
memory limit is killed for traffic it has already answered (docs/performance.md has the
numbers with the trim). It is the allocator keeping freed blocks, not a cache of ours:
`malloc_trim(0)` gives them back (the free pages of every arena, not only the heap's top).

So `Trimmer` reads the process's resident memory once a second (one read of
/proc/self/statm) and calls `malloc_trim(0)` while it is `GROWTH_BYTES` above the lowest it
has been, again each second as long as a trim gives back at least `STEP_BYTES` (a burst's
buffers are freed as its answers go out, after a trim in its middle), then not until RSS has
grown by `STEP_BYTES` more: nothing while the process is steady, a few trims after a burst
of large messages, at most one a second under a stream of them, and none again while
memory the process really holds (a deep queue) stays put. The trim runs off the loop (it
took up to 60 ms after 40 messages of 12 MiB, 8 at a time). Each process of `--workers` runs its own
(`gateway.process.server.serve` starts it in every role). Where the C library is not glibc (musl,
macOS) or there is no /proc, it does nothing.

It knows glibc and /proc, nothing of the gateway's front ends, scheduler or roles.
"""
from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

INTERVAL_S = 1.0
# Growth that is worth a trim: a few large messages' buffers; small enough that a 512 MiB
# pod is not killed by what a burst left behind, large enough that small requests (whose
# traffic moves RSS by a few MiB) never trim.
GROWTH_BYTES = 32 * 2**20
# A trim that gave back this much is followed by another a second later (the rest of a burst
# is freed after it); one that gave back less waits until RSS has grown this much again, so
# memory the process holds is not trimmed again and again.
STEP_BYTES = 4 * 2**20


def glibc_malloc_trim() -> Callable[[], object] | None:
    """glibc's `malloc_trim(0)`, or None where the process's C library has none."""
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's own C library
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes() -> int | None:
    """This process's resident memory (RSS), or None without /proc."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return None


class Trimmer:
    """Trims the allocator while the process's RSS is `growth_bytes` above the lowest it has
    been, as long as trims give back `step_bytes`, then once RSS has grown by `step_bytes`
    since: `check()` once per `interval_s`, in a thread, from `start()` to `stop()`. `trims`
    and `released_bytes` say what it did (and the DEBUG log, each time)."""

    def __init__(self, trim: Callable[[], object] | None = None, resident: Callable[[], int | None] = resident_bytes,
                 growth_bytes: int = GROWTH_BYTES, step_bytes: int = STEP_BYTES,
                 interval_s: float = INTERVAL_S) -> None:
        self.trim = glibc_malloc_trim() if trim is None else trim
        self.resident = resident
        self.growth_bytes = growth_bytes
        self.step_bytes = step_bytes
        self.interval_s = interval_s
        self.lowest = resident() or 0  # the lowest RSS seen
        self.left = 0                  # the RSS the last trim left
        self.armed = True              # the last trim gave back enough to try again
        self.trims = 0
        self.released_bytes = 0
        self._task: asyncio.Task[None] | None = None

    @property
    def works_here(self) -> bool:
        return self.trim is not None and self.resident() is not None

    def check(self) -> bool:
        """Trim if RSS has grown enough; True when it trimmed."""
        rss = self.resident()
        if rss is None or self.trim is None:
            return False
        self.lowest = min(self.lowest, rss)
        if rss - self.lowest < self.growth_bytes or (not self.armed and rss - self.left < self.step_bytes):
            return False
        started = time.perf_counter()
        self.trim()
        after = self.resident() or rss
        self.lowest = min(self.lowest, after)
        self.left = after
        self.armed = rss - after >= self.step_bytes
        self.trims += 1
        self.released_bytes += max(0, rss - after)
        log.debug("memory: malloc_trim gave back %.1f MiB in process %d (RSS %.1f -> %.1f MiB) in %.1f ms",
                  (rss - after) / 2**20, os.getpid(), rss / 2**20, after / 2**20,
                  (time.perf_counter() - started) * 1000)
        return True

    def start(self) -> None:
        """Check once per interval on the running loop, until `stop`."""
        if self.works_here and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="memory-trimmer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            # Off the loop: the trim walks every arena (ctypes lets go of the GIL meanwhile).
            await asyncio.to_thread(self.check)
