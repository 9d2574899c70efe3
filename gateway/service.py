"""The inference service: the one data plane every front end calls.

It holds the served models (`gateway.models`) and a `Scheduler`. For each request (`infer`,
whatever its protocol) it asks the model to put the decoded request in the model's batch
form, has the request's `gateway.lifecycle.Call` settle it into a `BatchRequest`, submits
it, and answers with its rows (`Answer`), which the model turns back into the client's
form, so a KServe v1 client and an OIP client of the same model land in the same batch.
A front end opens each request's Call here (`open`) and closes it once: the one place
requests are counted and timed. It keeps the front door (`door`, `gateway.access.front_door`: the token
or the tenants' keys a request must present, swapped whole on a reload; a tenant may call
only its models, checked in `infer` by the door of that moment, which finds the request's
tenant again by its key's digest) and hands the tenants' policies to the scheduler. It
also keeps the models' lifecycle (start, reload, close), readiness and server metadata; what describes the whole gateway it reads through
`Views`. Its scheduler, views and predictor clients come from its process's role: it
never asks where it runs.

Front ends know only this module, `gateway.lifecycle`, `gateway.models` and their own
codec; it knows no front end, no wire format and no predictor protocol (`backends.base`'s
interface only).
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from backends.base import Backend
from gateway import __version__
from gateway.access.front_door import FrontDoor
from gateway.batching.request import BatchResult
from gateway.batching.scheduler import Scheduler
from gateway.config import ConfigError, GatewayConfig, ModelConfig, tenant_directory
from gateway.kinds import BatchInputs
from gateway.lifecycle import Call
from gateway.models import triton
from gateway.models.base import SERVER_NAME, ServedModel
from gateway.models.forms import served_model
from gateway.observe.metrics import Metrics
from gateway.observe.views import Views
from gateway.telemetry.spans import Telemetry
from wire.embeddings import EmbeddingsHead, EmbeddingsRequest
from wire.errors import GatewayError, ModelNotFound
from wire.request import OipRequest, RequestHead

log = logging.getLogger(__name__)
EXTENSIONS = ("binary_tensor_data", "model_batching", *triton.EXTENSIONS)
# A request whose payloads hold more BYTES elements than this is decoded in a thread, off the
# event loop: each element not in a uniform run costs a Python step (about 0.5 µs here), so
# this many hold the loop for about 30 ms at most.
BYTES_ON_LOOP = 65_536


@dataclass(slots=True)
class Answer:
    """A request's rows of its batch's result, as its model's kind answers the client of its
    request's type (`for_client`: OIP tensors, v1 predictions, vectors, scores)."""
    served: ServedModel
    request_type: type
    batch: BatchInputs
    result: BatchResult

    @property
    def batch_id(self) -> str:
        """The id of its batch (comma-separated, if it was split across several)."""
        return ",".join(self.result.batch_ids)

    def for_client(self) -> Any:
        """The rows as its client reads them: its kind's answer to its request's type."""
        return self.served.kind.answer(self.request_type, self.result.outputs, self.batch)

    @property
    def tokens(self) -> int:
        """The tokens its rows were measured at (a kind that measures them; 0 for others)."""
        measured = self.served.kind.measures_tokens
        return int(self.batch.lengths.sum()) if self.batch.lengths is not None and measured else 0


