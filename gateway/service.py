"""The inference service: the one façade both front ends call.

It owns the served models (config, backend client, signature) and the shared scheduler,
and converts a decoded request into its model's *batch form* before submitting it, so
that a KServe v1 client and an OIP client of the same model land in the same batch:
- a tensor predictor (OIP) gets typed tensors: v1 instances are converted by the model's
  input signature;
- a v1 predictor gets one JSON tensor of instances: OIP tensors are converted to rows.
Front ends know only this module and their own codec; backends never see a front end.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from backends.base import Backend, BatchForm
from backends.registry import create_backend
from gateway import __version__
from gateway.batching.scheduler import BatchScheduler
from gateway.config import GatewayConfig, ModelConfig
from gateway.metrics import Metrics
from wire.codecs import v1
from wire.errors import InvalidInput, ModelNotFound, Unavailable
from wire.tensors import ModelSignature, Tensor, shape_fits
from wire.tracing import NO_CONTEXT, ClientContext

log = logging.getLogger(__name__)
METADATA_RETRY_S = 1.0
SERVER_NAME = "batching-gateway"
EXTENSIONS = ("binary_tensor_data", "model_batching")


@dataclass(slots=True)
class InferenceOutcome:
    outputs: list[Tensor]
    batch_id: str


class ServedModel:
    """One model the gateway serves: its config, backend client and known signature."""

    def __init__(self, config: ModelConfig, backend: Backend) -> None:
        self.config = config
        self.backend = backend
        self.signature: ModelSignature | None = config.signature
        self.versions: list[str] = []
        self._metadata_task: asyncio.Task | None = None

    @property
    def name(self) -> str:
        return self.config.name

    def describe(self) -> dict[str, Any]:
        """The model's OIP metadata, as both front ends answer it."""
        signature = self.signature or ModelSignature()
        return {"name": self.name, "versions": self.versions,
                "platform": f"{SERVER_NAME}/{self.config.backend}", **signature.describe()}

    @property
    def takes_rows(self) -> bool:
        return self.backend.batch_form is BatchForm.INSTANCES

    def check_version(self, version: str) -> None:
        if version and self.versions and version not in self.versions:
            raise ModelNotFound(f"model '{self.name}' has no version '{version}' (versions: {', '.join(self.versions)})")

    def require_signature(self) -> ModelSignature:
        if self.signature is None:
            raise Unavailable(
                f"model '{self.name}': its input signature is not known yet (the predictor has not "
                f"described it; declare [[models.inputs]] in the config)"
            )
        return self.signature

    def start(self) -> None:
        self._metadata_task = asyncio.get_running_loop().create_task(self._learn_metadata())

    async def close(self) -> None:
        if self._metadata_task is not None:
            self._metadata_task.cancel()
        await self.backend.close()

    async def _learn_metadata(self) -> None:
        """Read signature and versions from the predictor, retrying until it answers."""
        while True:
            described = await self.backend.metadata()
            if described is not None:
                signature, self.versions = described
                if self.signature is None:
                    self.signature = signature
                return
            if self.takes_rows:
                return  # v1 predictors have no metadata endpoint: the config says what it knows
            await asyncio.sleep(METADATA_RETRY_S)

    async def ready(self) -> bool:
        if not await self.backend.ready():
            return False
        return self.signature is not None or self.takes_rows


