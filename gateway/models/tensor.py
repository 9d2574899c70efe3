"""`TensorModel`, the served model of a predictor that takes typed tensors (Open Inference
Protocol): an OIP request's tensors checked against the signature and put in its input
order, v1 instances converted by it (ragged ones padded, each row's length kept, for a
model with padded inputs), a TorchServe upload as BYTES tensors; and the two helpers the
kinds built on it share (`texts_of`, `output_holding`). Ready only once the predictor has
described itself.

It must not know a predictor that takes instances (`instance.py`), nor the kinds built on
it (`gateway.embeddings`, `gateway.rerank`).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.instances import instances_to_tensors, padded_instances_to_tensors, unnamed_instances_to_tensors
from gateway.models.base import BatchInputs, ServedModel
from gateway.uploads import upload_to_tensors
from wire.errors import BadPredictorAnswer, InvalidInput
from wire.tensors import Tensor, TensorSpec, shape_fits
from wire.upload import Upload


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
