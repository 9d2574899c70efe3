"""The simulated model: OUTPUT0 = 2 x INPUT0 (FP32), at a configurable cost per call.

The cost is `call_ms + per_instance_ms x rows + per_element_us x elements of INPUT0 / 1000`
(elements: what a padded batch of sequences makes grow) of sleep per call, with at most `slots`
calls computing at once (others wait their turn), like a predictor with that many model
instances. It keeps its own call log so tests and benchmarks can see how many calls and
rows it received. It speaks no protocol: the in-process backend and the standalone
simulated server (`tools.simulated_predictor`) wrap it.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np

from backends.settings import Cost
from wire.errors import InvalidInput
from wire.tensors import ModelSignature, Tensor, TensorSpec

SIGNATURE = ModelSignature(
    inputs=(TensorSpec("INPUT0", "FP32", (-1, -1)),),
    outputs=(TensorSpec("OUTPUT0", "FP32", (-1, -1)),),
)


@dataclass(slots=True)
class CallLog:
    calls: int = 0
    instances: int = 0
    batch_sizes: list[int] = field(default_factory=list)

    def record(self, rows: int) -> None:
        self.calls += 1
        self.instances += rows
        if len(self.batch_sizes) < 100_000:  # bounded: it is a diagnostic, not a store
            self.batch_sizes.append(rows)

    def as_dict(self) -> dict:
        return {"calls": self.calls, "instances": self.instances, "batch_sizes": self.batch_sizes}


class SimulatedModel:
    signature = SIGNATURE

    def __init__(self, name: str = "demo", cost: Cost | None = None) -> None:
        self.name = name
        self.cost = cost or Cost()
        self.log = CallLog()
        self._slots: asyncio.Semaphore | None = None

    async def predict(self, inputs: list[Tensor]) -> list[Tensor]:
        """One call: validate, pay the cost, answer 2 x INPUT0."""
        if len(inputs) != 1 or inputs[0].name != "INPUT0":
            raise InvalidInput(f"model '{self.name}' takes exactly one input, INPUT0")
        data = inputs[0].data
        if data.dtype.kind not in "iuf" or data.ndim < 1:
            raise InvalidInput(f"model '{self.name}': INPUT0 must be numeric with a batch dimension")
        await self.pay(len(data), data.size)
        return [Tensor("OUTPUT0", "FP32", np.multiply(data, 2, dtype=np.float32))]

    async def pay(self, rows: int, elements: int) -> None:
        """One call's cost for `rows` rows of `elements` elements in all, in one of the slots."""
        if self._slots is None:  # created lazily so it binds to the running loop
            self._slots = asyncio.Semaphore(self.cost.slots)
        async with self._slots:
            self.log.record(rows)
            delay = (self.cost.call_ms + self.cost.per_instance_ms * rows + self.cost.per_element_us * elements / 1000) / 1000.0
            if delay > 0:
                await asyncio.sleep(delay)

    async def predict_instances(self, instances: list) -> list:
        """KServe v1 form: each instance is one row of INPUT0."""
        try:
            data = np.asarray(instances, dtype=np.float32)
        except (ValueError, TypeError):
            raise InvalidInput("instances must be equal-length lists of numbers") from None
        outputs = await self.predict([Tensor("INPUT0", "FP32", data)])
        return outputs[0].data.tolist()
