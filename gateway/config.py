"""Gateway configuration: the TOML file, its defaults, and its validation.

Every problem is reported as a ConfigError naming the key (e.g. `models[0].batching.max_batch_size`)
and what is wrong with it; the CLI turns it into exit status 2. With no file, the embedded
default serves model `demo` from the in-process simulated predictor.
"""
from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Set
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from backends.settings import Cost, PredictorProtocol, PredictorSettings
from gateway.batching import policies
from gateway.batching.config import BatchingConfig, GeneratedInput, PaddedInput, PaddingConfig, TenantPolicy
from gateway.config_keys import names as keys_in
from gateway.tenants import DIGEST, Directory, KeyConflict, KeySource, KeyUnavailable, Tenant, directory
from gateway.tokens import (
    DEFAULT_TOKEN_ENCODING,
    TOKEN_ENCODINGS,
    EncodingUnavailable,
    TokenCounter,
    TokenizerUnavailable,
    token_decoder,
)
from wire.codecs.limits import Limits
from wire.rerank import DOCUMENT_INPUT, QUERY_INPUT
from wire.tensors import NUMPY_DTYPES, ModelSignature, TensorSpec, is_wire_datatype

# The user-facing choices; `_predictor_protocol` resolves them into one PredictorProtocol.
BACKENDS = ("triton", "kserve", "torchserve", "simulated")
PROTOCOLS = ("http", "grpc")


class ConfigError(ValueError):
    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


@dataclass(frozen=True, slots=True)
class EmbeddingsConfig:
    """The `[models.embeddings]` table: a model whose rows are texts, embedded into vectors
    (`gateway.embeddings`). Set on every model of an OpenAI-compatible predictor."""
    tokenizer: str = ""      # the model's tokenizer.json: exact token counts ("" = the estimate, gateway.tokens)
    input: str = ""          # the BYTES input the texts travel in ("" = the only input, else "text")
    output: str = ""         # the FP32 output holding the vectors ("" = the only FP32 output)
    deduplicate: bool = True  # identical texts in one batch are sent once
    # An OpenAI client's token ids: decoded back to text in this tiktoken encoding
    # (gateway.tokens), or TOKEN_IDS_AS_IS: sent to an OpenAI-compatible predictor as they are.
    token_ids: str = DEFAULT_TOKEN_ENCODING
    token_ids_file: str = ""  # the encoding's .tiktoken file ("" = tiktoken's cache)


@dataclass(frozen=True, slots=True)
class RerankConfig:
    """The `[models.rerank]` table: a cross-encoder whose rows are (query, document) pairs,
    scored (`gateway.rerank`). Set on every model of a score or rerank predictor."""
    tokenizer: str = ""                  # the model's tokenizer.json: exact token counts ("" = the estimate)
    query_input: str = QUERY_INPUT       # the BYTES input holding each pair's query
    document_input: str = DOCUMENT_INPUT  # the BYTES input holding each pair's document
    output: str = ""                     # the FP32 output holding the scores ("" = the only FP32 output)


@dataclass(frozen=True, slots=True)
class ModelConfig:
    name: str
    predictor: PredictorSettings     # how to reach the model's predictor (backends.settings)
    batching: BatchingConfig = field(default_factory=BatchingConfig)
    embeddings: EmbeddingsConfig | None = None  # a text-embedding model (None: tensors or instances)
    rerank: RerankConfig | None = None  # a rerank model: (query, document) pairs scored

    @property
    def signature(self) -> ModelSignature | None:
        """The declared signature (None: read from the predictor's metadata). It lives in
        the predictor settings, which need it too (TorchServe's OIP outputs)."""
        return self.predictor.signature


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    http_port: int = 8080
    grpc_port: int = 8081
    grace_s: float = 10.0
    tls_cert_file: str = ""      # with tls_key_file: both front ends serve TLS only
    tls_key_file: str = ""
    auth_token: str = ""         # read from the env var named by auth_token_env; "" = no auth
    # Connection hygiene (docs/reliability.md): defaults a production proxy would choose.
    header_timeout_s: float = 10.0   # a new connection's first request head (Envoy's edge advice)
    body_timeout_s: float = 60.0     # a request body, in total
    idle_timeout_s: float = 75.0     # a kept-alive connection's next head (nginx; above cloud LBs' 60 s)
    max_connections: int = 0         # per front end; 0: from the open-files limit (gateway.server)
    max_concurrent_streams: int = 256  # gRPC calls at once on one connection (Go's bound is 250)
    # Completed connections the kernel holds until accepted: gRPC's (somaxconn), not Tornado's 128,
    # which a burst of a few hundred connects overflows (each SYN dropped then waits 1 s to retry).
    http_listen_backlog: int = 4096
    workers: int = 1                 # protocol processes batching as one (gateway.workers); "auto": the cores


@dataclass(frozen=True, slots=True)
class TracingConfig:
    """The `[tracing]` table: OpenTelemetry traces (`gateway.telemetry`). A key left out
    falls back to its standard OTEL_* environment variable, so the variables alone are
    enough; `enabled = false` turns tracing off whatever they say."""
    enabled: bool | None = None      # None: on when OTEL_TRACES_EXPORTER or an OTLP endpoint is set
    exporter: str = ""               # otlp | console | none (OTEL_TRACES_EXPORTER)
    protocol: str = ""               # grpc | http/protobuf (OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL)
    endpoint: str = ""               # as OTEL_EXPORTER_OTLP_ENDPOINT
    sample_ratio: float | None = None  # root spans sampled at this ratio, children follow their parent
    service_name: str = ""           # OTEL_SERVICE_NAME; default batching-gateway
    max_queue_size: int = 0          # spans waiting for export before new ones are dropped (OTEL_BSP_MAX_QUEUE_SIZE)


