"""Several protocol processes that batch as one (`serve --workers N`).

N processes serve the same HTTP and gRPC ports (SO_REUSEPORT: the kernel spreads
connections). One of them, the batcher, also holds what decides batches: the scheduler
(with the tenants' quotas), the predictors' clients that run them, and the stats every
view of the gateway reads; it serves clients of its own like the others. The N - 1 workers
parse each protocol, convert requests to their models' batch form as one process would,
and hand the tensors to the batcher over a Unix socket; each gets back exactly its own
rows. So `max_batch_size`, `max_queue`, `max_inflight` (fixed or auto), every policy
decision and every tenant's quota hold for the whole gateway, and requests that arrive at
different processes share batches.

Each process is the one gateway assembly (`gateway.process.server.Gateway`) with a role
(`gateway.process.roles`); this package holds the two roles of `--workers` and what they speak:

- `channel.py`: the typed messages both sides speak (`BatchRequest`s and their results,
  tensors in the raw codec's layout, no pickle), one frame per loop turn.
- `batcher.py`: the batcher's side: it queues what workers send in the one scheduler and
  answers the views that must describe the whole gateway (`BatcherViews`: /metrics summed
  over the workers, Triton statistics, the live page).
- `worker_role.py`: a worker's side: `WorkerRole`, with `RemoteScheduler` (the `Scheduler` its
  service holds) and `RemoteViews`.
- `batcher_role.py`: `BatcherRole`: starting workers (`python -m gateway worker`), one READY
  line, restarting a worker that dies, carrying SIGHUP and SIGTERM to every worker.

The front ends, the service and the models do not know they run in a worker: they see a
`Scheduler` and `Views`. Nothing here imports `gateway.process.server`, nor it this package.
"""
