"""What every row layout answers (`RowLayout`), and the shape of a request cut into parts
(`Cut`), of what a layout reads of a part (`LaidPart`). The package's docstring says
what each question means; this module holds only the vocabulary the layouts and the queue
share. It must not know any layout, nor a queued request (its future, its deadline).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np

from gateway.batching.fairness import FairShare
from gateway.batching.merge import Mergeable
from gateway.batching.padding import RowShape
from wire.tensors import Tensor

Restore = Callable[[list[Tensor]], list[Tensor]]
"""A request's joined answer, put back in the order its client sent the rows."""


@dataclass(slots=True)
class Cut:
    """A request cut into parts: part k is `pieces[k]`, of lengths `shapes[k]` (None where
    the layout measures nothing) and signature `signatures[k]`; `restore` undoes the
    layout's reordering of the rows (None: they travel as sent)."""
    pieces: list[list[Tensor]]
    shapes: list[RowShape | None]
    signatures: list[Hashable]
    restore: Restore | None = None


class LaidPart(Mergeable, Protocol):
    """What a layout reads of a queued part (`request.Part`): its tensors and its lengths."""

    @property
    def inputs(self) -> list[Tensor]:
        """The part's own rows of each input."""

    @property
    def shape(self) -> RowShape | None:
        """Its lengths, as `cut` measured them (None where the layout measures nothing)."""


LaidPartT = TypeVar("LaidPartT", bound=LaidPart)


class RowLayout(Protocol):
    """What the queue and the executor ask of a model's rows (see the package)."""

    def cut(self, inputs: list[Tensor], lengths: np.ndarray | None, agreed: tuple) -> Cut:
        """`inputs` (rows first, at least one) cut into parts; `lengths`: each row's own
        length where the model layer measured it; `agreed`: what else must be equal for
        two requests to share a batch (their parameters), () for nothing."""
        ...

    def take(self, pending: deque[LaidPartT], limit: int, leader: LaidPartT, by_level: bool,
             fair: FairShare | None = None) -> list[LaidPartT]:
        """Remove and return the next batch's parts from `pending`, formed around `leader`,
        at most `limit` rows (`by_level`: in priority order; `fair`: across tenants; see
        `merge.take_oldest_group`)."""
        ...

    def tokens(self, rows: int, lengths: np.ndarray | None) -> int:
        """What a request of `rows` rows (of real `lengths`) counts against its tenant's
        `tokens_per_minute`: its texts' tokens for a text model, else its rows."""
        ...

    def batch_inputs(self, parts: Sequence[LaidPart]) -> list[Tensor]:
        """The one call's input tensors for these parts, their rows in part order."""
        ...

    def check_outputs(self, outputs: list[Tensor], parts: Sequence[LaidPart]) -> None:
        """Raise BadPredictorAnswer for an answer this layout cannot cut back per part (the
        executor has already checked one row per input row)."""
        ...

    def part_outputs(self, part: LaidPart, outputs: list[Tensor]) -> list[Tensor]:
        """`part`'s own outputs, from its rows of the batch's outputs."""
        ...

    def elements(self, parts: Sequence[LaidPart]) -> tuple[int, int] | None:
        """A batch's (padded, real) elements along its padded length; None if not measured."""
        ...


def with_agreed(key: Hashable, agreed: tuple) -> Hashable:
    """A part's signature: its tensors' `key`, joined by what else must agree, if anything."""
    return (key, agreed) if agreed else key
