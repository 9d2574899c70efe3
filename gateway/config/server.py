"""The `[server]`, `[server.tls]`, `[limits]` and `[tracing]` tables: where and how the gateway
listens, what one request may carry, and its traces.

Each key is declared once: on its field of ServerConfig or TracingConfig, or, for a value
of a type that knows no config (`wire.codecs.limits.Limits`), as a Key whose default is that
type's. The rules between keys (TLS's two files, the token's variable, the worker count)
are the functions here. It knows no model and no tenant.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from gateway.config_keys import ConfigError, Key, Kind, Table, declared, default_of, fields, key, read, table
from wire.codecs.limits import Limits

MAX_WORKERS = 64
MAX_LISTEN_BACKLOG = 65535  # listen() takes an int; Linux caps it at net.core.somaxconn anyway
_TIMEOUT = "must be positive: a connection with no time limit is how descriptors run out"


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = key(Kind.STRING, "127.0.0.1", "The address both front ends listen on.")
    http_port: int = key(Kind.INTEGER, 8080, "The HTTP front end's port (0: a free one).", minimum=0, maximum=65535)
    grpc_port: int = key(Kind.INTEGER, 8081, "The gRPC front end's port (0: a free one).", minimum=0, maximum=65535)
    grace_s: float = key(Kind.NUMBER, 10.0, "On SIGTERM or a reload, how long queued and in-flight requests may take "
                                            "before they are answered 503.", minimum=0)
    # With tls_key_file: both front ends serve TLS only.
    tls_cert_file: str = key(Kind.STRING, "", "The server certificate (PEM); with key_file.", name="cert_file",
                             file=True, within="tls")
    tls_key_file: str = key(Kind.STRING, "", "Its private key (PEM); with cert_file.", name="key_file", file=True,
                            within="tls")
    auth_token: str = ""         # read from the env var named by auth_token_env; "" = no auth
    # Connection hygiene (docs/reliability.md): defaults a production proxy would choose.
    # A new connection's first request head (Envoy's edge advice).
    header_timeout_s: float = key(Kind.NUMBER, 10.0, "How long a new connection may take to send its first request "
                                                     "head.", positive=_TIMEOUT)
    body_timeout_s: float = key(Kind.NUMBER, 60.0, "How long a request body may take in total.", positive=_TIMEOUT)
    # A kept-alive connection's next head (nginx; above cloud LBs' 60 s).
    idle_timeout_s: float = key(Kind.NUMBER, 75.0, "How long a kept-alive connection may wait for its next request.",
                                positive=_TIMEOUT)
    # Per front end; 0: from the open-files limit (gateway.process.server).
    max_connections: int = key(Kind.INTEGER, 0, "HTTP client connections per front end; 0: what the open-files limit "
                                                "allows.", minimum=0)
    # gRPC calls at once on one connection (Go's bound is 250).
    max_concurrent_streams: int = key(Kind.INTEGER, 256, "gRPC calls at once on one connection.", minimum=1)
    # A ModelStreamInfer stream presents its key once, when it opens: bounded, it presents it
    # again (each message's tenant is also looked up again by its key: gateway.access.front_door).
    max_stream_age_s: float = key(Kind.NUMBER, 0.0, "How long a gRPC ModelStreamInfer stream may stay open: past "
                                                    "it, the stream stops reading, answers what it has read and "
                                                    "ends UNAVAILABLE, and the client opens another, presenting its "
                                                    "key again; 0: no limit.", minimum=0)
    # Completed connections the kernel holds until accepted: gRPC's (somaxconn), not Tornado's 128,
    # which a burst of a few hundred connects overflows (each SYN dropped then waits 1 s to retry).
    http_listen_backlog: int = key(Kind.INTEGER, 4096, "Connections the kernel completes and holds for the HTTP front "
                                                       "end until it accepts them (listen's backlog; Linux caps it at "
                                                       "net.core.somaxconn).", minimum=1, maximum=MAX_LISTEN_BACKLOG)
    # Protocol processes batching as one (gateway.process.workers); "auto": the cores. Read by `workers`.
    workers: int = key(Kind.INTEGER_OR_AUTO, 1, "Protocol processes that batch as one (`auto`: the machine's cores).")
    # The inference routes on Tornado's delegate layer (gateway.rest.lean); false: the RequestHandler
    # twin of each, which answers the same and is kept to hold the lean path to it.
    lean_routes: bool = key(Kind.BOOLEAN, True, "Serve the inference routes on Tornado's delegate layer (false: "
                                                "through a RequestHandler each, as before: the same answers, at more "
                                                "CPU a request).")


SERVER = Table("server", "[server]", (
    *declared(ServerConfig),
    Key("tls", Kind.TABLE, "Serve both front ends over TLS only ([server.tls])."),
    Key("auth_token_env", Kind.STRING, "The environment variable holding a bearer token every request must carry "
                                       "(health probes exempt); unset: no token. With [[tenants]], the key of one "
                                       "more tenant, named default.", default=""),
))
SERVER_TLS = Table("server.tls", "[server.tls]", declared(ServerConfig, within="tls"))


def server(document: dict) -> ServerConfig:
    raw = table(document, "server", "server")
    values = read(SERVER, raw, "server")
    tls = read(SERVER_TLS, table(raw, "tls", "server.tls"), "server.tls")
    if bool(tls["tls_cert_file"]) != bool(tls["tls_key_file"]):
        raise ConfigError("server.tls", "set both cert_file and key_file")
    token = ""
    token_env = values["auth_token_env"]
    if token_env:
        token = os.environ.get(token_env, "")
        if not token:
            # Unnamed: a token written where its variable's name belongs stays unsaid.
            raise ConfigError("server.auth_token_env", "the environment variable it names is unset or empty")
    count = workers(raw.get("workers", SERVER["workers"].default), "server.workers")
    return ServerConfig(**fields(ServerConfig, values), **tls, auth_token=token, workers=count)


def workers(value: Any, key: str) -> int:
    """A worker count: a positive integer, or "auto" for the machine's cores."""
    if value == "auto":
        return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WORKERS:
        raise ConfigError(key, f"must be \"auto\" or an integer from 1 to {MAX_WORKERS}, got {value!r}")
    return value


