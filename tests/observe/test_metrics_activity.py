"""/metrics and the live page as large as the tenants that send, never the tenants declared,
and rendered off the loop (issue 45, item 4; docs/reference/metrics.md, docs/tenants.md#usage).

A tenant has series (and a row on the live page) once it has sent something, and none
before; with 20,000 declared and a few sending, a scrape holds the few. Both documents are
copied on the loop a chunk of tenants at a time (`BatchScheduler.read_tenant_usage`) and
built in a thread, in one process and in the batcher of `--workers` (which sums its
workers' counts there too). Nothing here is timed: sizes, counts of series, which thread
rendered, and how many times the loop ran during a scrape."""
from __future__ import annotations

import asyncio
import hashlib
import threading
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.batching.config import BatchingConfig, TenantPolicy
from gateway.batching.request import BatchRequest
from gateway.batching.scheduler import USAGE_CHUNK, BatchScheduler
from gateway.config import parse
from gateway.models.forms import served_model
from gateway.observe import live, metrics
from gateway.observe.metrics import Metrics
from gateway.observe.views import LocalViews
from gateway.process.workers import batcher as batcher_module
from gateway.process.workers.batcher import BatcherViews
from tests.batching.support import RecordingExecutor, rows
from tests.harness import http
from tests.observe.test_views import QuietBackend
from tests.processes import gateway as gateway_process
from wire.errors import RateLimited

DECLARED = 20_000


def tenant_series(text: str) -> dict[str, int]:
    """How many samples of the exposition carry each tenant's label."""
    counts: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "tenant" in sample.labels:
                counts[sample.labels["tenant"]] = counts.get(sample.labels["tenant"], 0) + 1
    return counts


async def views_with_tenants(declared: int) -> tuple[LocalViews, BatchScheduler]:
    scheduler = BatchScheduler(asyncio.get_running_loop())
    scheduler.add_model("m", RecordingExecutor(delay_s=0), BatchingConfig(max_hold_s=0, max_queue=100_000))
    config = parse({"models": [{"name": "m", "backend": "simulated"}]}).models[0]
    views = LocalViews(scheduler, {"m": served_model(config, QuietBackend())}, Metrics())  # type: ignore[arg-type]
    scheduler.set_tenants([TenantPolicy(f"t{index}") for index in range(declared)])
    return views, scheduler


async def send(scheduler: BatchScheduler, tenants: range) -> None:
    """One request of each tenant in `tenants`, a few hundred at a time."""
    for start in range(tenants.start, tenants.stop, 500):
        await asyncio.gather(*(scheduler.submit(BatchRequest.arriving("m", rows(0, 1), tenant=f"t{index}"))
                               for index in range(start, min(start + 500, tenants.stop))))


async def test_a_tenant_that_has_sent_nothing_has_no_series_and_one_that_has_sent_something_has_them():
    views, scheduler = await views_with_tenants(2)
    text = (await views.exposition()).decode()
    assert "tenant=" not in text and (await views.live())["tenants"] == []  # declared, silent: nothing
    await send(scheduler, range(1))
    text = (await views.exposition()).decode()
    series = tenant_series(text)
    assert set(series) == {"t0"}, series
    for line in ('gateway_tenant_requests_total{code="200",tenant="t0"} 1.0', 'gateway_tenant_rows_total{tenant="t0"} 1.0',
                 'gateway_tenant_requests_in_flight{tenant="t0"} 0.0'):
        assert line in text, line
    assert [row["name"] for row in (await views.live())["tenants"]] == ["t0"]
    # Written as text directly (gateway.observe.tenant_metrics.text): each family described once, of its type.
    kinds = {family.name: family.type for family in text_string_to_metric_families(text)
             if family.name.startswith("gateway_tenant_")}
    assert kinds == {"gateway_tenant_requests": "counter", "gateway_tenant_rows": "counter",
                     "gateway_tenant_tokens": "counter", "gateway_tenant_queue_wait_seconds": "histogram",
                     "gateway_tenant_refusals": "counter", "gateway_tenant_requests_in_flight": "gauge"}
    assert text.count("# TYPE gateway_tenant_") == len(kinds)


async def test_a_tenant_refused_by_its_quota_has_sent_something_and_has_series():
    views, scheduler = await views_with_tenants(0)
    scheduler.set_tenants([TenantPolicy("idle"), TenantPolicy("held", max_concurrent=0)])
    with pytest.raises(RateLimited, match="max_concurrent"):
        await scheduler.submit(BatchRequest.arriving("m", rows(0, 1), tenant="held"))
    text = (await views.exposition()).decode()
    assert set(tenant_series(text)) == {"held"}
    assert 'gateway_tenant_refusals_total{reason="max_concurrent",tenant="held"} 1.0' in text


