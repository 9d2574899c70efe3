"""ModelView: everything a reader may know of one model's batching, at one moment.

/metrics (`gateway.observe.metrics`), the live page (`gateway.observe.live`) and Triton's statistics
(`gateway.models.triton`) each render a model from its `ModelView` (`BatchScheduler.view`): the
counters and histograms (`stats.StatsSnapshot`), the queue's figures now (rows and requests
queued, batches in flight and the limit, the slots of one replica), the settings in force
and the load on the predictor fleet (`load.LoadSignal`). It is taken on the scheduler's
loop and immutable after, so a reader sees one consistent moment and never reaches into
the queue.

It holds the shape only: the scheduler fills it, the readers render it.
"""
from __future__ import annotations

from dataclasses import dataclass

from gateway.batching.config import BatchingConfig
from gateway.batching.load import LoadSignal
from gateway.batching.stats import StatsSnapshot


@dataclass(frozen=True, slots=True)
class ModelView:
    name: str
    config: BatchingConfig       # the settings in force (the latest re-tune's)
    stats: StatsSnapshot         # what the model's requests and batches did, counted since it started
    queued_rows: int             # rows of live requests not yet taken into a batch
    queued_requests: int         # requests with rows still queued (a split request counts once)
    inflight: int                # batches at the predictor
    inflight_limit: int          # batches it may have there now: its slots on every replica in rotation
    slots_per_replica: int       # max_inflight, or what "auto" has learned
    load: LoadSignal             # demand against the fleet's capacity
