"""gateway/observe/memory.py: each gateway process gives back to the system what large messages left
in glibc's allocator. The policy on a fake clock of RSS readings; then real gateway processes
(one, and the batcher and worker of `--workers 2`) trimming after a burst of 12 MiB gRPC
messages, read from their DEBUG log. What it gives back is measured by
`python -m tools.large_message_rss`, not asserted here (docs/operations.md has the numbers)."""
from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from gateway.observe.memory import Trimmer, glibc_malloc_trim, resident_bytes
from tests.processes import python_module
from tools.large_message_rss import infer
from tools.processes import child_pids

MIB = 2**20


class Process:
    """RSS readings the test sets, and the trims it was asked for."""

    def __init__(self, rss_mib: float) -> None:
        self.rss = int(rss_mib * MIB)
        self.trims = 0
        self.after_trim: list[float] = []  # RSS each trim leaves, in MiB, in turn

    def resident(self) -> int:
        return self.rss

    def trim(self) -> None:
        self.trims += 1
        if self.after_trim:
            self.rss = int(self.after_trim.pop(0) * MIB)


def test_nothing_is_trimmed_while_the_process_stays_near_the_lowest_it_has_been():
    process = Process(70)
    trimmer = Trimmer(trim=process.trim, resident=process.resident)
    for rss in (70, 80, 95, 101, 75, 90):
        process.rss = rss * MIB
        assert not trimmer.check()
    assert process.trims == 0


def test_a_burst_is_trimmed_again_while_trims_give_back_then_not_until_rss_grows():
    process = Process(70)
    trimmer = Trimmer(trim=process.trim, resident=process.resident)
    process.rss = 400 * MIB  # in the middle of a burst of large messages
    process.after_trim = [300, 120, 118]  # the burst's end frees more after the first trim
    assert trimmer.check() and process.trims == 1
    process.rss = 310 * MIB
    assert trimmer.check() and process.rss == 120 * MIB  # gave back 100 MiB: tried again
    assert trimmer.check() and process.rss == 118 * MIB  # gave back 2 MiB: that was all
    for _ in range(3):
        assert not trimmer.check()  # memory the process holds is not trimmed again and again
    process.rss = 123 * MIB
    process.after_trim = [100]
    assert trimmer.check() and process.trims == 4  # grown by STEP_BYTES since: a new burst
    assert trimmer.trims == 4 and trimmer.released_bytes == (100 + 190 + 2 + 23) * MIB


def test_glibc_and_proc_are_found_here():
    assert glibc_malloc_trim() is not None, "this project's machines run glibc"
    assert resident_bytes() > 10 * MIB
    assert Trimmer().works_here


def test_without_proc_it_does_nothing():
    trimmer = Trimmer(resident=lambda: None)
    assert not trimmer.works_here and not trimmer.check()


MESSAGES, MESSAGE_MIB = 24, 12
TRIM_LINE = re.compile(r"malloc_trim gave back ([\d.]+) MiB in process (\d+)")


@pytest.mark.parametrize("workers", ["1", "2"], ids=["one-process", "workers-2"])
def test_every_process_trims_after_a_burst_of_large_grpc_messages(workers):
    """24 messages of 12 MiB, each on a connection of its own (so that under --workers they
    reach both processes: the kernel spreads connections, and every message's tensors cross
    to the batcher), 4 at a time; then each process logs a trim that gave memory back."""
    gateway = python_module("gateway", "serve", "--http-port", "0", "--grpc-port", "0", "--log-level", "DEBUG",
                            "--workers", workers, ready_timeout=60)
    try:
        pids = {gateway.pid, *child_pids(gateway.pid)}
        assert len(pids) == int(workers)
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda seed: infer(gateway.grpc_address, MESSAGE_MIB * MIB // 4, seed), range(MESSAGES)))

        def trimmed() -> set[int]:
            return {int(pid) for released, pid in TRIM_LINE.findall(gateway.log_text()) if float(released) > 0}

        deadline = time.monotonic() + 20  # a check per second: the last of the burst's trims comes in a few
        while trimmed() != pids and time.monotonic() < deadline:
            time.sleep(0.2)
        assert trimmed() == pids, gateway.log_tail()
    finally:
        assert gateway.stop() == 0
