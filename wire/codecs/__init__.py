"""Wire formats, one module each: `oip_json` (Open Inference Protocol REST, JSON and the
binary tensor extension), `oip_grpc` (OIP protobuf), `v1` (KServe v1 instances and the
conversion between v1 rows and tensors), with `raw` holding the byte layout both binary
forms share and `limits` the size checks every decoder applies before allocating.

Codecs are used in both directions: front ends decode requests and encode responses,
backend clients encode requests and decode responses. They know nothing of batching.
"""
