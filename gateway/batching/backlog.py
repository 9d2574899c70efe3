"""Backlog: what one model's queue holds waiting, and who gives way when it is full.

Semantics
---------
* `pending` holds the queued parts in arrival order; a part whose request was answered
  (expired, cancelled, failed) lingers until it is met and skipped. The counts are of live
  rows not yet taken into a batch: in all (`queued_rows`), by priority level and by tenant
  (each kept only where there are levels, or tenants).
* The *leader* is the part the next batch forms around: the oldest live part, or, with
  levels, the oldest of the highest level queued.
* **Making room** in a full queue (`make_room`) refuses queued requests that never reached
  the predictor, never for nothing (only when enough can be freed): first those of lower
  priority levels than the newcomer's, the lowest level and the newest first; then, when
  tenants share the queue, those of its own level whose tenant holds more of the queue for
  its weight than the newcomer's tenant would, the furthest over its share and the newest
  first. Each is answered Overloaded, saying why it gave way.

All of it runs on the scheduler's loop. It must not know timers, slots, policies or
executors (the queue's), nor HTTP, gRPC or predictor protocols.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from gateway.batching.request import Part, QueuedRequest
from gateway.batching.tenant_quotas import Tenants
from wire.errors import Overloaded


class Backlog:
    def __init__(self) -> None:
        self.pending: deque[Part] = deque()
        self.queued_rows = 0  # rows of live requests not yet taken into a batch
        self.rows_by_level: dict[int, int] = {}  # the same, by priority level (kept only when there are levels)
        self.rows_by_tenant: dict[str, int] = {}  # the same, by tenant (kept only for requests of a tenant)

    def push(self, request: QueuedRequest, parts: Iterable[Part]) -> None:
        """`request`'s parts join the back of the queue, each counted at its own level."""
        if request.level:
            by_level = self.rows_by_level
            for part in parts:
                by_level[part.level] = by_level.get(part.level, 0) + part.size
                if part.level != request.level:
                    request.demoted_rows += part.size
                self.pending.append(part)
        else:
            self.pending.extend(parts)
        if request.tenant:
            self.rows_by_tenant[request.tenant] = self.rows_by_tenant.get(request.tenant, 0) + request.size
        self.queued_rows += request.size

    def took(self, part: Part) -> None:
        """`part` was taken into a batch: its rows no longer count as queued."""
        request = part.request
        demoted = part.size if part.level != request.level else 0
        request.demoted_rows -= demoted
        self._count_out(request, part.size, demoted)

    def unqueue(self, request: QueuedRequest) -> None:
        """The rows `request` still has queued no longer count: it ended (answered, expired,
        cancelled, refused), and its parts left are skipped when met."""
        demoted, request.demoted_rows = request.demoted_rows, 0
        self._count_out(request, request.queued_rows, demoted)

    def _count_out(self, request: QueuedRequest, rows: int, demoted: int) -> None:
        """`rows` of `request` leave the counts, `demoted` of them from the level below its own."""
        request.queued_rows -= rows
        self.queued_rows -= rows
        if request.level:
            self.rows_by_level[request.level] -= rows - demoted
            if demoted:
                self.rows_by_level[request.level + 1] -= demoted
        if request.tenant:
            self.rows_by_tenant[request.tenant] -= rows

    def skip_answered(self) -> bool:
        """Drop answered parts from the front; whether a live part is left at all there."""
        pending = self.pending
        while pending and not pending[0].live:
            pending.popleft()
        return bool(pending)

    def leader(self, by_level: bool) -> Part | None:
        """The part the next batch forms around (see the module); None if none is live."""
        live = (part for part in self.pending if part.live)
        if not by_level:
            return next(live, None)
        return min(live, key=lambda part: part.level, default=None)

    def rows_ahead(self, level: int) -> int:
        """Queued rows that a request of `level` waits behind: those of its level and higher."""
        if not level:
            return self.queued_rows
        return sum(rows for queued_level, rows in self.rows_by_level.items() if queued_level <= level)

    def make_room(self, size: int, needed: int, level: int, tenant: str, tenants: Tenants, model: str,
                  refused: Callable[[QueuedRequest], None]) -> bool:
        """Free `needed` rows for a newcomer of `size` rows, of `level`, from `tenant` (see the
        module); each request refused is told to `refused` first. False, and nothing
        refused, when they cannot be freed."""
        shared = tenants.shared and bool(tenant)
        if not level and not shared:
            return False
        weight, share = tenants.weight, self.rows_by_tenant
        mine = (share.get(tenant, 0) + size) / weight(tenant) if shared else 0.0

        def over(request: QueuedRequest) -> float:
            """How much of the queue its tenant holds for its weight (0: not the newcomer's rival)."""
            return share.get(request.tenant, 0) / weight(request.tenant) if request.tenant != tenant else 0.0

        candidates = {id(part.request): part.request for part in self.pending
                      if part.live and not part.request.sent
                      and ((level and part.request.level > level)
                           or (shared and part.request.level == level and over(part.request) > mine))}
        victims, freed = [], 0
        # Newest by queue order, not by arrival time: two requests can share a loop time
        # (uvloop's clock moves in whole milliseconds, once per pass of the loop).
        for request in sorted(reversed(candidates.values()), key=lambda r: (-r.level, -over(r))):
            if freed >= needed:
                break
            victims.append(request)
            freed += request.queued_rows
        if freed < needed:
            return False
        for request in victims:
            refused(request)
            self.unqueue(request)  # accounted now: the room is needed now
            why = "one of a higher priority level" if request.level > level else "a tenant further under its share"
            request.fail(Overloaded(f"model '{model}': its queue is full and this request gave its place to "
                                    f"{why}; try again later"))
        return True
