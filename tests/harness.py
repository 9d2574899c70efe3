"""Test support: run a real gateway on 127.0.0.1 (free ports) in a background thread, and
a tiny stdlib HTTP client. The gateway is the production `Gateway`, not a double.

Tests that need requests to share (or not share) a batch make it so, never by sleeping:
`held_slot` holds a model's one batch slot at a gate, `queued` reads how many requests wait
behind it, and `wait_for` polls such a condition with a generous bound."""
from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from prometheus_client.parser import text_string_to_metric_families

from gateway import config as gateway_config
from gateway.process.server import Gateway
from tests.batching.support import stats_of


@dataclass
class RunningGateway:
    gateway: Gateway
    loop: asyncio.AbstractEventLoop

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.gateway.http_port}"

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.gateway.grpc_port}"

    def call(self, coroutine: Any, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def stats(self, model: str):
        async def read():
            return stats_of(self.gateway.scheduler, model)
        return self.call(read())


def config_for(*models: dict[str, Any], server: dict[str, Any] | None = None,
               **limits: Any) -> gateway_config.GatewayConfig:
    document: dict[str, Any] = {"models": list(models), "server": {"http_port": 0, "grpc_port": 0, **(server or {})}}
    if limits:
        document["limits"] = limits
    return gateway_config.parse(document)


@contextlib.contextmanager
def running_gateway(config: gateway_config.GatewayConfig, ready_timeout: float = 30,
                    wait_ready: bool = True) -> Iterator[RunningGateway]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="gateway-loop", daemon=True)
    thread.start()
    gateway = Gateway(config)
    running = RunningGateway(gateway, loop)
    try:
        running.call(gateway.start())
        if wait_ready:
            running.call(_wait_ready(gateway, ready_timeout), timeout=ready_timeout + 5)
        yield running
    finally:
        with contextlib.suppress(Exception):
            running.call(gateway.stop(grace_s=1.0))
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


async def _wait_ready(gateway: Gateway, timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await gateway.service.ready():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("the gateway's models did not become ready")
        await asyncio.sleep(0.1)


def http(method: str, url: str, body: bytes | dict | None = None,
         headers: dict[str, str] | None = None, timeout: float = 30) -> tuple[int, dict, bytes]:
    if isinstance(body, dict):
        body = orjson.dumps(body)
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def http_json(method: str, url: str, body: bytes | dict | None = None, **kwargs: Any) -> tuple[int, Any]:
    status, _, payload = http(method, url, body, **kwargs)
    return status, orjson.loads(payload) if payload else None


def timed_predict(gw: RunningGateway, model: str, row: list[float], timeout: float = 30) -> tuple[int, Any, float]:
    """One v1 request of one row: (status, body, seconds taken)."""
    started = time.monotonic()
    status, body = http_json("POST", f"{gw.http_url}/v1/models/{model}:predict", {"instances": [row]}, timeout=timeout)
    return status, body, time.monotonic() - started


def run_clients(gw: RunningGateway, seconds: float, workers: int = 8, limit: int = 2000, pause_s: float = 0.02,
                model: str = "demo", row: list[float] | None = None) -> list[tuple[int, float, float]]:
    """Paced closed-loop v1 clients for a bounded time and count: (status, elapsed, finished_at).

    The pause keeps fast failures during an outage from using up the request budget; a
    client that hangs fails the caller."""
    row = row or [1.0, 1.0]
    results: list[tuple[int, float, float]] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def client() -> None:
        while time.monotonic() < stop_at:
            with lock:
                if len(results) >= limit:
                    return
            status, _, elapsed = timed_predict(gw, model, row)
            with lock:
                results.append((status, elapsed, time.monotonic()))
            time.sleep(pause_s)

    threads = [threading.Thread(target=client) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=seconds + 30)
    assert not any(thread.is_alive() for thread in threads), "a client hung"
    return results


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 20) -> None:
    """Poll `condition` until it holds; fail naming `what` after `timeout` seconds (generous:
    what matters is that it happens, not when)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def queued(gw: RunningGateway, model: str) -> int:
    """How many requests wait in `model`'s queue (read on the gateway's loop)."""
    async def depth() -> int:
        return gw.gateway.scheduler.view(model).queued_rows
    return int(gw.call(depth()))


@contextlib.contextmanager
def held_slot(gw: RunningGateway, model: str) -> Iterator[tuple[threading.Event, list[int]]]:
    """Hold the model's only batch slot (max_inflight 1): the first batch sent while this is
    active waits at the gate, before its predictor call, until the event is set; the list
    records each batch's rows. Deterministic: no timing decides who shares a batch."""
    served = gw.gateway.service.models[model]
    assert served.config.batching.max_inflight == 1
    release, batches = threading.Event(), []
    executor = served.executor  # the model's own (an embedding model's sends each text once)

    async def gated(inputs):
        batches.append(len(inputs[0].data))
        if len(batches) == 1:
            while not release.is_set():
                await asyncio.sleep(0.005)
        return await executor(inputs)

    async def install(executor):
        gw.gateway.scheduler.add_model(model, executor, served.batching)  # as served: its kind's rows, its cap

    gw.call(install(gated))
    try:
        yield release, batches
    finally:
        release.set()
        gw.call(install(executor))


def metric(exposition: str, name: str, model: str) -> float:
    """The sample `name{model=...}` of a /metrics exposition; fails if it is absent."""
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == name and sample.labels.get("model") == model:
                return sample.value
    raise AssertionError(f"{name}{{model={model!r}}} is not in /metrics")


def scraped(http_url: str, name: str, model: str) -> float:
    """The gateway's own figure `name{model=...}`, read from its /metrics now (a process's
    too: with --workers the batcher answers for the whole gateway, whichever worker is asked)."""
    status, _, body = http("GET", f"{http_url}/metrics")
    assert status == 200, body[:200]
    return metric(body.decode(), name, model)