# -- [limits]: wire's Limits, whose defaults are the codecs' own ----------------------------------

LIMITS = Table("limits", "[limits]", tuple(
    Key(name, Kind.INTEGER, meaning, default_of(Limits, name), minimum=1) for name, meaning in (
        ("max_body_bytes", "A request body's bytes, received and decompressed (413)."),
        ("max_json_bytes", "A JSON document's bytes, checked before it is parsed (413)."),
        ("max_typed_bytes", "A gRPC inference message's bytes outside its `raw_input_contents` (typed contents, "
                            "parameters, names), checked before it is parsed (RESOURCE_EXHAUSTED)."),
        ("max_instances", "Rows (the batch dimension) in one request."),
        ("max_tensor_elements", "Elements of one tensor."),
    )))


def limits(document: dict) -> Limits:
    return Limits(**read(LIMITS, table(document, "limits", "limits"), "limits"))


# -- [tracing] ------------------------------------------------------------------------------------

TRACES_EXPORTERS = ("otlp", "console", "none")
OTLP_PROTOCOLS = ("grpc", "http/protobuf")


@dataclass(frozen=True, slots=True)
class TracingConfig:
    """The `[tracing]` table: OpenTelemetry traces (`gateway.telemetry`). A key left out
    falls back to its standard OTEL_* environment variable, so the variables alone are
    enough; `enabled = false` turns tracing off whatever they say. The defaults shown are
    those `gateway.telemetry` falls back to when the variable is unset too."""
    # None: on when OTEL_TRACES_EXPORTER or an OTLP endpoint is set.
    enabled: bool | None = key(Kind.BOOLEAN, None, "Trace requests and batches; unset: on when OTEL_TRACES_EXPORTER "
                                                   "or an OTLP endpoint is set; false turns tracing off whatever they "
                                                   "say.")
    exporter: str = key(Kind.STRING, "", "otlp, console or none (OTEL_TRACES_EXPORTER).", shown="otlp",
                        choices=("", *TRACES_EXPORTERS))
    protocol: str = key(Kind.STRING, "", "grpc or http/protobuf (OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL).",
                        shown="grpc", choices=("", *OTLP_PROTOCOLS))
    endpoint: str = key(Kind.STRING, "", "The collector (OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT).")
    # Root spans sampled at this ratio, children follow their parent.
    sample_ratio: float | None = key(Kind.NUMBER, None, "The share of root spans sampled; children follow their "
                                                        "parent.", shown="1", minimum=0, maximum=1)
    service_name: str = key(Kind.STRING, "", "OTEL_SERVICE_NAME.", shown="batching-gateway")
    max_queue_size: int = key(Kind.INTEGER, 0, "Spans waiting for export before new ones are dropped "
                                               "(OTEL_BSP_MAX_QUEUE_SIZE).", shown="2048", minimum=0)


TRACING = Table("tracing", "[tracing]", declared(TracingConfig))


def tracing(document: dict) -> TracingConfig:
    return TracingConfig(**read(TRACING, table(document, "tracing", "tracing"), "tracing"))
