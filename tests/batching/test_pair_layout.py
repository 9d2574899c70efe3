"""gateway/batching/layouts/pairs.py: (query, document) pairs as rows; held to one query per
batch for a predictor that takes one query per call, mixed otherwise."""
from __future__ import annotations

from collections import deque

import numpy as np

from gateway.batching.config import BatchingConfig, PaddingConfig
from gateway.batching.layouts import PairRows, TextRows, layout_for
from tests.batching.test_layouts import parts_of
from wire.tensors import Tensor

PAIRS = PaddingConfig(inputs=(), query_input="query")
ONE_QUERY = PaddingConfig(inputs=(), query_input="query", one_query=True)


def pairs(*rows: tuple[str, str]) -> list[Tensor]:
    def column(values):
        data = np.empty((len(values), 1), dtype=object)
        data[:, 0] = [v.encode() for v in values]
        return data
    return [Tensor("query", "BYTES", column([q for q, _ in rows])), Tensor("document", "BYTES", column([d for _, d in rows]))]


def test_a_rerank_model_gets_pair_rows_one_query_or_not():
    assert type(layout_for(BatchingConfig(padding=PAIRS, max_batch_cost=100))) is PairRows
    assert layout_for(BatchingConfig(padding=ONE_QUERY, max_batch_cost=100)).one_query
    assert type(layout_for(BatchingConfig(padding=PaddingConfig(inputs=()), max_batch_cost=100))) is TextRows


def test_pairs_of_any_queries_share_a_batch_without_one_query():
    layout = layout_for(BatchingConfig(padding=PAIRS, max_batch_cost=1000))
    parts = parts_of(layout, pairs(("q1", "a")), np.array([4])) + parts_of(layout, pairs(("q2", "b")), np.array([4]))
    pending = deque(parts)
    taken = layout.take(pending, 32, pending[0], by_level=False)
    assert len(taken) == 2
    assert [t.data[:, 0].tolist() for t in layout.batch_inputs(taken)] == [[b"q1", b"q2"], [b"a", b"b"]]
    assert layout.tokens(2, np.array([4, 5])) == 9  # what a tenant's tokens_per_minute counts


def test_with_one_query_only_requests_asking_the_same_query_merge():
    layout = layout_for(BatchingConfig(padding=ONE_QUERY, max_batch_cost=1000))
    parts = [*parts_of(layout, pairs(("q1", "a")), np.array([4])), *parts_of(layout, pairs(("q2", "b")), np.array([4])),
             *parts_of(layout, pairs(("q1", "c")), np.array([4]))]
    pending = deque(parts)
    taken = layout.take(pending, 32, pending[0], by_level=False)
    assert [t.data[:, 0].tolist() for t in layout.batch_inputs(taken)] == [[b"q1", b"q1"], [b"a", b"c"]]
    assert len(pending) == 1


def test_a_request_asking_several_queries_is_cut_by_query_and_answered_in_its_order():
    layout = layout_for(BatchingConfig(padding=ONE_QUERY, max_batch_size=2, max_batch_cost=1000))
    rows = [("q1", "long document"), ("q2", "b"), ("q1", "a"), ("q2", "c"), ("q1", "d")]
    parts = parts_of(layout, pairs(*rows), np.array([20, 3, 4, 5, 6]))
    for part in parts:
        queries = {value[0] for value in part.inputs[0].data.tolist()}
        assert len(queries) == 1 and len(part.inputs[0].data) <= 2
    request = parts[0].request
    for part in reversed(parts):  # each part answered with its own documents, in any order
        request.answer_part(part.index, [Tensor("score", "BYTES", part.inputs[1].data.copy())], "b")
    assert request.future.result().outputs[0].data[:, 0].tolist() == [d.encode() for _, d in rows]
