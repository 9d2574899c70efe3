"""The models the gateway serves, each owning its *batch form*.

A predictor takes a batch in one of two forms (`backends.base.BatchForm`): typed tensors
(Open Inference Protocol predictors) or one JSON tensor of KServe v1 instances (v1 and
TorchServe predictors). Clients of every front end reach every model, so each request is
converted to its model's form before it is queued, and the model's answer is converted
back to the form its client speaks. That is what a served model owns, in one place:

- `batch_inputs_from_tensors` / `batch_inputs_from_instances`: an OIP or a v1 request in the
  model's batch form, checked against the model's signature (names, datatypes, shapes);
- `tensors_from_outputs` / `predictions_from_outputs`: the batch result as OIP output
  tensors or v1 predictions;
- its signature (from config, else learned from the predictor's metadata and re-read
  every `METADATA_REFRESH_S`, so a predictor restarted with another model is followed),
  versions, readiness and OIP metadata.

A model that describes no tensors (a custom `kserve.Model`, KServe's sklearn and xgboost
runtimes, every v1 predictor) is served all the same: its readiness is its predictor's,
OIP requests pass through with their own names and datatypes, and an OIP client of a v1
predictor gets KServe's own convention for the predictions (`output-0`, the datatype taken
from the values). Only a conversion that needs a name nobody gave (v1 instances for a
tensor predictor that lists no inputs) is refused, at request time, with 400 naming the
config key that would supply it.

`TensorModel` and `InstanceModel` are the two forms; `served_model` picks one from the
backend. This module knows no wire format (codecs decode before it and encode after it),
nothing of the scheduler, and no predictor protocol beyond the backend interface.
"""
from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from typing import Any

from backends.base import Backend, BatchForm
from gateway.config import ModelConfig
from gateway.instances import instances_to_tensors, outputs_to_predictions, predictions_to_outputs, tensors_to_instances
from wire.codecs.v1 import rows_tensor
from wire.errors import InvalidInput, ModelNotFound
from wire.tensors import ModelSignature, Tensor, TensorSpec, shape_fits

log = logging.getLogger(__name__)
METADATA_RETRY_S = 1.0     # until the predictor first answers
METADATA_REFRESH_S = 10.0  # after that: a predictor may restart with another model
SERVER_NAME = "batching-gateway"


class ServedModel(ABC):
    """One model the gateway serves: its config, backend client and known signature."""

    retries_metadata = True  # a tensor predictor describes itself once it is up

    def __init__(self, config: ModelConfig, backend: Backend) -> None:
        self.config = config
        self.backend = backend
        self.signature: ModelSignature | None = config.signature
        self.versions: list[str] = []
        self._metadata_task: asyncio.Task | None = None

    @property
    def name(self) -> str:
        return self.config.name

    # -- the batch form ----------------------------------------------------------------

    @abstractmethod
    def batch_inputs_from_tensors(self, inputs: list[Tensor]) -> list[Tensor]:
        """An OIP request's input tensors in this model's batch form."""

    @abstractmethod
    def batch_inputs_from_instances(self, instances: list[Any]) -> list[Tensor]:
        """A v1 request's instances in this model's batch form."""

    @abstractmethod
    def tensors_from_outputs(self, outputs: list[Tensor]) -> list[Tensor]:
        """A batch result (this request's rows) as OIP output tensors."""

    def predictions_from_outputs(self, outputs: list[Tensor]) -> list[Any]:
        """A batch result (this request's rows) as v1 predictions, one per instance."""
        return outputs_to_predictions(outputs)

    def check_requested_outputs(self, requested: list[str]) -> None:
        """Refuse, before queueing, outputs the model is known not to have."""
        if not requested or not self.described_outputs:
            return
        known = {spec.name for spec in self.described_outputs}
        unknown = [name for name in requested if name not in known]
        if unknown:
            raise InvalidInput(f"model '{self.name}' has no output named {', '.join(unknown)}")

    def select_outputs(self, outputs: list[Tensor], requested: list[str]) -> list[Tensor]:
        """The outputs a client asked for, in its order (all of them if it asked for none)."""
        if not requested:
            return outputs
        by_name = {t.name: t for t in outputs}
        missing = [n for n in requested if n not in by_name]
        if missing:
            raise InvalidInput(f"model '{self.name}' produced no output named {', '.join(missing)}")
        return [by_name[n] for n in requested]

    @property
    def described_inputs(self) -> tuple[TensorSpec, ...]:
        """The inputs config or metadata name (empty: nobody described them)."""
        return self.signature.inputs if self.signature is not None else ()

    @property
    def described_outputs(self) -> tuple[TensorSpec, ...]:
        return self.signature.outputs if self.signature is not None else ()

    # -- identity, metadata, readiness -------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """The model's OIP metadata, as both front ends answer it."""
        signature = self.signature or ModelSignature()
        return {"name": self.name, "versions": self.versions,
                "platform": f"{SERVER_NAME}/{self.config.predictor.server}", **signature.describe()}

    def check_version(self, version: str) -> None:
        if version and self.versions and version not in self.versions:
            raise ModelNotFound(
                f"model '{self.name}' has no version '{version}' (versions: {', '.join(self.versions)})")

    def start(self) -> None:
        self._metadata_task = asyncio.get_running_loop().create_task(self._learn_metadata())

    async def close(self) -> None:
        if self._metadata_task is not None:
            self._metadata_task.cancel()
        await self.backend.close()

    async def _learn_metadata(self) -> None:
        """Read signature and versions from the predictor: until it first answers, then
        again now and then (a declared signature always stands)."""
        while True:
            described = await self.backend.metadata()
            if described is not None:
                signature, self.versions = described
                if self.config.signature is None and signature != self.signature:
                    if self.signature is not None:
                        log.info("model '%s': the predictor now describes %s", self.name, signature.describe())
                    self.signature = signature
            if not self.retries_metadata:
                return
            await asyncio.sleep(METADATA_RETRY_S if described is None else METADATA_REFRESH_S)

    async def ready(self) -> bool:
        return await self.backend.ready()


