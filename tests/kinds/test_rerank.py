"""The rerank kind (gateway/kinds/rerank.py): which pairs may share a call is its
predictor's to say, and its rows reach the scheduler as pairs whatever the client."""
from __future__ import annotations

import numpy as np
import pytest

from backends.base import Backend
from gateway import config
from gateway.batching.config import PairSpec
from gateway.batching.layouts import PairRows, layout_for
from gateway.kinds import Rerank
from gateway.models.forms import served_model
from wire.rerank import RerankRequest
from wire.tensors import Tensor


class Scorer(Backend):
    """A predictor of pairs that says whether it takes one query per call."""

    def __init__(self, one_query_per_call: bool) -> None:
        self.one_query_per_call = one_query_per_call

    async def infer(self, inputs: list[Tensor]) -> list[Tensor]:
        return [Tensor("score", "FP32", np.zeros((len(inputs[0].data), 1), np.float32))]

    async def ready(self) -> bool:
        return True


def rerank_model(one_query_per_call: bool):
    model = config.parse({"models": [{"name": "r", "backend": "kserve", "api": "score",
                                      "url": "http://127.0.0.1:1"}]}).models[0]
    return served_model(model, Scorer(one_query_per_call))


@pytest.mark.parametrize("one_query", [True, False], ids=["one query a call (Cohere's shape)", "any pairs (vLLM)"])
def test_a_rerank_models_batches_hold_one_query_only_when_its_predictor_takes_one_query_a_call(one_query):
    served = rerank_model(one_query)
    assert isinstance(served.kind, Rerank)
    assert served.config.batching.rows == PairSpec(query_input="query")  # the config says nothing of it
    layout = layout_for(served.batching)
    assert isinstance(layout, PairRows) and layout.one_query is one_query


def test_a_cohere_clients_documents_become_pairs_measured_query_and_document_apart():
    served = rerank_model(True)
    batch = served.batch_inputs(RerankRequest(model="r", query="what is up", documents=["the sky", "a much longer document"]))
    assert [tensor.name for tensor in batch.tensors] == ["query", "document"]
    assert batch.tensors[0].data[:, 0].tolist() == [b"what is up"] * 2
    assert batch.lengths is not None and batch.lengths.shape == (2, 2)
    assert batch.lengths[0, 0] == batch.lengths[1, 0] and batch.lengths[0, 1] < batch.lengths[1, 1]
