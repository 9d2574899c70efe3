"""Padding and bucket arithmetic: how requests of different lengths share one batch.

Semantics
---------
* A model may declare inputs whose dimension `dim` (never the batch) varies between
  requests (`PaddedInput`). Every padded input of a request has the same size there: the
  request's *length*. Each row also has a *real length* (at most the request's length): the
  request's length for tensors, each instance's own for ragged KServe v1 instances, which
  the model layer pads to the longest instance before they get here.
* Without buckets, requests that differ only in their length share a signature and a
  batch, padded to the batch's longest member (*pad to longest*). With `buckets`
  (ascending), a request's *padded length* is the smallest bucket that holds its length;
  requests merge only within one bucket and the batch is padded to the bucket itself (a
  fixed shape per bucket, the waste bounded by the bucket spacing). A length beyond the
  largest bucket is refused (InvalidInput, 400), as is a length of 0.
* Padding fills with the input's declared `value`. A *generated* input (`GeneratedInput`)
  tells the model where the padding starts: "length" is each row's real length, shape
  [rows, 1]; "mask" is 1 for each row's real positions and 0 for its padding, shape
  [rows, padded length]. Clients never send a generated input.
* An output that *follows* the padded length (per token) comes back with that dimension
  padded; each part is cut back to its request's own length (`trim`). Other outputs
  (pooled) come back as they are. An output that should follow but does not have the
  batch's padded length there is the predictor's error (BadPredictorAnswer).
* The *cost* of a batch is rows x padded length (padded elements). `max_batch_cost` caps
  it beside `max_batch_size`: a request whose cost exceeds it is split into parts of
  `max_batch_cost // padded length` rows; a single row that costs more than
  `max_batch_cost` can never be sent and is refused (PayloadTooLarge, 413).
* Padding waste is padded elements / real elements (1.0 = none), counted per batch.
* *Texts* (an embedding or rerank model: `TextSpec`) pad nothing here: each row
  is one text whose length, its tokens, the model layer measured and the request carries.
  A request's length is its longest text; buckets, the cost cap and the waste count work
  on those lengths as on padded ones, and the predictor's tokenizer pads (or packs) the
  batch itself. With `summed`, a batch costs the sum of its rows' lengths instead of rows
  x the longest: the cost of a predictor that packs sequences instead of padding them.

Plain data in, plain data out, as `merge`: this module must not know futures, queues,
policies, executors, or anything beyond the tensors and the rows spec (`PaddedSpec`, `TextSpec`).
"""
from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gateway.batching.config import PaddedSpec, TextSpec
from wire.errors import BadPredictorAnswer, InvalidInput, PayloadTooLarge
from wire.tensors import NUMPY_DTYPES, Tensor

BUCKETS_KEY = "batching.buckets"
COST_KEY = "batching.max_batch_cost"


@dataclass(frozen=True, slots=True)
class RowShape:
    """The lengths of one queued part: its tensors' `length` along the padded dims, each
    row's real `lengths`, and the `padded` length it travels at alone; `shared`: what a
    batch holding it pays once beside its rows, whatever their number (a rerank query sent
    once with its documents), out of the cost cap."""
    length: int
    padded: int
    lengths: np.ndarray  # int64, one per row
    shared: int = 0

    def rows(self, start: int, count: int) -> RowShape:
        """The shape of rows start..start+count (a part of a split request)."""
        return RowShape(self.length, self.padded, self.lengths[start:start + count], self.shared)


def measure(inputs: list[Tensor], padding: PaddedSpec | TextSpec, lengths: np.ndarray | None = None) -> RowShape:
    """A request's length, padded length and rows' real lengths (`lengths`: each row's, when
    they are not all the request's length). Raises InvalidInput for what cannot be padded."""
    if isinstance(padding, TextSpec):  # texts: the lengths are their tokens, measured by the model's kind
        if lengths is None or len(lengths) != len(inputs[0].data) or not len(lengths):
            raise InvalidInput("the request's texts were not measured in tokens")
        length = int(lengths.max())
        return RowShape(length, padded_length(length, padding.buckets), lengths)
    by_name = {t.name: t for t in inputs}
    sizes = {}
    for spec in padding.inputs:
        tensor = by_name.get(spec.name)
        if tensor is None:
            raise InvalidInput(f"the request has no input '{spec.name}', which the model pads")
        if tensor.data.ndim <= spec.dim:
            raise InvalidInput(f"input '{spec.name}' has shape {list(tensor.data.shape)}: it has no dimension "
                               f"{spec.dim}, the one declared variable (pad.dim)")
        sizes[spec.name] = tensor.data.shape[spec.dim]
    length = next(iter(sizes.values()))
    if any(size != length for size in sizes.values()):
        raise InvalidInput(f"the padded inputs must have one length per request; got {sizes}")
    if length == 0:
        raise InvalidInput("a request of length 0 along its variable dimension cannot be padded")
    rows = len(inputs[0].data)
    if lengths is None:
        lengths = np.full(rows, length, dtype=np.int64)
    return RowShape(length, padded_length(length, padding.buckets), lengths)


