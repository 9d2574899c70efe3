"""`ServedModel`, what every served model is, whatever its batch form and kind: its kind
(`kind`, `gateway.kinds`: what its rows mean, which reads each client's decoded request into
`BatchInputs` and answers it), the checks every form shares (an OIP request's inputs by their
headers, before any payload is decoded; the outputs asked for), the answer back in its form
(`select_outputs`, `predictions_from_outputs`), and what the predictor says of the model: its signature (from config, else learned from the
predictor's metadata and re-read every `METADATA_REFRESH_S`), versions, readiness, OIP
metadata, and the most rows it takes in one call (`batch_limit`, from its own model
configuration: Triton's `max_batch_size`), which caps the model's batches (`batching`).

It must not know the forms themselves (`tensor.py`, `instance.py` implement the abstract
methods), nor any one kind: it asks its kind.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from backends.base import Backend
from gateway.batching.admission import fits_queue
from gateway.batching.config import BatchingConfig, PaddedSpec
from gateway.batching.executor import Executor
from gateway.config import ModelConfig
from gateway.kinds import BatchInputs, ModelKind, kind_of
from gateway.models.instances import outputs_to_predictions
from wire.errors import InvalidInput, ModelNotFound, echo
from wire.tensors import ModelSignature, Tensor, TensorSpec
from wire.upload import Upload

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
        # The most rows the predictor takes in one call, as its own model configuration says
        # (Triton's max_batch_size); None while it says nothing.
        self.batch_limit: int | None = None
        # The predictor's own model configuration (Triton's, as its JSON), as last read when the
        # metadata was (at readiness, then every METADATA_REFRESH_S); None: none read, or the
        # one read was malformed. What the configuration route serves from: never read per client.
        self.predictor_config: dict[str, Any] | None = None
        self._malformed_config: Any = None  # the last malformed configuration logged (logged once)
        self._metadata_task: asyncio.Task | None = None
        self._on_batch_limit: Callable[[], None] | None = None
        # What its rows mean (gateway.kinds), as its config's kind settings say.
        self.kind: ModelKind = kind_of(config.kind)(config.kind, self)

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def server(self) -> str:
        """The predictor's server, as its errors name it ("triton", "kserve", ...)."""
        return self.config.predictor.server

    @property
    def batching(self) -> BatchingConfig:
        """The model's batching as configured, its rows as its kind has its predictor take
        them, and its `max_batch_size` capped at the predictor's `batch_limit`: a batch the
        predictor cannot take would be refused whole (Triton: 400, "batch-size must be <= N"),
        and a larger request must be split to fit it."""
        configured = self.config.batching
        rows = self.kind.rows_for(configured.rows)
        if rows != configured.rows:
            configured = dataclasses.replace(configured, rows=rows)
        if self.batch_limit is None or self.batch_limit >= configured.max_batch_size:
            return configured
        return dataclasses.replace(configured, max_batch_size=self.batch_limit)

    @property
    def form(self) -> str:
        """The name of this model's batch form: requests converted by another form (before a
        reload changed it) are told apart by it."""
        return f"{type(self).__name__}/{type(self.kind).__name__}/{self.backend.batch_form.value}"

    # -- the batch form ----------------------------------------------------------------

    def batch_inputs(self, request: Any) -> BatchInputs:
        """Any client's decoded request in this model's batch form, read by its kind."""
        return self.kind.batch_inputs(request)

    def check_inputs(self, inputs: Sequence[TensorSpec]) -> None:
        """Refuse an OIP request by its inputs' headers (name, datatype, shape as sent):
        called before any payload is decoded, and again on the decoded tensors. By its form's
        signature first (`check_signature`), then every model's rule: each input has the same,
        non-zero, number of rows, which its queue can hold; then by its kind's."""
        self.check_signature(inputs)
        rows = {spec.shape[0] if spec.shape else 0 for spec in inputs}
        if len(rows) > 1 or 0 in rows:
            raise InvalidInput("every input must have the same, non-zero, batch dimension; got shapes "
                               + ", ".join(f"{list(spec.shape)} ('{spec.name}')" for spec in inputs))
        if rows:
            self.check_rows(rows.pop())
        self.kind.check_inputs(inputs)

    @abstractmethod
    def check_signature(self, inputs: Sequence[TensorSpec]) -> None:
        """An OIP request's inputs against the signature its form holds them to."""

    def check_rows(self, rows: int) -> None:
        """Refuse a request by the rows it declares, before anything is spent on them (its
        payloads decoded, its token ids checked): more than the model's queue holds
        (`max_queue`) could never be queued (PayloadTooLarge, the queue's own rule)."""
        fits_queue(self.name, self.batching, rows)

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
        """What the scheduler calls with each merged batch (its kind's choice)."""
        return self.kind.executor()

    @property
    def padding(self) -> PaddedSpec | None:
        """Its padded inputs, when its rows have a variable dimension."""
        rows = self.config.batching.rows
        return rows if isinstance(rows, PaddedSpec) else None

    @property
    def client_inputs(self) -> tuple[TensorSpec, ...]:
        """The inputs an OIP client sends, as its kind presents them: by default the described
        ones but those the gateway generates."""
        padding = self.padding
        described = self.described_inputs
        if padding is not None and padding.generated:
            generated = {spec.name for spec in padding.generated}
            described = tuple(spec for spec in described if spec.name not in generated)
        return self.kind.client_inputs(described)

    @property
    def client_outputs(self) -> tuple[TensorSpec, ...]:
        """The outputs an OIP client is answered, as its kind presents them."""
        return self.kind.client_outputs(self.described_outputs)

    def check_requested_outputs(self, requested: list[str]) -> None:
        """Refuse, before queueing, outputs the model is known not to have."""
        if not requested or not self.client_outputs:
            return
        known = {spec.name for spec in self.client_outputs}
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
        signature = ModelSignature(self.client_inputs, self.client_outputs)
        return {"name": self.name, "versions": self.versions,
                "platform": f"{SERVER_NAME}/{self.config.predictor.server}", **signature.describe()}

    def check_version(self, version: str) -> None:
        if version and self.versions and version not in self.versions:
            # Triton's words first (its clients look for them), then the gateway's own.
            raise ModelNotFound(f"Request for unknown model: '{self.name}' version {echo(version)} is not found: "
                                f"model '{self.name}' has no version '{echo(version)}' "
                                f"(versions: {', '.join(self.versions)})")

    def start(self, on_batch_limit: Callable[[], None] | None = None) -> None:
        """Learn what the predictor says of the model, in the background; `on_batch_limit`
        is called when its `batch_limit` changes (and so, maybe, `batching`)."""
        self._on_batch_limit = on_batch_limit
        self._metadata_task = asyncio.get_running_loop().create_task(self._learn_metadata())
        self.kind.start()

    async def close(self) -> None:
        if self._metadata_task is not None:
            self._metadata_task.cancel()
        await self.backend.close()

    async def _learn_metadata(self) -> None:
        """Read signature, versions and batch limit from the predictor: until it first
        answers, then again now and then (a declared signature always stands)."""
        while True:
            described = await self.backend.metadata()
            if described is not None:
                # Its batch limit first: a signature learned makes a tensor model ready, and no
                # batch should be cut before the limit is known. Only Triton has a model
                # configuration to ask (KServe would answer 404 every time).
                if self.backend.reads_model_config:
                    self._learn_batch_limit(self._learn_config(await self.backend.model_config()))
                signature, self.versions = described
                if self.config.signature is None and signature != self.signature:
                    if self.signature is not None:
                        log.info("model '%s': the predictor now describes %s", self.name, signature.describe())
                    self.signature = signature
            if not self.retries_metadata:
                return
            await asyncio.sleep(METADATA_RETRY_S if described is None else METADATA_REFRESH_S)

    def _learn_config(self, predictor_config: Any) -> dict[str, Any] | None:
        """Keep the configuration the predictor gave (one not read this time changes nothing);
        a malformed one is logged, once, and known as none."""
        if predictor_config is None:
            return None
        problem = config_problem(predictor_config)
        if problem is not None:
            if predictor_config != self._malformed_config:
                log.warning("model '%s': the predictor's model configuration is malformed (%s): the gateway reports "
                            "its own view of the model instead", self.name, problem)
                self._malformed_config = predictor_config
            self.predictor_config = None
            return None
        self.predictor_config = predictor_config
        return predictor_config

    def _learn_batch_limit(self, predictor_config: dict[str, Any] | None) -> None:
        limit = predictor_batch_limit(predictor_config)
        if predictor_config is None or limit == self.batch_limit:
            return  # a configuration not read this time says nothing new
        self.batch_limit = limit
        configured = self.config.batching.max_batch_size
        if limit is not None and limit < configured:
            log.warning("model '%s': the predictor takes at most %d rows a call (its max_batch_size), fewer than "
                        "max_batch_size %d: batches are capped at %d, larger requests split to fit", self.name,
                        limit, configured, limit)
        if self._on_batch_limit is not None:
            self._on_batch_limit()

    async def ready(self) -> bool:
        return await self.backend.ready()


