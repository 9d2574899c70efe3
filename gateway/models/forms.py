"""Which batch form serves a model's config: the one choice among the forms.

A tensor predictor's models are `TensorModel`s and a v1 predictor's `InstanceModel`s
(`PaddedInstanceModel` when its inputs are padded). A model's kind (`gateway.kinds`) is
its config's, whatever its form: an embedding or rerank model's predictor takes tensors
(the config allows no other). It sits above the forms, so that neither imports the other.
"""
from __future__ import annotations

from backends.base import Backend, BatchForm
from gateway.batching.config import PaddedSpec
from gateway.config import ModelConfig
from gateway.models.base import ServedModel
from gateway.models.instance import InstanceModel, PaddedInstanceModel
from gateway.models.tensor import TensorModel


def served_model(config: ModelConfig, backend: Backend) -> ServedModel:
    """The served model of the batch form its backend takes."""
    if backend.batch_form is BatchForm.INSTANCES:
        padded = isinstance(config.batching.rows, PaddedSpec)
        return PaddedInstanceModel(config, backend) if padded else InstanceModel(config, backend)
    return TensorModel(config, backend)
