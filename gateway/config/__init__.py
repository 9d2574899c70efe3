"""Gateway configuration: the TOML file, its defaults, and its validation.

Every key is declared once, as a typed field with its bounds, default and meaning
(`gateway.config_keys`): on the field its value lands in, or in its table's module here
(`server`: [server], [server.tls], [limits], [tracing]; `models`: [[models]] and
[models.simulated]; `batching`; `tensors`: a model's inputs, outputs and padding; `tenants`;
`shared`: the store quotas are held in across replicas; a model kind's table, such as
[models.embeddings] and [models.rerank], in its kind's module, `gateway.kinds`). One reader
(`gateway.config_keys.read`) checks every
table by those declarations; each module adds only the rules between its keys. `TABLES`
lists them in the reference page's order (`tools.gen_docs`).

Every problem is reported as a ConfigError naming the key (e.g. `models[0].batching.max_batch_size`)
and what is wrong with it; the CLI turns it into exit status 2. With no file, the embedded
default serves model `demo` from the in-process simulated predictor.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backends.settings import PredictorProtocol, PredictorSettings
from gateway.batching.config import TenantPolicy
from gateway.config.batching import BATCHING, DEFAULT_MAX_BATCH_TOKENS
from gateway.config.models import (
    BACKENDS,
    DEFAULT_BASE_PATH,
    MODELS,
    PROTOCOLS,
    SIMULATED,
    SIMULATED_TASKS,
    ModelConfig,
    model,
)
from gateway.config.server import (
    LIMITS,
    OTLP_PROTOCOLS,
    SERVER,
    SERVER_TLS,
    TRACES_EXPORTERS,
    TRACING,
    ServerConfig,
    TracingConfig,
    limits,
    server,
    tracing,
    workers,
)
from gateway.config.shared import SHARED, SharedConfig, shared
from gateway.config.tenants import DEFAULT_TENANT, TENANTS, TenantConfig, tenant_directory, tenants
from gateway.config.tensors import INPUTS, OUTPUTS, PAD
from gateway.config_keys import ConfigError, Key, Kind, Table, only, table, value
from gateway.kinds import TOKEN_IDS_AS_IS, Embeddings, EmbeddingsConfig, Rerank, RerankConfig
from wire.codecs.limits import Limits

__all__ = [
    "BACKENDS", "DEFAULT_BASE_PATH", "DEFAULT_MAX_BATCH_TOKENS", "DEFAULT_TENANT", "OTLP_PROTOCOLS", "PROTOCOLS",
    "SIMULATED_TASKS", "TABLES", "TOKEN_IDS_AS_IS", "TRACES_EXPORTERS", "ConfigError", "EmbeddingsConfig",
    "GatewayConfig", "ModelConfig", "RerankConfig", "ServerConfig", "SharedConfig", "TenantConfig", "TracingConfig",
    "embedded_default", "load", "parse", "tenant_directory", "workers",
]

DOCUMENT = Table("", "The document", (
    Key("models", Kind.TABLES, "The models to serve, at least one ([[models]])."),
    Key("server", Kind.TABLE, "Where and how the gateway listens ([server])."),
    Key("limits", Kind.TABLE, "Bounds on what one request may carry ([limits])."),
    Key("tracing", Kind.TABLE, "OpenTelemetry traces ([tracing]); each key falls back to its OTEL_* variable."),
    Key("tenants", Kind.TABLES, "Who shares the gateway, each with keys of its own ([[tenants]]; docs/tenants.md): "
                                "with any declared, every request needs a known key."),
    Key("shared", Kind.TABLE, "The store the tenants' quotas are held in across gateway replicas ([shared]; "
                              "docs/tenants.md)."),
))
# Every table, in the order the reference page gives them.
TABLES: tuple[Table, ...] = (DOCUMENT, SERVER, SERVER_TLS, LIMITS, TRACING, MODELS, BATCHING, INPUTS, PAD, OUTPUTS,
                             SIMULATED, Embeddings.table(), Rerank.table(), TENANTS, SHARED)


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    models: tuple[ModelConfig, ...]
    server: ServerConfig = field(default_factory=ServerConfig)
    limits: Limits = field(default_factory=Limits)
    tracing: TracingConfig = field(default_factory=TracingConfig)
    tenants: tuple[TenantConfig, ...] = ()  # none: no tenants (the token, if any, is everyone's)
    shared: SharedConfig = field(default_factory=SharedConfig)  # no url: quotas held in each process

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
    only(document, "", DOCUMENT.names())
    server_config, limits_config, tracing_config = server(document), limits(document), tracing(document)
    models_raw = document.get("models")
    if not isinstance(models_raw, list) or not models_raw:
        raise ConfigError("models", "at least one [[models]] table is required")
    models, names = [], set()
    for index, raw in enumerate(models_raw):
        config = model(raw, f"models[{index}]")
        if config.name in names:
            raise ConfigError(f"models[{index}].name", f"duplicate model name '{config.name}'")
        names.add(config.name)
        models.append(config)
    token_env = value(SERVER["auth_token_env"], table(document, "server", "server"), "server")
    tenant_configs = tenants(document.get("tenants"), token_env, names)
    tenant_directory(tenant_configs)  # every key readable now, and no key given to two tenants
    return GatewayConfig(models=tuple(models), server=server_config, limits=limits_config, tracing=tracing_config,
                         tenants=tenant_configs, shared=shared(document))
