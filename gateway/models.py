"""The models the gateway serves, each owning its *batch form*.

A predictor takes a batch in one of two forms (`backends.base.BatchForm`): typed tensors
(Open Inference Protocol predictors) or one JSON tensor of KServe v1 instances (v1 and
TorchServe predictors). Clients of every front end reach every model, so each request is
converted to its model's form before it is queued, and the model's answer is converted
back to what its client speaks. That is what a served model owns, in one place:

- `check_inputs`: an OIP request's inputs as their headers declare them, checked against
  the model's signature (names, datatypes, rows, each row's shape) before any payload is
  decoded (`wire.request.RequestHead`): a 64 MB tensor of the wrong kind costs its header;
- `batch_inputs_from_tensors` / `_instances` / `_upload`: an OIP, v1 or TorchServe request in the
  model's batch form, checked against the model's signature (by `check_inputs` for tensors);
- `tensors_from_outputs` / `predictions_from_outputs`: the batch result as OIP output
  tensors or v1 predictions;
- its signature (from config, else learned from the predictor's metadata and re-read
  every `METADATA_REFRESH_S`, so a predictor restarted with another model is followed),
  versions, readiness and OIP metadata.

A model that describes no tensors (a custom `kserve.Model`, KServe's sklearn and xgboost
runtimes, every v1 predictor) is served all the same: its readiness is its predictor's,
OIP requests pass through with their own names and datatypes, and an OIP client of a v1
predictor gets KServe's own convention for the predictions (`output-0`, the datatype taken
from the values), and v1 instances for a tensor predictor that lists no inputs travel as
its twin (`input-0`). Only a conversion that needs a name nobody gave is refused, at
request time, with 400 naming the config key that would supply it.

A TorchServe upload (a raw body, form parts or gRPC entries: `wire.upload`) is one row:
`batch_inputs_from_upload` (`gateway.uploads`) makes it an instance of named values for a
v1 or TorchServe predictor, or BYTES tensors for a tensor predictor.

A model with variable-length inputs (`batching.padding`) takes typed tensors whatever its
predictor: requests of different lengths are padded together in the scheduler, so its v1
clients' instances may be ragged along the declared dimension (each keeps its own length,
and per-token predictions come back at that length), and a v1 predictor of such a model
gets the padded batch as instances (`PaddedInstanceModel`). Its generated inputs (each
row's length or mask) are filled by the scheduler: clients never send them and its OIP
metadata does not list them.

`TensorModel` and `InstanceModel` are the two forms; `gateway.model_kinds.served_model`
picks one from the backend (or `gateway.embeddings.EmbeddingModel`, a tensor model whose
rows are texts, for a model with `[models.embeddings]`; `gateway.rerank.RerankModel`, whose
rows are (query, document) pairs, for a model with `[models.rerank]`). This module knows
no wire format (codecs decode before it and encode after it), nothing of the scheduler,
and no predictor protocol beyond the backend interface.
"""
from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from backends.base import Backend
from gateway.batching.config import PaddingConfig
from gateway.batching.executor import Executor
from gateway.batching.request import NO_PARAMETERS
from gateway.config import ModelConfig
from gateway.instances import (
    instances_to_tensors,
    outputs_to_predictions,
    padded_instances_to_tensors,
    predictions_to_outputs,
    tensors_to_instances,
    unnamed_instances_to_tensors,
)
from gateway.uploads import upload_to_instance, upload_to_tensors
from wire.embeddings import EmbeddingsRequest
from wire.errors import BadPredictorAnswer, InvalidInput, ModelNotFound, echo
from wire.request import OipRequest
from wire.rerank import RerankRequest
from wire.tensors import ModelSignature, Tensor, TensorSpec, rows_tensor, shape_fits
from wire.upload import TorchServeRequest, Upload

log = logging.getLogger(__name__)
METADATA_RETRY_S = 1.0     # until the predictor first answers
METADATA_REFRESH_S = 10.0  # after that: a predictor may restart with another model
SERVER_NAME = "batching-gateway"


# What a front end decodes, whatever its protocol: an OIP request, a TorchServe request,
# an OpenAI embeddings request, a Cohere rerank request, or KServe v1 instances.
ClientRequest = OipRequest | TorchServeRequest | EmbeddingsRequest | RerankRequest | list[Any]


