"""Several replicas of one model behind the one Backend interface.

Each batch goes to the healthy replica with the fewest batches in flight. A replica that
cannot be reached (Unavailable) is taken out of rotation and its batch is retried on
another replica at once (inference is a pure function of the batch, so a batch the dead
replica never answered is safe to resend); a background probe puts the replica back when
its readiness check passes again. Other errors (rejections, bad answers) are the batch's
own and are not retried. It knows no protocol: replicas are any Backends.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from backends.base import Backend
from wire.errors import Unavailable
from wire.tensors import ModelSignature, Tensor

log = logging.getLogger(__name__)
PROBE_INTERVAL_S = 1.0


class ReplicaSet(Backend):
    def __init__(self, replicas: list[Backend], names: list[str], probe_interval_s: float = PROBE_INTERVAL_S) -> None:
        if not replicas:
            raise ValueError("a replica set needs at least one replica")
        self.replicas = replicas
        self.names = names  # for logs only: never in client-visible errors
        self.batch_form = replicas[0].batch_form
        self.takes_dimensions = replicas[0].takes_dimensions
        self.inflight = [0] * len(replicas)
        self.healthy = [True] * len(replicas)
        self._probe_interval_s = probe_interval_s
        self._probes: dict[int, asyncio.Task] = {}

    async def start(self) -> None:
        for replica in self.replicas:
            await replica.start()

    async def infer(self, inputs: list[Tensor]) -> list[Tensor]:
        tried: set[int] = set()
        last_error: Unavailable | None = None
        while True:
            index = self._pick(tried)
            if index is None:
                raise last_error or Unavailable("no replica of the model is reachable")
            tried.add(index)
            self.inflight[index] += 1
            try:
                return await self.replicas[index].infer(inputs)
            except Unavailable as error:
                last_error = error
                self._take_out(index)
            finally:
                self.inflight[index] -= 1

    def _pick(self, tried: set[int]) -> int | None:
        """The untried healthy replica with the fewest batches in flight; if none is
        healthy, an untried one anyway (it may have come back before its probe noticed)."""
        untried = [i for i in range(len(self.replicas)) if i not in tried]
        pool = [i for i in untried if self.healthy[i]] or untried
        return min(pool, key=lambda i: self.inflight[i]) if pool else None

    def _take_out(self, index: int) -> None:
        if self.healthy[index]:
            log.warning("replica %s is unreachable: taken out of rotation", self.names[index])
        self.healthy[index] = False
        if index not in self._probes or self._probes[index].done():
            self._probes[index] = asyncio.get_running_loop().create_task(self._probe(index))

    async def _probe(self, index: int) -> None:
        while not self.healthy[index]:
            await asyncio.sleep(self._probe_interval_s)
            if await self.replicas[index].ready():
                self.healthy[index] = True
                log.warning("replica %s answers again: back in rotation", self.names[index])

    def replicas_in_rotation(self) -> list[bool]:
        return list(self.healthy)

    async def ready(self) -> bool:
        checks = await asyncio.gather(*(replica.ready() for replica in self.replicas))
        return any(checks)

    async def metadata(self) -> tuple[ModelSignature, list[str]] | None:
        for replica in self.replicas:
            described = await replica.metadata()
            if described is not None:
                return described
        return None

    async def model_config(self) -> dict[str, Any] | None:
        for replica in self.replicas:
            config = await replica.model_config()
            if config is not None:
                return config
        return None

    async def close(self) -> None:
        for probe in self._probes.values():
            probe.cancel()
        for replica in self.replicas:
            await replica.close()