class TensorModel(ServedModel):
    """A predictor that takes typed tensors (Open Inference Protocol)."""

    def batch_inputs_from_tensors(self, inputs: list[Tensor]) -> list[Tensor]:
        """The tensors, checked against the signature and put in its input order (as sent
        when the model describes no inputs: they batch by their own names and types)."""
        signature = self.signature
        if signature is None or not signature.inputs:
            return inputs
        by_name = {t.name: t for t in inputs}
        expected = [spec.name for spec in signature.inputs]
        if set(by_name) != set(expected):
            raise InvalidInput(
                f"model '{self.name}' takes inputs {expected}; the request has {sorted(by_name)}"
            )
        ordered = []
        for spec in signature.inputs:
            tensor = by_name[spec.name]
            if tensor.datatype != spec.datatype:
                raise InvalidInput(
                    f"input '{spec.name}' of model '{self.name}' is {spec.datatype}, got {tensor.datatype}"
                )
            if not shape_fits(spec.shape[1:], tensor.data.shape[1:]):
                raise InvalidInput(
                    f"input '{spec.name}' of model '{self.name}' has shape {list(spec.shape)} "
                    f"(-1 is any size); got {list(tensor.data.shape)}"
                )
            ordered.append(tensor)
        return ordered

    def batch_inputs_from_instances(self, instances: list[Any]) -> list[Tensor]:
        if not self.described_inputs:
            raise InvalidInput(
                f"model '{self.name}' describes no inputs (its predictor's metadata lists none), so v1 "
                f"instances have no tensor name or datatype to travel as; declare them in the config "
                f"([[models.inputs]] with name, datatype and shape), or send an OIP request")
        return instances_to_tensors(instances, self.described_inputs)

    def tensors_from_outputs(self, outputs: list[Tensor]) -> list[Tensor]:
        return outputs

    async def ready(self) -> bool:
        # Ready once the predictor is, and has answered its metadata once (describing
        # nothing is an answer too), so that no request is judged against a signature that
        # is merely not read yet.
        return await self.backend.ready() and self.signature is not None


class InstanceModel(ServedModel):
    """A predictor that takes KServe v1 instances (KServe v1, TorchServe)."""

    retries_metadata = False  # v1 predictors have no metadata endpoint: the config says what it knows

    def batch_inputs_from_tensors(self, inputs: list[Tensor]) -> list[Tensor]:
        return [rows_tensor(tensors_to_instances(inputs))]

    def batch_inputs_from_instances(self, instances: list[Any]) -> list[Tensor]:
        return [rows_tensor(instances)]

    def tensors_from_outputs(self, outputs: list[Tensor]) -> list[Tensor]:
        return predictions_to_outputs(outputs[0].data.tolist(), self.described_outputs)


def served_model(config: ModelConfig, backend: Backend) -> ServedModel:
    """The served model of the form its backend takes."""
    if backend.batch_form is BatchForm.INSTANCES:
        return InstanceModel(config, backend)
    return TensorModel(config, backend)
