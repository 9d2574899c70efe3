"""`TensorModel`, the served model of a predictor that takes typed tensors (Open Inference
Protocol): an OIP request's tensors checked against the signature and put in its input
order, v1 instances converted by it (ragged ones padded, each row's length kept, for a
model with padded inputs), a TorchServe upload as BYTES tensors. Ready only once the
predictor has described itself.

It must not know a predictor that takes instances (`instance.py`), nor any kind of model.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.kinds import BatchInputs
from gateway.models.base import ServedModel
from gateway.models.instances import instances_to_tensors, padded_instances_to_tensors, unnamed_instances_to_tensors
from gateway.models.uploads import upload_to_tensors
from wire.errors import InvalidInput
from wire.tensors import Tensor, TensorSpec, shape_fits
from wire.upload import Upload


class TensorModel(ServedModel):
    """A predictor that takes typed tensors (Open Inference Protocol)."""

    def check_signature(self, inputs: Sequence[TensorSpec]) -> None:
        """When the model describes its inputs: the same names, each of its datatype, each row
        of its shape."""
        specs = self.client_inputs
        if not specs:
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
