"""The policy table: the names the config accepts, and one implementation per name."""
from __future__ import annotations

import asyncio

import pytest

from gateway import config as gateway_config
from gateway.batching import policies
from gateway.batching.config import BatchingConfig
from gateway.batching.policies import REGISTRY, make_policy
from gateway.batching.policies.adaptive import AdaptivePolicy
from gateway.batching.policies.base import Policy, Setting
from gateway.batching.policies.deadline import DeadlinePolicy
from gateway.batching.policies.window import WindowPolicy
from gateway.batching.request import BatchRequest
from gateway.batching.scheduler import BatchScheduler
from gateway.observe.metrics import Metrics
from tests.batching.support import rows, stats_of
from wire.errors import InvalidInput
from wire.tracing import ClientContext


def test_the_config_names_map_to_their_policies():
    assert policies.names() == ("adaptive", "window", "deadline")  # the order the config's error message lists them in
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


class PatientPolicy(Policy):
    """A policy as a new file would add it: a key of its own, a departure reason of its own."""
    settings = (Setting("patience_ms", "max_hold_s"),)
    timer_reason = "patience_ran_out"

    def wait_until(self, queue, now):
        oldest = queue.pending[0]
        if now >= oldest.enqueued_at + self.config.max_hold_s:
            return None
        return oldest.enqueued_at + self.config.max_hold_s


async def test_a_new_policy_is_one_table_entry_its_keys_read_and_its_reasons_counted(monkeypatch):
    """Adding a policy changes neither the config, the queue nor /metrics: its settings and
    its timer's departure reason come from its own declaration."""
    monkeypatch.setitem(REGISTRY, "patient", PatientPolicy)
    parsed = gateway_config.parse({"models": [{"name": "m", "backend": "simulated", "batching": {
        "policy": "patient", "patience_ms": 20}}]})
    batching = parsed.models[0].batching
    assert (batching.policy, batching.max_hold_s) == ("patient", 0.02)
    with pytest.raises(gateway_config.ConfigError, match="patience_msec"):
        gateway_config.parse({"models": [{"name": "m", "backend": "simulated", "batching": {"patience_msec": 1}}]})

    async def echo(inputs):
        return inputs

    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("m", echo, batching)
    await scheduler.submit(BatchRequest.arriving("m", rows(1, 1)))  # alone: it leaves when its patience runs out
    assert stats_of(scheduler, "m").departures["patience_ran_out"] == 1
    metrics = Metrics()
    metrics.watch_scheduler(scheduler)
    exposition = (await metrics.exposition()).decode()
    assert 'gateway_batch_departures_total{model="m",reason="patience_ran_out"} 1.0' in exposition
    assert 'gateway_batch_departures_total{model="m",reason="window_expired"} 0.0' in exposition


class TenantQuotaPolicy(AdaptivePolicy):
    """A policy that reads the typed request: a client that names no tenant (a forwarded
    request parameter) is refused at admission; its priority and deadline are there too."""

    def refusal(self, queue, request, deadline, now, level=0):
        self.seen.append((request.model, request.rows, request.priority, request.client.request_id,
                          request.deadline_s is not None and deadline > now))
        if "tenant" not in request.parameters:
            return InvalidInput("name your tenant")
        return None

    seen: list = []


async def test_a_policy_reads_the_typed_request_at_admission(monkeypatch):
    monkeypatch.setitem(REGISTRY, "tenants", TenantQuotaPolicy)
    TenantQuotaPolicy.seen = []
    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("m", _echo, BatchingConfig(policy="tenants"))
    named = BatchRequest.arriving("m", rows(0, 2), timeout_s=5.0, priority=1, client=ClientContext("r-1"),
                                  parameters={"tenant": "a"})
    assert (await scheduler.submit(named)).outputs[0].data.shape == (2, 2)
    with pytest.raises(InvalidInput, match="tenant"):
        await scheduler.submit(BatchRequest.arriving("m", rows(2, 1)))
    assert TenantQuotaPolicy.seen == [("m", 2, 1, "r-1", True), ("m", 1, 0, "", False)]


async def _echo(inputs):
    return inputs
