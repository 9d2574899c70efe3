"""Merge and split arithmetic: the row bookkeeping of batching, with no event loop.

Semantics
---------
* A request is a list of tensors sharing a first (batch) dimension. Requests merge only
  with requests of the same *signature* (input names, datatypes and non-batch dimensions).
* `max_batch_size` is a hard cap. A request larger than it is split into parts of at most
  that size (`split_request`); the parts may travel in separate batches, answered in any
  order, and the answer is reassembled in part order (`Reassembly`).
* A batch is one `numpy.concatenate` per input over its parts (`concatenate`); its result
  is cut back into each part's consecutive rows (`slice_result`).
* The next batch is the signature group of the oldest live part, oldest first, up to the
  cap (`take_oldest_group`), and, with `max_cost`, up to that many padded elements (rows x
  the longest member's padded length: see `padding`), or, `summed`, that many elements of
  the rows' own lengths added up.

Everything here is plain data in, plain data out. This module must not know futures,
deadlines, timers, policies or executors: the queue tells it what is live.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence
from typing import Protocol, TypeVar

import numpy as np

from gateway.batching.fairness import FairShare
from gateway.batching.padding import cost
from wire.tensors import Tensor


class Mergeable(Protocol):
    """What the batch selection reads of a queued part."""

    @property
    def size(self) -> int:
        """Rows of the part."""

    @property
    def signature(self) -> Hashable:
        """Parts merge only with parts of an equal signature."""

    @property
    def live(self) -> bool:
        """False once the part's request is answered (expired, cancelled, failed)."""

    @property
    def padded(self) -> int:
        """The length the part travels at alone (read only with a `max_cost`)."""

    @property
    def elements(self) -> int:
        """Its rows' own lengths added up (read only with a `summed` `max_cost`)."""

    @property
    def level(self) -> int:
        """Its request's priority level, 1 the highest (read only `by_level`, or `fair`)."""

    @property
    def tenant(self) -> str:
        """The tenant whose request it is (read only with `fair`)."""


PartT = TypeVar("PartT", bound=Mergeable)


def split_request(inputs: list[Tensor], max_rows: int) -> list[list[Tensor]]:
    """A request's tensors as consecutive parts of at most `max_rows` rows, in order.

    A request that fits is its own single part, the same list (no slicing, no copy);
    the parts of a larger one are numpy views of its rows."""
    size = len(inputs[0].data)
    if size <= max_rows:
        return [inputs]
    return [
        [Tensor(t.name, t.datatype, t.data[start:start + max_rows]) for t in inputs]
        for start in range(0, size, max_rows)
    ]


def concatenate(groups: Sequence[list[Tensor]]) -> list[Tensor]:
    """One numpy.concatenate per input across the groups (or the group itself if alone).

    Every group holds the same inputs in the same order (equal signatures); the first
    group's names and datatypes name the result."""
    if len(groups) == 1:
        return groups[0]
    return [
        Tensor(first.name, first.datatype, np.concatenate([group[i].data for group in groups]))
        for i, first in enumerate(groups[0])
    ]


def slice_result(outputs: list[Tensor], sizes: Sequence[int]) -> list[list[Tensor]]:
    """A batch result cut back per part: part k gets the `sizes[k]` rows after those of
    the parts before it (numpy views, no copy)."""
    sliced: list[list[Tensor]] = []
    offset = 0
    for size in sizes:
        end = offset + size
        sliced.append([Tensor(t.name, t.datatype, t.data[offset:end]) for t in outputs])
        offset = end
    return sliced


class Reassembly:
    """The answers to one request's parts, gathered in any order and joined in part order."""

    __slots__ = ("_outputs", "_missing")

    def __init__(self, parts: int) -> None:
        self._outputs: list[list[Tensor] | None] = [None] * parts
        self._missing = parts

    def add(self, index: int, outputs: list[Tensor]) -> list[Tensor] | None:
        """Record part `index`'s rows; returns the whole answer once every part is in."""
        self._outputs[index] = outputs
        self._missing -= 1
        if self._missing:
            return None
        return concatenate([part for part in self._outputs if part is not None])


