"""The HTTP front end (Tornado): KServe v1 and Open Inference Protocol REST endpoints."""
