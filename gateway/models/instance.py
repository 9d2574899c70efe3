"""The served models of a predictor that takes KServe v1 instances (KServe v1, TorchServe):
`InstanceModel`, whose batch form is one JSON tensor of instances (an OIP client's tensors
become instances, a TorchServe upload one instance of its parts, and the predictions come
back as tensors by the declared outputs); and `PaddedInstanceModel`, for a model with
variable-length inputs: a `TensorModel` whose padded batches travel to the predictor as
instances. Both read no metadata: v1 predictors have none, the config declares what is known.

It must not know any kind of model (`gateway.kinds`).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.batching.executor import Executor
from gateway.kinds import BatchInputs
from gateway.models.base import ServedModel
from gateway.models.instances import predictions_to_outputs, tensors_to_instances
from gateway.models.tensor import TensorModel
from gateway.models.uploads import upload_to_instance
from wire.tensors import Tensor, TensorSpec, rows_tensor
from wire.upload import Upload


class InstanceModel(ServedModel):
    """A predictor that takes KServe v1 instances (KServe v1, TorchServe)."""

    retries_metadata = False  # v1 predictors have no metadata endpoint: the config says what it knows

    def check_signature(self, inputs: Sequence[TensorSpec]) -> None:
        """None: an OIP client's tensors become instances by their own names."""

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
