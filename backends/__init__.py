"""Predictor clients, one module per protocol, behind the one interface in `base`.

`oip_http` and `oip_grpc` speak the Open Inference Protocol (Triton, KServe v2),
`kserve_v1` speaks KServe v1 JSON, and `simulated/` holds the project's own simulated
predictor (in-process backend and standalone server). `registry.create_backend` picks one
from a model's config. Backends know nothing of the gateway's front ends or scheduler.
"""
