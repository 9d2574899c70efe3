"""The gRPC front end (grpc.aio): the OIP service and TorchServe's inference API, one
module each, on one error path and lifecycle (`rpc`); health checking and server reflection."""