TRACES_EXPORTERS = ("otlp", "console", "none")
OTLP_PROTOCOLS = ("grpc", "http/protobuf")


@dataclass(frozen=True, slots=True)
class TenantConfig:
    """A `[[tenants]]` table: what the scheduler knows of it (`policy`: its name, level,
    weight and quotas), the models it may call (None: all) and where its keys come from
    (`key`: read by `gateway.tenants`, never held here)."""
    policy: TenantPolicy
    key: KeySource
    models: tuple[str, ...] | None = None
    declared_at: str = ""  # its table, as errors name it: "tenants[2]", or "server" (DEFAULT_TENANT)

    @property
    def name(self) -> str:
        return self.policy.name

    @property
    def key_setting(self) -> str:
        """The config key its key is given by, as errors name it."""
        return "server.auth_token_env" if self.declared_at == "server" else f"{self.declared_at}.{self.key.field}"

    @property
    def tenant(self) -> Tenant:
        """As the front door knows it (`gateway.tenants`)."""
        return Tenant(self.name, None if self.models is None else frozenset(self.models))


# With [server] auth_token_env and [[tenants]], the token is the key of one more tenant, this one.
DEFAULT_TENANT = "default"


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    models: tuple[ModelConfig, ...]
    server: ServerConfig = field(default_factory=ServerConfig)
    limits: Limits = field(default_factory=Limits)
    tracing: TracingConfig = field(default_factory=TracingConfig)
    tenants: tuple[TenantConfig, ...] = ()  # none: no tenants (the token, if any, is everyone's)

    @property
    def tenant_policies(self) -> tuple[TenantPolicy, ...]:
        """Each tenant as the scheduler takes it (`Scheduler.set_tenants`)."""
        return tuple(tenant.policy for tenant in self.tenants)


def embedded_default() -> GatewayConfig:
    """Model `demo` on the in-process simulated predictor: works with nothing installed."""
    predictor = PredictorSettings(PredictorProtocol.SIMULATED, server="simulated", model="demo")
    return GatewayConfig(models=(ModelConfig(name="demo", predictor=predictor),))


