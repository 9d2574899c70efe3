"""Batching: per-model queues that merge requests into batches for one executor each.

Modules, from the public face inwards:

* `scheduler`: `BatchScheduler`, the public API (`add_model` / `replace_model` /
  `remove_model` / `set_tenants` / `submit` and `enqueue` / `close` / `hurry`, and the
  figures its views read) and its threading rules; `Scheduler`, the protocol a worker's
  stand-in shares with it.
* `queue`: `ModelQueue`, one model's queue: admission, executor slots, deadlines,
  cancellation, shipping batches and answering their requests, abandoning on shutdown;
  `backlog`: what it holds waiting, and who gives way when it is full.
* `layouts/`: what a row is, one layout per model (`PlainRows`, `PaddedRows`,
  `TextRows`): how a request is cut, what a batch costs, its inputs, the check of its
  outputs and each part's answer.
* `tenants` and `fairness`: the tenants the scheduler knows by name, their quotas and
  usage; a batch filled across them by weighted deficit round robin.
* `policies/`: when a queue ships: the `Policy` interface (`base`), `adaptive` (default,
  with its learned hold), `window` (KServe's) and `deadline` (for `slo_ms`), named in one
  table; `profile` (the learned latency per batch size) and `inflight` (`max_inflight =
  "auto"`) beside them, `load` (the autoscaling signal).
* `executor`: running one batch at the executor, and bisecting a batch it rejects.
* `merge` and `padding`: pure row arithmetic: splitting big requests, concatenating parts,
  slicing results back, reassembling split requests, choosing the next batch; lengths,
  buckets and padded batches.
* `request`: `BatchRequest`, the one shape in which a request reaches a scheduler, and
  `BatchResult`; a request while a queue holds it (`QueuedRequest`), the parts it travels in.
* `config`: `BatchingConfig`, a model's batching settings and their defaults, and
  `TenantPolicy`, what the scheduler knows of a tenant.
* `stats`: `ModelStats`, a model's counters and histograms and their one recorder (the
  queue and the executor tell it each event), and `StatsSnapshot`, the one projection
  of them that /metrics, the live page and Triton's statistics read; `observer`, the seam
  a tracer plugs into.

What the package must not know: HTTP, gRPC, any predictor protocol, or a tenant's keys.
An executor is any async callable that takes the merged input tensors and returns output
tensors with one row per input row; tensors and errors come from `wire`.
"""
