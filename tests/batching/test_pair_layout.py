"""gateway/batching/layouts/pairs.py: (query, document) pairs as rows; held to one query per
batch for a predictor that takes one query per call, its query counted once a batch, mixed
otherwise, each pair counted whole."""
from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from gateway.batching.config import BatchingConfig, PairSpec, TextSpec
from gateway.batching.layouts import PairRows, TextRows, layout_for
from tests.batching.test_layouts import parts_of
from wire.errors import PayloadTooLarge
from wire.tensors import Tensor

PAIRS = PairSpec(query_input="query")
ONE_QUERY = PairSpec(query_input="query", one_query=True)


def pairs(*rows: tuple[str, str]) -> list[Tensor]:
    def column(values):
        data = np.empty((len(values), 1), dtype=object)
        data[:, 0] = [v.encode() for v in values]
        return data
    return [Tensor("query", "BYTES", column([q for q, _ in rows])), Tensor("document", "BYTES", column([d for _, d in rows]))]


def test_a_rerank_model_gets_pair_rows_one_query_or_not():
    assert type(layout_for(BatchingConfig(rows=PAIRS, max_batch_cost=100))) is PairRows
    assert layout_for(BatchingConfig(rows=ONE_QUERY, max_batch_cost=100)).one_query
    assert type(layout_for(BatchingConfig(rows=TextSpec(), max_batch_cost=100))) is TextRows


def test_pairs_of_any_queries_share_a_batch_without_one_query():
    layout = layout_for(BatchingConfig(rows=PAIRS, max_batch_cost=1000))
    parts = parts_of(layout, pairs(("q1", "a")), np.array([4])) + parts_of(layout, pairs(("q2", "b")), np.array([4]))
    pending = deque(parts)
    taken = layout.take(pending, 32, pending[0], by_level=False)
    assert len(taken) == 2
    assert [t.data[:, 0].tolist() for t in layout.batch_inputs(taken)] == [[b"q1", b"q2"], [b"a", b"b"]]
    assert layout.tokens(2, np.array([4, 5])) == 9  # what a tenant's tokens_per_minute counts


def test_with_one_query_only_requests_asking_the_same_query_merge():
    layout = layout_for(BatchingConfig(rows=ONE_QUERY, max_batch_cost=1000))
    parts = [*parts_of(layout, pairs(("q1", "a")), np.array([4])), *parts_of(layout, pairs(("q2", "b")), np.array([4])),
             *parts_of(layout, pairs(("q1", "c")), np.array([4]))]
    pending = deque(parts)
    taken = layout.take(pending, 32, pending[0], by_level=False)
    assert [t.data[:, 0].tolist() for t in layout.batch_inputs(taken)] == [[b"q1", b"q1"], [b"a", b"c"]]
    assert len(pending) == 1


def test_a_request_asking_several_queries_is_cut_by_query_and_answered_in_its_order():
    layout = layout_for(BatchingConfig(rows=ONE_QUERY, max_batch_size=2, max_batch_cost=1000))
    rows = [("q1", "long document"), ("q2", "b"), ("q1", "a"), ("q2", "c"), ("q1", "d")]
    parts = parts_of(layout, pairs(*rows), np.array([20, 3, 4, 5, 6]))
    for part in parts:
        queries = {value[0] for value in part.inputs[0].data.tolist()}
        assert len(queries) == 1 and len(part.inputs[0].data) <= 2
    request = parts[0].request
    for part in reversed(parts):  # each part answered with its own documents, in any order
        request.answer_part(part.index, [Tensor("score", "BYTES", part.inputs[1].data.copy())], "b")
    assert request.future.result().outputs[0].data[:, 0].tolist() == [d.encode() for _, d in rows]


def measured(query_tokens: int, *document_tokens: int) -> np.ndarray:
    """A request's pair lengths as the rerank model measures them: [rows, 2], query and document."""
    return np.array([[query_tokens, tokens] for tokens in document_tokens], dtype=np.int64)


def test_with_one_query_a_batch_counts_its_query_once_and_its_documents_each():
    layout = layout_for(BatchingConfig(rows=ONE_QUERY, max_batch_size=64, max_batch_cost=1000))
    rows = [("long query", f"d{i}") for i in range(40)]
    parts = parts_of(layout, pairs(*rows), measured(600, *[10] * 40))  # 40 pairs of 610 tokens
    assert [len(part.inputs[0].data) for part in parts] == [40]  # 600 + 40 x 10 <= 1000: one call
    parts = parts_of(layout, pairs(*rows), measured(900, *[10] * 40))
    assert [len(part.inputs[0].data) for part in parts] == [10] * 4  # 900 + 10 x 10: ten documents a call
    pending = deque(parts + parts_of(layout, pairs(*rows[:5]), measured(900, *[10] * 5)))
    taken = layout.take(pending, 64, pending[0], by_level=False)
    assert sum(len(part.inputs[0].data) for part in taken) == 10  # the merge holds the query once too


def test_with_one_query_a_pair_over_the_budget_is_refused_naming_the_query_and_the_document():
    layout = layout_for(BatchingConfig(rows=ONE_QUERY, max_batch_cost=1000))
    with pytest.raises(PayloadTooLarge, match=r"the query's 900 and the document's 200\) .*max_batch_tokens = 1000"):
        layout.cut(pairs(("q", "a"), ("q", "b")), measured(900, 10, 200), ())


def test_without_one_query_each_pair_costs_its_query_and_its_document():
    layout = layout_for(BatchingConfig(rows=PAIRS, max_batch_size=64, max_batch_cost=1000))
    rows = [("long query", f"d{i}") for i in range(4)]
    parts = parts_of(layout, pairs(*rows), measured(400, *[10] * 4))
    assert [len(part.inputs[0].data) for part in parts] == [2, 2]  # 2 x 410 <= 1000 < 3 x 410
    assert layout.tokens(4, measured(400, *[10] * 4)) == 1640  # a tenant pays every pair whole
