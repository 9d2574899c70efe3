"""Several protocol processes that batch as one (`serve --workers N`).

One process, the batcher, holds what decides batches: the scheduler, the predictors'
clients that run them, and the stats every view of the gateway reads. N worker processes
serve the same HTTP and gRPC ports (SO_REUSEPORT: the kernel spreads connections), parse
each protocol, convert requests to their models' batch form as one process would, and hand
the tensors to the batcher over a Unix socket; each gets back exactly its own rows. So
`max_batch_size`, `max_queue`, `max_inflight` (fixed or auto) and every policy decision
hold for the whole gateway, and requests that arrive at different workers share batches.

- `channel.py`: the frames both sides speak (pickled messages on a Unix stream), written
  once per loop turn.
- `batcher.py`: the batcher's side: it submits what workers send to the one scheduler and
  answers the views that must describe the whole gateway (/metrics, Triton statistics,
  the live page).
- `remote.py`: a worker's side: `RemoteScheduler`, what the worker's service holds in place
  of a scheduler, and the remote views.
- `supervisor.py`: the batcher process's own work: starting workers, one READY line,
  restarting a worker that dies, and carrying SIGHUP and SIGTERM to every worker.
- `worker.py`: a worker process (`python -m gateway.workers.worker`).

The front ends, the service and the models do not know they run in a worker: they see a
scheduler and the service's views.
"""
