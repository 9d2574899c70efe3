"""Several replicas of one model behind the one Backend interface; replicas come and go.

Semantics
---------
* Each batch goes to the replica in rotation with the fewest batches in flight (ties: the
  one that joined first). The batcher's slots are per replica in rotation (`in_rotation`),
  so with least-in-flight each replica holds at most its share.
* A replica that cannot be reached (Unavailable) is taken out of rotation and its batch is
  retried on another replica at once (inference is a pure function of the batch, so a
  batch the dead replica never answered is safe to resend); a background probe puts the
  replica back when its readiness check passes again. Other errors (rejections, bad
  answers) are the batch's own and are not retried. With no replica in rotation, each
  is tried anyway (one may have come back before its probe noticed).
* Membership changes at run time (`update`, with the full list of addresses): a new
  address becomes a replica that joins the rotation once its readiness check passes (the
  probe that returns an unreachable one); an address no longer listed leaves the
  rotation at once, finishes the batches it has in flight, and is closed after them. No
  batch is lost either way: a batch is sent only to a replica in rotation, and one that
  fails Unavailable on a leaving replica is retried on another. The batches a leaving
  replica still has are counted apart (`batches_leaving`): they hold none of the slots of
  the replicas in rotation, so a hung replica taken off the list (an autoscaler's
  scale-down) does not stall the model; its batches' requests get their deadline error.
* The addresses known when the set starts are in rotation at once, as a single predictor
  is: the gateway's own readiness already waits for them.
* Discovery (`resolve`, e.g. `backends.discovery.dns_addresses`): the set asks it for the
  addresses at start and every `refresh_s`, and updates itself. A failed or empty answer
  keeps the replicas it has: a DNS hiccup must not empty the fleet.

It knows no protocol: replicas are any Backends, made from an address by `make`.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from backends.base import Backend
from wire.errors import Unavailable
from wire.tensors import ModelSignature, Tensor

log = logging.getLogger(__name__)
PROBE_INTERVAL_S = 1.0
Resolve = Callable[[], Awaitable[list[str]]]
"""The replicas' addresses now (raises OSError when they cannot be found)."""


class Replica:
    """One replica's client and its place in the rotation."""

    __slots__ = ("address", "backend", "inflight", "healthy", "leaving", "probe")

    def __init__(self, address: str, backend: Backend, healthy: bool) -> None:
        self.address = address  # for logs only: never in client-visible errors
        self.backend = backend
        self.inflight = 0       # batches sent to it and not yet returned
        self.healthy = healthy  # reachable, as far as we know: in rotation unless leaving
        self.leaving = False    # no longer listed: finishes what it has, takes nothing new
        self.probe: asyncio.Task[None] | None = None  # waiting for its readiness check to pass

    @property
    def in_rotation(self) -> bool:
        return self.healthy and not self.leaving


