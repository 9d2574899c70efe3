"""gateway/batching/layouts: what a row is, per model, and what the queue and executor ask of it."""
from __future__ import annotations

import asyncio
from collections import deque

import numpy as np
import pytest

from gateway.batching.config import BatchingConfig, GeneratedInput, PaddedInput, PaddedSpec, TextSpec
from gateway.batching.layouts import PaddedRows, PlainRows, TextRows, layout_for
from gateway.batching.request import Part, QueuedRequest
from wire.errors import BadPredictorAnswer, InvalidInput, PayloadTooLarge
from wire.tensors import Tensor

TOKENS = PaddedSpec(inputs=(PaddedInput("IDS", dim=1),), outputs=(("HIDDEN", 1),),
                       generated=(GeneratedInput("LEN", "INT32", "length"),))
TEXTS = TextSpec(buckets=(16, 64))


def ids(rows: int, length: int) -> list[Tensor]:
    return [Tensor("IDS", "INT64", np.arange(rows * length, dtype=np.int64).reshape(rows, length))]


def texts(*values: str) -> list[Tensor]:
    return [Tensor("TEXT", "BYTES", np.array([v.encode() for v in values], dtype=np.object_))]


LOOP = asyncio.new_event_loop()  # the requests' futures only: nothing runs on it


@pytest.fixture(scope="module", autouse=True)
def _close_loop():
    yield
    LOOP.close()


def parts_of(layout, inputs, lengths=None, agreed=()) -> list[Part]:
    """The parts `layout` cuts a request into, as a queue would hold them."""
    cut = layout.cut(inputs, lengths, agreed)
    future = LOOP.create_future()
    request = QueuedRequest(cut.signatures[0], len(inputs[0].data), 1e9, future, len(cut.pieces), layout,
                            restore=cut.restore)
    return [Part(request, i, piece, len(piece[0].data), 0.0, shape, signature)
            for i, (piece, shape, signature) in enumerate(zip(cut.pieces, cut.shapes, cut.signatures, strict=True))]


def test_each_model_gets_the_layout_its_settings_call_for():
    assert isinstance(layout_for(BatchingConfig()), PlainRows)
    assert isinstance(layout_for(BatchingConfig(rows=TOKENS)), PaddedRows)
    assert isinstance(layout_for(BatchingConfig(rows=TEXTS, max_batch_cost=100)), TextRows)


# -- plain rows ---------------------------------------------------------------------------


def test_plain_rows_travel_as_sent_without_measuring_anything():
    inputs = ids(3, 4)
    cut = PlainRows(max_batch_size=8).cut(inputs, None, ())
    assert cut.pieces == [inputs] and cut.pieces[0] is inputs  # no slice, no copy
    assert cut.shapes == [None] and cut.restore is None


def test_plain_rows_split_at_the_batch_size_and_all_parts_share_the_signature():
    cut = PlainRows(max_batch_size=2).cut(ids(5, 4), None, ())
    assert [len(p[0].data) for p in cut.pieces] == [2, 2, 1]
    assert len(set(cut.signatures)) == 1


def test_parameters_join_the_signature():
    layout = PlainRows(max_batch_size=8)
    plain = layout.cut(ids(1, 4), None, ()).signatures[0]
    with_parameters = layout.cut(ids(1, 4), None, (("top_k", 3),)).signatures[0]
    assert plain != with_parameters


def test_plain_batches_concatenate_and_answer_each_part_its_rows():
    layout = PlainRows(max_batch_size=8)
    parts = parts_of(layout, ids(2, 3)) + parts_of(layout, ids(1, 3))
    (batch,) = layout.batch_inputs(parts)
    assert batch.data.shape == (3, 3)
    assert layout.elements(parts) is None
    out = [Tensor("OUT", "FP32", np.zeros((2, 1), np.float32))]
    assert layout.part_outputs(parts[0], out) is out


# -- padded rows ---------------------------------------------------------------------------


