"""A dual-protocol (HTTP + gRPC) inference batching gateway.

Layout: `rest/` and `grpc/` are the front ends, `batching/` the
scheduler, `service.py` the one façade the front ends call, `config.py` and `cli.py` the way
in. Predictor clients live in the top-level `backends` package.
"""
__version__ = "0.1.0"
