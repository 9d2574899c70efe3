"""gateway/config_keys.py and the tables of gateway/config/: every key the parser accepts is
declared once, with its type, default and meaning, and the defaults the reference page
states are the ones the config's dataclasses hold."""
from __future__ import annotations

import dataclasses

import pytest

from backends.settings import Cost
from gateway import config
from gateway.batching import policies
from gateway.batching.config import BatchingConfig, TenantPolicy
from gateway.config_keys import Table, declared
from wire.codecs.limits import Limits


def table(path: str) -> Table:
    (found,) = [table for table in config.TABLES if table.path == path]
    return found


def test_every_key_says_what_it_means_once():
    keys = [(table.path, key) for table in config.TABLES for key in table.keys]
    assert all(key.meaning and key.kind for _, key in keys)
    assert len({(path, key.name) for path, key in keys}) == len(keys)
    assert len({table.path for table in config.TABLES}) == len(config.TABLES)


def test_a_policy_key_is_declared_once_on_its_field_or_by_its_policy_never_both():
    declared_by_policies = {policy.selected_by for policy in policies.REGISTRY.values() if policy.selected_by}
    assert declared_by_policies <= table("models[].batching").names()  # slo_ms: BatchingConfig.slo_s
    assert not set(policies.settings()) & table("models[].batching").names()


def _default(path: str, name: str) -> str:
    return table(path)[name].default_text


def _toml(value: object) -> str:
    """A default as the reference page writes it: TOML's spelling."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else f"{value:g}" if isinstance(value, float) else str(value)


@pytest.mark.parametrize("path, source", [("server", config.ServerConfig()), ("limits", Limits()),
                                          ("models[].simulated", Cost()), ("models[].batching", BatchingConfig())])
def test_the_stated_defaults_are_the_dataclasses(path, source):
    compared = 0
    for name in table(path).names():
        stated = _default(path, name)
        if not hasattr(source, name) or stated.startswith("the "):  # "the lowest level": said, not a value
            continue
        value = getattr(source, name)
        assert stated == _toml(value), name
        compared += 1
    assert compared >= 3


def test_the_other_stated_defaults():
    batching = BatchingConfig()
    assert float(_default("models[].batching", "max_latency_ms")) == batching.max_latency_s * 1000
    assert float(_default("models[].batching", "max_hold_ms")) == batching.max_hold_s * 1000
    assert _default("models[].batching", "max_batch_tokens") == str(config.DEFAULT_MAX_BATCH_TOKENS)
    assert _default("models[]", "base_path") == config.DEFAULT_BASE_PATH
    assert _default("models[].embeddings", "deduplicate") == str(config.EmbeddingsConfig().deduplicate).lower()
    assert _default("models[].embeddings", "token_ids") == config.EmbeddingsConfig().token_ids


@pytest.mark.parametrize("cls", [config.ServerConfig, config.TracingConfig, config.EmbeddingsConfig,
                                 config.RerankConfig, BatchingConfig, TenantPolicy])
def test_a_key_declared_on_a_field_is_that_fields_default_and_is_in_a_table(cls):
    defaults = {item.name: item.default for item in dataclasses.fields(cls)}
    tabled = {key.field for table in config.TABLES for key in table.keys}
    keys = declared(cls) + (declared(cls, within="tls") if cls is config.ServerConfig else ())
    for key in keys:
        assert defaults[key.field] == key.value, key.name
        assert key.field in tabled, key.name


def test_a_key_in_milliseconds_holds_seconds():
    assert table("models[].batching")["max_latency_ms"].value == BatchingConfig().max_latency_s == 0.5
    assert table("models[]")["dns_refresh_ms"].value == 5.0


def test_a_key_nobody_declared_is_refused_naming_it():
    with pytest.raises(config.ConfigError, match="models\\[0\\].batching.max_wait_ms"):
        config.parse({"models": [{"name": "m", "batching": {"max_wait_ms": 5}}]})