def test_padded_rows_are_padded_to_the_longest_with_generated_inputs_and_trimmed_back():
    layout = PaddedRows(TOKENS, max_batch_size=8, max_batch_cost=0)
    parts = parts_of(layout, ids(1, 2)) + parts_of(layout, ids(1, 5))
    assert parts[0].signature == parts[1].signature  # lengths differ, the signature does not
    merged = {t.name: t.data for t in layout.batch_inputs(parts)}
    assert merged["IDS"].shape == (2, 5) and merged["LEN"].ravel().tolist() == [2, 5]
    hidden = Tensor("HIDDEN", "FP32", np.ones((1, 5, 4), np.float32))
    layout.check_outputs([Tensor("HIDDEN", "FP32", np.ones((2, 5, 4), np.float32))], parts)
    with pytest.raises(BadPredictorAnswer, match="follows the padded length"):
        layout.check_outputs([Tensor("HIDDEN", "FP32", np.ones((2, 4, 4), np.float32))], parts)
    assert layout.part_outputs(parts[0], [hidden])[0].data.shape == (1, 2, 4)
    assert layout.elements(parts) == (10, 7)


def test_padded_rows_split_by_cost_and_a_row_over_the_cost_is_413():
    layout = PaddedRows(TOKENS, max_batch_size=8, max_batch_cost=10)
    assert [len(p[0].data) for p in layout.cut(ids(5, 4), None, ()).pieces] == [2, 2, 1]
    with pytest.raises(PayloadTooLarge, match="batching.max_batch_cost"):
        layout.cut(ids(1, 11), None, ())


def test_layouts_of_two_settings_never_share_a_signature():
    # A reload that changes a model's padding: parts queued before it batch apart.
    before = PaddedRows(TOKENS, max_batch_size=8, max_batch_cost=0).cut(ids(1, 4), None, ()).signatures[0]
    after = PaddedRows(TOKENS, max_batch_size=8, max_batch_cost=0).cut(ids(1, 4), None, ()).signatures[0]
    assert before != after


# -- texts ----------------------------------------------------------------------------------


def test_texts_are_sorted_by_tokens_cut_by_bucket_and_answered_in_the_clients_order():
    layout = TextRows(TEXTS, max_batch_size=32, max_batch_cost=1000)
    parts = parts_of(layout, texts("long", "a", "mid"), np.array([40, 5, 9]))
    assert [p.inputs[0].data.tolist() for p in parts] == [[b"a", b"mid"], [b"long"]]  # bucket 16, then 64
    assert parts[0].signature != parts[1].signature
    request = parts[0].request
    for part in reversed(parts):  # answered in any order
        request.answer_part(part.index, [Tensor("V", "BYTES", part.inputs[0].data.copy())], "b")
    assert request.future.result().outputs[0].data.tolist() == [b"long", b"a", b"mid"]


def test_one_text_is_one_part_and_a_batch_of_texts_is_concatenated():
    layout = TextRows(TEXTS, max_batch_size=32, max_batch_cost=1000)
    parts = parts_of(layout, texts("a"), np.array([3])) + parts_of(layout, texts("b"), np.array([7]))
    assert len(parts) == 2 and parts[0].request.restore is None
    assert layout.batch_inputs(parts)[0].data.tolist() == [b"a", b"b"]
    assert layout.elements(parts) == (2 * 16, 10)
    summed = TextRows(TextSpec(summed=True), max_batch_size=32, max_batch_cost=1000)
    assert summed.elements(parts_of(summed, texts("a", "b"), np.array([3, 7]))) == (10, 10)


@pytest.mark.parametrize("padding", [TEXTS, TextSpec()], ids=["buckets", "no buckets"])
def test_a_text_over_the_token_budget_is_413_naming_max_batch_tokens(padding):
    layout = TextRows(padding, max_batch_size=32, max_batch_cost=50)
    for lengths in (np.array([51]), np.array([3, 51])):
        with pytest.raises(PayloadTooLarge, match=r"51 tokens .*batching\.max_batch_tokens = 50"):
            layout.cut(texts(*["x"] * len(lengths)), lengths, ())


def test_texts_must_have_been_measured():
    with pytest.raises(InvalidInput, match="not measured in tokens"):
        TextRows(TEXTS, max_batch_size=32, max_batch_cost=1000).cut(texts("a"), None, ())


def test_take_respects_each_layouts_cost():
    summed = TextRows(TextSpec(summed=True), max_batch_size=32, max_batch_cost=100)
    longest = TextRows(TextSpec(), max_batch_size=32, max_batch_cost=100)
    for layout, taken in ((summed, 3), (longest, 2)):  # 10 + 45 + 40 = 95 tokens; 3 x 45 = 135 padded
        pending = deque(p for n in (10, 45, 40) for p in parts_of(layout, texts("t"), np.array([n])))
        assert len(layout.take(pending, 32, pending[0], by_level=False)) == taken
