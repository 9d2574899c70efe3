"""gateway/observe/views.py: what describes the whole gateway, read from this process's scheduler
(`LocalViews`): Triton's statistics of one model or all, /metrics with the scheduler's
figures, the live page's snapshot; a model it does not serve is refused in Triton's words."""
from __future__ import annotations

import asyncio

import pytest

from backends.base import BatchForm
from gateway.batching.config import BatchingConfig, TenantPolicy
from gateway.batching.request import BatchRequest
from gateway.batching.scheduler import BatchScheduler
from gateway.config import parse
from gateway.models.forms import served_model
from gateway.observe.metrics import Metrics
from gateway.observe.views import LocalViews
from tests.batching.support import RecordingExecutor, rows
from wire.errors import ModelNotFound, RateLimited


class QuietBackend:
    """Enough of a predictor client for a served model that is never started: two
    replicas, one of them out of rotation."""
    batch_form = BatchForm.TENSORS

    def replicas_in_rotation(self) -> list[bool]:
        return [True, False]


async def views_of_one_model() -> tuple[LocalViews, BatchScheduler]:
    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("m", RecordingExecutor(delay_s=0), BatchingConfig())
    config = parse({"models": [{"name": "m", "backend": "simulated"}]}).models[0]
    views = LocalViews(scheduler, {"m": served_model(config, QuietBackend())}, Metrics())  # type: ignore[arg-type]
    await scheduler.submit(BatchRequest.arriving("m", rows(0, 3)))
    return views, scheduler


async def test_statistics_count_what_the_scheduler_did_and_refuse_an_unknown_model():
    views, _ = await views_of_one_model()
    [stats] = (await views.statistics("m"))["model_stats"]
    assert stats["name"] == "m" and stats["inference_stats"]["success"]["count"] == 1
    assert [s["name"] for s in (await views.statistics())["model_stats"]] == ["m"]
    with pytest.raises(ModelNotFound, match="Request for unknown model: 'nope'"):
        await views.statistics("nope")


async def test_the_exposition_carries_the_scheduler_figures_and_the_replicas_in_rotation():
    views, _ = await views_of_one_model()
    text = (await views.exposition()).decode()
    assert 'gateway_batched_instances_total{model="m"} 3.0' in text
    assert 'gateway_replicas_in_rotation{model="m"} 1.0' in text


async def test_the_live_snapshot_lists_the_model():
    views, _ = await views_of_one_model()
    assert [model["name"] for model in (await views.live())["models"]] == ["m"]


async def test_no_tenant_declared_the_tenant_families_have_no_sample():
    views, _ = await views_of_one_model()
    text = (await views.exposition()).decode()
    assert "# TYPE gateway_tenant_requests_total counter" in text  # described, as every family is
    assert "tenant=" not in text and (await views.live())["tenants"] == []


async def test_the_exposition_counts_each_tenants_requests_by_status_and_refusals_by_reason():
    views, scheduler = await views_of_one_model()
    scheduler.set_tenants([TenantPolicy("search"), TenantPolicy("indexing", requests_per_second=1)])
    await scheduler.submit(BatchRequest.arriving("m", rows(0, 2), tenant="search"))
    await scheduler.submit(BatchRequest.arriving("m", rows(0, 1), tenant="indexing"))
    with pytest.raises(RateLimited):
        await scheduler.submit(BatchRequest.arriving("m", rows(0, 1), tenant="indexing"))
    text = (await views.exposition()).decode()
    for line in ('gateway_tenant_requests_total{code="200",tenant="search"} 1.0',
                 'gateway_tenant_requests_total{code="200",tenant="indexing"} 1.0',
                 'gateway_tenant_requests_total{code="429",tenant="indexing"} 1.0',
                 'gateway_tenant_rows_total{tenant="search"} 2.0',
                 'gateway_tenant_tokens_total{tenant="indexing"} 1.0',
                 'gateway_tenant_refusals_total{reason="requests_per_second",tenant="indexing"} 1.0',
                 'gateway_tenant_queue_wait_seconds_count{tenant="search"} 1.0',
                 'gateway_tenant_requests_in_flight{tenant="indexing"} 0.0'):
        assert line in text, line