class _Budget:
    """What a batch being taken holds so far, against its row and cost caps."""

    __slots__ = ("limit", "max_cost", "summed", "rows", "padded", "elements")

    def __init__(self, limit: int, max_cost: int, summed: bool) -> None:
        self.limit, self.max_cost, self.summed = limit, max_cost, summed
        self.rows = self.padded = self.elements = 0

    def fits(self, part: Mergeable) -> bool:
        if self.rows + part.size > self.limit:
            return False
        if not self.max_cost or not self.rows:  # a first part always fits: it was split to fit alone
            return True
        if self.summed:
            return self.elements + part.elements <= self.max_cost
        return cost(self.rows + part.size, max(self.padded, part.padded)) <= self.max_cost

    @property
    def full(self) -> bool:
        return self.rows >= self.limit

    def take(self, part: Mergeable) -> None:
        self.rows += part.size
        if self.max_cost:
            self.padded = max(self.padded, part.padded)
            if self.summed:
                self.elements += part.elements


def take_oldest_group(pending: deque[PartT], limit: int, leader: PartT | None = None,
                      max_cost: int = 0, by_level: bool = False, summed: bool = False,
                      fair: FairShare | None = None) -> list[PartT]:
    """Remove and return the next batch from `pending`: the parts sharing the signature of
    the oldest live part (or of `leader`), oldest first, while they fit in `limit` rows
    (and, if `max_cost`, in that many padded elements, or `summed` elements). `by_level`: the group is taken in
    priority order instead, the highest level first and oldest first within a level, so
    lower levels fill only the room the higher ones leave.

    A part of another signature, or one that would overflow the cap, keeps its place in
    the queue (so a later, smaller part of the group may still join); parts that are no
    longer live are dropped wherever they are met.

    `fair`: when parts of several tenants could join, the batch is filled across them by
    weighted deficit round robin instead (see `fairness`), level by level."""
    while pending and not pending[0].live:
        pending.popleft()
    if not pending:
        return []
    signature = (leader or pending[0]).signature
    budget = _Budget(limit, max_cost, summed)
    if fair is not None:
        group = [index for index, part in enumerate(pending) if part.live and part.signature == signature]
        if len({pending[index].tenant for index in group}) > 1:
            return _take_fair(pending, group, budget, fair)
    if by_level:
        return _take_by_level(pending, signature, budget)
    taken: list[PartT] = []
    skipped: list[PartT] = []
    while pending and budget.rows < limit:
        part = pending.popleft()
        if not part.live:
            continue
        if part.signature != signature or not budget.fits(part):
            skipped.append(part)
            continue
        taken.append(part)
        budget.take(part)
    pending.extendleft(reversed(skipped))
    return taken


def _take_by_level(pending: deque[PartT], signature: Hashable, budget: _Budget) -> list[PartT]:
    """`take_oldest_group` in priority order (see there); one pass to choose, one to rebuild."""
    group = sorted((index for index, part in enumerate(pending) if part.live and part.signature == signature),
                   key=lambda index: (pending[index].level, index))
    taken: list[PartT] = []
    chosen: set[int] = set()
    for index in group:
        part = pending[index]
        if not budget.fits(part):
            continue
        taken.append(part)
        chosen.add(index)
        budget.take(part)
        if budget.rows >= budget.limit:
            break
    kept = [part for index, part in enumerate(pending) if index not in chosen and part.live]
    pending.clear()
    pending.extend(kept)
    return taken


def _take_fair(pending: deque[PartT], group: list[int], budget: _Budget, fair: FairShare) -> list[PartT]:
    """`take_oldest_group` across tenants (see `fairness`): each level queued, highest first,
    filled by its round robin from each tenant's parts in queue order."""
    levels: dict[int, dict[str, deque[PartT]]] = {}
    for index in group:
        part = pending[index]
        levels.setdefault(part.level, {}).setdefault(part.tenant, deque()).append(part)
    taken: list[PartT] = []
    for level in sorted(levels):
        if budget.full:
            break
        taken += fair.fill(level, levels[level], budget)
    chosen = {id(part) for part in taken}
    kept = [part for part in pending if id(part) not in chosen and part.live]
    pending.clear()
    pending.extend(kept)
    return taken
