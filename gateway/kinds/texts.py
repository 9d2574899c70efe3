"""`TextKind`: what the kinds whose rows are texts share (embeddings, rerank): each row
measured in tokens by the model's tokenizer (or the estimate: `tokens.py`), whatever the
client's protocol, so that the scheduler's token budget holds.

A text kind reads OIP and TorchServe requests through the model's batch form, as every kind
does, then measures what they hold (`measure`, the kind's own: one text a row, or a pair).
It knows no served model class and no wire format, as `base.py`.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from gateway.kinds.base import BatchInputs, Model, ModelKind, reads
from gateway.kinds.tokens import TokenCounter
from wire.request import OipRequest
from wire.tensors import Tensor
from wire.upload import TorchServeRequest


class TextKind(ModelKind):
    """Rows that are texts, measured in tokens (the answer's usage counts them)."""

    measures_tokens = True

    def __init__(self, settings: Any, model: Model) -> None:
        super().__init__(settings, model)
        self.tokens = TokenCounter(settings.tokenizer)

    def measure(self, tensors: list[Tensor]) -> np.ndarray:
        """Each row's tokens, from the texts its tensors hold (InvalidInput if they hold none):
        each text kind's own."""
        raise NotImplementedError(type(self).__name__)

    @reads(OipRequest)
    def from_oip(self, request: OipRequest) -> BatchInputs:
        """An OIP client's BYTES texts, measured."""
        batch = super().from_oip(request)
        batch.lengths = self.measure(batch.tensors)
        return batch

    @reads(TorchServeRequest)
    def from_torchserve(self, request: TorchServeRequest) -> BatchInputs:
        """A TorchServe client's upload or instances, measured."""
        batch = super().from_torchserve(request)
        batch.lengths = self.measure(batch.tensors)
        return batch
