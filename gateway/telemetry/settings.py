"""What tracing runs with: `[tracing]` and the standard OTEL_* variables resolved into
`TracingSettings` (a `[tracing]` key wins over its variable), or None for no tracing.

Every value the SDK would read is checked here, so that an unusable one is a ConfigError
(exit 2, and in check-config) where the SDK would raise a traceback or warn and go on with
its default; and tracing asked for without the `otel` extra installed is one too.
OpenTelemetry is imported only to know it is installed. It must not know the spans, the
request's Call, the scheduler or how spans are exported.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gateway.config import OTLP_PROTOCOLS, TRACES_EXPORTERS, ConfigError, TracingConfig


@dataclass(frozen=True, slots=True)
class TracingSettings:
    """What tracing runs with, once `[tracing]` and the environment are resolved."""
    exporters: tuple[str, ...]  # otlp | console, each (OTEL_TRACES_EXPORTER may list several)
    protocol: str         # grpc | http/protobuf (otlp)
    endpoint: str         # "" : the exporter's own default or its variables
    sample_ratio: float | None
    service_name: str
    max_queue_size: int   # 0: OTEL_BSP_MAX_QUEUE_SIZE or the SDK's 2048


def resolve(config: TracingConfig, environ: Mapping[str, str] = os.environ) -> TracingSettings | None:
    """The tracing to run, or None for none. A ConfigError (exit 2) when tracing is asked
    for but the `otel` extra is not installed, or a variable has a value we cannot use."""
    def env(*names: str) -> str:
        return next((environ[name].strip() for name in names if environ.get(name, "").strip()), "")

    # The specification's list form: "otlp,console" runs both; "none" alone turns tracing off.
    listed = config.exporter or env("OTEL_TRACES_EXPORTER").lower()
    exporters = tuple(dict.fromkeys(name.strip() for name in listed.split(",") if name.strip()))
    if config.enabled is False or env("OTEL_SDK_DISABLED").lower() == "true":
        return None
    endpoint = config.endpoint or env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
    if not (config.enabled or (exporters and exporters != ("none",)) or endpoint):
        return None
    exporters = exporters or ("otlp",)
    if exporters == ("none",):
        return None
    unknown = [name for name in exporters if name not in TRACES_EXPORTERS or name == "none"]
    if unknown:
        raise ConfigError("OTEL_TRACES_EXPORTER", f"must list {', '.join(e for e in TRACES_EXPORTERS if e != 'none')} "
                                                  f"(or be none); got {listed!r}")
    protocol = config.protocol or env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL").lower()
    protocol = protocol or "http/protobuf"  # the specification's default
    if protocol not in OTLP_PROTOCOLS:
        raise ConfigError("OTEL_EXPORTER_OTLP_PROTOCOL", f"must be one of {', '.join(OTLP_PROTOCOLS)}; "
                                                         f"got {protocol!r}")
    _check_variables(env, config.max_queue_size)
    try:
        import opentelemetry.sdk.trace  # noqa: F401
        if "otlp" in exporters and protocol == "grpc":
            import opentelemetry.exporter.otlp.proto.grpc.trace_exporter  # noqa: F401
        elif "otlp" in exporters:
            import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401
    except ImportError:
        raise ConfigError("tracing", "tracing is on, but OpenTelemetry is not installed: pip install "
                                     "'batching-gateway[otel]'") from None
    ratio = config.sample_ratio if config.sample_ratio is not None else _parent_based_ratio(env)
    return TracingSettings(exporters, protocol, endpoint, ratio,
                           config.service_name or env("OTEL_SERVICE_NAME") or "batching-gateway",
                           config.max_queue_size)


# The samplers the specification names for OTEL_TRACES_SAMPLER, and what each batch span
# processor and exporter variable may hold: an unusable value is a config error here (exit
# 2, and in check-config), where the SDK would raise a traceback or warn and go on with
# its default.
SAMPLERS = ("always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off",
            "parentbased_traceidratio", "parentbased_jaeger_remote", "jaeger_remote", "xray")
BSP_MINIMUMS = {"OTEL_BSP_SCHEDULE_DELAY": 0, "OTEL_BSP_EXPORT_TIMEOUT": 0, "OTEL_BSP_MAX_QUEUE_SIZE": 1,
                "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": 1}
COMPRESSIONS = ("gzip", "deflate", "none")


def _parent_based_ratio(env: Callable[..., str]) -> float | None:
    """The ratio of OTEL_TRACES_SAMPLER when it is parent-based (the default,
    parentbased_always_on, is 1.0); None for a sampler the SDK must read itself."""
    sampler = env("OTEL_TRACES_SAMPLER").lower() or "parentbased_always_on"
    if sampler not in SAMPLERS:
        raise ConfigError("OTEL_TRACES_SAMPLER", f"must be one of {', '.join(SAMPLERS)}; got {sampler!r}")
    ratio = 1.0
    if sampler.endswith("traceidratio"):  # its argument is checked for the SDK's sampler too
        argument = env("OTEL_TRACES_SAMPLER_ARG") or "1.0"
        try:
            ratio = float(argument)
        except ValueError:
            raise ConfigError("OTEL_TRACES_SAMPLER_ARG", f"must be a number from 0 to 1, got {argument!r}") from None
        if not 0.0 <= ratio <= 1.0:  # NaN too
            raise ConfigError("OTEL_TRACES_SAMPLER_ARG", f"must be a number from 0 to 1, got {argument!r}")
    if sampler == "parentbased_always_on":
        return 1.0
    if sampler == "parentbased_always_off":
        return 0.0
    if sampler == "parentbased_traceidratio":
        return ratio
    return None


def _check_variables(env: Callable[..., str], max_queue_size: int) -> None:
    """The batch span processor's and the exporter's variables, as the SDK would read them."""
    values = {}
    for name, minimum in BSP_MINIMUMS.items():
        value = env(name)
        if value and (not value.isdigit() or int(value) < minimum):
            raise ConfigError(name, f"must be an integer >= {minimum} (milliseconds or spans), got {value!r}")
        values[name] = int(value) if value else None
    queue = values["OTEL_BSP_MAX_QUEUE_SIZE"] or 2048
    batch = values["OTEL_BSP_MAX_EXPORT_BATCH_SIZE"] or 512
    if not max_queue_size and batch > queue:  # [tracing] max_queue_size sets both itself
        raise ConfigError("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", f"must be <= OTEL_BSP_MAX_QUEUE_SIZE ({queue}), got {batch}")
    compression = env("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION").lower()
    if compression and compression not in COMPRESSIONS:
        raise ConfigError("OTEL_EXPORTER_OTLP_COMPRESSION", f"must be one of {', '.join(COMPRESSIONS)}; "
                                                            f"got {compression!r}")
