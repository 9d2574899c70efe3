"""Fair batches: one batch filled across the tenants queued at one priority level by weighted
deficit round robin (DRR).

Semantics
---------
* Only when parts of two or more tenants could join a batch: with one tenant (or none
  declared) the batch is taken exactly as `merge.take_oldest_group` takes it.
* Within a tenant, its parts go first come first served. Across tenants, each visit in
  round-robin order gives a tenant a quantum of `weight` x the largest part queued (so a
  visit lets even the lightest tenant send a part), and the tenant sends its oldest parts
  while their cost fits in what it is owed (its *deficit*); what it does not spend is kept
  for its next visit, and a tenant with nothing left queued that could join the batch keeps
  nothing (it cannot bank credit while idle). Cost is `Part.elements`: rows for a tensor model, tokens for texts
  (each row's real length for a padded model). So over many batches each backlogged
  tenant's share of the cost sent is its weight's share of the weights of those queued.
* A batch is one stretch of one continuous round robin: the next batch resumes at the
  tenant whose turn it was, with what it was still owed, so the order of tenants in a ring
  never favours the first.
* A tenant whose oldest part does not fit the room left in the batch sends nothing more in
  it (its later parts would overtake its own older ones); the others fill the room.
* Priority levels stay strict: the highest level queued fills the batch first (each level
  with a round robin of its own), lower levels fill only the room it leaves.

Plain data in, plain data out: it must not know futures, timers or the queue; it reads
each part's tenant, level, cost and liveness, and the tenants' weights.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from typing import Any, Protocol, TypeVar


class FairPart(Protocol):
    """What a fair batch reads of a queued part (beyond what `merge.Mergeable` reads)."""

    @property
    def tenant(self) -> str:
        """The tenant whose request it is ("" when none is declared)."""

    @property
    def elements(self) -> int:
        """Its cost in the fair share: rows, or its rows' own lengths (tokens) added up."""

    @property
    def level(self) -> int:
        """Its request's priority level (0 when the model has none)."""

    @property
    def size(self) -> int: ...

    @property
    def signature(self) -> Hashable: ...

    @property
    def live(self) -> bool: ...


PartT = TypeVar("PartT", bound=FairPart)


class Budget(Protocol):
    """The room left in the batch being taken (`merge`'s row and cost caps, over its parts)."""

    def fits(self, part: Any) -> bool: ...

    def take(self, part: Any) -> None: ...

    @property
    def full(self) -> bool: ...


class _Ring:
    """One level's round robin: whose turn it is, and what each tenant is owed."""

    __slots__ = ("order", "turn", "visited", "deficit")

    def __init__(self) -> None:
        self.order: list[str] = []         # the tenants in round-robin order, newcomers at the end
        self.turn = 0                      # the index in `order` whose turn it is
        self.visited = False               # the tenant whose turn it is has had its quantum
        self.deficit: dict[str, float] = {}


class FairShare:
    """One queue's round robins, one per priority level (see the module)."""

    def __init__(self, weight: Callable[[str], float]) -> None:
        self.weight = weight
        self._rings: dict[int, _Ring] = {}

    def fill(self, level: int, queued: dict[str, deque[PartT]], budget: Budget) -> list[PartT]:
        """Take parts from `queued` (each tenant's candidate parts at `level`, oldest first)
        into `budget` by weighted deficit round robin; returns them in the order taken."""
        ring = self._rings.setdefault(level, _Ring())
        for tenant in queued:
            if tenant not in ring.deficit:
                ring.order.append(tenant)
                ring.deficit[tenant] = 0.0
        weights = {tenant: self.weight(tenant) for tenant in queued}
        largest = max(part.elements for parts in queued.values() for part in parts)
        quantum = largest / min(weights.values())  # per unit of weight: a visit lets any tenant send a part
        taken: list[PartT] = []
        blocked: set[str] = set()
        while not budget.full and len(blocked) < len(queued):
            tenant = ring.order[ring.turn]
            parts = queued.get(tenant)
            if parts is None or tenant in blocked:
                self._next(ring)
                continue
            if not ring.visited:
                ring.deficit[tenant] += quantum * weights[tenant]
                ring.visited = True
            while parts and parts[0].elements <= ring.deficit[tenant] and not budget.full:
                part = parts[0]
                if not budget.fits(part):
                    blocked.add(tenant)
                    break
                budget.take(part)
                taken.append(part)
                parts.popleft()
                ring.deficit[tenant] -= part.elements
            if not parts:
                ring.deficit[tenant] = 0.0  # nothing left queued: no credit kept
                blocked.add(tenant)
            if budget.full:
                break  # the next batch resumes here, with what this tenant is still owed
            self._next(ring)
        self._forget_idle(ring, queued)
        return taken

    @staticmethod
    def _next(ring: _Ring) -> None:
        ring.turn = (ring.turn + 1) % len(ring.order)
        ring.visited = False

    @staticmethod
    def _forget_idle(ring: _Ring, queued: dict[str, deque[PartT]]) -> None:
        """Tenants with nothing queued at this level leave the ring (they rejoin at its end)."""
        idle = [tenant for tenant in ring.order if tenant not in queued]
        if not idle:
            return
        current = ring.order[ring.turn]
        ring.order = [tenant for tenant in ring.order if tenant in queued]
        for tenant in idle:
            del ring.deficit[tenant]
        if current in queued:
            ring.turn = ring.order.index(current)
        else:
            ring.turn, ring.visited = 0, False
