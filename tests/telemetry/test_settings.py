"""gateway/telemetry/settings.py: tracing is turned on by the standard OTEL_* variables
alone or by `[tracing]` (a key wins over its variable); an unusable value is a one-line
config error, at start and in check-config. (These tests were in tests/test_telemetry.py,
with those of the spans, while the package was one module.)"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config import ConfigError, TracingConfig
from gateway.config import parse as parse_config
from gateway.telemetry.settings import resolve


def test_the_standard_variables_alone_turn_it_on_and_a_table_key_wins_over_its_variable():
    assert resolve(TracingConfig(), {}) is None  # nothing said: off, nothing imported
    on = resolve(TracingConfig(), {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert on is not None and (on.exporters, on.protocol, on.service_name) == (("otlp",), "http/protobuf",
                                                                             "batching-gateway")
    on = resolve(TracingConfig(), {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                                             "OTEL_SERVICE_NAME": "edge"})
    assert on is not None and (on.protocol, on.service_name) == ("grpc", "edge")
    assert resolve(TracingConfig(), {"OTEL_TRACES_EXPORTER": "none"}) is None
    assert resolve(TracingConfig(), {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}) is None
    assert resolve(TracingConfig(enabled=False), {"OTEL_TRACES_EXPORTER": "otlp"}) is None
    on = resolve(TracingConfig(protocol="grpc", sample_ratio=0.01), {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                                                                              "OTEL_TRACES_EXPORTER": "otlp"})
    assert on is not None and on.protocol == "grpc" and on.sample_ratio == 0.01
    with pytest.raises(ConfigError, match="OTEL_TRACES_EXPORTER"):
        resolve(TracingConfig(), {"OTEL_TRACES_EXPORTER": "zipkin"})
    # A parent-based sampler from the variables is the gateway's to apply (before any span is made).
    otlp = {"OTEL_TRACES_EXPORTER": "otlp"}
    assert resolve(TracingConfig(), otlp).sample_ratio == 1.0  # the default, parentbased_always_on
    assert resolve(TracingConfig(), {**otlp, "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                                               "OTEL_TRACES_SAMPLER_ARG": "0.01"}).sample_ratio == 0.01
    assert resolve(TracingConfig(), {**otlp, "OTEL_TRACES_SAMPLER": "always_on"}).sample_ratio is None
    with pytest.raises(ConfigError, match="OTEL_TRACES_SAMPLER_ARG"):
        resolve(TracingConfig(), {**otlp, "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                                            "OTEL_TRACES_SAMPLER_ARG": "2"})


def test_the_tracing_table_is_validated_like_every_other():
    with pytest.raises(ConfigError, match="tracing.sample_ratio"):
        parse_config({"models": [{"name": "m", "backend": "simulated"}], "tracing": {"sample_ratio": 2}})
    with pytest.raises(ConfigError, match="tracing.protocol"):
        parse_config({"models": [{"name": "m", "backend": "simulated"}], "tracing": {"protocol": "thrift"}})


@pytest.mark.parametrize("variables, named", [
    ({"OTEL_BSP_MAX_QUEUE_SIZE": "lots"}, "OTEL_BSP_MAX_QUEUE_SIZE"),
    ({"OTEL_BSP_SCHEDULE_DELAY": "-5"}, "OTEL_BSP_SCHEDULE_DELAY"),
    ({"OTEL_BSP_MAX_QUEUE_SIZE": "10", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "20"}, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"),
    ({"OTEL_EXPORTER_OTLP_COMPRESSION": "brotli"}, "OTEL_EXPORTER_OTLP_COMPRESSION"),
    ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "abc"}, "OTEL_TRACES_SAMPLER_ARG"),
    ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "-1"}, "OTEL_TRACES_SAMPLER_ARG"),
    ({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "nan"}, "OTEL_TRACES_SAMPLER_ARG"),
    ({"OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER"),
])
def test_an_unusable_variable_is_a_one_line_config_error_at_start_and_in_check_config(tmp_path, variables, named):
    config = tmp_path / "gateway.toml"
    config.write_text('[[models]]\nname = "demo"\nbackend = "simulated"\n')
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "otlp", **variables}
    for command in (["check-config", str(config)], ["serve", "--config", str(config), "--http-port", "0", "--grpc-port", "0"]):
        done = subprocess.run([sys.executable, "-m", "gateway", *command], env=env, capture_output=True, text=True,
                              timeout=60, cwd=Path(__file__).parents[2])
        assert done.returncode == 2, done.stderr
        [line] = done.stderr.strip().splitlines()  # one line, no traceback
        assert line.startswith("batching-gateway: config error:") and named in line, line


def test_the_list_form_of_the_exporter_variable_runs_each_exporter():
    otlp = {"OTEL_TRACES_EXPORTER": "otlp, console"}
    assert resolve(TracingConfig(), otlp).exporters == ("otlp", "console")
    with pytest.raises(ConfigError, match="OTEL_TRACES_EXPORTER"):
        resolve(TracingConfig(), {"OTEL_TRACES_EXPORTER": "otlp,zipkin"})


def test_a_sample_ratio_that_is_not_a_finite_number_is_refused():
    for ratio in ("nan", "inf"):
        with pytest.raises(ConfigError, match="tracing.sample_ratio"):
            parse_config({"models": [{"name": "m", "backend": "simulated"}],
                          "tracing": {"enabled": True, "sample_ratio": float(ratio)}})
