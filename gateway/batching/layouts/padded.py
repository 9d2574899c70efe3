"""`PaddedRows`: rows whose padded inputs vary in length along one dimension.

A request is measured (`padding.measure`: its length, the bucket it travels at, each row's
real length) and cut into parts of as many rows as one batch may hold at that padded
length (`max_batch_size`, and `max_batch_cost` padded elements). Requests of one bucket
(of any length, without buckets) share a signature; a batch costs rows x its longest
padded length, its inputs are padded to it with the generated inputs added
(`padding.pad_batch`), the outputs that follow the padded length must have it, and each
part's outputs are trimmed back to its own length. The arithmetic is `padding`'s; this
module says when it runs.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gateway.batching import padding as pad
from gateway.batching.config import PaddedSpec
from gateway.batching.fairness import FairShare
from gateway.batching.layouts.base import Cut, LaidPart, LaidPartT, with_agreed
from gateway.batching.merge import split_request, take_oldest_group
from wire.tensors import Tensor


@dataclass(frozen=True, slots=True, eq=False)
class PaddedRows:
    padding: PaddedSpec
    max_batch_size: int
    max_batch_cost: int

    def cut(self, inputs: list[Tensor], lengths: np.ndarray | None, agreed: tuple) -> Cut:
        shape = pad.measure(inputs, self.padding, lengths)
        rows = pad.rows_per_part(shape.padded, self.max_batch_size, self.max_batch_cost)
        pieces = split_request(inputs, rows)
        # The layout joins the signature: parts cut under other settings (before a reload)
        # never share a batch with these.
        signature = with_agreed((self, pad.signature(inputs, self.padding, shape)), agreed)
        shapes: list[pad.RowShape | None] = [shape.rows(start, rows) for start in range(0, len(shape.lengths), rows)]
        return Cut(pieces, shapes, [signature] * len(pieces))

    def take(self, pending: deque[LaidPartT], limit: int, leader: LaidPartT, by_level: bool,
             fair: FairShare | None = None) -> list[LaidPartT]:
        return take_oldest_group(pending, limit, leader, self.max_batch_cost, by_level=by_level, fair=fair)

    def tokens(self, rows: int, lengths: np.ndarray | None) -> int:
        return rows

    def batch_inputs(self, parts: Sequence[LaidPart]) -> list[Tensor]:
        return pad.pad_batch([part.inputs for part in parts], _shapes(parts), self.padding)

    def check_outputs(self, outputs: list[Tensor], parts: Sequence[LaidPart]) -> None:
        pad.check_outputs(outputs, pad.batch_length(_shapes(parts)), self.padding)

    def part_outputs(self, part: LaidPart, outputs: list[Tensor]) -> list[Tensor]:
        assert part.shape is not None  # cut measured every part
        return pad.trim(outputs, part.shape.length, self.padding)

    def elements(self, parts: Sequence[LaidPart]) -> tuple[int, int] | None:
        return pad.elements(_shapes(parts))


def _shapes(parts: Sequence[LaidPart]) -> list[pad.RowShape]:
    shapes = [part.shape for part in parts]
    assert all(shape is not None for shape in shapes)  # cut measured every part
    return shapes  # type: ignore[return-value]
