"""`TextRows`: one text a row (an embedding model's BYTES input), each measured in tokens.

The model layer measured each text (`BatchRequest.lengths`); nothing is padded here, the
predictor's tokenizer pads or packs the batch itself. A request of several texts is sorted
by length and cut by bucket (`padding.text_parts`), so that each part batches with other
requests' texts of its own bucket and a list's short texts never pay for its long ones;
its answer is put back in the client's order once every part is in. A batch costs its
rows x its longest text (`token_cost = "longest"`) or its texts' tokens added up
(`"sum"`), within `max_batch_tokens` less what every batch of them pays once (`shared`: the
query of a one-query rerank request, `pairs`): one text longer than that can never be sent
and is refused (413) naming that key, before any bucket is looked up.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from gateway.batching import padding as pad
from gateway.batching.config import TextSpec
from gateway.batching.fairness import FairShare
from gateway.batching.layouts.base import Cut, LaidPart, LaidPartT, Restore, with_agreed
from gateway.batching.merge import concatenate, take_oldest_group
from wire.errors import InvalidInput, PayloadTooLarge
from wire.tensors import Tensor

TOKENS_KEY = "batching.max_batch_tokens"


@dataclass(frozen=True, slots=True, eq=False)
class TextRows:
    padding: TextSpec
    max_batch_size: int
    max_batch_cost: int  # tokens (the model's max_batch_tokens)

    def cut(self, inputs: list[Tensor], lengths: np.ndarray | None, agreed: tuple, shared: int = 0) -> Cut:
        """See `RowLayout.cut`; `shared`: tokens every batch of these rows pays once beside
        them, out of `max_batch_tokens` (a one-query rerank request's query: `pairs`)."""
        if lengths is None or len(lengths) != len(inputs[0].data):
            raise InvalidInput("the request's texts were not measured in tokens")
        room = self.room(shared)
        longest = int(lengths.max())
        if self.max_batch_cost and longest + shared > self.max_batch_cost:
            raise PayloadTooLarge(f"a text of {longest} tokens is longer than a whole batch may hold ({TOKENS_KEY} = "
                                  f"{self.max_batch_cost}): send shorter texts")
        if len(lengths) == 1:
            shape = pad.measure(inputs, self.padding, lengths)
            pad.rows_per_part(shape.padded, self.max_batch_size, room)
            shape = replace(shape, shared=shared) if shared else shape
            return Cut([inputs], [shape], [self._signature(inputs, shape, agreed)])
        order, shapes = pad.text_parts(lengths, self.padding, self.max_batch_size, room)
        if shared:
            shapes = [replace(shape, shared=shared) for shape in shapes]
        restore: Restore | None = None
        if order is not None:
            inputs = [Tensor(t.name, t.datatype, t.data[order]) for t in inputs]
            restore = _restore_order(order)
        pieces, start = [], 0
        for shape in shapes:
            rows = len(shape.lengths)
            pieces.append([Tensor(t.name, t.datatype, t.data[start:start + rows]) for t in inputs])
            start += rows
        signatures = [self._signature(piece, shape, agreed) for piece, shape in zip(pieces, shapes, strict=True)]
        return Cut(pieces, list(shapes), signatures, restore)

    def _signature(self, piece: list[Tensor], shape: pad.RowShape, agreed: tuple) -> object:
        # The layout joins it: parts cut under other settings (before a reload) never share a batch;
        # and what a batch pays once: the parts of a signature share it (see `take`).
        return with_agreed((self, pad.signature(piece, self.padding, shape), shape.shared), agreed)

    def room(self, shared: int) -> int:
        """The tokens a batch's rows may cost when it pays `shared` once beside them (0: no cap)."""
        return max(self.max_batch_cost - shared, 1) if self.max_batch_cost else 0

    def take(self, pending: deque[LaidPartT], limit: int, leader: LaidPartT, by_level: bool,
             fair: FairShare | None = None) -> list[LaidPartT]:
        shared = leader.shape.shared if leader.shape is not None else 0  # its whole group's: in the signature
        return take_oldest_group(pending, limit, leader, self.room(shared), by_level=by_level,
                                 summed=self.padding.summed, fair=fair)

    def tokens(self, rows: int, lengths: np.ndarray | None) -> int:
        return int(lengths.sum()) if lengths is not None else rows

    def batch_inputs(self, parts: Sequence[LaidPart]) -> list[Tensor]:
        return concatenate([part.inputs for part in parts])  # the predictor's tokenizer pads

    def check_outputs(self, outputs: list[Tensor], parts: Sequence[LaidPart]) -> None:
        return None  # one vector per text: nothing follows a padded length

    def part_outputs(self, part: LaidPart, outputs: list[Tensor]) -> list[Tensor]:
        return outputs

    def elements(self, parts: Sequence[LaidPart]) -> tuple[int, int] | None:
        shapes = [part.shape for part in parts if part.shape is not None]
        return pad.elements(shapes, self.padding.summed)


def _restore_order(order: np.ndarray) -> Restore:
    """The answer's rows, travelled in `order`, put back in the order they were sent."""
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))

    def restore(whole: list[Tensor]) -> list[Tensor]:
        return [Tensor(t.name, t.datatype, t.data[inverse]) for t in whole]

    return restore
