"""The one small interface every predictor client implements, and how a batch travels.

The gateway sees predictors only through `Backend` and `BatchForm`; this module knows no
protocol and nothing of the gateway.
"""
from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from typing import Any

from wire.tensors import ModelSignature, Tensor


class BatchForm(enum.Enum):
    """How a merged batch travels to the predictor."""
    TENSORS = "tensors"      # typed tensors (Open Inference Protocol)
    INSTANCES = "instances"  # one JSON tensor of KServe v1 instances, one per row


# The flags of `Backend` that say what a client can do, forwarded as they are by whoever
# stands for a client (`capabilities`, `Backend.take_capabilities`).
CAPABILITIES = ("takes_dimensions", "reads_model_config", "one_query_per_call")


class Backend(ABC):
    """A client for one model on one predictor.

    `infer` sends a merged batch as ONE call and returns one output row per input row.
    Failures are raised as gateway errors: Unavailable (cannot reach it), PredictorRejected
    (it called the batch bad input), PredictorFailed (its own 5xx), BadPredictorAnswer
    (an answer we cannot use), each made in `backends.errors`.
    """

    # What the client can do: each set by the client (from the settings the registry gives
    # it), a `ReplicaSet` taking its replicas' as its own and a worker's stand-in the
    # batcher's client's (`CAPABILITIES`). The gateway reads these, never a protocol or a
    # server's name.
    batch_form: BatchForm = BatchForm.TENSORS
    """How a merged batch travels to the predictor."""
    takes_dimensions: bool = False
    """A batch's `dimensions` parameter shortens the vectors it answers (OpenAI's
    embeddings API)."""
    reads_model_config: bool = False
    """The predictor has a model configuration to ask (`model_config`: Triton's); one
    without would answer 404 every time."""
    one_query_per_call: bool = False
    """A call holds one query's documents (a Cohere-shaped rerank server): a batch of
    (query, document) pairs must not mix queries."""

    def capabilities(self) -> dict[str, bool]:
        """Every flag of `CAPABILITIES`, by its name (what a stand-in takes as its own)."""
        return {name: getattr(self, name) for name in CAPABILITIES}

    def take_capabilities(self, capabilities: dict[str, bool]) -> None:
        """Say what another client says (a replica set its replicas'; a worker's stand-in
        the batcher's client's)."""
        for name in CAPABILITIES:
            setattr(self, name, bool(capabilities[name]))

    async def start(self) -> None:  # noqa: B027 (optional: a client may have nothing to open)
        """Open connections. Must not fail if the predictor is not up yet."""

    @abstractmethod
    async def infer(self, inputs: list[Tensor]) -> list[Tensor]: ...

    @abstractmethod
    async def ready(self) -> bool: ...

    async def metadata(self) -> tuple[ModelSignature, list[str]] | None:
        """The model's signature and versions as the predictor reports them, if it can."""
        return None

    async def model_config(self) -> dict[str, Any] | None:
        """The predictor's own model configuration in Triton's JSON form, if it has one
        (Triton's model configuration extension)."""
        return None

    def replicas_in_rotation(self) -> list[bool]:
        """Whether each of the model's predictor replicas is in rotation now: one
        predictor is one replica, always in (every batch goes to it, reachable or not)."""
        return [True]

    def in_rotation(self) -> int:
        """How many of `replicas_in_rotation` are in: the batcher's slots are per replica
        (called before every batch: it must be cheap)."""
        return 1

    def batches_leaving(self) -> int:
        """Batches still at replicas that have left the rotation (no longer listed): the
        batcher counts them apart from the slots of those in rotation (called before every
        batch: it must be cheap). One predictor never leaves."""
        return 0

    async def update_replicas(self, addresses: tuple[str, ...]) -> bool:
        """Take a new list of replica addresses in place, if this client can (a replica set
        can; a single predictor's client cannot: it is replaced). True if it did."""
        return False

    async def close(self) -> None:  # noqa: B027 (optional: a client may have nothing to close)
        """Close connections."""
