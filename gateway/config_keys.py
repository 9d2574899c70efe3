"""Every key of the gateway's TOML configuration: its table, type, default and meaning.

The one declaration of what a config may say. The parser (`gateway.config`) accepts in
each table exactly the keys declared here for it (`names`), so a key cannot be added to
the parser without its description; the reference page (docs/reference/config.md,
`tools.gen_docs`) lists them. How each value is checked and used is the parser's, and
the defaults' source is the dataclass each value lands in: a test compares the two.

It knows no TOML file and imports nothing of the gateway.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Key:
    table: str     # "server", "models[]", "models[].batching", ...: where the key goes
    name: str
    type: str      # as a user writes it: integer, string, ...
    default: str   # as a user reads it ("" when required or when nothing is the default)
    meaning: str


KEYS: tuple[Key, ...] = (
    # -- the document ------------------------------------------------------------------------
    Key("", "models", "array of tables", "", "The models to serve, at least one ([[models]])."),
    Key("", "server", "table", "", "Where and how the gateway listens ([server])."),
    Key("", "limits", "table", "", "Bounds on what one request may carry ([limits])."),
    Key("", "tracing", "table", "", "OpenTelemetry traces ([tracing]); each key falls back to its OTEL_* variable."),
    Key("", "tenants", "array of tables", "", "Who shares the gateway, each with keys of its own ([[tenants]]; "
                                              "docs/tenants.md): with any declared, every request needs a known key."),
    # -- [server] ----------------------------------------------------------------------------
    Key("server", "host", "string", "127.0.0.1", "The address both front ends listen on."),
    Key("server", "http_port", "integer", "8080", "The HTTP front end's port (0: a free one)."),
    Key("server", "grpc_port", "integer", "8081", "The gRPC front end's port (0: a free one)."),
    Key("server", "grace_s", "number", "10", "On SIGTERM or a reload, how long queued and in-flight requests may "
                                             "take before they are answered 503."),
    Key("server", "tls", "table", "", "Serve both front ends over TLS only ([server.tls])."),
    Key("server", "auth_token_env", "string", "", "The environment variable holding a bearer token every request "
                                                  "must carry (health probes exempt); unset: no token. With "
                                                  "[[tenants]], the key of one more tenant, named default."),
    Key("server", "header_timeout_s", "number", "10", "How long a new connection may take to send its first "
                                                      "request head."),
    Key("server", "body_timeout_s", "number", "60", "How long a request body may take in total."),
    Key("server", "idle_timeout_s", "number", "75", "How long a kept-alive connection may wait for its next request."),
    Key("server", "max_connections", "integer", "0", "HTTP client connections per front end; 0: what the open-files "
                                                     "limit allows."),
    Key("server", "max_concurrent_streams", "integer", "256", "gRPC calls at once on one connection."),
    Key("server", "http_listen_backlog", "integer", "4096", "Connections the kernel completes and holds for the "
                                                            "HTTP front end until it accepts them (listen's "
                                                            "backlog; Linux caps it at net.core.somaxconn)."),
    Key("server", "workers", "integer or \"auto\"", "1", "Protocol processes that batch as one (`auto`: the "
                                                          "machine's cores)."),
    Key("server.tls", "cert_file", "string", "", "The server certificate (PEM); with key_file."),
    Key("server.tls", "key_file", "string", "", "Its private key (PEM); with cert_file."),
    # -- [limits] ----------------------------------------------------------------------------
    Key("limits", "max_body_bytes", "integer", "67108864", "A request body's bytes, received and decompressed (413)."),
    Key("limits", "max_json_bytes", "integer", "16777216", "A JSON document's bytes, checked before it is parsed "
                                                           "(413)."),
    Key("limits", "max_instances", "integer", "65536", "Rows (the batch dimension) in one request."),
    Key("limits", "max_tensor_elements", "integer", "67108864", "Elements of one tensor."),
    # -- [tracing] ---------------------------------------------------------------------------
    Key("tracing", "enabled", "boolean", "", "Trace requests and batches; unset: on when OTEL_TRACES_EXPORTER or an "
                                             "OTLP endpoint is set; false turns tracing off whatever they say."),
    Key("tracing", "exporter", "string", "otlp", "otlp, console or none (OTEL_TRACES_EXPORTER)."),
    Key("tracing", "protocol", "string", "grpc", "grpc or http/protobuf (OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL)."),
    Key("tracing", "endpoint", "string", "", "The collector (OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT)."),
    Key("tracing", "sample_ratio", "number", "1", "The share of root spans sampled; children follow their parent."),
    Key("tracing", "service_name", "string", "batching-gateway", "OTEL_SERVICE_NAME."),
    Key("tracing", "max_queue_size", "integer", "2048", "Spans waiting for export before new ones are dropped "
                                                        "(OTEL_BSP_MAX_QUEUE_SIZE)."),
    # -- [[models]] --------------------------------------------------------------------------
    Key("models[]", "name", "string", "", "The name clients use (required, unique)."),
    Key("models[]", "backend", "string", "simulated", "The predictor's software: triton, kserve, torchserve, or "
                                                      "simulated (in the gateway's process)."),
    Key("models[]", "protocol", "string", "http", "What carries the calls to the predictor: http or grpc."),
    Key("models[]", "url", "string or array", "", "The predictor's address (http://host:port, or host:port for "
                                                  "gRPC), or a list of replicas' addresses; required but for "
                                                  "simulated."),
    Key("models[]", "dns_replicas", "boolean", "false", "Every address the url's host name resolves to is a "
                                                        "replica (a Kubernetes headless Service), looked up again "
                                                        "every dns_refresh_ms: new ones join once ready, vanished "
                                                        "ones drain and leave. Not with TLS."),
    Key("models[]", "dns_refresh_ms", "number", "5000", "dns_replicas: the time between lookups."),
    Key("models[]", "backend_model", "string", "the model's name", "The model's name at the predictor."),
    Key("models[]", "api", "string", "v1 for kserve over HTTP and torchserve, else v2",
        "v1: KServe v1 (TorchServe: its own API); v2: the Open Inference Protocol; openai: an OpenAI-compatible "
        "embeddings server; score: vLLM's score API; rerank: Cohere's rerank API, one query per call (these three: "
        "backend kserve, HTTP)."),
    Key("models[]", "base_path", "string", "/openai/v1", "api = \"openai\", \"score\" or \"rerank\": the path "
                                                         "before /embeddings, /score or /rerank (Infinity: \"\", "
                                                         "TEI and vLLM: /v1)."),
    Key("models[]", "binary_data", "boolean", "true for triton", "OIP over HTTP with the binary tensor extension."),
    Key("models[]", "tls", "boolean", "true for an https:// url", "gRPC to the predictor over TLS."),
    Key("models[]", "ca_file", "string", "", "A CA bundle to verify the predictor (default: the system's)."),
    Key("models[]", "inputs", "array of tables", "", "The model's inputs ([[models.inputs]]); unset: learned from "
                                                     "the predictor's metadata."),
    Key("models[]", "outputs", "array of tables", "", "The model's outputs ([[models.outputs]]), with inputs."),
    Key("models[]", "batching", "table", "", "How its requests are batched ([models.batching])."),
    Key("models[]", "simulated", "table", "", "The simulated predictor's model and cost ([models.simulated])."),
    Key("models[]", "embeddings", "table", "", "A text-embedding model ([models.embeddings]): implied by api = "
                                               "\"openai\" and by the simulated encoder."),
    Key("models[]", "rerank", "table", "", "A rerank model, (query, document) pairs scored ([models.rerank]): "
                                           "implied by api = \"score\" or \"rerank\" and by the simulated "
                                           "reranker."),
    # -- [models.batching] -------------------------------------------------------------------
    Key("models[].batching", "policy", "string", "adaptive", "window, adaptive or deadline (chosen by slo_ms)."),
    Key("models[].batching", "max_batch_size", "integer", "32", "Rows per predictor call; larger requests are "
                                                                "split."),
    Key("models[].batching", "timeout_s", "number", "60", "A request's deadline from its arrival (a client may ask "
                                                          "for less)."),
    Key("models[].batching", "max_inflight", "integer or \"auto\"", "1", "Batches of this model at each predictor "
                                                                          "replica at once; auto: learned."),
    Key("models[].batching", "demand_smoothing_ms", "number", "5000", "The load signal's demand "
                                                                      "(gateway_demand_rows_per_second): the time "
                                                                      "constant of its exponential smoothing."),
    Key("models[].batching", "inflight_ceiling", "integer", "8", "max_inflight = \"auto\": the most it may try."),
    Key("models[].batching", "max_queue", "integer", "4096", "Rows queued beyond which requests are refused (429)."),
    Key("models[].batching", "priority_levels", "integer", "0", "Priority levels, 1 the highest; 0: one level for "
                                                                "all."),
    Key("models[].batching", "default_priority_level", "integer", "the lowest level",
        "The level of a request that names none."),
    Key("models[].batching", "max_latency_ms", "number", "500", "window: the most the oldest request waits for a "
                                                                "full batch; adaptive: caps the learned hold."),
    Key("models[].batching", "max_hold_ms", "number", "10", "adaptive: the most a learned hold may delay a batch; "
                                                            "0: never hold."),
    Key("models[].batching", "slo_ms", "number", "", "The deadline policy's latency objective, and every request's "
                                                     "deadline."),
    Key("models[].batching", "buckets", "array of integers", "", "Ascending lengths: padded requests (or texts, in "
                                                                 "tokens) merge within one bucket."),
    Key("models[].batching", "max_batch_cost", "integer", "0", "Padded elements (rows x padded length) per batch; "
                                                               "0: no limit."),
    Key("models[].batching", "max_batch_tokens", "integer", "16384", "An embedding model's tokens per batch (a "
                                                                     "rerank model's: query plus document, each "
                                                                     "pair)."),
    Key("models[].batching", "token_cost", "string", "longest", "How a batch of texts costs its tokens: longest "
                                                                "(rows x the longest, a predictor that pads) or "
                                                                "sum."),
    # -- [[models.inputs]] and [[models.outputs]] ---------------------------------------------
    Key("models[].inputs[]", "name", "string", "", "The input's name."),
    Key("models[].inputs[]", "datatype", "string", "", "An OIP datatype: BOOL, INT8..UINT64, FP16, BF16, FP32, "
                                                       "FP64 or BYTES."),
    Key("models[].inputs[]", "shape", "array of integers", "[-1, -1]", "Batch first; -1 for any size."),
    Key("models[].inputs[]", "pad", "table", "", "A variable dimension, padded by the gateway: { dim = 1, value = 0 }."),
    Key("models[].inputs[]", "generate", "string", "", "An input the gateway fills: length (each row's, [-1, 1]) or "
                                                       "mask ([-1, -1])."),
    Key("models[].inputs[].pad", "dim", "integer", "1", "The dimension that varies (never 0, the batch)."),
    Key("models[].inputs[].pad", "value", "number or boolean", "0", "What the padding is filled with."),
    Key("models[].outputs[]", "name", "string", "", "The output's name."),
    Key("models[].outputs[]", "datatype", "string", "", "An OIP datatype."),
    Key("models[].outputs[]", "shape", "array of integers", "[-1, -1]", "Batch first; -1 for any size."),
    Key("models[].outputs[]", "follows_pad", "integer", "", "The output's dimension that follows the padded length: "
                                                            "cut back to each request's own."),
    # -- [models.simulated] and [models.embeddings] --------------------------------------------
    Key("models[].simulated", "task", "string", "double", "double (OUTPUT0 = 2 x INPUT0), embed (texts to unit "
                                                          "vectors) or rerank ((query, document) pairs to scores)."),
    Key("models[].simulated", "call_ms", "number", "5", "Each call's fixed cost."),
    Key("models[].simulated", "per_instance_ms", "number", "0", "Each call's cost per row."),
    Key("models[].simulated", "per_element_us", "number", "0", "Each call's cost per element of its input (tokens "
                                                               "for embed)."),
    Key("models[].simulated", "slots", "integer", "1", "Calls computing at once; others wait their turn."),
    Key("models[].embeddings", "tokenizer", "string", "", "The model's tokenizer.json: exact token counts (the "
                                                          "embeddings extra); unset: an estimate."),
    Key("models[].embeddings", "input", "string", "the only input, else text", "The BYTES input the texts travel in."),
    Key("models[].embeddings", "output", "string", "the only FP32 output", "The FP32 output holding the vectors."),
    Key("models[].embeddings", "deduplicate", "boolean", "true", "Identical texts in one batch are sent once."),
    Key("models[].embeddings", "token_ids", "string", "cl100k_base",
        "What an OpenAI client's token ids (LangChain's default) mean: a tiktoken encoding (cl100k_base, "
        "o200k_base, o200k_harmony, p50k_base, p50k_edit, r50k_base) they are decoded in, back to their text; "
        "as_is: the predictor's own ids, sent to it as they are (api = \"openai\")."),
    Key("models[].embeddings", "token_ids_file", "string", "tiktoken's cache",
        "The encoding's .tiktoken file; unset: tiktoken's cache (TIKTOKEN_CACHE_DIR, else its default). Never "
        "downloaded."),
    Key("models[].rerank", "tokenizer", "string", "", "The model's tokenizer.json: exact token counts of each "
                                                      "pair (the embeddings extra); unset: an estimate."),
    Key("models[].rerank", "query_input", "string", "query", "OIP: the BYTES input holding each pair's query."),
    Key("models[].rerank", "document_input", "string", "document", "OIP: the BYTES input holding each pair's "
                                                                   "document."),
    Key("models[].rerank", "output", "string", "the only FP32 output", "OIP: the FP32 output holding the scores, "
                                                                       "[rows, 1]."),
    # -- [[tenants]] -------------------------------------------------------------------------
    Key("tenants[]", "name", "string", "", "The tenant's name, in metrics, logs and spans (never its key); required, "
                                           "unique."),
    Key("tenants[]", "key_env", "string", "", "The environment variable holding its key. Exactly one of key_env, "
                                              "key_file and key_sha256."),
    Key("tenants[]", "key_file", "string", "", "A file holding its key (a mounted Secret), read again on SIGHUP."),
    Key("tenants[]", "key_sha256", "array of strings", "", "The SHA-256 digests (hex) of its keys; several let a "
                                                           "key rotate."),
    Key("tenants[]", "priority", "integer", "the model's default", "The level of its requests where a model has "
                                                                   "priority_levels (1 the highest); a request may ask "
                                                                   "for a lower level, never a higher one."),
    Key("tenants[]", "weight", "number", "1", "Its share among the tenants queued at one level."),
    Key("tenants[]", "models", "array of strings", "all", "The models it may call; another is refused 403. [] for a "
                                                          "key that only reads /metrics and the live page."),
    Key("tenants[]", "requests_per_second", "number", "", "Its quota of requests: a bucket of at most this many, "
                                                          "refilled at this rate; over it, 429 with Retry-After."),
    Key("tenants[]", "tokens_per_minute", "number", "", "Its quota of tokens (text models; rows for tensor models), "
                                                        "a bucket of at most this many."),
    Key("tenants[]", "max_concurrent", "integer", "", "Its requests in the gateway at once; beyond, 429."),
)


def names(table: str) -> frozenset[str]:
    """The keys `table` may hold (a table as `Key.table` writes it)."""
    return frozenset(key.name for key in KEYS if key.table == table)