class InferenceService:
    def __init__(self, config: GatewayConfig, scheduler: BatchScheduler) -> None:
        self.config = config
        self.scheduler = scheduler
        self.models: dict[str, ServedModel] = {}
        self.active_requests = 0  # inside infer_*: what a graceful stop waits for
        self.metrics = Metrics(scheduler)
        self._background: set[asyncio.Task] = set()  # held so they are not collected mid-flight

    async def start(self) -> None:
        for model_config in self.config.models:
            await self._add_model(model_config)

    async def _add_model(self, model_config: ModelConfig) -> None:
        backend = create_backend(model_config)
        await backend.start()
        served = ServedModel(model_config, backend)
        self.scheduler.add_model(served.name, backend.infer, model_config.batching)
        self.models[served.name] = served
        served.start()

    async def reconfigure(self, config: GatewayConfig, grace_s: float) -> dict[str, list[str]]:
        """Apply a reloaded config without dropping requests in flight.

        New models start serving; removed models stop taking requests, finish what they
        have queued and in flight (within `grace_s`), then close. A model whose batching
        changed is re-tuned in place; one whose predictor changed gets a new backend for
        new batches while batches already sent finish on the old one."""
        old = {m.name: m for m in self.config.models}
        new = {m.name: m for m in config.models}
        changes: dict[str, list[str]] = {"added": [], "removed": [], "retuned": [], "replaced": []}
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
            if dataclasses.replace(before, batching=after.batching) == after:
                self.scheduler.add_model(name, self.models[name].backend.infer, after.batching)
                self.models[name].config = after
                changes["retuned"].append(name)
                continue
            retired = self.models[name]
            await self._add_model(after)  # the scheduler now sends new batches to the new backend
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
            raise ModelNotFound(f"model '{name}' is not served by this gateway")
        served.check_version(version)
        return served

    def server_metadata(self) -> dict[str, Any]:
        return {"name": SERVER_NAME, "version": __version__, "extensions": list(EXTENSIONS)}

    async def ready(self) -> bool:
        checks = await asyncio.gather(*(m.ready() for m in self.models.values()))
        return all(checks)

    # -- inference -------------------------------------------------------------------

    async def infer_tensors(self, name: str, version: str, inputs: list[Tensor],
                            requested: list[str] | None = None,
                            timeout_s: float | None = None,
                            client: ClientContext = NO_CONTEXT) -> InferenceOutcome:
        """An OIP request (REST or gRPC): tensors in, tensors out."""
        self.active_requests += 1
        try:
            return await self._infer_tensors(name, version, inputs, requested, timeout_s, client)
        finally:
            self.active_requests -= 1

    async def _infer_tensors(self, name: str, version: str, inputs: list[Tensor],
                             requested: list[str] | None, timeout_s: float | None,
                             client: ClientContext) -> InferenceOutcome:
        served = self.model(name, version)
        if served.takes_rows:
            batch_inputs = [v1.tensors_to_rows(inputs)]
        else:
            batch_inputs = self._conform(served, inputs)
        if requested and served.signature is not None and served.signature.outputs:
            known = {spec.name for spec in served.signature.outputs}
            unknown = [name for name in requested if name not in known]
            if unknown:
                raise InvalidInput(f"model '{served.name}' has no output named {', '.join(unknown)}")
        result = await self.scheduler.submit(served.name, batch_inputs, timeout_s, client)
        outputs = result.outputs
        if served.takes_rows:
            outputs = v1.predictions_to_outputs(outputs[0], served.require_signature().outputs)
        if requested:
            by_name = {t.name: t for t in outputs}
            missing = [n for n in requested if n not in by_name]
            if missing:
                raise InvalidInput(f"model '{served.name}' produced no output named {', '.join(missing)}")
            outputs = [by_name[n] for n in requested]
        return InferenceOutcome(outputs, ",".join(result.batch_ids))

    async def infer_instances(self, name: str, instances: list[Any],
                              timeout_s: float | None = None,
                              client: ClientContext = NO_CONTEXT) -> tuple[list[Any], str]:
        """A KServe v1 request: instances in, predictions out."""
        self.active_requests += 1
        try:
            return await self._infer_instances(name, instances, timeout_s, client)
        finally:
            self.active_requests -= 1

    async def _infer_instances(self, name: str, instances: list[Any],
                               timeout_s: float | None, client: ClientContext) -> tuple[list[Any], str]:
        served = self.model(name)
        if served.takes_rows:
            batch_inputs = [v1.rows_tensor(instances)]
        else:
            batch_inputs = v1.instances_to_tensors(instances, served.require_signature().inputs)
        result = await self.scheduler.submit(served.name, batch_inputs, timeout_s, client)
        return v1.outputs_to_predictions(result.outputs), ",".join(result.batch_ids)

    def _conform(self, served: ServedModel, inputs: list[Tensor]) -> list[Tensor]:
        """Check tensors against the model's signature and put them in its input order."""
        signature = served.signature
        if signature is None:
            return inputs
        by_name = {t.name: t for t in inputs}
        expected = [spec.name for spec in signature.inputs]
        if set(by_name) != set(expected):
            raise InvalidInput(
                f"model '{served.name}' takes inputs {expected}; the request has {sorted(by_name)}"
            )
        ordered = []
        for spec in signature.inputs:
            tensor = by_name[spec.name]
            if tensor.datatype != spec.datatype:
                raise InvalidInput(
                    f"input '{spec.name}' of model '{served.name}' is {spec.datatype}, got {tensor.datatype}"
                )
            if not shape_fits(spec.shape[1:], tensor.data.shape[1:]):
                raise InvalidInput(
                    f"input '{spec.name}' of model '{served.name}' has shape {list(spec.shape)} "
                    f"(-1 is any size); got {list(tensor.data.shape)}"
                )
            ordered.append(tensor)
        return ordered
