"""The batching gateway application: HTTP and gRPC front ends feeding one batch scheduler.

- `rest/` (Tornado) and `grpc/` (grpc.aio): the front ends, for KServe v1, Open Inference
  Protocol, TorchServe and OpenAI clients, each with one error path; `front_ends.py`, both
  around one service in one process;
- `service.py`: the one data plane every front end calls; `lifecycle.py`: one request's
  `Call`, from arrival to answer;
- `models/`: each served model and its batch form; `kinds/`: what its rows mean (tensors,
  texts embedded, pairs scored), one module and one object per kind;
  `instances.py`, `uploads.py`, `tokens.py`: v1 instances, TorchServe uploads and texts
  into tensors; `triton.py`: Triton's model configuration and statistics documents;
- `batching/`: the scheduler, its queues, row layouts, policies and tenants' quotas;
- `auth.py` and `tenants.py`: who may call (the token, or tenants' keys);
- `config/`, `config_keys.py`, `cli.py`, `server.py`, `roles.py`, `workers/`: the way in,
  the process and its role (one process, or `--workers`); `views.py`, `metrics.py`
  (with `scheduler_metrics.py` and `tenant_metrics.py`), `live.py`, `logs.py`, `telemetry/`,
  `memory.py`: operating it; `shared.py` (with `redis_scripts.py`): tenants' quotas held
  across replicas.

It builds on `wire` (what travels) and reaches predictors (Triton, KServe, TorchServe, an
OpenAI-compatible server) only through `backends.registry`, `settings` and `base`;
docs/ARCHITECTURE.md has the map.
"""
__version__ = "0.1.0"
