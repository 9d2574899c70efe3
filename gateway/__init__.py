"""The batching gateway application: HTTP and gRPC front ends feeding one batch scheduler.

- `rest/` (Tornado) and `grpc/` (grpc.aio): the front ends, for KServe v1, Open Inference
  Protocol and TorchServe clients, each with one error path;
- `service.py`: the one data plane every front end calls;
- `models.py`: each served model and its batch form; `instances.py`: v1 instances and
  tensors, both ways;
- `batching/`: the scheduler, its queues and policies;
- `config.py`, `cli.py`, `server.py`: the way in and the process; `metrics.py`, `logs.py`,
  `auth.py`: operating it.

It builds on `wire` (what travels) and reaches predictors (Triton, KServe, TorchServe)
only through `backends.registry`; docs/ARCHITECTURE.md has the map.
"""
__version__ = "0.1.0"
