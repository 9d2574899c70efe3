"""`ModelKind`, what a kind of model declares, and the registry of kinds.

A served model has a *batch form* (typed tensors or KServe v1 instances: `gateway.models`,
chosen by its predictor) and a *kind* (tensors, embeddings, rerank, ...: chosen by its
config), and asks its kind everything that depends on what its rows mean:

- its `[models.<name>]` table: `settings` (a frozen dataclass whose fields declare its keys,
  `gateway.config_keys`), read by `configure`, which also says whether a model is of this kind
  at all (a table present, or implied by its predictor);
- the client request types it answers, each mapped to its batch inputs (`@reads`): an OIP
  request, KServe v1 instances and a TorchServe request by default, through the model's
  batch form; a kind adds its own clients' requests (an OpenAI embeddings request, a Cohere
  rerank request) and may read the default ones its own way;
- its rows spec (`rows`: `PlainSpec`, `PaddedSpec`, `TextSpec` or `PairSpec`), from which the
  scheduler's row layout is chosen by type;
- its answer projection by request type (`@answers`): the batch result as the client of that
  request type reads it (OIP tensors, v1 predictions, vectors, scores), and the tensors its
  OIP clients see (`client_inputs`, `client_outputs`: the predictor's, by default).

Kinds register themselves by being defined (a subclass with a `name`), so a new kind is one
module: the config reads its table, its requests reach it, and a request type no kind of a
model reads is refused by the kind that does read it (`refusal`: "not an embedding model").

It knows no served model class (only `Model`, what a kind asks of one), no front end, no wire
format and no predictor protocol beyond the backends' interface; it sits below the config,
which reads the kinds' tables.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

from backends.base import Backend
from backends.settings import PredictorSettings
from gateway.batching.config import PlainSpec, RowsSpec, TextSpec
from gateway.batching.executor import Executor
from gateway.batching.request import NO_PARAMETERS
from gateway.config_keys import Key, Kind, Table, declared
from wire.errors import BadPredictorAnswer, InvalidInput, ModelNotFound
from wire.request import OipRequest
from wire.tensors import Tensor, TensorSpec
from wire.upload import TorchServeRequest, Upload


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


class Model(Protocol):
    """What a kind asks of the served model it answers for (`gateway.models.base.ServedModel`)."""

    @property
    def name(self) -> str: ...
    @property
    def backend(self) -> Backend: ...
    @property
    def client_inputs(self) -> tuple[TensorSpec, ...]: ...
    @property
    def server(self) -> str: ...

    def batch_inputs_from_tensors(self, inputs: list[Tensor]) -> list[Tensor]: ...
    def batch_inputs_from_instances(self, instances: list[Any]) -> BatchInputs: ...
    def batch_inputs_from_upload(self, row: Upload) -> BatchInputs: ...
    def check_requested_outputs(self, requested: list[str]) -> None: ...
    def select_outputs(self, outputs: list[Tensor], requested: list[str]) -> list[Tensor]: ...
    def tensors_from_outputs(self, outputs: list[Tensor]) -> list[Tensor]: ...
    def predictions_from_outputs(self, outputs: list[Tensor], lengths: np.ndarray | None = None) -> list[Any]: ...


Reader = Callable[[Any, Any], BatchInputs]                    # (the kind, a request) -> its batch inputs
Projection = Callable[[Any, list[Tensor], BatchInputs], Any]  # (the kind, its rows of the result, its batch inputs)


def reads(*request_types: type) -> Callable[[Reader], Reader]:
    """Marks a kind's method as the reader of these client request types."""
    def mark(method: Reader) -> Reader:
        method.reads = request_types  # type: ignore[attr-defined]
        return method
    return mark


def answers(*request_types: type) -> Callable[[Projection], Projection]:
    """Marks a kind's method as the answer to the clients of these request types."""
    def mark(method: Projection) -> Projection:
        method.answers = request_types  # type: ignore[attr-defined]
        return method
    return mark


# Every kind with a name, by it (its table's name), in the order they were defined.
KINDS: dict[str, type[ModelKind]] = {}