async def test_with_20000_tenants_declared_a_scrape_is_as_large_as_the_tenants_that_sent():
    few, _ = await views_with_tenants(3)
    many, scheduler = await views_with_tenants(DECLARED)
    for views in (few, many):
        await send(views.scheduler, range(3))
    small, large = (await few.exposition()).decode(), (await many.exposition()).decode()
    assert tenant_series(large) == tenant_series(small) and set(tenant_series(large)) == {"t0", "t1", "t2"}
    # The same series, so the same text but for the figures themselves (times queued, timestamps).
    assert len(large.splitlines()) == len(small.splitlines())
    assert abs(len(large) - len(small)) < len(small) // 20, (len(large), len(small))
    assert [row["name"] for row in (await many.live())["tenants"]] == ["t0", "t1", "t2"]
    await send(scheduler, range(DECLARED - 2, DECLARED))  # the last declared: still in declared order
    assert [row["name"] for row in (await many.live())["tenants"]] == ["t0", "t1", "t2", "t19998", "t19999"]


async def test_a_large_exposition_is_copied_a_chunk_per_loop_turn_and_rendered_in_a_thread(monkeypatch):
    sending = 5 * USAGE_CHUNK
    views, scheduler = await views_with_tenants(sending)
    await send(scheduler, range(sending))
    rendered: list[bool] = []  # per render: whether it ran on a thread with no running loop
    built: list[bool] = []

    def on_thread() -> bool:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return threading.current_thread() is not threading.main_thread()
        return False

    real_render, real_document = metrics.Scrape.render, live.document
    monkeypatch.setattr(metrics.Scrape, "render", lambda *args: (rendered.append(on_thread()), real_render(*args))[1])
    monkeypatch.setattr(live, "document", lambda *args: (built.append(on_thread()), real_document(*args))[1])

    turns = 0
    stop = asyncio.Event()

    async def ticker() -> None:  # another client of the loop: one callback per loop turn
        nonlocal turns
        while not stop.is_set():
            turns += 1
            await asyncio.sleep(0)

    for read in (views.exposition, views.live):
        turns = 0
        stop.clear()
        ticking = asyncio.ensure_future(ticker())
        await asyncio.sleep(0)
        document = await read()
        stop.set()
        await ticking
        # The tenants' usage came a chunk per turn: the loop ran between every two chunks at least.
        assert turns >= sending // USAGE_CHUNK, (read.__name__, turns)
        if read is views.exposition:
            assert len(tenant_series(document.decode())) == sending  # type: ignore[union-attr]
    assert rendered == [True] and built == [True]


class Workers:
    """The batcher's link to its workers, as `BatcherViews` asks it: one worker's own counts."""

    async def workers_metrics(self) -> list[list[metrics.Family]]:
        return [[("gateway_requests", "counter", "Inference requests answered, by model, protocol and status code",
                  [("gateway_requests_total", {"model": "m", "protocol": "v1", "code": "200"}, "5.0")])]]


async def test_under_workers_the_batcher_sums_and_renders_the_exposition_in_a_thread(monkeypatch):
    local, scheduler = await views_with_tenants(DECLARED)
    await send(scheduler, range(2))
    written: list[str] = []  # by whom: the merge of every process's counts, and the scheduler's text
    real_merge, real_text = batcher_module.merge_families, metrics.Scrape.scheduler_text

    def merge(processes):
        written.append(f"merge on {threading.current_thread().name}")
        return real_merge(processes)

    def scheduler_text(scrape):
        written.append(f"scheduler on {threading.current_thread().name}")
        return real_text(scrape)

    monkeypatch.setattr(batcher_module, "merge_families", merge)
    monkeypatch.setattr(metrics.Scrape, "scheduler_text", scheduler_text)
    text = (await BatcherViews(local, Workers()).exposition()).decode()  # type: ignore[arg-type]
    main = threading.main_thread().name
    assert len(written) == 2 and not any(entry.endswith(f" on {main}") for entry in written), written
    assert set(tenant_series(text)) == {"t0", "t1"}
    assert 'gateway_requests_total{code="200",model="m",protocol="v1"} 5.0' in text


def sha256(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@pytest.mark.parametrize("workers", [1, 2], ids=["one process", "two workers"])
def test_a_gateway_with_20000_tenants_declared_exposes_the_two_that_sent(tmp_path: Path, workers: int):
    path = tmp_path / "gateway.toml"
    path.write_text('[[models]]\nname = "demo"\nbackend = "simulated"\n[models.simulated]\ncall_ms = 1\n' + "".join(
        f'[[tenants]]\nname = "t{index}"\nkey_sha256 = ["{sha256(f"sk-scale-{index:05d}")}"]\n'
        for index in range(DECLARED)))
    process = gateway_process(path, workers=workers)
    try:
        url = "http://" + process.fields["http"]
        for index in (7, 19_999):
            status = http("POST", f"{url}/v1/models/demo:predict", {"instances": [[1.0]]},
                          headers={"Authorization": f"Bearer sk-scale-{index:05d}"})[0]
            assert status == 200
        bearer = {"Authorization": "Bearer sk-scale-00000"}
        scrapes = [http("GET", f"{url}/metrics", headers=bearer) for _ in range(3)]  # any process may answer
        lives = [http("GET", f"{url}/dashboard/data", headers=bearer) for _ in range(3)]
    finally:
        assert process.stop() == 0
    for status, _, body in scrapes:
        assert status == 200
        series = tenant_series(body.decode())
        assert set(series) == {"t7", "t19999"}, sorted(series)[:5]
        assert len(body) < 64 * 1024  # before: 28 MB, 21 series for each declared tenant
    for status, _, body in lives:
        assert status == 200 and b'"t7"' in body and len(body) < 64 * 1024
