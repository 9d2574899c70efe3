"""The simulated model as a backend in the gateway's own process (the embedded default).

No wire at all: the batch's tensors are handed to the model as they are. It knows nothing
of the gateway.
"""
from __future__ import annotations

from backends.base import Backend
from backends.simulated.model import SimulatedModel
from wire.errors import InvalidInput, PredictorRejected
from wire.tensors import ModelSignature, Tensor


class InProcessBackend(Backend):
    def __init__(self, model: SimulatedModel) -> None:
        self.model = model

    async def infer(self, inputs: list[Tensor]) -> list[Tensor]:
        try:
            return await self.model.predict(inputs)
        except InvalidInput as exc:
            raise PredictorRejected(exc.message) from None

    async def ready(self) -> bool:
        return True

    async def metadata(self) -> tuple[ModelSignature, list[str]]:
        return self.model.signature, ["1"]
