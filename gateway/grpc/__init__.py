"""The gRPC front end (grpc.aio): the OIP service, health checking and server reflection."""