def padded_length(length: int, buckets: Sequence[int]) -> int:
    """The length a request of `length` travels at: the smallest bucket that holds it, or
    itself without buckets."""
    if not buckets:
        return length
    index = bisect_left(buckets, length)
    if index == len(buckets):
        raise InvalidInput(f"length {length} is beyond the largest bucket, {buckets[-1]} ({BUCKETS_KEY}): "
                           f"send at most {buckets[-1]}")
    return buckets[index]


def signature(inputs: list[Tensor], padding: PaddedSpec | TextSpec, shape: RowShape) -> tuple:
    """What must agree for padded requests to share a batch: `wire.tensors.signature_key`
    with each padded dimension replaced by the bucket (any length: -1, without buckets)."""
    padded = padding.inputs if isinstance(padding, PaddedSpec) else ()
    dims = {spec.name: spec.dim - 1 for spec in padded}  # in the shape without the batch
    key = shape.padded if padding.buckets else -1
    tensors = tuple((t.name, t.datatype, _with(t.data.shape[1:], dims.get(t.name), key)) for t in inputs)
    return tensors if padded else (*tensors, key)  # texts: the bucket joins the key


def _with(shape: tuple[int, ...], index: int | None, value: int) -> tuple[int, ...]:
    return shape if index is None else (*shape[:index], value, *shape[index + 1:])


def rows_per_part(padded: int, max_batch_size: int, max_batch_cost: int) -> int:
    """The most rows of this padded length one batch may hold."""
    if not max_batch_cost:
        return max_batch_size
    rows = max_batch_cost // padded
    if rows < 1:
        raise PayloadTooLarge(f"one row of padded length {padded} costs {padded} padded elements, more than a "
                              f"whole batch may ({COST_KEY} = {max_batch_cost}): send shorter inputs")
    return min(max_batch_size, rows)


def text_parts(lengths: np.ndarray, padding: TextSpec, max_batch_size: int,
               max_batch_cost: int) -> tuple[np.ndarray | None, list[RowShape]]:
    """A request of several texts cut into parts of similar length: the order that sorts
    its rows by length (None when they already are), and the consecutive parts of the
    sorted rows, each within one bucket (any length, without buckets) and no larger than
    one batch may hold at its longest. So a list's short texts never pay for its long ones'
    padding, and each part batches with other requests' texts of its bucket."""
    order = np.argsort(lengths, kind="stable")
    if bool(np.all(order[:-1] < order[1:])):
        order_or_none, ordered = None, lengths
    else:
        order_or_none, ordered = order, lengths[order]
    shapes: list[RowShape] = []
    start = 0
    while start < len(ordered):
        bucket = padded_length(int(ordered[start]), padding.buckets)
        rows_per_part(bucket, max_batch_size, max_batch_cost)  # a text too long for any batch is refused
        end = start + 1
        while end < len(ordered):
            longest = int(ordered[end])
            padded = padded_length(longest, padding.buckets)
            if (padding.buckets and padded != bucket) or end + 1 - start > rows_per_part(padded, max_batch_size,
                                                                                         max_batch_cost):
                break
            end += 1
        longest = int(ordered[end - 1])
        shapes.append(RowShape(longest, padded_length(longest, padding.buckets), ordered[start:end]))
        start = end
    return order_or_none, shapes


def cost(rows: int, padded: int) -> int:
    """A batch's cost: its padded elements (`summed`: the sum of the rows' lengths instead)."""
    return rows * padded