class ReplicaSet(Backend):
    def __init__(self, make: Callable[[str], Backend], addresses: Iterable[str] = (), resolve: Resolve | None = None,
                 refresh_s: float = 0.0, probe_interval_s: float = PROBE_INTERVAL_S, seed: str = "") -> None:
        """`make`: a replica's client from its address; `addresses`: the replicas listed now;
        `resolve` and `refresh_s`: discovery (see the module docstring); `seed`: an address
        whose client (never started) tells the batch form and capabilities when none is listed yet."""
        self._make = make
        self.replicas: list[Replica] = []  # in the order they joined; leaving ones until they are closed
        for address in addresses:
            self.replicas.append(Replica(address, make(address), healthy=True))
        if not self.replicas and resolve is None:
            raise ValueError("a replica set needs at least one replica or a way to find them")
        # Every replica is made alike (one protocol, one server): the form and what it can do
        # are its client's, read from the first one made.
        probe_client = self.replicas[0].backend if self.replicas else make(seed)
        self.batch_form = probe_client.batch_form
        self.take_capabilities(probe_client.capabilities())
        self._resolve = resolve
        self._refresh_s = refresh_s
        self._probe_interval_s = probe_interval_s
        self._refresher: asyncio.Task[None] | None = None
        self._closing: set[asyncio.Task[None]] = set()  # leaving replicas' clients being closed
        self._serving = 0  # replicas in rotation: read before every batch, so kept, not counted
        self._leaving_batches = 0  # batches at leaving replicas: the same
        self._recount()

    async def start(self) -> None:
        if self._resolve is not None:
            found = await self._discover()
            if found:
                for address in found:
                    self.replicas.append(Replica(address, self._make(address), healthy=True))
                self._recount()
            if self._refresh_s > 0:
                self._refresher = asyncio.get_running_loop().create_task(self._refresh())
        for replica in self.replicas:
            await replica.backend.start()

    # -- batches -----------------------------------------------------------------------

    async def infer(self, inputs: list[Tensor]) -> list[Tensor]:
        tried: set[Replica] = set()
        last_error: Unavailable | None = None
        while True:
            replica = self._pick(tried)
            if replica is None:
                raise last_error or Unavailable("no replica of the model is reachable")
            tried.add(replica)
            replica.inflight += 1
            try:
                return await replica.backend.infer(inputs)
            except Unavailable as error:
                last_error = error
                self._take_out(replica)
            finally:
                replica.inflight -= 1
                if replica.leaving:
                    self._leaving_batches -= 1
                    if replica.inflight == 0:
                        self._close_later(replica)

    def _pick(self, tried: set[Replica]) -> Replica | None:
        """The untried replica in rotation with the fewest batches in flight; if none is in
        rotation, an untried one that is not leaving anyway."""
        untried = [r for r in self.replicas if r not in tried and not r.leaving]
        pool = [r for r in untried if r.healthy] or untried
        return min(pool, key=lambda r: r.inflight) if pool else None

    # -- health --------------------------------------------------------------------------

    def _take_out(self, replica: Replica) -> None:
        if replica.healthy:
            log.warning("replica %s is unreachable: taken out of rotation", replica.address)
        replica.healthy = False
        self._recount()
        self._watch(replica)

    def _watch(self, replica: Replica) -> None:
        """Probe the replica until its readiness check passes, then put it in rotation."""
        if replica.probe is None or replica.probe.done():
            replica.probe = asyncio.get_running_loop().create_task(self._probe(replica))

    async def _probe(self, replica: Replica) -> None:
        while not replica.healthy and not replica.leaving:
            if await replica.backend.ready():
                replica.healthy = True
                self._recount()
                log.warning("replica %s is ready: in rotation", replica.address)
                return
            await asyncio.sleep(self._probe_interval_s)

    def _recount(self) -> None:
        self._serving = sum(1 for r in self.replicas if r.in_rotation)

    # -- membership ----------------------------------------------------------------------

    async def update(self, addresses: Iterable[str]) -> None:
        """The replicas are now these: new ones join after their readiness check, missing
        ones leave once their batches in flight return."""
        wanted = list(dict.fromkeys(addresses))
        current = {r.address: r for r in self.replicas if not r.leaving}
        for address, replica in current.items():
            if address not in wanted:
                replica.leaving = True
                self._leaving_batches += replica.inflight
                log.warning("replica %s is no longer listed: it leaves the rotation", replica.address)
                if replica.inflight == 0:
                    self._close_later(replica)
        for address in wanted:
            if address not in current:
                replica = Replica(address, self._make(address), healthy=False)
                self.replicas.append(replica)
                log.warning("replica %s is listed: it joins once it is ready", address)
                await replica.backend.start()
                self._watch(replica)
        self._recount()

    async def update_replicas(self, addresses: tuple[str, ...]) -> bool:
        """A reloaded config lists these replicas now (a set that finds its own by DNS keeps
        finding them: it takes no list)."""
        if self._resolve is not None or not addresses:
            return False
        await self.update(addresses)
        return True

    def _close_later(self, replica: Replica) -> None:
        """A leaving replica with nothing in flight: out of the set, its client closed."""
        if replica in self.replicas:
            self.replicas.remove(replica)
            if replica.probe is not None:
                replica.probe.cancel()
            closing = asyncio.get_running_loop().create_task(replica.backend.close())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    async def _discover(self) -> list[str]:
        """The addresses `resolve` finds now; [] when it fails (the caller keeps what it has)."""
        assert self._resolve is not None
        try:
            found = await self._resolve()
        except OSError as error:
            log.warning("finding the model's replicas failed (%s): keeping the %d it has", error,
                        sum(1 for r in self.replicas if not r.leaving))
            return []
        if not found:
            log.warning("no replica of the model was found: keeping the %d it has",
                        sum(1 for r in self.replicas if not r.leaving))
        return found

    async def _refresh(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_s)
            found = await self._discover()
            if found:
                await self.update(found)

    # -- what the gateway reads ---------------------------------------------------------

    def replicas_in_rotation(self) -> list[bool]:
        return [r.in_rotation for r in self.replicas if not r.leaving]

    def in_rotation(self) -> int:
        return self._serving

    def batches_leaving(self) -> int:
        return self._leaving_batches

    def addresses(self) -> list[str]:
        """The listed replicas' addresses (not the leaving ones), in the order they joined."""
        return [r.address for r in self.replicas if not r.leaving]

    async def ready(self) -> bool:
        serving = [r for r in self.replicas if not r.leaving]
        checks = await asyncio.gather(*(r.backend.ready() for r in serving))
        return any(checks)

    async def metadata(self) -> tuple[ModelSignature, list[str]] | None:
        for replica in list(self.replicas):
            described = await replica.backend.metadata()
            if described is not None:
                return described
        return None

    async def model_config(self) -> dict[str, Any] | None:
        for replica in list(self.replicas):
            config = await replica.backend.model_config()
            if config is not None:
                return config
        return None

    async def close(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
        for replica in self.replicas:
            if replica.probe is not None:
                replica.probe.cancel()
            await replica.backend.close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