@dataclass(slots=True)
class BatchInputs:
    """A request in its model's batch form, and each row's real length when its instances
    were ragged along a padded dimension (None: every row is as long as the tensors); an
    OIP request's outputs asked for and its parameters that travel with its batch; the
    deadline and priority the request itself asks for in its body (an OIP request's
    `timeout` and `priority` parameters), which win over its transport's (`Call`)."""
    tensors: list[Tensor]
    lengths: np.ndarray | None = None
    requested: list[str] = field(default_factory=list)
    parameters: Mapping[str, Any] = field(default_factory=lambda: NO_PARAMETERS)
    timeout_s: float | None = None
    priority: int | None = None


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

    @property
    def form(self) -> str:
        """The name of this model's batch form: requests converted by another form (before a
        reload changed it) are told apart by it."""
        return f"{type(self).__name__}/{self.backend.batch_form.value}"

    # -- the batch form ----------------------------------------------------------------

    def batch_inputs(self, request: ClientRequest) -> BatchInputs:
        """Any client's request in this model's batch form: the one place a front end's
        decoded request is told apart by its protocol."""
        if isinstance(request, OipRequest):
            requested = [output.name for output in request.outputs]
            tensors = self.batch_inputs_from_tensors(request.inputs)
            self.check_requested_outputs(requested)
            return BatchInputs(tensors, requested=requested, parameters=request.forwarded_parameters(),
                               timeout_s=request.timeout_s,
                               priority=request.priority if "priority" in request.parameters else None)
        if isinstance(request, TorchServeRequest):
            if request.upload is not None:
                return self.batch_inputs_from_upload(request.upload)
            assert request.instances is not None  # the codec gives one or the other
            return self.batch_inputs_from_instances(request.instances)
        if isinstance(request, EmbeddingsRequest):
            raise self.not_an_embedding_model()
        if isinstance(request, RerankRequest):
            raise self.not_a_rerank_model()
        return self.batch_inputs_from_instances(request)

    def not_an_embedding_model(self) -> ModelNotFound:
        """What an OpenAI embeddings client is told of a model that embeds nothing
        (`gateway.embeddings.EmbeddingModel` is the one that does)."""
        return ModelNotFound(f"The model '{self.name}' is not an embedding model: its clients send tensors or "
                             f"instances (a [models.embeddings] table makes a model embed texts)")

    @property
    def embeds_texts(self) -> bool:
        """Whether OpenAI embeddings clients may name it (see gateway.embeddings)."""
        return False

    def embeddings_from_outputs(self, outputs: list[Tensor]) -> np.ndarray:
        """A batch result (this request's rows) as vectors, float32 [rows, dims]."""
        raise self.not_an_embedding_model()

    def not_a_rerank_model(self) -> ModelNotFound:
        """What a Cohere rerank client is told of a model that scores no pairs
        (`gateway.rerank.RerankModel` is the one that does)."""
        return ModelNotFound(f"The model '{self.name}' is not a rerank model: its clients send tensors or instances "
                             f"(a [models.rerank] table makes a model score (query, document) pairs)")

    @property
    def reranks(self) -> bool:
        """Whether Cohere rerank clients may name it (see gateway.rerank)."""
        return False

    def scores_from_outputs(self, outputs: list[Tensor]) -> np.ndarray:
        """A batch result (this request's rows) as scores, float32 [rows]."""
        raise self.not_a_rerank_model()

    def check_inputs(self, inputs: Sequence[TensorSpec]) -> None:
        """Refuse an OIP request by its inputs' headers (name, datatype, shape as sent):
        called before any payload is decoded, and again on the decoded tensors. Every
        model: each input has the same, non-zero, number of rows."""
        rows = {spec.shape[0] if spec.shape else 0 for spec in inputs}
        if len(rows) > 1 or 0 in rows:
            raise InvalidInput("every input must have the same, non-zero, batch dimension; got shapes "
                               + ", ".join(f"{list(spec.shape)} ('{spec.name}')" for spec in inputs))

    @abstractmethod
    def batch_inputs_from_tensors(self, inputs: list[Tensor]) -> list[Tensor]:
        """An OIP request's input tensors in this model's batch form."""

    @abstractmethod
    def batch_inputs_from_instances(self, instances: list[Any]) -> BatchInputs:
        """A v1 request's instances in this model's batch form."""

    @abstractmethod
    def batch_inputs_from_upload(self, row: Upload) -> BatchInputs:
        """A TorchServe upload (one row of named parts) in this model's batch form."""

    @abstractmethod
    def tensors_from_outputs(self, outputs: list[Tensor]) -> list[Tensor]:
        """A batch result (this request's rows) as OIP output tensors."""

    def predictions_from_outputs(self, outputs: list[Tensor], lengths: np.ndarray | None = None) -> list[Any]:
        """A batch result (this request's rows) as v1 predictions, one per instance; with
        `lengths` (ragged instances), per-token outputs cut back to each instance's own."""
        padding = self.padding
        if lengths is None or padding is None:
            return outputs_to_predictions(outputs)
        return outputs_to_predictions(outputs, {name: (dim, lengths) for name, dim in padding.outputs})

    @property
    def executor(self) -> Executor:
        """What the scheduler calls with each merged batch."""
        return self.backend.infer

    @property
    def padding(self) -> PaddingConfig | None:
        return self.config.batching.padding

    @property
    def client_inputs(self) -> tuple[TensorSpec, ...]:
        """The described inputs a client sends: all but those the gateway generates."""
        padding = self.padding
        if padding is None or not padding.generated:
            return self.described_inputs
        generated = {spec.name for spec in padding.generated}
        return tuple(spec for spec in self.described_inputs if spec.name not in generated)

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
        signature = ModelSignature(self.client_inputs, self.described_outputs)
        return {"name": self.name, "versions": self.versions,
                "platform": f"{SERVER_NAME}/{self.config.predictor.server}", **signature.describe()}

    def check_version(self, version: str) -> None:
        if version and self.versions and version not in self.versions:
            # Triton's words first (its clients look for them), then the gateway's own.
            raise ModelNotFound(f"Request for unknown model: '{self.name}' version {echo(version)} is not found: "
                                f"model '{self.name}' has no version '{echo(version)}' "
                                f"(versions: {', '.join(self.versions)})")

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

    def texts_of(self, tensor: Tensor) -> list[str]:
        """A BYTES input of one text per row as the texts (InvalidInput if one is not UTF-8):
        what an embedding or rerank model measures in tokens."""
        rows = tensor.data.reshape(len(tensor.data), -1)
        try:
            return [value.decode("utf-8") if isinstance(value, bytes) else str(value) for value in rows[:, 0]]
        except UnicodeDecodeError as exc:
            raise InvalidInput(f"input '{tensor.name}' of model '{self.name}': a text is not UTF-8 ({exc.reason} at "
                               f"byte {exc.start})") from None

    def output_holding(self, outputs: list[Tensor], wanted: str, what: str, table: str) -> Tensor:
        """The one output that holds `what` (the embeddings, the scores): the one named
        `wanted` (the `output` key of [models.<table>]), else the only FP32 one, else the only one."""
        candidates = [t for t in outputs if t.name == wanted] if wanted else \
            [t for t in outputs if t.datatype == "FP32"] or outputs
        if len(candidates) != 1:
            names = [t.name for t in outputs]
            raise BadPredictorAnswer(
                f"model '{self.name}': cannot tell which output holds {what} among {names}; "
                f"name it with [models.{table}] output" if not wanted else
                f"model '{self.name}' answered no output '{wanted}' ([models.{table}] output); it has {names}")
        return candidates[0]

    def check_inputs(self, inputs: Sequence[TensorSpec]) -> None:
        """Also, when the model describes its inputs: the same names, each of its datatype,
        each row of its shape."""
        specs = self.client_inputs
        if not specs:
            super().check_inputs(inputs)
            return
        by_name = {spec.name: spec for spec in inputs}
        expected = [spec.name for spec in specs]
        if set(by_name) != set(expected):
            raise InvalidInput(
                f"model '{self.name}' takes inputs {expected}; the request has {sorted(by_name)}"
            )
        for spec in specs:
            sent = by_name[spec.name]
            if sent.datatype != spec.datatype:
                raise InvalidInput(
                    f"input '{spec.name}' of model '{self.name}' is {spec.datatype}, got {sent.datatype}"
                )
            if not shape_fits(spec.shape[1:], sent.shape[1:]):
                raise InvalidInput(
                    f"input '{spec.name}' of model '{self.name}' has shape {list(spec.shape)} "
                    f"(-1 is any size); got {list(sent.shape)}"
                )
        super().check_inputs(inputs)

    def batch_inputs_from_tensors(self, inputs: list[Tensor]) -> list[Tensor]:
        """The tensors, checked against the signature and put in its input order (as sent
        when the model describes no inputs: they batch by their own names and types)."""
        self.check_inputs([TensorSpec(t.name, t.datatype, t.data.shape) for t in inputs])
        specs = self.client_inputs
        if not specs:
            return inputs
        by_name = {t.name: t for t in inputs}
        return [by_name[spec.name] for spec in specs]

    def batch_inputs_from_instances(self, instances: list[Any]) -> BatchInputs:
        if not self.described_inputs:
            return BatchInputs(unnamed_instances_to_tensors(instances))
        padding = self.padding
        if padding is None:
            return BatchInputs(instances_to_tensors(instances, self.described_inputs))
        padded = {spec.name: (spec.dim, spec.value) for spec in padding.inputs}
        tensors, lengths = padded_instances_to_tensors(instances, self.client_inputs, padded)
        return BatchInputs(tensors, lengths)

    def batch_inputs_from_upload(self, row: Upload) -> BatchInputs:
        return BatchInputs(upload_to_tensors(self.name, row, self.client_inputs))

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

    def batch_inputs_from_instances(self, instances: list[Any]) -> BatchInputs:
        return BatchInputs([rows_tensor(instances)])

    def batch_inputs_from_upload(self, row: Upload) -> BatchInputs:
        return BatchInputs([rows_tensor([upload_to_instance(row)])])

    def tensors_from_outputs(self, outputs: list[Tensor]) -> list[Tensor]:
        return predictions_to_outputs(outputs[0].data.tolist(), self.described_outputs)


class PaddedInstanceModel(TensorModel):
    """A v1 predictor (KServe v1, TorchServe) of a model with variable-length inputs: its
    batch form is typed tensors, so that they can be padded, and each padded batch travels
    to the predictor as instances (one per row, objects when there are several inputs, the
    generated ones included); its predictions come back by the declared outputs."""

    retries_metadata = False  # as InstanceModel: the config declares the signature (padding needs it)

    @property
    def executor(self) -> Executor:
        return self._infer

    async def _infer(self, inputs: list[Tensor]) -> list[Tensor]:
        answer = await self.backend.infer([rows_tensor(tensors_to_instances(inputs))])
        return predictions_to_outputs(answer[0].data.tolist(), self.described_outputs)
