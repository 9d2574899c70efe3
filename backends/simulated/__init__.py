"""The project's simulated predictor: a model with a configurable cost and a checkable
answer (OUTPUT0 = 2 x INPUT0), served in-process (`inprocess`) or as its own server
(`server`) speaking KServe v1 HTTP, OIP HTTP and OIP gRPC."""
