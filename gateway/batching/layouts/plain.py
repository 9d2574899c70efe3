"""`PlainRows`: rows of fixed shape (OIP tensors, KServe v1 instances, uploads).

A request is one part, or parts of at most `max_batch_size` rows (numpy views), all of its
signature (`wire.tensors.signature_key`: names, datatypes, the shape after the batch
dimension). A batch costs its rows; its inputs are one `numpy.concatenate` per input; each
part's outputs are its consecutive rows. Nothing is measured, padded or trimmed.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gateway.batching.fairness import FairShare
from gateway.batching.layouts.base import Cut, LaidPart, LaidPartT, with_agreed
from gateway.batching.merge import concatenate, split_request, take_oldest_group
from wire.tensors import Tensor, signature_key


@dataclass(frozen=True, slots=True, eq=False)
class PlainRows:
    max_batch_size: int

    def cut(self, inputs: list[Tensor], lengths: np.ndarray | None, agreed: tuple) -> Cut:
        pieces = split_request(inputs, self.max_batch_size)
        signature = with_agreed(signature_key(inputs), agreed)  # the parts of one request all agree
        return Cut(pieces, [None] * len(pieces), [signature] * len(pieces))

    def take(self, pending: deque[LaidPartT], limit: int, leader: LaidPartT, by_level: bool,
             fair: FairShare | None = None) -> list[LaidPartT]:
        return take_oldest_group(pending, limit, leader, by_level=by_level, fair=fair)

    def tokens(self, rows: int, lengths: np.ndarray | None) -> int:
        return rows

    def batch_inputs(self, parts: Sequence[LaidPart]) -> list[Tensor]:
        return concatenate([part.inputs for part in parts])

    def check_outputs(self, outputs: list[Tensor], parts: Sequence[LaidPart]) -> None:
        return None  # one row per input row is all a plain answer must hold

    def part_outputs(self, part: LaidPart, outputs: list[Tensor]) -> list[Tensor]:
        return outputs

    def elements(self, parts: Sequence[LaidPart]) -> tuple[int, int] | None:
        return None
