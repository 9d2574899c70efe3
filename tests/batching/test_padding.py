"""gateway/batching/padding.py: how requests of different lengths share one batch."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.batching import padding as pad
from gateway.batching.config import GeneratedInput, PaddedInput, PaddedSpec, TextSpec
from gateway.batching.layouts import TextRows
from gateway.batching.padding import RowShape
from gateway.models import instances
from wire.errors import BadPredictorAnswer, InvalidInput, PayloadTooLarge
from wire.tensors import Tensor

TOKENS = PaddedSpec(inputs=(PaddedInput("IDS", 1, -1),), outputs=(("HIDDEN", 1),),
                       generated=(GeneratedInput("LEN", "INT32", "length"), GeneratedInput("MASK", "BOOL", "mask")))
BUCKETED = PaddedSpec(inputs=(PaddedInput("IDS", 1, 0),), buckets=(4, 8, 16))


def ids(rows: int, length: int, start: int = 1) -> list[Tensor]:
    return [Tensor("IDS", "INT64", np.arange(start, start + rows * length, dtype=np.int64).reshape(rows, length))]


TEXTS = TextSpec(buckets=(16, 64, 512))


def texts(*words: str) -> list[Tensor]:
    data = np.empty((len(words), 1), dtype=object)
    data[:, 0] = [w.encode() for w in words]
    return [Tensor("text", "BYTES", data)]


# -- a request's lengths -------------------------------------------------------------------------

def test_texts_are_measured_by_the_tokens_the_model_layer_counted():
    shape = pad.measure(texts("a", "b", "c"), TEXTS, np.array([5, 40, 9]))
    assert (shape.length, shape.padded, shape.lengths.tolist()) == (40, 64, [5, 40, 9])
    with pytest.raises(InvalidInput, match="not measured in tokens"):
        pad.measure(texts("a"), TEXTS)


def test_texts_share_a_batch_within_one_bucket_and_nothing_is_padded():
    short, longer = (pad.measure(texts("a"), TEXTS, np.array([n])) for n in (10, 30))
    assert pad.signature(texts("a"), TEXTS, short) != pad.signature(texts("b"), TEXTS, longer)  # 16 vs 64
    assert pad.signature(texts("a"), TEXTS, longer) == pad.signature(texts("bb"), TEXTS, longer)
    layout = TextRows(TEXTS, max_batch_size=32, max_batch_cost=1000)
    batch = layout.batch_inputs([SimpleNamespace(inputs=texts("a")), SimpleNamespace(inputs=texts("b", "c"))])
    assert [row[0] for row in batch[0].data] == [b"a", b"b", b"c"] and len(batch) == 1


def test_a_list_of_texts_is_sorted_by_length_and_cut_by_bucket_and_by_what_a_batch_holds():
    order, shapes = pad.text_parts(np.array([40, 5, 300, 9, 60, 12]), TEXTS, max_batch_size=32, max_batch_cost=600)
    assert order.tolist() == [1, 3, 5, 0, 4, 2]
    # 5, 9, 12 in bucket 16; 40, 60 in 64; 300 in 512 (alone: 2 x 512 > 600).
    assert [(s.length, s.padded, s.lengths.tolist()) for s in shapes] == \
        [(12, 16, [5, 9, 12]), (60, 64, [40, 60]), (300, 512, [300])]
    order, shapes = pad.text_parts(np.array([5, 6, 7, 8]), TEXTS, max_batch_size=3, max_batch_cost=0)
    assert order is None and [s.lengths.tolist() for s in shapes] == [[5, 6, 7], [8]]  # sorted already; 3 rows a batch
    unbucketed = TextSpec()
    _, shapes = pad.text_parts(np.array([10, 20, 30, 40]), unbucketed, max_batch_size=32, max_batch_cost=70)
    # Without buckets, cut where rows x the longest would pass the cost: 3 x 30 = 90 and 2 x 40 = 80 > 70.
    assert [s.lengths.tolist() for s in shapes] == [[10, 20], [30], [40]]
    with pytest.raises(PayloadTooLarge, match="more than a whole batch may"):
        pad.text_parts(np.array([5, 700]), unbucketed, max_batch_size=32, max_batch_cost=600)


def test_a_batch_of_texts_counts_its_waste_padded_or_summed():
    shapes = [RowShape(40, 64, np.array([40, 8])), RowShape(9, 16, np.array([9]))]
    assert pad.elements(shapes) == (3 * 64, 57)          # the predictor pads to the longest
    assert pad.elements(shapes, summed=True) == (57, 57)  # it packs: no waste



def test_a_request_is_measured_along_its_declared_dimension():
    shape = pad.measure(ids(2, 5), TOKENS)
    assert (shape.length, shape.padded, shape.lengths.tolist()) == (5, 5, [5, 5])


def test_ragged_rows_keep_their_own_real_lengths():
    shape = pad.measure(ids(3, 5), TOKENS, np.array([5, 2, 4]))
    assert shape.lengths.tolist() == [5, 2, 4]
    assert shape.rows(1, 2).lengths.tolist() == [2, 4]


def test_with_buckets_a_request_travels_at_the_smallest_bucket_that_holds_it():
    assert [pad.padded_length(n, (4, 8, 16)) for n in (1, 4, 5, 8, 9, 16)] == [4, 4, 8, 8, 16, 16]
    assert pad.padded_length(7, ()) == 7


def test_a_length_beyond_the_largest_bucket_is_refused_naming_the_key():
    with pytest.raises(InvalidInput, match=r"length 17 is beyond the largest bucket, 16 \(batching.buckets\)"):
        pad.measure(ids(1, 17), BUCKETED)


def test_padded_inputs_must_agree_on_the_length_and_it_must_not_be_zero():
    two = PaddedSpec(inputs=(PaddedInput("IDS", 1), PaddedInput("TYPES", 1)))
    request = [*ids(1, 3), Tensor("TYPES", "INT64", np.zeros((1, 4), dtype=np.int64))]
    with pytest.raises(InvalidInput, match="one length per request"):
        pad.measure(request, two)
    with pytest.raises(InvalidInput, match="length 0"):
        pad.measure([Tensor("IDS", "INT64", np.zeros((1, 0), dtype=np.int64))], TOKENS)
    with pytest.raises(InvalidInput, match="no dimension 1"):
        pad.measure([Tensor("IDS", "INT64", np.zeros(3, dtype=np.int64))], TOKENS)


# -- what merges ---------------------------------------------------------------------------------

def test_without_buckets_any_length_shares_a_signature_and_with_buckets_only_within_one():
    def key(length: int, config: PaddedSpec) -> tuple:
        inputs = ids(1, length)
        return pad.signature(inputs, config, pad.measure(inputs, config))

    assert key(3, TOKENS) == key(300, TOKENS)
    assert key(5, BUCKETED) == key(8, BUCKETED) != key(9, BUCKETED)
    other_width = [Tensor("IDS", "INT64", np.zeros((1, 3, 2), dtype=np.int64))]
    assert pad.signature(other_width, TOKENS, pad.measure(other_width, TOKENS)) != key(3, TOKENS)


# -- cost ------------------------------------------------------------------------------------------

def test_cost_caps_the_rows_of_a_part_and_one_row_too_costly_is_refused():
    assert pad.rows_per_part(8, max_batch_size=32, max_batch_cost=0) == 32
    assert pad.rows_per_part(8, max_batch_size=32, max_batch_cost=100) == 12
    assert pad.rows_per_part(8, max_batch_size=4, max_batch_cost=100) == 4
    with pytest.raises(PayloadTooLarge, match=r"max_batch_cost = 7"):
        pad.rows_per_part(8, max_batch_size=4, max_batch_cost=7)


# -- the batch ---------------------------------------------------------------------------------

def test_a_batch_is_padded_to_its_longest_member_with_the_generated_length_and_mask():
    a, b = ids(1, 2, start=1), ids(2, 3, start=10)
    shapes = [pad.measure(a, TOKENS), pad.measure(b, TOKENS, np.array([3, 1]))]
    merged = {t.name: t.data for t in pad.pad_batch([a, b], shapes, TOKENS)}
    np.testing.assert_array_equal(merged["IDS"], [[1, 2, -1], [10, 11, 12], [13, 14, 15]])
    np.testing.assert_array_equal(merged["LEN"], [[2], [3], [1]])
    assert merged["LEN"].dtype == np.int32
    np.testing.assert_array_equal(merged["MASK"], [[1, 1, 0], [1, 1, 1], [1, 0, 0]])
    assert merged["MASK"].dtype == np.bool_


def test_a_bucketed_batch_is_padded_to_its_bucket():
    a, b = ids(1, 5), ids(1, 6)
    shapes = [pad.measure(a, BUCKETED), pad.measure(b, BUCKETED)]
    merged = pad.pad_batch([a, b], shapes, BUCKETED)
    assert merged[0].data.shape == (2, 8)
    assert pad.elements(shapes) == (16, 11)


def test_inputs_that_are_not_padded_are_concatenated_and_inner_dims_are_kept():
    config = PaddedSpec(inputs=(PaddedInput("X", 1, 0.5),))
    a = [Tensor("X", "FP32", np.ones((1, 1, 2), np.float32)), Tensor("S", "FP32", np.zeros((1, 2), np.float32))]
    b = [Tensor("X", "FP32", np.ones((1, 2, 2), np.float32)), Tensor("S", "FP32", np.ones((1, 2), np.float32))]
    x, s = pad.pad_batch([a, b], [pad.measure(a, config), pad.measure(b, config)], config)
    np.testing.assert_array_equal(x.data[0], [[1, 1], [0.5, 0.5]])
    np.testing.assert_array_equal(s.data, [[0, 0], [1, 1]])


def test_outputs_that_follow_the_padded_length_are_checked_and_cut_back_and_pooled_ones_kept():
    hidden = Tensor("HIDDEN", "FP32", np.arange(12, dtype=np.float32).reshape(2, 3, 2))
    pooled = Tensor("POOLED", "FP32", np.ones((2, 1), np.float32))
    pad.check_outputs([hidden, pooled], 3, TOKENS)
    with pytest.raises(BadPredictorAnswer, match="should have 4 there"):
        pad.check_outputs([hidden], 4, TOKENS)
    trimmed = pad.trim([hidden, pooled], 2, TOKENS)
    np.testing.assert_array_equal(trimmed[0].data, hidden.data[:, :2])
    assert trimmed[1] is pooled


@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=12),
       buckets=st.sampled_from([(), (8, 16, 32, 40), (40,)]))
def test_padding_then_trimming_gives_every_part_back_exactly_its_rows(lengths, buckets):
    config = PaddedSpec(inputs=(PaddedInput("IDS", 1, 0),), buckets=buckets, outputs=(("IDS", 1),))
    parts = [ids(1, n, start=100 * i) for i, n in enumerate(lengths)]
    shapes = [pad.measure(part, config) for part in parts]
    merged = pad.pad_batch(parts, shapes, config)[0]
    assert merged.data.shape == (len(lengths), max(s.padded for s in shapes))
    assert not buckets or merged.data.shape[1] in buckets
    padded, real = pad.elements(shapes)
    assert (padded, real) == (merged.data.size, sum(lengths))
    for row, (part, shape) in enumerate(zip(parts, shapes, strict=True)):
        back = pad.trim([Tensor("IDS", "INT64", merged.data[row:row + 1])], shape.length, config)[0]
        np.testing.assert_array_equal(back.data, part[0].data)


def test_rows_of_different_lengths_are_padded_to_one_and_cut_back_to_their_own_the_same_way_for_instances():
    short, long = np.ones((1, 2, 3), np.int32), np.full((2, 4, 3), 7, np.int32)
    padded = pad.pad_rows([short, long], 1, 5, -1)  # one allocation: the parts one after another
    assert padded.shape == (3, 5, 3) and padded.dtype == np.int32
    np.testing.assert_array_equal(padded[0, :2], short[0])
    assert (padded[0, 2:] == -1).all() and (padded[1:, 4:] == -1).all()
    back = pad.cut_back(padded[0:1], 1, 2)
    np.testing.assert_array_equal(back, short)
    assert np.shares_memory(back, padded)  # a view, no copy
    # KServe v1's ragged instances are padded and their predictions cut back by the same two.
    assert (instances.pad_rows, instances.cut_back) == (pad.pad_rows, pad.cut_back)
