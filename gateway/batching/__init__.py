"""Batching: per-model queues that merge requests into batches for one executor each.

Modules, from the public face inwards:

* `scheduler`: `BatchScheduler`, the public API (`add_model` / `replace_model` /
  `remove_model` / `set_tenants` / `submit` and `enqueue` / `close` / `hurry`, and the
  figures its views read) and its threading rules; `Scheduler`, the protocol a worker's
  stand-in shares with it.
* `queue`: `ModelQueue`, one model's queue: admission, executor slots, deadlines,
  cancellation, shipping batches and answering their requests, abandoning on shutdown;
  `backlog`: what it holds waiting, and who gives way when it is full; `wakeups`: when it
  weighs its batches again (at the end of the loop's pass, at the policy's time).
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

Semantics
---------
* Requests merge only with requests of the same model and signature, in arrival order
  (see `merge.take_oldest_group` for the one exception: a part too big for the room left
  in a batch lets a smaller, later one of its group go first). With priority levels, a
  batch forms around the oldest part of the highest level queued and is filled in
  priority order, oldest first within a level; a long request's parts beyond its share
  (`long_request_rows`) wait a level lower (`admission.parts`).
* At most as many batches as the model's `slots` allow are at the executor at once
  (`max_inflight`, or learned, per predictor replica in rotation). Whenever a slot is
  free and a live request waits, the policy decides: ship now, or wait until a given time.
  A request arriving to less than a full batch is weighed at the end of the loop's
  current pass (`wakeups`), so the requests read in one pass leave together.
* When a batch returns, its requests are answered (their futures set) and the task that
  ran it runs the next batch its freed slot takes, in the same loop turn: the call is
  written before the answered clients wake, so the predictor never idles behind our own
  bookkeeping (a new task would start it a turn later, after all of them).
* Whether a request may join, at which level and with which deadline is `admission`'s
  (refusals: DeadlineExceeded before queueing, late, Overloaded beyond `max_queue`). A
  queued request whose deadline passes is answered DeadlineExceeded, never sent; one whose
  batch is at the executor is answered at its deadline too (see `executor`). A request
  whose caller goes away (its awaiting task is cancelled) is dropped and its rows never
  sent; one answered early leaves its parts behind, skipped when met.
* With tenants sharing the model, a batch is filled across those queued by their weights
  (`fairness`).
* What a row is belongs to the model's row layout (`layouts`), chosen with its settings:
  how a request is cut into parts and what they must agree on, what a batch costs (rows,
  padded elements or tokens beside `max_batch_size`), its inputs, the check of its
  outputs and each part's answer. A request keeps the layout that cut it across a reload.
* Abandoning a queue (model removed, gateway shutting down) answers everything queued
  with the given error and cancels batches in flight, whose requests get Unavailable.
* What becomes of each request and batch is told to the model's `stats.ModelStats`, one
  event at a time (arrived, refused, timed out, dropped, finished; a batch left): the
  queue counts nothing itself.

What the package must not know: HTTP, gRPC, any predictor protocol, or a tenant's keys.
An executor is any async callable that takes the merged input tensors and returns output
tensors with one row per input row; tensors and errors come from `wire`.
"""
