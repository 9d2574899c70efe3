"""The policy table: the names the config accepts, and one implementation per name."""
from __future__ import annotations

import pytest

from gateway.batching.config import BatchingConfig
from gateway.batching.policies import POLICIES, REGISTRY, make_policy
from gateway.batching.policies.adaptive import AdaptivePolicy
from gateway.batching.policies.base import Policy
from gateway.batching.policies.deadline import DeadlinePolicy
from gateway.batching.policies.window import WindowPolicy


def test_the_config_names_map_to_their_policies():
    assert POLICIES == ("adaptive", "window", "deadline")  # the order the config's error message lists them in
    assert BatchingConfig().policy == "adaptive"
    assert isinstance(make_policy(BatchingConfig()), AdaptivePolicy)
    assert isinstance(make_policy(BatchingConfig(policy="window")), WindowPolicy)
    assert isinstance(make_policy(BatchingConfig(policy="deadline", slo_s=0.1)), DeadlinePolicy)
    assert all(issubclass(implementation, Policy) for implementation in REGISTRY.values())


def test_each_queue_gets_its_own_policy_with_its_config():
    config = BatchingConfig(max_hold_s=0.002)
    first, second = make_policy(config), make_policy(config)
    assert first is not second and first.config is config


def test_an_unknown_name_is_refused():
    with pytest.raises(ValueError, match="unknown batching policy 'eager'"):
        make_policy(BatchingConfig(policy="eager"))
