"""Merge and split arithmetic, without an event loop: splitting, concatenating, slicing back,
reassembling, and choosing the next batch from a queue."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from gateway.batching.merge import Reassembly, concatenate, slice_result, split_request, take_oldest_group
from wire.tensors import Tensor


def tensors(start: int, count: int) -> list[Tensor]:
    """Two inputs of `count` rows, numbered from `start`, of different dtypes and widths."""
    numbers = np.arange(start, start + count)
    return [Tensor("A", "FP32", np.stack([numbers, -numbers], axis=1).astype(np.float32)),
            Tensor("B", "INT64", numbers.reshape(count, 1).astype(np.int64))]


def assert_same(got: list[Tensor], expected: list[Tensor]) -> None:
    assert [(t.name, t.datatype) for t in got] == [(t.name, t.datatype) for t in expected]
    for g, e in zip(got, expected, strict=True):
        assert g.data.dtype == e.data.dtype
        np.testing.assert_array_equal(g.data, e.data)


# -- split_request ---------------------------------------------------------------------------

def test_a_request_that_fits_is_its_own_part_uncopied():
    inputs = tensors(0, 4)
    parts = split_request(inputs, 4)
    assert len(parts) == 1 and parts[0] is inputs


def test_a_large_request_splits_into_capped_parts_in_order():
    parts = split_request(tensors(0, 10), 4)
    assert [len(p[0].data) for p in parts] == [4, 4, 2]
    for part, start in zip(parts, (0, 4, 8), strict=True):
        assert_same(part, tensors(start, len(part[0].data)))


def test_an_exact_multiple_splits_into_full_parts():
    assert [len(p[1].data) for p in split_request(tensors(0, 8), 4)] == [4, 4]


# -- concatenate and slice_result ------------------------------------------------------------

def test_a_lone_group_is_the_batch_itself():
    group = tensors(0, 3)
    assert concatenate([group]) is group


def test_groups_concatenate_per_input_in_order():
    batch = concatenate([tensors(0, 2), tensors(2, 3), tensors(5, 1)])
    assert_same(batch, tensors(0, 6))


def test_a_batch_result_slices_back_into_each_parts_rows():
    sliced = slice_result(tensors(0, 6), [1, 3, 2])
    assert len(sliced) == 3
    assert_same(sliced[0], tensors(0, 1))
    assert_same(sliced[1], tensors(1, 3))
    assert_same(sliced[2], tensors(4, 2))


@given(sizes=st.lists(st.integers(min_value=1, max_value=9), min_size=1, max_size=8),
       cap=st.integers(min_value=1, max_value=10))
def test_split_then_concatenate_gives_back_the_request(sizes, cap):
    request = tensors(100, sum(sizes))
    parts = split_request(request, cap)
    assert all(len(p[0].data) <= cap for p in parts)
    assert_same(concatenate(parts), request)
    # And slicing a merged batch by part sizes inverts the merge.
    groups = [tensors(sum(sizes[:i]), size) for i, size in enumerate(sizes)]
    for got, expected in zip(slice_result(concatenate(groups), sizes), groups, strict=True):
        assert_same(got, expected)


# -- Reassembly ------------------------------------------------------------------------------

def test_parts_answered_out_of_order_are_joined_in_part_order():
    answers = Reassembly(3)
    assert answers.add(2, tensors(8, 2)) is None
    assert answers.add(0, tensors(0, 4)) is None
    whole = answers.add(1, tensors(4, 4))
    assert whole is not None
    assert_same(whole, tensors(0, 10))


def test_a_single_part_answer_is_the_whole_answer():
    outputs = tensors(0, 2)
    assert Reassembly(1).add(0, outputs) is outputs


# -- take_oldest_group -----------------------------------------------------------------------

@dataclass
class Queued:
    name: str
    size: int
    signature: str = "a"
    live: bool = True
    level: int = 0
    padded: int = 1    # the length it travels at alone (longest text, in tokens)
    elements: int = 0  # its rows' own lengths added up
    tenant: str = ""   # whose request (read only by fair batches: tests/batching/test_fairness.py)


def names(parts) -> list[str]:
    return [p.name for p in parts]


def test_the_oldest_group_is_taken_oldest_first_up_to_the_cap():
    pending = deque([Queued("1", 2), Queued("2", 1), Queued("3", 1), Queued("4", 1)])
    assert names(take_oldest_group(pending, 4)) == ["1", "2", "3"]
    assert names(pending) == ["4"]


def test_other_signatures_keep_their_place():
    pending = deque([Queued("1", 1), Queued("x", 1, "b"), Queued("2", 1), Queued("y", 1, "b")])
    assert names(take_oldest_group(pending, 4)) == ["1", "2"]
    assert names(pending) == ["x", "y"]


def test_a_part_too_big_for_the_room_left_keeps_its_place_and_a_smaller_one_joins():
    pending = deque([Queued("1", 3), Queued("big", 3), Queued("small", 1), Queued("after", 1)])
    assert names(take_oldest_group(pending, 4)) == ["1", "small"]
    assert names(pending) == ["big", "after"]


def test_by_level_the_group_is_taken_highest_level_first_and_lower_levels_fill_the_room():
    pending = deque([Queued("low-1", 1, level=2), Queued("high-1", 2, level=1), Queued("x", 1, "b", level=1),
                     Queued("low-2", 2, level=2), Queued("high-2", 1, level=1), Queued("low-3", 1, level=2)])
    leader = pending[1]
    # high-1 and high-2 (3 rows); low-1 fills the last row; low-2 (2 rows) no longer fits.
    assert names(take_oldest_group(pending, 4, leader, by_level=True)) == ["high-1", "high-2", "low-1"]
    assert names(pending) == ["x", "low-2", "low-3"]  # the rest keep their order


def test_parts_no_longer_live_are_dropped_and_never_taken():
    pending = deque([Queued("gone", 1, "b", live=False), Queued("1", 1), Queued("gone too", 1, live=False),
                     Queued("2", 1)])
    assert names(take_oldest_group(pending, 4)) == ["1", "2"]  # the signature is the oldest *live* one's
    assert names(pending) == []
    assert take_oldest_group(deque([Queued("gone", 1, live=False)]), 4) == []


def test_a_cost_cap_bounds_rows_times_the_longest_and_a_shorter_part_may_still_join():
    pending = deque([Queued("1", 2, padded=100), Queued("long", 2, padded=300), Queued("short", 1, padded=50)])
    # 1 + long: 4 rows x 300 = 1200 > 1000; 1 + short: 3 x 100 = 300.
    assert names(take_oldest_group(pending, 8, max_cost=1000)) == ["1", "short"]
    assert names(pending) == ["long"]
    assert names(take_oldest_group(pending, 8, max_cost=10)) == ["long"]  # a first part always goes: it was split to fit


def test_summed_the_cap_bounds_the_rows_own_lengths_added_up():
    # What a predictor that packs sequences pays: 60 + 300 + 100 = 460 fits 500, though
    # padded to the longest the three would cost 3 rows x 300 = 900.
    pending = deque([Queued("1", 1, padded=60, elements=60), Queued("2", 1, padded=300, elements=300),
                     Queued("3", 1, padded=100, elements=100), Queued("4", 1, padded=50, elements=50)])
    assert names(take_oldest_group(pending, 8, max_cost=500, summed=True)) == ["1", "2", "3"]
    assert names(take_oldest_group(deque(pending), 8, max_cost=500)) == ["4"]


def test_by_level_the_cost_cap_holds_too():
    pending = deque([Queued("low", 1, padded=400, level=2), Queued("high", 1, padded=100, level=1),
                     Queued("high-long", 1, padded=500, level=1)])
    assert names(take_oldest_group(pending, 8, pending[1], max_cost=800, by_level=True)) == ["high", "low"]


queued_parts = st.lists(st.tuples(st.integers(min_value=1, max_value=5), st.sampled_from("ab"), st.booleans()),
                        max_size=20)


@given(spec=queued_parts, limit=st.integers(min_value=5, max_value=12))
def test_taking_a_batch_keeps_the_cap_one_signature_and_the_order(spec, limit):
    before = [Queued(str(i), size, signature, live) for i, (size, signature, live) in enumerate(spec)]
    pending = deque(before)
    taken = take_oldest_group(pending, limit)
    assert sum(p.size for p in taken) <= limit
    assert all(p.live for p in taken)
    live = [p for p in before if p.live]
    if live:
        assert taken and {p.signature for p in taken} == {live[0].signature}
        assert taken[0] is live[0]
    else:
        assert taken == []
    # Taken parts keep their relative order; the rest keep theirs, except dropped dead ones
    # met before the scan stopped.
    assert names(taken) == [p.name for p in before if p in taken]
    assert names(pending) == [p.name for p in before if p not in taken and p in pending]
    assert {p.name for p in pending} >= {p.name for p in live if p not in taken}
