"""What travels between clients, the gateway and predictors, with no opinion on batching.

`tensors` (the decoded tensor model and its rules), `request` (an inference request as any
front end decodes it), `errors` (every failure a client can see, with its HTTP status and
gRPC code), `codecs/` (one module per wire format), `tracing` (request ids and trace
context) and `generated/` (the protobuf stubs).

Both the gateway (`gateway`) and the predictor clients (`backends`) build on this package;
it imports neither of them.
"""
