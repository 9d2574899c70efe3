"""Batching: per-model queues that merge requests into batches for one executor each.

Modules, from the public face inwards:

* `scheduler`: `BatchScheduler`, the public API (add_model / remove_model / submit /
  submit_threadsafe / stats / close / hurry) and its threading rules.
* `queue`: `ModelQueue`, one model's queue: executor slots, deadlines, the bounded queue,
  cancellation, shipping batches and answering their requests, abandoning on shutdown.
* `policies/`: when a queue ships: the `Policy` interface (`base`), `adaptive` (default,
  with the learned hold `ReturnTracker`) and `window` (KServe's), named in one table.
* `executor`: running one batch at the executor, and bisecting a batch it rejects.
* `merge`: pure row arithmetic: splitting big requests, concatenating parts, slicing
  results back, reassembling split requests, choosing the next batch.
* `request`: `BatchRequest`, the one shape in which a request reaches a scheduler, and
  `BatchResult`; a request while a queue holds it (`QueuedRequest`), the parts it travels in.
* `config`: `BatchingConfig`, a model's batching settings and their defaults.
* `stats`: `ModelStats`, a model's counters and histograms and their one recorder (the
  queue and the executor tell it each event), and `StatsSnapshot`, the one projection
  of them that /metrics, the live page and Triton's statistics read.

What the package must not know: HTTP, gRPC, or any predictor protocol. An executor is
any async callable that takes the merged input tensors and returns output tensors with
one row per input row; tensors and errors come from `wire`.
"""