class ModelKind:
    """What rows of one kind mean, for one served model (`model`) configured with `settings`.

    A subclass declares its `name` (its `[models.<name>]` table: "" for the default kind,
    which has none), its `settings` type, its `table_key` (how the reference lists the table
    among a model's keys), its rows spec, and its readers and answers by request type."""

    name: ClassVar[str] = ""
    settings_type: ClassVar[type] = type(None)
    table_key: ClassVar[Key | None] = None
    rows: ClassVar[type[RowsSpec]] = PlainSpec
    # What a client is told of another kind's model when it sends a request only this kind
    # reads: "is not <what> ... (a [models.<name>] table makes a model <makes>)".
    what: ClassVar[str] = ""
    makes: ClassVar[str] = ""
    # Whether its rows are measured in tokens (the answer's usage: `tokens`).
    measures_tokens: ClassVar[bool] = False
    _readers: ClassVar[dict[type, Reader]] = {}
    _answers: ClassVar[dict[type, Projection]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        readers: dict[type, Reader] = {}
        projections: dict[type, Projection] = {}
        for klass in reversed(cls.__mro__):  # the most derived last: a subclass reads a type its own way
            for method in vars(klass).values():
                readers.update(dict.fromkeys(getattr(method, "reads", ()), method))
                projections.update(dict.fromkeys(getattr(method, "answers", ()), method))
        cls._readers, cls._answers = readers, projections
        if cls.name:
            KINDS[cls.name] = cls

    def __init__(self, settings: Any, model: Model) -> None:
        self.settings = settings
        self.model = model

    @classmethod
    def table(cls) -> Table:
        """Its `[models.<name>]` table, as the config reads it and the reference shows it."""
        return Table(f"models[].{cls.name}", f"[models.{cls.name}]", declared(cls.settings_type))

    # -- the config --------------------------------------------------------------------

    @classmethod
    def configure(cls, raw: dict, key: str, predictor: PredictorSettings) -> Any | None:
        """The model `raw` (`key`: "models[0]") as this kind's settings, or None when it is
        not of this kind; a ConfigError for a table that cannot be served as written."""
        return None

    @classmethod
    def spec(cls, settings: Any, texts: TextSpec) -> RowsSpec:
        """A kind whose rows are texts: its rows spec, from the token budget the config read."""
        return texts

    def rows_for(self, configured: RowsSpec) -> RowsSpec:
        """Its rows spec as its predictor takes them (the configured one, by default)."""
        return configured

    # -- a request in, an answer out ---------------------------------------------------

    @classmethod
    def reads_request(cls, request_type: type) -> bool:
        """Whether its clients may send requests of this type."""
        return request_type in cls._readers

    def require(self, request_type: type) -> None:
        """Refuse, as `batch_inputs` would, a model whose kind does not read this type."""
        if request_type not in self._readers:
            raise refusal(request_type, self.model.name)

    def batch_inputs(self, request: Any) -> BatchInputs:
        """Any client's decoded request in its model's batch form: the one place a request is
        told apart by its type."""
        reader = self._readers.get(type(request))
        if reader is None:
            raise refusal(type(request), self.model.name)
        return reader(self, request)

    def answer(self, request_type: type, outputs: list[Tensor], batch: BatchInputs) -> Any:
        """A request's rows of its batch's result, as the client of its type reads them."""
        return self._answers[request_type](self, outputs, batch)

    def client_inputs(self, described: tuple[TensorSpec, ...]) -> tuple[TensorSpec, ...]:
        """The inputs its OIP clients send (and its metadata lists), from those the predictor's
        signature describes: the same, by default; a kind whose rows its clients send in
        another shape (texts it turns into features) names its own."""
        return described

    def client_outputs(self, described: tuple[TensorSpec, ...]) -> tuple[TensorSpec, ...]:
        """The outputs its OIP clients are answered, as `client_inputs`."""
        return described

    def check_inputs(self, inputs: Sequence[TensorSpec]) -> None:
        """An OIP request's inputs by their headers, beyond its batch form's checks."""

    def executor(self) -> Executor:
        """What the scheduler calls with each merged batch of its model."""
        return self.model.backend.infer

    def start(self) -> None:
        """Called when its model starts serving (on the event loop)."""

    # -- the default requests, through the model's batch form ----------------------------

    @reads(OipRequest)
    def from_oip(self, request: OipRequest) -> BatchInputs:
        model = self.model
        requested = [output.name for output in request.outputs]
        tensors = model.batch_inputs_from_tensors(request.inputs)
        model.check_requested_outputs(requested)
        return BatchInputs(tensors, requested=requested, parameters=request.forwarded_parameters(),
                           timeout_s=request.timeout_s,
                           priority=request.priority if "priority" in request.parameters else None)

    @reads(TorchServeRequest)
    def from_torchserve(self, request: TorchServeRequest) -> BatchInputs:
        if request.upload is not None:
            return self.model.batch_inputs_from_upload(request.upload)
        assert request.instances is not None  # the codec gives one or the other
        return self.batch_inputs(request.instances)

    @reads(list)
    def from_instances(self, instances: list[Any]) -> BatchInputs:
        return self.model.batch_inputs_from_instances(instances)

    @answers(OipRequest)
    def tensors(self, outputs: list[Tensor], batch: BatchInputs) -> list[Tensor]:
        """As OIP output tensors: those the client asked for, in its order (all if none)."""
        return self.model.select_outputs(self.model.tensors_from_outputs(outputs), batch.requested)

    @answers(list, TorchServeRequest)
    def predictions(self, outputs: list[Tensor], batch: BatchInputs) -> list[Any]:
        """As KServe v1 predictions, one per instance (TorchServe's too)."""
        return self.model.predictions_from_outputs(outputs, batch.lengths)


class Tensors(ModelKind):
    """The default kind: rows of tensors (or instances) as their clients send them, fixed or
    padded along a variable dimension (`[[models.inputs]] pad`)."""


def kind_of(settings: Any) -> type[ModelKind]:
    """The kind whose settings these are (the default kind's are None)."""
    if settings is None:
        return Tensors
    for kind in KINDS.values():
        if isinstance(settings, kind.settings_type):
            return kind
    raise LookupError(f"no model kind has settings {type(settings).__name__}")


def refusal(request_type: type, model: str) -> ModelNotFound:
    """What a client is told of a model whose kind does not read its request's type: the
    words of the kind that does."""
    owner = next((kind for kind in KINDS.values() if kind.reads_request(request_type)), None)
    if owner is None:
        return ModelNotFound(f"The model '{model}' reads no {request_type.__name__}")
    return ModelNotFound(f"The model '{model}' is not {owner.what}: its clients send tensors or instances (a "
                         f"[models.{owner.name}] table makes a model {owner.makes})")


# -- what the kinds whose rows are texts share ----------------------------------------------

def texts_of(model: str, tensor: Tensor) -> list[str]:
    """A BYTES input of one text per row as the texts (InvalidInput if one is not UTF-8):
    what an embedding or rerank model measures in tokens."""
    rows = tensor.data.reshape(len(tensor.data), -1)
    try:
        return [value.decode("utf-8") if isinstance(value, bytes) else str(value) for value in rows[:, 0]]
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"input '{tensor.name}' of model '{model}': a text is not UTF-8 ({exc.reason} at "
                           f"byte {exc.start})") from None


def texts_column(name: str, texts: list[str]) -> Tensor:
    """Texts as a BYTES input, [rows, 1]."""
    column = np.empty((len(texts), 1), dtype=object)
    column[:, 0] = [text.encode("utf-8", "surrogatepass") for text in texts]
    return Tensor(name, "BYTES", column)


def output_holding(model: str, outputs: list[Tensor], wanted: str, what: str, table: str) -> Tensor:
    """The one output that holds `what` (the embeddings, the scores): the one named `wanted`
    (the `output` key of [models.<table>]), else the only FP32 one, else the only one."""
    candidates = [t for t in outputs if t.name == wanted] if wanted else \
        [t for t in outputs if t.datatype == "FP32"] or outputs
    if len(candidates) != 1:
        names = [t.name for t in outputs]
        raise BadPredictorAnswer(
            f"model '{model}': cannot tell which output holds {what} among {names}; "
            f"name it with [models.{table}] output" if not wanted else
            f"model '{model}' answered no output '{wanted}' ([models.{table}] output); it has {names}")
    return candidates[0]


def table_key(name: str, meaning: str) -> Key:
    """How a kind's table is listed among a model's keys."""
    return Key(name, Kind.TABLE, meaning)

