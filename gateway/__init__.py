"""The batching gateway application: HTTP and gRPC front ends feeding one batch scheduler.

Its rooms, each a folder (or one module) named for what it holds, from the top floor down
(each imports only the floors below it: pyproject.toml's lint-imports contracts):

- `cli.py`: the command line; `process/`: the process and its roles (`server.py`, one
  gateway process; `front_ends.py`; `roles.py`; `workers/`, `--workers`);
- `rest/` (Tornado) and `grpc/` (grpc.aio): the front ends, for KServe v1, Open Inference
  Protocol, TorchServe, OpenAI and Cohere clients, each with one error path;
- `service.py`: the one data plane every front end calls; `lifecycle.py`: one request's
  `Call`, from arrival to answer;
- `observe/`: what is observed (`/metrics`, the live page, the views of the whole gateway,
  logs, memory); `telemetry/`: traces;
- `models/`: each served model and its batch form (with v1 instances, TorchServe uploads
  and Triton's documents); `kinds/`: what its rows mean (tensors, texts embedded, pairs
  scored, with texts' tokens), one module and one object per kind;
- `shared/`: tenants' quotas held across replicas; `config/`: the TOML file read;
- `access/`: the front door (the token, or tenants' keys); `batching/`: the scheduler, its
  queues, row layouts, policies and tenants' quotas; `config_keys.py`: how a key is
  declared and read.

It builds on `wire` (what travels) and reaches predictors (Triton, KServe, TorchServe, an
OpenAI-compatible server) only through `backends.registry`, `settings` and `base`;
docs/ARCHITECTURE.md has the map.
"""
__version__ = "0.1.0"
