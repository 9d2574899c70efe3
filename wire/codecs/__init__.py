"""Wire formats, one module each: `oip_json` (Open Inference Protocol REST, JSON and the
binary tensor extension), `oip_grpc` (OIP protobuf), `v1` (KServe v1 bodies), `torchserve`
(TorchServe-style bodies), `openai` (OpenAI's Embeddings API), `cohere` (Cohere's Rerank
API), `score` (vLLM's score API, towards a predictor); with `raw` (the byte layout both
binary forms share), `json_data` (tensor data and scores in JSON, shared by the JSON
formats), `limits` (the size checks every decoder applies before allocating) and
`content_encoding` (gzip and deflate HTTP bodies, decoded within the body limit).

Codecs are used in both directions: front ends decode requests and encode responses,
predictor clients encode requests and decode responses, so a codec raises `InvalidInput`
for anything malformed whichever side sent it (`backends.errors` turns a predictor's into
BadPredictorAnswer). They know nothing of batching, models' signatures or predictors.
"""
