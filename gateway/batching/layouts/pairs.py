"""`PairRows`: one (query, document) pair a row (a rerank model's two BYTES inputs), each
measured in tokens: its lengths are [rows, 2], each pair's query's tokens and its
document's (or [rows], each pair's tokens whole, nothing known to be shared).

A pair is a text row in everything but two things, so this layout is `TextRows` (sorted and
cut by bucket, costed within `max_batch_tokens` by the longest or by the sum, put back in the
client's order) with two rules added for a predictor that takes one query per call
(`one_query`, Cohere's rerank shape):

- the query joins each part's signature, so a batch holds the pairs of one query only.
  Requests that ask the same query still merge, and a request whose rows ask several (an
  OIP client's) is cut by query first, its answer put back in its order;
- the call carries that query once, so a batch costs its documents (by the longest or by the
  sum, and bucketed by their lengths) plus the query's tokens once, within
  `max_batch_tokens` (`RowShape.shared`): a long query never makes each document a batch of
  its own.

Without `one_query` (vLLM's score API, an OIP cross-encoder, the simulated reranker) pairs of
any queries share a batch, and each pair costs its query's tokens plus its document's: the
predictor encodes the query again with every document.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from gateway.batching.fairness import FairShare
from gateway.batching.layouts.base import Cut, LaidPart, LaidPartT, Restore
from gateway.batching.layouts.texts import TOKENS_KEY, TextRows
from wire.errors import InvalidInput, PayloadTooLarge
from wire.tensors import Tensor


@dataclass(frozen=True, slots=True, eq=False)
class PairRows:
    texts: TextRows      # how the pairs are measured, cut, costed and joined
    query_input: str     # the input holding each row's query
    one_query: bool      # a batch holds the pairs of one query (the predictor takes one per call)

    def cut(self, inputs: list[Tensor], lengths: np.ndarray | None, agreed: tuple) -> Cut:
        if lengths is None or len(lengths) != len(inputs[0].data):
            raise InvalidInput("the request's pairs were not measured in tokens")
        if not self.one_query:
            return self.texts.cut(inputs, lengths.sum(axis=1) if lengths.ndim == 2 else lengths, agreed)
        groups = self._rows_by_query(inputs)
        if len(groups) == 1:
            query = next(iter(groups))
            return self._cut_one_query(inputs, lengths, agreed, query)
        cuts, sizes = [], []
        for query, rows in groups.items():
            index = np.asarray(rows, dtype=np.intp)
            cuts.append(self._cut_one_query([Tensor(t.name, t.datatype, t.data[index]) for t in inputs],
                                            lengths[index], agreed, query))
            sizes.append(len(rows))
        order = np.concatenate([np.asarray(rows, dtype=np.intp) for rows in groups.values()])
        return Cut([piece for cut in cuts for piece in cut.pieces], [shape for cut in cuts for shape in cut.shapes],
                   [signature for cut in cuts for signature in cut.signatures],
                   _restore_groups([cut.restore for cut in cuts], sizes, order))

    def _cut_one_query(self, inputs: list[Tensor], lengths: np.ndarray, agreed: tuple, query: Hashable) -> Cut:
        """The pairs of one query, costed as the call carries them: each document, and the
        query once a batch (its tokens the largest any of its rows was measured at)."""
        if lengths.ndim != 2:
            return self.texts.cut(inputs, lengths, (*agreed, query))
        shared, documents = int(lengths[:, 0].max()), lengths[:, 1]
        cost = self.texts.max_batch_cost
        if cost and shared + int(documents.max()) > cost:
            longest = int(documents.max())
            raise PayloadTooLarge(f"a pair of {shared + longest} tokens (the query's {shared} and the document's "
                                  f"{longest}) is longer than a whole batch may hold ({TOKENS_KEY} = {cost}): send a "
                                  f"shorter query or shorter documents")
        return self.texts.cut(inputs, documents, (*agreed, query), shared=shared)

    def _rows_by_query(self, inputs: list[Tensor]) -> dict[Hashable, list[int]]:
        query = next((t for t in inputs if t.name == self.query_input), None)
        if query is None:
            raise InvalidInput(f"the request has no input '{self.query_input}', the query of each pair")
        groups: dict[Hashable, list[int]] = {}
        for row, value in enumerate(query.data.reshape(len(query.data), -1)[:, 0].tolist()):
            groups.setdefault(value, []).append(row)
        return groups

    def take(self, pending: deque[LaidPartT], limit: int, leader: LaidPartT, by_level: bool,
             fair: FairShare | None = None) -> list[LaidPartT]:
        return self.texts.take(pending, limit, leader, by_level, fair)

    def tokens(self, rows: int, lengths: np.ndarray | None) -> int:
        return self.texts.tokens(rows, lengths)

    def batch_inputs(self, parts: Sequence[LaidPart]) -> list[Tensor]:
        return self.texts.batch_inputs(parts)

    def check_outputs(self, outputs: list[Tensor], parts: Sequence[LaidPart]) -> None:
        return None  # one score per pair

    def part_outputs(self, part: LaidPart, outputs: list[Tensor]) -> list[Tensor]:
        return outputs

    def elements(self, parts: Sequence[LaidPart]) -> tuple[int, int] | None:
        return self.texts.elements(parts)


def _restore_groups(restores: list[Restore | None], sizes: list[int], order: np.ndarray) -> Restore:
    """The joined answer of a request cut by query (group after group, each in its own part
    order) put back in the order its client sent the rows."""
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    bounds = np.cumsum([0, *sizes])

    def restore(whole: list[Tensor]) -> list[Tensor]:
        groups = []
        for restore_group, start, end in zip(restores, bounds[:-1], bounds[1:], strict=True):
            group = [Tensor(t.name, t.datatype, t.data[start:end]) for t in whole]
            groups.append(restore_group(group) if restore_group is not None else group)
        joined = [Tensor(t.name, t.datatype, np.concatenate([group[i].data for group in groups]))
                  for i, t in enumerate(whole)]
        return [Tensor(t.name, t.datatype, t.data[inverse]) for t in joined]

    return restore