def batch_length(shapes: Sequence[RowShape]) -> int:
    """The length a batch of these parts is padded to (one bucket, or the longest)."""
    return max(shape.padded for shape in shapes)


def pad_batch(groups: Sequence[list[Tensor]], shapes: Sequence[RowShape], padding: PaddedSpec) -> list[Tensor]:
    """One tensor per input for the whole batch, each padded input filled with its pad value
    up to the batch length, then the generated inputs. Each padded input is one allocation
    and one copy per part; the others are concatenated as `merge.concatenate` does."""
    padded = batch_length(shapes)
    specs = {spec.name: spec for spec in padding.inputs}
    merged = []
    for i, first in enumerate(groups[0]):
        spec = specs.get(first.name)
        if spec is None:
            data = np.concatenate([group[i].data for group in groups]) if len(groups) > 1 else first.data
        else:
            data = pad_rows([group[i].data for group in groups], spec.dim, padded, spec.value)
        merged.append(Tensor(first.name, first.datatype, data))
    lengths = np.concatenate([shape.lengths for shape in shapes])
    merged += [generated_input(spec.name, spec.datatype, spec.kind, lengths, padded) for spec in padding.generated]
    return merged


def pad_rows(parts: Sequence[np.ndarray], dim: int, length: int, value: Any) -> np.ndarray:
    """`parts` (rows first, alike but along `dim`) one after another in one array, each
    filled with `value` along `dim` up to `length`: one allocation, one copy per part. The
    one way rows of different lengths are padded, a batch's parts or ragged v1 instances."""
    first = parts[0]
    shape = list(first.shape)
    shape[0], shape[dim] = sum(len(part) for part in parts), length
    data = np.full(shape, value, dtype=first.dtype)
    offset = 0
    for part in parts:
        where = [slice(offset, offset + len(part))] + [slice(None)] * (part.ndim - 1)
        where[dim] = slice(0, part.shape[dim])
        data[tuple(where)] = part
        offset += len(part)
    return data


def cut_back(data: np.ndarray, dim: int, length: int) -> np.ndarray:
    """`data` cut back to its first `length` along `dim` (a numpy view): the one way padded
    rows are trimmed, a part's outputs or a ragged instance's predictions."""
    where = [slice(None)] * data.ndim
    where[dim] = slice(0, length)
    return data[tuple(where)]


def generated_input(name: str, datatype: str, kind: str, lengths: np.ndarray, padded: int) -> Tensor:
    """The input the gateway generates from the rows' real lengths: "length" or "mask"."""
    dtype = NUMPY_DTYPES[datatype]
    if kind == "length":
        return Tensor(name, datatype, lengths.reshape(-1, 1).astype(dtype))
    return Tensor(name, datatype, (np.arange(padded) < lengths[:, None]).astype(dtype))


def check_outputs(outputs: list[Tensor], padded: int, padding: PaddedSpec) -> None:
    """Every output that follows the padded length has the batch's padded length there."""
    follows = dict(padding.outputs)
    for tensor in outputs:
        dim = follows.get(tensor.name)
        if dim is not None and (tensor.data.ndim <= dim or tensor.data.shape[dim] != padded):
            raise BadPredictorAnswer(
                f"output '{tensor.name}' follows the padded length at dimension {dim} (follows_pad), so it should "
                f"have {padded} there; the predictor answered shape {list(tensor.data.shape)}")


def trim(outputs: list[Tensor], length: int, padding: PaddedSpec) -> list[Tensor]:
    """A part's outputs with every output that follows the padded length cut back to the
    part's own `length` (numpy views); the others as they are."""
    follows = dict(padding.outputs)
    trimmed = []
    for tensor in outputs:
        dim = follows.get(tensor.name)
        if dim is not None:
            tensor = Tensor(tensor.name, tensor.datatype, cut_back(tensor.data, dim, length))
        trimmed.append(tensor)
    return trimmed


def elements(shapes: Sequence[RowShape], summed: bool = False) -> tuple[int, int]:
    """A batch's (padded, real) elements along the padded length: waste is their ratio
    (1.0 for a predictor that packs, `summed`)."""
    rows = sum(len(shape.lengths) for shape in shapes)
    real = int(sum(int(shape.lengths.sum()) for shape in shapes))
    return (real if summed else cost(rows, batch_length(shapes))), real
