"""The HTTP front end (Tornado): one module per protocol (KServe v1, Open Inference Protocol
REST, TorchServe's inference API, operations), on one lifecycle and one error path (`base`)."""
