"""Row layouts: what one row of a model's batch is, and everything that follows from it.

Semantics
---------
A model's *row layout* is chosen from its batching settings when the model is added or
re-tuned (`layout_for`), and answers every question whose answer depends on what a row
is, so that the queue and the executor ask it instead of testing the model's settings:

* `cut`: a request's parts, each of consecutive rows (`Cut`): the tensors each travels
  with, its lengths where the layout measures rows (`padding.RowShape`), the signature
  that must agree for two parts to share a batch, and the order the rows travel in. A
  layout that reorders rows gives the request a `restore`, which puts the joined answer
  back in the client's order. `cut` raises InvalidInput or PayloadTooLarge for what can
  never be batched, before the request is counted or queued.
* `take`: the next batch from the queued parts, oldest first (or across tenants:
  `fairness`), within the batch's row limit and the layout's cost (rows alone, padded
  elements, or tokens).
* `tokens`: what a request counts against its tenant's `tokens_per_minute` (its texts'
  tokens, or its rows).
* `batch_inputs`: the input tensors of the one predictor call for a batch's parts.
* `check_outputs`: what the predictor's answer must hold beyond one row per input row.
* `part_outputs`: each part's own outputs, cut from the batch's (trimmed to its length).
* `elements`: a batch's padded and real elements, for the waste figures (None when the
  layout measures no lengths).

The layouts, one module each: `PlainRows` (`plain`: fixed-shape tensors and KServe v1
instances; no padding work at all), `PaddedRows` (`padded`: inputs with a variable
dimension, padded per batch, with buckets, generated inputs and outputs that follow the
padded length), `TextRows` (`texts`: one text a row, measured in tokens, sorted and cut
by bucket, costed by the longest or by the sum) and `PairRows` (`pairs`: one (query,
document) pair a row, a text row whose batch may be held to one query). Which one is chosen by the type of the
model's rows spec (`config.RowsSpec`, set by its kind): a new layout is a new module here, a
new spec, and one branch in `layout_for`.

Plain data in, plain data out: this package must not know futures, timers, slots or
policies (the queue's), nor HTTP, gRPC or predictor protocols.
"""
from __future__ import annotations

from gateway.batching.config import BatchingConfig, PaddedSpec, PairSpec, PlainSpec
from gateway.batching.layouts.base import Cut, Restore, RowLayout
from gateway.batching.layouts.padded import PaddedRows
from gateway.batching.layouts.pairs import PairRows
from gateway.batching.layouts.plain import PlainRows
from gateway.batching.layouts.texts import TextRows

__all__ = ["Cut", "PaddedRows", "PairRows", "PlainRows", "Restore", "RowLayout", "TextRows", "layout_for"]


def layout_for(config: BatchingConfig) -> RowLayout:
    """The row layout of a model's rows spec."""
    rows = config.rows
    if isinstance(rows, PlainSpec):
        return PlainRows(config.max_batch_size)
    if isinstance(rows, PaddedSpec):
        return PaddedRows(rows, config.max_batch_size, config.max_batch_cost)
    texts = TextRows(rows, config.max_batch_size, config.max_batch_cost)
    if isinstance(rows, PairSpec):
        return PairRows(texts, rows.query_input, rows.one_query)
    return texts
