"""Which served model serves a model's config: the one choice among the kinds.

A tensor predictor's models are `TensorModel`s and a v1 predictor's `InstanceModel`s
(`PaddedInstanceModel` when its inputs are padded: `gateway.models`); a model with
`[models.embeddings]` is an `EmbeddingModel` (`gateway.embeddings`), and one with
`[models.rerank]` a `RerankModel` (`gateway.rerank`), whatever its predictor. It sits above
these modules, so that none imports another's kinds.
"""
from __future__ import annotations

from backends.base import Backend, BatchForm
from gateway.config import ModelConfig
from gateway.embeddings import EmbeddingModel
from gateway.models.base import ServedModel
from gateway.models.instance import InstanceModel, PaddedInstanceModel
from gateway.models.tensor import TensorModel
from gateway.rerank import RerankModel


def served_model(config: ModelConfig, backend: Backend) -> ServedModel:
    """The served model of the batch form its backend takes."""
    if config.embeddings is not None:
        return EmbeddingModel(config, backend)
    if config.rerank is not None:
        return RerankModel(config, backend)
    if backend.batch_form is BatchForm.INSTANCES:
        return PaddedInstanceModel(config, backend) if config.batching.padding else InstanceModel(config, backend)
    return TensorModel(config, backend)