def config_problem(predictor_config: Any) -> str | None:
    """What is wrong with a predictor's model configuration (Triton's JSON), as far as the
    gateway reads it and passes it on, or None: a JSON object whose `input` and `output`,
    when present, are lists of objects, each with a string `name` and a list of integer
    `dims` (gRPC's JSON spells int64 as strings). Present means present: a JSON null there
    is not a list."""
    if not isinstance(predictor_config, dict):
        return f"not an object but {type(predictor_config).__name__}"
    for side in ("input", "output"):
        if side not in predictor_config:
            continue
        tensors = predictor_config[side]
        if not isinstance(tensors, list):
            return f"'{side}' is not a list"
        for index, tensor in enumerate(tensors):
            if not isinstance(tensor, dict) or not isinstance(tensor.get("name"), str):
                return f"{side}[{index}] is not an object with a name"
            dims = tensor.get("dims", [])
            if not isinstance(dims, list) or not all(_integral(dim) for dim in dims):
                return f"{side}[{index}].dims is not a list of integers"
    return None


def _integral(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and value.lstrip("-").isdigit()


def predictor_batch_limit(predictor_config: dict[str, Any] | None) -> int | None:
    """The most rows a predictor takes in one call, from its model configuration in Triton's
    form: `max_batch_size` when it is positive. Zero (a model without a batch dimension,
    which the gateway's rows may still fit) or none says nothing."""
    value = (predictor_config or {}).get("max_batch_size")
    try:
        limit = int(value) if value is not None and not isinstance(value, bool) else 0
    except (TypeError, ValueError):
        return None
    return limit if limit > 0 else None
