"""Predictor clients, one module per protocol, behind the one interface in `base`.

- `settings`: `PredictorSettings` and `PredictorProtocol`, what a client needs to know;
- `registry`: `create_backend`, the one place a protocol picks its client;
- `oip_http`, `oip_grpc`: the Open Inference Protocol (Triton, KServe v2; `oip_grpc` also
  TorchServe's OIP, with its quirks as options);
- `kserve_v1`: KServe v1 REST (KServe, and TorchServe's KServe envelope);
- `torchserve_grpc`: TorchServe's own Predictions API over gRPC;
- `http`, `grpc`: the connection plumbing of the HTTP and the gRPC clients;
- `errors`: a predictor's failures and unusable answers as gateway errors;
- `metadata`, `replicas`: OIP metadata reading, and several replicas as one backend;
- `simulated/`: the project's simulated model, as an in-process backend.

Backends depend on `wire` only: they know nothing of the gateway (its config, front ends
or scheduler). The gateway reaches them through `registry`, `settings` and `base`.
"""