class InferenceService:
    def __init__(self, config: GatewayConfig, scheduler: Scheduler, telemetry: Telemetry,
                 views: Callable[[InferenceService], Views],
                 backends: Callable[[ModelConfig], Awaitable[Backend]]) -> None:
        self.config = config
        self.scheduler = scheduler  # this process's BatchScheduler, or a worker's RemoteScheduler
        self._backend = backends  # a model's predictor client (a worker's asks its batcher's)
        self.telemetry = telemetry  # request spans (the scheduler holds its batch observer)
        self.models: dict[str, ServedModel] = {}
        self.active_requests = 0  # inside infer: what a graceful stop waits for
        self.metrics = Metrics()
        if telemetry.enabled:
            self.metrics.watch_spans(telemetry.span_counts)
        # What describes the whole gateway, as this process's role reads it (gateway.observe.views).
        self.views = views(self)
        self._background: set[asyncio.Task] = set()  # held so they are not collected mid-flight
        self.door = front_door(config)
        # Whether its front ends check keys at all is settled at the start (gRPC's interceptor).
        self.keys_checked = not self.door.open

    async def start(self) -> None:
        self.scheduler.set_tenants(self.config.tenant_policies)
        for model_config in self.config.models:
            await self._add_model(model_config)

    async def _add_model(self, model_config: ModelConfig, replacing_within_s: float | None = None) -> None:
        """Serve a model; `replacing_within_s`: it replaces one of the same name, whose
        queue finishes what it holds (in the old form, on the old predictor) within it."""
        served = served_model(model_config, await self._backend(model_config))
        replicas = served.backend  # its replicas, as the queue's slots read them
        if replacing_within_s is None:
            self.scheduler.add_model(served.name, served.executor, served.batching, served.form, replicas)
        else:
            self.scheduler.replace_model(served.name, served.executor, served.batching, replacing_within_s,
                                         served.form, replicas)
        self.models[served.name] = served
        served.start(on_batch_limit=lambda: self._retune(served))

    def _retune(self, served: ServedModel) -> None:
        """The model's queue takes its batching as it is now (the config's, capped at the
        predictor's batch limit), in place: unless a reload has replaced or removed it since."""
        if self.models.get(served.name) is served:
            self.scheduler.add_model(served.name, served.executor, served.batching, served.form, served.backend)

    async def reconfigure(self, config: GatewayConfig, grace_s: float) -> dict[str, list[str]]:
        """Apply a reloaded config without dropping requests in flight.

        New models start serving; removed models stop taking requests, finish what they
        have queued and in flight (within `grace_s`), then close. A model whose batching
        changed is re-tuned in place, and one whose list of replicas changed takes the new
        list in place; one whose predictor changed otherwise gets a new backend for new
        batches while batches already sent finish on the old one.

        Tenants, their keys, weights and quotas are replaced whole, first: a removed key is
        refused from then on, also for a request admitted before and not yet submitted (a
        body still arriving, the next message of an open stream: `infer` asks the door
        again); requests already queued or at the predictor finish. A key that cannot be read
        now is a ConfigError, raised before anything changed.

        Returns what changed, by kind: the models' ("added", "removed", ...) and the
        tenants' (`tenants_changed`), each a list of names."""
        if config.tenants and not self.keys_checked:
            # The gRPC front end checks keys only if it started with something to check.
            raise ConfigError("tenants", "this gateway started open (no key, no token): restart it to require keys")
        door = await asyncio.to_thread(front_door, config)  # key files read off the loop
        tenant_changes = tenants_changed(self.config, self.door, config, door)
        self.door = door
        self.scheduler.set_tenants(config.tenant_policies)
        old = {m.name: m for m in self.config.models}
        new = {m.name: m for m in config.models}
        changes: dict[str, list[str]] = {"added": [], "removed": [], "retuned": [], "replicas": [], "replaced": [],
                                         **tenant_changes}
        for name in new.keys() - old.keys():
            await self._add_model(new[name])
            changes["added"].append(name)
        for name in old.keys() - new.keys():
            served = self.models.pop(name)
            self._in_background(self._retire(name, served, grace_s))
            changes["removed"].append(name)
        for name in old.keys() & new.keys():
            before, after = old[name], new[name]
            if before == after:
                continue
            served = self.models[name]
            # Only the replicas' addresses changed: the replica set takes them in place (new
            # ones join once ready, missing ones drain), so nothing is replaced.
            same_predictor = dataclasses.replace(before.predictor, addresses=after.predictor.addresses)
            if (dataclasses.replace(before, predictor=same_predictor, batching=after.batching) == after
                    and before.predictor.addresses != after.predictor.addresses
                    and before.batching.rows == after.batching.rows
                    and await served.backend.update_replicas(after.predictor.addresses)):
                before = dataclasses.replace(before, predictor=after.predictor)
                changes["replicas"].append(name)
            # A change of its rows may change the model's form (PaddedInstanceModel): replace it.
            if dataclasses.replace(before, batching=after.batching) == after and \
                    before.batching.rows == after.batching.rows:
                served.config = after
                self._retune(served)
                if before.batching != after.batching:
                    changes["retuned"].append(name)
                continue
            retired = self.models[name]
            # New requests go to the new backend in its form; those already queued finish as admitted.
            await self._add_model(after, replacing_within_s=grace_s)
            self._in_background(self._close_when_idle(retired, grace_s))
            changes["replaced"].append(name)
        self.config = config
        return changes

    def _in_background(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _retire(self, name: str, served: ServedModel, grace_s: float) -> None:
        await self.scheduler.remove_model(name, grace_s)
        await served.close()

    async def _close_when_idle(self, served: ServedModel, grace_s: float) -> None:
        """Close a replaced backend after the longest its last batches can take."""
        await asyncio.sleep(min(grace_s, served.config.batching.timeout_s))
        await served.close()

    async def close(self, grace_s: float = 0.0) -> None:
        await self.scheduler.close(grace_s)
        for served in self.models.values():
            await served.close()

    def model(self, name: str, version: str = "") -> ServedModel:
        served = self.models.get(name)
        if served is None:
            raise ModelNotFound.unknown(name)
        served.check_version(version)
        return served

    def server_metadata(self) -> dict[str, Any]:
        return {"name": SERVER_NAME, "version": __version__, "extensions": list(EXTENSIONS)}

    async def ready(self) -> bool:
        checks = await asyncio.gather(*(m.ready() for m in self.models.values()))
        return all(checks)

    async def model_config(self, served: ServedModel, own: bool = False) -> dict[str, Any]:
        """The model's configuration as Triton's JSON document (see gateway.models.triton), from what
        the gateway knows: the predictor's own configuration as the model last read it (at
        readiness and on each refresh), never asked for per client (a predictor slow to
        answer it would hold its model's connections); `own`: the gateway's view alone."""
        return triton.model_config(served, None if own else served.predictor_config)

    # -- views of the whole gateway (gateway.observe.views: this process's, or the workers') -----

    async def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        """Triton's statistics document of the whole gateway, for one model or (no name) all."""
        if name:
            self.model(name, version)  # an unknown model or version: refused here, wherever the figures are
        return await self.views.statistics(name, version)

    async def exposition(self) -> bytes:
        """/metrics of the whole gateway."""
        return await self.views.exposition()

    async def live(self) -> dict[str, Any]:
        """The live page's snapshot (`gateway.observe.live`) of the whole gateway."""
        return await self.views.live()

    # -- requests --------------------------------------------------------------------

    def open(self, front_end: str, model: str) -> Call:
        """A request has arrived at `front_end` for `model` (`gateway.lifecycle`). Every front
        end opens one per inference request, before checking anything, and closes it once
        with the HTTP status of the outcome (the same vocabulary for gRPC clients:
        `wire.errors` pairs each gRPC code with one), so rates add up across protocols."""
        return Call(front_end, model, self._closed)

    def _closed(self, call: Call) -> None:
        # Counted and timed once; an unknown model name counts as "unknown" (bounded cardinality).
        model = call.model if call.model in self.models else "unknown"
        self.metrics.count_request(model, call.front_end, str(call.status), call.elapsed_s)
        self.telemetry.request_closed(call)

    async def decode(self, served: ServedModel, head: RequestHead) -> OipRequest:
        """An OIP request's payloads, decoded once the model accepts what its headers declare
        (`ServedModel.check_inputs`): a tensor of the wrong datatype, rows or shape, or more rows
        than the model's queue holds, costs its header, never its payload. Many BYTES elements
        are decoded off the event loop."""
        served.check_inputs(head.inputs)
        if head.bytes_elements > BYTES_ON_LOOP:
            return await asyncio.to_thread(head.decode)
        return head.decode()

    def decode_embeddings(self, served: ServedModel, head: EmbeddingsHead) -> EmbeddingsRequest:
        """An embeddings request's inputs, checked once the rows it declares fit the model's
        queue (`ServedModel.check_rows`): 65,536 rows of token ids were checked and decoded,
        holding the loop 0.6-1.1 s, before the queue refused them. A model that embeds no
        texts refuses the request in `infer`, as any other."""
        if served.kind.reads_request(EmbeddingsRequest):
            served.check_rows(head.rows)
        return head.decode()

    async def infer(self, served: ServedModel, request: Any, call: Call) -> Answer:
        """Any client's request (OIP, KServe v1 instances, TorchServe, embeddings, rerank),
        decoded by its front end: put in the model's batch form by its kind, submitted as one `BatchRequest` (its deadline
        and priority settled by the call), answered with its rows of the batch."""
        # A counter, not a context manager: a queued request would hold its generator frame.
        self.active_requests += 1
        try:
            # Its key looked up again in the door of now: a reload may have removed, rotated or
            # renamed its tenant since it was admitted (a body still arriving, a stream's message).
            call.tenant = self.door.permit(call.tenant, served.name)
            batch = served.batch_inputs(request)
            submitted = call.batch_request(served.name, batch.tensors, batch.lengths,
                                           client=self.telemetry.request_started(call), parameters=batch.parameters,
                                           timeout_s=batch.timeout_s, priority=batch.priority, form=served.form)
            try:
                result = await self.scheduler.submit(submitted)
            except GatewayError as error:
                raise named_as_served(error, served) from None
            self.telemetry.request_batched(call, result)
            return Answer(served, type(request), batch, result)
        finally:
            self.active_requests -= 1


def front_door(config: GatewayConfig) -> FrontDoor:
    """What a request of this config must present: its tenants' keys, read now (a ConfigError
    if one cannot be), else the token, else nothing."""
    if config.tenants:
        return FrontDoor(tenants=tenant_directory(config.tenants))
    return FrontDoor(token=config.server.auth_token)


def tenants_changed(before: GatewayConfig, before_door: FrontDoor, after: GatewayConfig,
                    after_door: FrontDoor) -> dict[str, list[str]]:
    """The tenants a reload changes, by name (never a key, nor its digest): "tenants added",
    "tenants removed", "tenants changed" (its level, weight, quotas or models) and "tenant
    keys changed" (the keys read from its source now are not those it had: a rotation)."""
    old = {tenant.name: tenant for tenant in before.tenants}
    new = {tenant.name: tenant for tenant in after.tenants}
    kept = [name for name in new if name in old]
    rekeyed = (after_door.tenants.rekeyed(before_door.tenants, kept)
               if after_door.tenants is not None and before_door.tenants is not None else set())
    return {"tenants added": [name for name in new if name not in old],
            "tenants removed": [name for name in old if name not in new],
            "tenants changed": [name for name in kept
                                if (old[name].policy, old[name].models) != (new[name].policy, new[name].models)],
            "tenant keys changed": [name for name in kept if name in rekeyed]}


def named_as_served(error: GatewayError, served: ServedModel) -> GatewayError:
    """A predictor's error names the model as the predictor knows it (`backend_model`: the
    backends write "model '<name>'"); its clients know it by the name they used."""
    at_predictor = served.config.predictor.model
    if at_predictor != served.name and f"model '{at_predictor}'" in error.message:
        error.message = error.message.replace(f"model '{at_predictor}'", f"model '{served.name}'")
        error.args = (error.message,)
    return error