def load(path: str | Path) -> GatewayConfig:
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(str(path), "file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), f"not valid TOML: {exc}") from None
    return parse(document)


def parse(document: dict[str, Any]) -> GatewayConfig:
    _only(document, "", keys_in(""))
    server = _server(_table(document, "server", "server"))
    limits = _limits(_table(document, "limits", "limits"))
    tracing = _tracing(_table(document, "tracing", "tracing"))
    models_raw = document.get("models")
    if not isinstance(models_raw, list) or not models_raw:
        raise ConfigError("models", "at least one [[models]] table is required")
    models, names = [], set()
    for index, raw in enumerate(models_raw):
        model = _model(raw, f"models[{index}]")
        if model.name in names:
            raise ConfigError(f"models[{index}].name", f"duplicate model name '{model.name}'")
        names.add(model.name)
        models.append(model)
    token_env = _str(_table(document, "server", "server"), "server", "auth_token_env")
    tenants = _tenants(document.get("tenants"), token_env, names)
    tenant_directory(tenants)  # every key readable now, and no key given to two tenants
    return GatewayConfig(models=tuple(models), server=server, limits=limits, tracing=tracing, tenants=tenants)


def _model(raw: Any, key: str) -> ModelConfig:
    if not isinstance(raw, dict):
        raise ConfigError(key, "must be a table")
    _only(raw, key, keys_in("models[]"))
    name = _str(raw, key, "name", required=True)
    backend = _choice(raw, key, "backend", BACKENDS, "simulated")
    transport = _choice(raw, key, "protocol", PROTOCOLS, "http")
    addresses = _addresses(raw, key, required=backend != "simulated")
    protocol = _predictor_protocol(raw, key, backend, transport)
    for address in addresses:
        if protocol.transport == "http" and not address.startswith(("http://", "https://")):
            raise ConfigError(f"{key}.url", f"an HTTP predictor address looks like http://host:port, got '{address}'")
    inputs = _tensor_specs(raw.get("inputs"), f"{key}.inputs", keys_in("models[].inputs[]"))
    outputs = _tensor_specs(raw.get("outputs"), f"{key}.outputs", keys_in("models[].outputs[]"))
    signature = ModelSignature(inputs, outputs) if inputs else None
    if outputs and not inputs:
        raise ConfigError(f"{key}.inputs", "declare inputs too when declaring outputs")
    target_model = _str(raw, key, "backend_model") or name
    binary_data = _bool(raw, key, "binary_data", backend == "triton")
    tls = _bool(raw, key, "tls", bool(addresses) and addresses[0].startswith("https://"))
    ca_file = _file(raw, key, "ca_file")
    dns_refresh_s = _dns_replicas(raw, key, addresses, tls)
    simulated_raw = _table(raw, "simulated", f"{key}.simulated")
    _only(simulated_raw, f"{key}.simulated", keys_in("models[].simulated"))
    simulated_task = _choice(simulated_raw, f"{key}.simulated", "task", SIMULATED_TASKS, "double")
    cost = _simulated({k: v for k, v in simulated_raw.items() if k != "task"}, f"{key}.simulated")
    base_path = _base_path(raw, key, protocol)
    embeddings = _embeddings(raw, key, protocol, simulated_task)
    rerank = _rerank(raw, key, protocol, simulated_task)
    if embeddings is not None and rerank is not None:
        raise ConfigError(f"{key}.rerank", "a model embeds texts or scores pairs, not both: keep one of "
                                           "[models.embeddings] and [models.rerank]")
    batching_raw = _table(raw, "batching", f"{key}.batching")
    own_keys = PADDING_KEYS | TOKEN_KEYS
    batching = _batching({k: v for k, v in batching_raw.items() if k not in own_keys}, f"{key}.batching")
    if embeddings is not None:
        batching = _token_budget(key, batching_raw, batching)
    elif rerank is not None:
        batching = _token_budget(key, batching_raw, batching)
        assert batching.padding is not None  # _token_budget sets it
        batching = replace(batching, padding=replace(batching.padding, query_input=rerank.query_input,
                                                     one_query=protocol is PredictorProtocol.RERANK_HTTP))
    else:
        batching = _padding(raw, key, inputs, outputs, batching_raw, batching)
    predictor = PredictorSettings(protocol=protocol, server=backend, model=target_model, addresses=addresses,
                                  binary_data=binary_data, tls=tls, ca_file=ca_file, signature=signature,
                                  simulated_cost=cost, simulated_task=simulated_task, base_path=base_path,
                                  dns_refresh_s=dns_refresh_s)
    return ModelConfig(name=name, predictor=predictor, batching=batching, embeddings=embeddings, rerank=rerank)


# The JSON APIs of a kserve backend over HTTP beside v1 and v2: their protocol and what they are.
_HTTP_APIS = {
    "openai": (PredictorProtocol.OPENAI_HTTP, "KServe's OpenAI endpoint (or any OpenAI-compatible embeddings server)"),
    "score": (PredictorProtocol.SCORE_HTTP, "vLLM's score API"),
    "rerank": (PredictorProtocol.RERANK_HTTP, "Cohere's rerank API (Infinity, vLLM, any Cohere-compatible server)"),
}


def _predictor_protocol(raw: dict, key: str, backend: str, transport: str) -> PredictorProtocol:
    """The one protocol that `backend`, `protocol` (the transport) and `api` name together.

    `api = "v1"` means KServe v1 REST for kserve over HTTP, and TorchServe's own
    Predictions API for torchserve over gRPC; "v2" means the Open Inference Protocol."""
    default_api = "v1" if (backend == "kserve" and transport == "http") or backend == "torchserve" else "v2"
    api = _choice(raw, key, "api", ("v1", "v2", *_HTTP_APIS), default_api)
    if api in _HTTP_APIS:
        if backend != "kserve" or transport != "http":
            raise ConfigError(f"{key}.api", f"api = \"{api}\" is {_HTTP_APIS[api][1]} over HTTP: use it with "
                                            f"backend = \"kserve\"")
        return _HTTP_APIS[api][0]
    if api == "v1" and transport != "http" and backend != "torchserve":  # torchserve grpc v1: its Predictions API
        raise ConfigError(f"{key}.api", "KServe v1 is HTTP only; use api = \"v2\" with protocol = \"grpc\"")
    if backend == "torchserve" and transport == "http" and api != "v1":
        raise ConfigError(f"{key}.api", "TorchServe over HTTP is spoken through its KServe envelope (api = \"v1\"); "
                                        "for the Open Inference Protocol use protocol = \"grpc\" with api = \"v2\"")
    if api == "v1" and backend == "triton":
        raise ConfigError(f"{key}.api", "Triton speaks only the Open Inference Protocol (v2)")
    if backend == "simulated":
        return PredictorProtocol.SIMULATED
    if backend == "torchserve":
        if transport == "http":
            return PredictorProtocol.TORCHSERVE_KSERVE_HTTP
        return PredictorProtocol.TORCHSERVE_PREDICTIONS_GRPC if api == "v1" else PredictorProtocol.TORCHSERVE_OIP_GRPC
    if transport == "grpc":
        return PredictorProtocol.OIP_GRPC  # api is "v2": v1 over gRPC was refused above
    return PredictorProtocol.KSERVE_V1_HTTP if api == "v1" else PredictorProtocol.OIP_HTTP


def _batching(raw: dict, key: str) -> BatchingConfig:
    """The [models.batching] keys every policy shares and each policy's own (declared by the
    policy: `policies.settings`, and described in `config_keys` like every key: a test holds
    the two together); the padding and token keys are read apart."""
    declared = policies.settings()
    _only(raw, key, (keys_in("models[].batching") - PADDING_KEYS - TOKEN_KEYS) | declared.keys())
    levels = _number(raw, key, "priority_levels", 0, integer=True, minimum=0)
    # Triton's rule: the default level is one of the levels; here the lowest unless set.
    default_level = _number(raw, key, "default_priority_level", levels, integer=True, minimum=1 if levels else 0,
                            maximum=levels)
    default = BatchingConfig()
    # A policy's own settings, in milliseconds in TOML (seconds in BatchingConfig).
    durations: dict[str, Any] = {}
    for setting in declared.values():
        if setting.key not in raw:
            continue
        seconds = _number(raw, key, setting.key, 0, minimum=0) / 1000
        if setting.positive and not seconds > 0:
            raise ConfigError(f"{key}.{setting.key}", "must be positive")
        durations[setting.field] = seconds
    # A setting that selects a policy (slo_ms: the deadline policy) chooses it, and that
    # policy cannot run without it.
    chosen = [name for setting_key, name in policies.selected_by().items() if setting_key in raw]
    policy = _choice(raw, key, "policy", policies.names(), chosen[0] if chosen else default.policy)
    for setting_key, name in policies.selected_by().items():
        if (policy == name) != (setting_key in raw):
            raise ConfigError(f"{key}.{setting_key}" if setting_key in raw else f"{key}.policy",
                              f"policy \"{name}\" and {setting_key} go together: set {setting_key} to use it")
    # max_inflight is a number, or "auto" (learned, up to inflight_ceiling).
    auto_inflight = raw.get("max_inflight") == "auto"
    if isinstance(raw.get("max_inflight"), str) and not auto_inflight:
        raise ConfigError(f"{key}.max_inflight", f'must be an integer >= 1 or "auto", got {raw["max_inflight"]!r}')
    if "inflight_ceiling" in raw and not auto_inflight:
        raise ConfigError(f"{key}.inflight_ceiling", 'applies only to max_inflight = "auto"')
    fixed = {k: v for k, v in raw.items() if k != "max_inflight"} if auto_inflight else raw
    return BatchingConfig(
        policy=policy, priority_levels=levels, default_priority_level=default_level, **durations,
        auto_inflight=auto_inflight,
        inflight_ceiling=_number(raw, key, "inflight_ceiling", default.inflight_ceiling, integer=True, minimum=1),
        max_batch_size=_number(raw, key, "max_batch_size", default.max_batch_size, integer=True, minimum=1),
        timeout_s=_number(raw, key, "timeout_s", default.timeout_s, minimum=0.001),
        max_inflight=_number(fixed, key, "max_inflight", default.max_inflight, integer=True, minimum=1),
        max_queue=_number(raw, key, "max_queue", default.max_queue, integer=True, minimum=1),
        demand_smoothing_s=_number(raw, key, "demand_smoothing_ms", default.demand_smoothing_s * 1000,
                                   minimum=10) / 1000,
    )


def _server(raw: dict) -> ServerConfig:
    _only(raw, "server", keys_in("server"))
    default = ServerConfig()
    tls = _table(raw, "tls", "server.tls")
    _only(tls, "server.tls", keys_in("server.tls"))
    cert_file, key_file = _file(tls, "server.tls", "cert_file"), _file(tls, "server.tls", "key_file")
    if bool(cert_file) != bool(key_file):
        raise ConfigError("server.tls", "set both cert_file and key_file")
    token = ""
    token_env = _str(raw, "server", "auth_token_env")
    if token_env:
        token = os.environ.get(token_env, "")
        if not token:
            raise ConfigError("server.auth_token_env", f"environment variable {token_env} is unset or empty")
    return ServerConfig(
        tls_cert_file=cert_file, tls_key_file=key_file, auth_token=token,
        host=_str(raw, "server", "host") or default.host,
        http_port=_number(raw, "server", "http_port", default.http_port, integer=True, minimum=0, maximum=65535),
        grpc_port=_number(raw, "server", "grpc_port", default.grpc_port, integer=True, minimum=0, maximum=65535),
        grace_s=_number(raw, "server", "grace_s", default.grace_s, minimum=0),
        header_timeout_s=_timeout(raw, "header_timeout_s", default.header_timeout_s),
        body_timeout_s=_timeout(raw, "body_timeout_s", default.body_timeout_s),
        idle_timeout_s=_timeout(raw, "idle_timeout_s", default.idle_timeout_s),
        max_connections=_number(raw, "server", "max_connections", default.max_connections, integer=True, minimum=0),
        max_concurrent_streams=_number(raw, "server", "max_concurrent_streams", default.max_concurrent_streams,
                                       integer=True, minimum=1),
        http_listen_backlog=_number(raw, "server", "http_listen_backlog", default.http_listen_backlog,
                                    integer=True, minimum=1, maximum=MAX_LISTEN_BACKLOG),
        workers=workers(raw.get("workers", default.workers), "server.workers"),
    )


MAX_WORKERS = 64
MAX_LISTEN_BACKLOG = 65535  # listen() takes an int; Linux caps it at net.core.somaxconn anyway


def workers(value: Any, key: str) -> int:
    """A worker count: a positive integer, or "auto" for the machine's cores."""
    if value == "auto":
        return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WORKERS:
        raise ConfigError(key, f"must be \"auto\" or an integer from 1 to {MAX_WORKERS}, got {value!r}")
    return value


def _timeout(raw: dict, key: str, default: float) -> float:
    value = _number(raw, "server", key, default)
    if not value > 0:  # NaN too
        raise ConfigError(f"server.{key}", "must be positive: a connection with no time limit is how descriptors run out")
    return value


def _limits(raw: dict) -> Limits:
    _only(raw, "limits", keys_in("limits"))
    default = Limits()
    return Limits(**{
        name: _number(raw, "limits", name, getattr(default, name), integer=True, minimum=1)
        for name in sorted(keys_in("limits"))
    })


def _tracing(raw: dict) -> TracingConfig:
    _only(raw, "tracing", keys_in("tracing"))
    ratio = raw.get("sample_ratio")
    return TracingConfig(
        enabled=_bool(raw, "tracing", "enabled", False) if "enabled" in raw else None,
        exporter=_choice(raw, "tracing", "exporter", ("", *TRACES_EXPORTERS), ""),
        protocol=_choice(raw, "tracing", "protocol", ("", *OTLP_PROTOCOLS), ""),
        endpoint=_str(raw, "tracing", "endpoint"),
        sample_ratio=None if ratio is None else _number(raw, "tracing", "sample_ratio", 1.0, minimum=0, maximum=1),
        service_name=_str(raw, "tracing", "service_name"),
        max_queue_size=_number(raw, "tracing", "max_queue_size", 0, integer=True, minimum=0),
    )


def _simulated(raw: dict, key: str) -> Cost:
    default = Cost()
    return Cost(
        call_ms=_number(raw, key, "call_ms", default.call_ms, minimum=0),
        per_instance_ms=_number(raw, key, "per_instance_ms", default.per_instance_ms, minimum=0),
        slots=_number(raw, key, "slots", default.slots, integer=True, minimum=1),
        per_element_us=_number(raw, key, "per_element_us", default.per_element_us, minimum=0),
    )


def _tensor_specs(raw: Any, key: str, allowed: Set[str]) -> tuple[TensorSpec, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(key, "must be an array of tables with name, datatype and shape")
    specs = []
    for index, item in enumerate(raw):
        item_key = f"{key}[{index}]"
        if not isinstance(item, dict):
            raise ConfigError(item_key, "must be a table with name, datatype and shape")
        _only(item, item_key, allowed)  # pad, generate and follows_pad: read by _padding
        datatype = _str(item, item_key, "datatype", required=True)
        if not is_wire_datatype(datatype):
            raise ConfigError(f"{item_key}.datatype", f"unknown datatype '{datatype}'")
        shape = item.get("shape", [-1, -1])
        if not isinstance(shape, list) or not shape or not all(isinstance(d, int) and d >= -1 for d in shape):
            raise ConfigError(f"{item_key}.shape", "must be a list of integers (-1 for any size), batch first")
        specs.append(TensorSpec(_str(item, item_key, "name", required=True), datatype, tuple(shape)))
    return tuple(specs)


# -- text-embedding models (gateway.embeddings, gateway.tokens) -----------------------

SIMULATED_TASKS = ("double", "embed", "rerank")
TOKEN_KEYS = frozenset({"max_batch_tokens", "token_cost"})  # of [models.batching], read by _token_budget
TOKEN_COSTS = ("longest", "sum")
TOKEN_IDS_AS_IS = "as_is"  # [models.embeddings] token_ids: the predictor's own vocabulary, passed on
DEFAULT_MAX_BATCH_TOKENS = 16384  # TEI's default: 32 rows of 512 tokens
# KServe's: its route prefix (KSERVE_OPENAI_ROUTE_PREFIX, default /openai) and /v1.
DEFAULT_BASE_PATH = "/openai/v1"


def _base_path(raw: dict, key: str, protocol: PredictorProtocol) -> str:
    """Where a JSON API server's routes start: `<base_path>/embeddings`, `/score`, `/rerank`."""
    if "base_path" not in raw:
        return DEFAULT_BASE_PATH
    if protocol not in _WITH_BASE_PATH:
        raise ConfigError(f"{key}.base_path", "applies only to api = \"openai\", \"score\" or \"rerank\"")
    path = _str(raw, key, "base_path").rstrip("/")
    if path and not path.startswith("/"):
        raise ConfigError(f"{key}.base_path", f"must start with / (or be empty, the server's root), got {path!r}")
    return path


_WITH_BASE_PATH = frozenset({PredictorProtocol.OPENAI_HTTP, PredictorProtocol.SCORE_HTTP, PredictorProtocol.RERANK_HTTP})
# The predictors that take texts as a BYTES tensor: OIP (Triton, KServe v2), OpenAI's API.
_TAKE_TEXTS = frozenset({PredictorProtocol.OIP_HTTP, PredictorProtocol.OIP_GRPC, PredictorProtocol.OPENAI_HTTP,
                         PredictorProtocol.SIMULATED})


def _embeddings(raw: dict, key: str, protocol: PredictorProtocol, simulated_task: str) -> EmbeddingsConfig | None:
    """The `[models.embeddings]` table; a model of an OpenAI-compatible predictor (or the
    simulated encoder) is an embedding model even without it."""
    implied = protocol is PredictorProtocol.OPENAI_HTTP or simulated_task == "embed"
    if "embeddings" not in raw and not implied:
        return None
    table_key = f"{key}.embeddings"
    if protocol not in _TAKE_TEXTS or (protocol is PredictorProtocol.SIMULATED and not implied):
        raise ConfigError(table_key, "an embedding model's texts travel as a BYTES tensor: it needs a tensor predictor "
                                     "(Triton, KServe v2, an OpenAI-compatible server with api = \"openai\", or "
                                     "the simulated model with task = \"embed\")")
    table = _table(raw, "embeddings", table_key)
    _only(table, table_key, keys_in("models[].embeddings"))
    tokenizer = _file(table, table_key, "tokenizer")
    config = EmbeddingsConfig(tokenizer=tokenizer, input=_str(table, table_key, "input"),
                              output=_str(table, table_key, "output"),
                              deduplicate=_bool(table, table_key, "deduplicate", True),
                              token_ids=_choice(table, table_key, "token_ids", (*TOKEN_ENCODINGS, TOKEN_IDS_AS_IS),
                                                DEFAULT_TOKEN_ENCODING),
                              token_ids_file=_file(table, table_key, "token_ids_file"))
    if tokenizer:
        try:
            TokenCounter(tokenizer)
        except TokenizerUnavailable as exc:
            raise ConfigError(f"{table_key}.tokenizer", str(exc)) from None
    _token_ids(table, table_key, config, protocol)
    return config


# The predictors that score pairs: OIP (two BYTES inputs), vLLM's score API, Cohere's rerank API.
_SCORE_PAIRS = frozenset({PredictorProtocol.OIP_HTTP, PredictorProtocol.OIP_GRPC, PredictorProtocol.SCORE_HTTP,
                          PredictorProtocol.RERANK_HTTP, PredictorProtocol.SIMULATED})


def _rerank(raw: dict, key: str, protocol: PredictorProtocol, simulated_task: str) -> RerankConfig | None:
    """The `[models.rerank]` table; a model of a score or rerank predictor (or the simulated
    reranker) is a rerank model even without it."""
    implied = protocol in (PredictorProtocol.SCORE_HTTP, PredictorProtocol.RERANK_HTTP) or simulated_task == "rerank"
    if "rerank" not in raw and not implied:
        return None
    table_key = f"{key}.rerank"
    if protocol not in _SCORE_PAIRS or (protocol is PredictorProtocol.SIMULATED and not implied):
        raise ConfigError(table_key, "a rerank model's pairs travel as two BYTES tensors or a score API: it needs "
                                     "Triton, KServe v2, api = \"score\" or \"rerank\", or the simulated model "
                                     "with task = \"rerank\"")
    table = _table(raw, "rerank", table_key)
    _only(table, table_key, keys_in("models[].rerank"))
    if protocol is not PredictorProtocol.OIP_HTTP and protocol is not PredictorProtocol.OIP_GRPC:
        for name in sorted({"query_input", "document_input", "output"} & table.keys()):
            raise ConfigError(f"{table_key}.{name}", "names a tensor of an Open Inference Protocol predictor "
                                                     "(Triton, KServe v2); this one's are fixed")
    tokenizer = _file(table, table_key, "tokenizer")
    config = RerankConfig(tokenizer=tokenizer, query_input=_str(table, table_key, "query_input") or QUERY_INPUT,
                          document_input=_str(table, table_key, "document_input") or DOCUMENT_INPUT,
                          output=_str(table, table_key, "output"))
    if config.query_input == config.document_input:
        raise ConfigError(f"{table_key}.document_input", f"the query and the document travel in two inputs; both "
                                                         f"are named '{config.query_input}'")
    if tokenizer:
        try:
            TokenCounter(tokenizer)
        except TokenizerUnavailable as exc:
            raise ConfigError(f"{table_key}.tokenizer", str(exc)) from None
    return config


def _token_ids(table: dict, key: str, config: EmbeddingsConfig, protocol: PredictorProtocol) -> None:
    """`token_ids` and `token_ids_file`: an encoding named here must be readable now; the
    default one is looked for when the model starts, and token ids are refused without it."""
    if config.token_ids == TOKEN_IDS_AS_IS:
        if protocol is not PredictorProtocol.OPENAI_HTTP:
            raise ConfigError(f"{key}.token_ids", "only an OpenAI-compatible predictor (api = \"openai\") takes "
                                                  "token ids; this one takes texts: name the tiktoken encoding "
                                                  "the ids are decoded in")
        if config.token_ids_file:
            raise ConfigError(f"{key}.token_ids_file", "token ids passed as they are are not decoded: "
                                                       "no encoding file is read")
        return
    if "token_ids" in table or "token_ids_file" in table:
        try:
            token_decoder(config.token_ids, config.token_ids_file)
        except EncodingUnavailable as exc:
            raise ConfigError(f"{key}.{'token_ids_file' if config.token_ids_file else 'token_ids'}",
                              str(exc)) from None


def _token_budget(key: str, batching_raw: dict, batching: BatchingConfig) -> BatchingConfig:
    """`max_batch_tokens`, `token_cost` and `buckets` of an embedding or rerank model's
    [models.batching]: each text (or pair) is a row whose length is its tokens
    (gateway.batching.padding)."""
    if "max_batch_cost" in batching_raw:
        raise ConfigError(f"{key}.batching.max_batch_cost", "an embedding or rerank model's batch is limited in "
                                                             "tokens: use max_batch_tokens")
    buckets = _buckets(batching_raw, key)
    tokens = _number(batching_raw, f"{key}.batching", "max_batch_tokens", DEFAULT_MAX_BATCH_TOKENS, integer=True,
                     minimum=1)
    token_cost = _choice(batching_raw, f"{key}.batching", "token_cost", TOKEN_COSTS, "longest")
    padding = PaddingConfig(inputs=(), buckets=buckets, summed=token_cost == "sum")
    return replace(batching, max_batch_cost=tokens, padding=padding)


def _buckets(batching_raw: dict, key: str) -> tuple[int, ...]:
    buckets = batching_raw.get("buckets", [])
    if (not isinstance(buckets, list) or not all(isinstance(b, int) and not isinstance(b, bool) and b >= 1
                                                 for b in buckets) or buckets != sorted(set(buckets))):
        raise ConfigError(f"{key}.batching.buckets", f"must be a list of ascending lengths >= 1, got {buckets!r}")
    return tuple(buckets)


# -- tenants (gateway.tenants holds their keys; docs/tenants.md) ----------------------

KEY_SOURCES = ("key_env", "key_file", "key_sha256")
_TENANT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _tenants(raw: Any, token_env: str, models: Set[str]) -> tuple[TenantConfig, ...]:
    """The `[[tenants]]` tables; with `[server] auth_token_env` too, its token is the key of
    one more tenant, `default`, which may call every model."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError("tenants", "must be an array of tables: [[tenants]]")
    tenants: list[TenantConfig] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(raw):
        tenant = _tenant(item, f"tenants[{index}]", models)
        if tenant.name in seen:
            raise ConfigError(f"tenants[{index}].name",
                              f"duplicate tenant name '{tenant.name}' (also tenants[{seen[tenant.name]}])")
        if tenant.name == DEFAULT_TENANT and token_env:
            raise ConfigError(f"tenants[{index}].name", f"'{DEFAULT_TENANT}' is the tenant whose key is [server] "
                                                        f"auth_token_env's: name this one otherwise")
        seen[tenant.name] = index
        tenants.append(tenant)
    if token_env and tenants:
        tenants.append(TenantConfig(TenantPolicy(DEFAULT_TENANT), KeySource(env=token_env), declared_at="server"))
    return tuple(tenants)


def _tenant(raw: Any, key: str, models: Set[str]) -> TenantConfig:
    if not isinstance(raw, dict):
        raise ConfigError(key, "must be a table")
    _only(raw, key, keys_in("tenants[]"))
    name = _str(raw, key, "name", required=True)
    if not _TENANT_NAME.fullmatch(name):
        raise ConfigError(f"{key}.name", "must be 1 to 64 letters, digits, '_', '-' or '.' (it labels metrics)")
    given = [source for source in KEY_SOURCES if source in raw]
    if not given:
        raise ConfigError(key, f"needs its key: one of {', '.join(KEY_SOURCES)}")
    if len(given) > 1:
        raise ConfigError(f"{key}.{given[1]}", f"give exactly one of {', '.join(KEY_SOURCES)}, not {given[0]} too")
    policy = TenantPolicy(
        name=name,
        priority=_number(raw, key, "priority", 0, integer=True, minimum=1) if "priority" in raw else 0,
        weight=_positive(raw, key, "weight", 1.0),
        requests_per_second=_positive(raw, key, "requests_per_second", None),
        tokens_per_minute=_positive(raw, key, "tokens_per_minute", None),
        max_concurrent=_number(raw, key, "max_concurrent", 1, integer=True, minimum=1) if "max_concurrent" in raw
        else None,
    )
    return TenantConfig(policy, _key_source(raw, key, given[0]), _tenant_models(raw, key, models), key)


def _key_source(raw: dict, key: str, field: str) -> KeySource:
    # What is wrong is said without the value: a key pasted where its digest belongs stays unsaid.
    if field == "key_env":
        return KeySource(env=_str(raw, key, "key_env", required=True))
    if field == "key_file":
        return KeySource(file=_str(raw, key, "key_file", required=True))
    digests = raw["key_sha256"]
    if not isinstance(digests, list) or not digests:
        raise ConfigError(f"{key}.key_sha256", "must be a list of SHA-256 digests, 64 hex digits each")
    for index, value in enumerate(digests):
        if not isinstance(value, str) or not DIGEST.fullmatch(value):
            raise ConfigError(f"{key}.key_sha256[{index}]", "is not a SHA-256 digest (64 hex digits: printf %s "
                                                            "\"$KEY\" | sha256sum)")
    return KeySource(sha256=tuple(value.lower() for value in digests))


def _tenant_models(raw: dict, key: str, models: Set[str]) -> tuple[str, ...] | None:
    if "models" not in raw:
        return None
    names = raw["models"]
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise ConfigError(f"{key}.models", "must be a list of model names")
    for name in names:
        if name not in models:
            raise ConfigError(f"{key}.models", f"no model '{name}' among the [[models]]")
    return tuple(names)


def _positive(raw: dict, key: str, name: str, default: Any) -> Any:
    """A number > 0 and finite, or `default` when the key is absent."""
    if name not in raw:
        return default
    value = _number(raw, key, name, 0)
    if not (value > 0 and math.isfinite(value)):
        raise ConfigError(f"{key}.{name}", f"must be a positive number, got {value}")
    return float(value)


def tenant_directory(tenants: tuple[TenantConfig, ...]) -> Directory:
    """The tenants' keys read now (`gateway.tenants`): at the start, on every reload, and by
    `check-config`. ConfigError naming the table's key when a source gives no key, or when
    one key is given to two tenants (never saying the key)."""
    try:
        return directory((tenant.tenant, tenant.key) for tenant in tenants)
    except KeyUnavailable as error:
        raise ConfigError(tenants[error.index].key_setting, error.problem) from None
    except KeyConflict as error:
        first = tenants[error.first]
        raise ConfigError(tenants[error.second].key_setting, f"gives the same key as {first.key_setting} (tenant "
                                                             f"'{first.name}'): each key belongs to one tenant") from None


# -- variable-length inputs (gateway.batching.padding says what they mean) -------------

PADDING_KEYS = frozenset({"buckets", "max_batch_cost"})  # of [models.batching], read by _padding
GENERATED_KINDS = ("length", "mask")


def _padding(raw: dict, key: str, inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...],
             batching_raw: dict, batching: BatchingConfig) -> BatchingConfig:
    """`pad` and `generate` of [[models.inputs]], `follows_pad` of [[models.outputs]],
    `buckets` and `max_batch_cost` of [models.batching], into `batching.padding`."""
    padded, generated = [], []
    for index, (spec, item) in enumerate(zip(inputs, raw.get("inputs") or [], strict=True)):
        item_key = f"{key}.inputs[{index}]"
        if "pad" in item:
            padded.append(_padded_input(spec, item["pad"], f"{item_key}.pad"))
        if "generate" in item:
            generated.append(_generated_input(spec, item, f"{item_key}.generate"))
    follows = []
    for index, (spec, item) in enumerate(zip(outputs, raw.get("outputs") or [], strict=True)):
        if "follows_pad" in item:
            dim = _number(item, f"{key}.outputs[{index}]", "follows_pad", 1, integer=True, minimum=1)
            if len(spec.shape) <= dim or spec.shape[dim] != -1:
                raise ConfigError(f"{key}.outputs[{index}].follows_pad",
                                  f"dimension {dim} of shape {list(spec.shape)} must be -1: it is the padded length")
            follows.append((spec.name, dim))
    for name in sorted(TOKEN_KEYS & batching_raw.keys()):
        raise ConfigError(f"{key}.batching.{name}", "applies to an embedding model: add its [models.embeddings] table "
                                                    "(or, to a rerank model, its [models.rerank] table)")
    used = [f"{key}.batching.{name}" for name in sorted(PADDING_KEYS & batching_raw.keys())]
    used += [f"{key}.inputs[].generate"] * bool(generated) + [f"{key}.outputs[].follows_pad"] * bool(follows)
    if not padded:
        if used:
            raise ConfigError(used[0], "needs an input with a variable dimension: pad = { dim = 1, value = 0 } "
                                       "in its [[models.inputs]]")
        return batching
    buckets = _buckets(batching_raw, key)
    cost = _number(batching_raw, f"{key}.batching", "max_batch_cost", batching.max_batch_cost, integer=True, minimum=1) \
        if "max_batch_cost" in batching_raw else batching.max_batch_cost
    padding = PaddingConfig(inputs=tuple(padded), buckets=buckets, outputs=tuple(follows),
                            generated=tuple(generated))
    return replace(batching, max_batch_cost=cost, padding=padding)


def _padded_input(spec: TensorSpec, raw: Any, key: str) -> PaddedInput:
    if not isinstance(raw, dict):
        raise ConfigError(key, "must be a table: pad = { dim = 1, value = 0 }")
    _only(raw, key, keys_in("models[].inputs[].pad"))
    dim = _number(raw, key, "dim", 1, integer=True, minimum=1)
    if len(spec.shape) <= dim or spec.shape[dim] != -1:
        raise ConfigError(f"{key}.dim", f"dimension {dim} of shape {list(spec.shape)} must be -1 (batch first): "
                                        f"it is the one that varies")
    if spec.datatype in ("BYTES", "BF16"):
        raise ConfigError(key, f"{spec.datatype} inputs cannot be padded")
    value = raw.get("value", 0)
    integer = spec.datatype.startswith(("INT", "UINT"))
    fits = (isinstance(value, bool) if spec.datatype == "BOOL" else
            isinstance(value, int) and not isinstance(value, bool) if integer else
            isinstance(value, (int, float)) and not isinstance(value, bool))
    if fits and integer:
        info = np.iinfo(NUMPY_DTYPES[spec.datatype])
        fits = info.min <= value <= info.max
    if not fits:
        raise ConfigError(f"{key}.value", f"must be a value of {spec.datatype}, got {value!r}")
    return PaddedInput(spec.name, dim, value)


def _generated_input(spec: TensorSpec, item: dict, key: str) -> GeneratedInput:
    kind = item["generate"]
    if kind not in GENERATED_KINDS:
        raise ConfigError(key, f"must be one of {', '.join(GENERATED_KINDS)}; got {kind!r}")
    if "pad" in item:
        raise ConfigError(key, "a generated input is not padded: the gateway fills it")
    if spec.datatype in ("BYTES", "BF16"):
        raise ConfigError(key, f"a {kind} cannot be {spec.datatype}: use INT32, INT64, FP32 or BOOL")
    expected = (-1, 1) if kind == "length" else (-1, -1)
    if spec.shape != expected:
        raise ConfigError(key, f"a generated {kind} has shape {list(expected)} (batch first); "
                               f"declare shape = {list(expected)}, got {list(spec.shape)}")
    return GeneratedInput(spec.name, spec.datatype, kind)


# -- small typed readers ---------------------------------------------------------------

def _only(raw: dict, key: str, allowed: Set[str]) -> None:
    for name in raw:
        if name not in allowed:
            where = f"{key}.{name}" if key else name
            raise ConfigError(where, f"unknown key (allowed: {', '.join(sorted(allowed))})")


def _table(raw: dict, name: str, key: str) -> dict:
    value = raw.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(key, "must be a table")
    return value


def _str(raw: dict, key: str, name: str, required: bool = False) -> str:
    value = raw.get(name)
    if value is None:
        if required:
            raise ConfigError(f"{key}.{name}", "is required")
        return ""
    if not isinstance(value, str) or (required and not value):
        raise ConfigError(f"{key}.{name}", f"must be a non-empty string, got {value!r}")
    return value


def _addresses(raw: dict, key: str, required: bool) -> tuple[str, ...]:
    """`url`: one address, or a list of replica addresses of the same model."""
    value = raw.get("url")
    if value is None:
        if required:
            raise ConfigError(f"{key}.url", "is required")
        return ()
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, str) and v for v in values):
        raise ConfigError(f"{key}.url", f"must be an address or a non-empty list of addresses, got {value!r}")
    if len(set(values)) != len(values):
        raise ConfigError(f"{key}.url", "lists the same replica twice")
    return tuple(values)


def _dns_replicas(raw: dict, key: str, addresses: tuple[str, ...], tls: bool) -> float | None:
    """`dns_replicas`: every address the url's host name resolves to is a replica, found
    again every `dns_refresh_ms`; the seconds between lookups, or None (the url as it is)."""
    if not _bool(raw, key, "dns_replicas", False):
        if "dns_refresh_ms" in raw:
            raise ConfigError(f"{key}.dns_refresh_ms", "applies only with dns_replicas = true")
        return None
    if len(addresses) != 1:
        raise ConfigError(f"{key}.url", "with dns_replicas = true, name one host name, whose addresses are the replicas")
    url = addresses[0]
    try:
        port = urlsplit(url if "://" in url else f"//{url}").port
    except ValueError:
        port = None
    if port is None:
        raise ConfigError(f"{key}.url", f"with dns_replicas = true, name a host name and a port, got '{url}'")
    if tls:
        # Each replica is reached by its IP address, which a certificate for the name does not cover.
        raise ConfigError(f"{key}.dns_replicas", "cannot be used with TLS to the predictor: each replica is reached "
                                                 "by its IP address, which the predictor's certificate does not name")
    return float(_number(raw, key, "dns_refresh_ms", 5000, minimum=100)) / 1000


def _file(raw: dict, key: str, name: str) -> str:
    path = _str(raw, key, name)
    if path and not os.path.isfile(path):
        raise ConfigError(f"{key}.{name}", f"no such file: {path}")
    return path


def _bool(raw: dict, key: str, name: str, default: bool) -> bool:
    value = raw.get(name, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{key}.{name}", f"must be true or false, got {value!r}")
    return value


def _choice(raw: dict, key: str, name: str, choices: tuple[str, ...], default: str) -> str:
    value = raw.get(name, default)
    if value not in choices:
        raise ConfigError(f"{key}.{name}", f"must be one of {', '.join(choices)}; got {value!r}")
    return value


def _number(raw: dict, key: str, name: str, default: float, *, integer: bool = False,
            minimum: float | None = None, maximum: float | None = None) -> Any:
    value = raw.get(name, default)
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise ConfigError(f"{key}.{name}", f"must be {'an integer' if integer else 'a number'}, got {value!r}")
    if minimum is not None and not value >= minimum:  # written so that NaN fails it too
        raise ConfigError(f"{key}.{name}", f"must be >= {minimum:g}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{key}.{name}", f"must be <= {maximum:g}, got {value}")
    return value
