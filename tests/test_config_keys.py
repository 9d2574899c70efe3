"""gateway/config_keys.py: every key the parser accepts is declared once, with its type,
default and meaning, and the defaults it states are the ones the config's dataclasses hold."""
from __future__ import annotations

import pytest

from backends.settings import Cost
from gateway import config
from gateway.batching import policies
from gateway.batching.config import BatchingConfig
from gateway.config_keys import KEYS, names
from wire.codecs.limits import Limits


def test_every_key_says_what_it_means_once():
    assert all(key.meaning and key.type for key in KEYS)
    assert len({(key.table, key.name) for key in KEYS}) == len(KEYS)


def test_every_policy_setting_is_declared():
    assert set(policies.settings()) <= names("models[].batching")


def _default(table: str, name: str) -> str:
    (key,) = [key for key in KEYS if key.table == table and key.name == name]
    return key.default


@pytest.mark.parametrize("table, source", [("server", config.ServerConfig()), ("limits", Limits()),
                                           ("models[].simulated", Cost()), ("models[].batching", BatchingConfig())])
def test_the_stated_defaults_are_the_dataclasses(table, source):
    compared = 0
    for name in names(table):
        stated = _default(table, name)
        if not hasattr(source, name) or stated.startswith("the "):  # "the lowest level": said, not a value
            continue
        value = getattr(source, name)
        assert stated == (value if isinstance(value, str) else f"{value:g}" if isinstance(value, float) else str(value)), \
            name
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


def test_a_key_nobody_declared_is_refused_naming_it():
    with pytest.raises(config.ConfigError, match="models\\[0\\].batching.max_wait_ms"):
        config.parse({"models": [{"name": "m", "batching": {"max_wait_ms": 5}}]})
