"""Overload, clients that go away, and shutdown: nothing lost, nothing hangs."""
from __future__ import annotations

import concurrent.futures
import signal
import socket
import threading
import time

from tests.harness import config_for, held_slot, http_json, queued, running_gateway, wait_for
from tests.processes import gateway as gateway_process


def slow_demo(call_ms: float, **batching) -> dict:
    return {"name": "demo", "backend": "simulated", "simulated": {"call_ms": call_ms},
            "batching": {"max_batch_size": 8, **batching}}


def predict(url: str, value: float, timeout: float = 30) -> tuple[int, dict]:
    return http_json("POST", f"{url}/v1/models/demo:predict", {"instances": [[value]]}, timeout=timeout)


def test_ten_times_capacity_is_refused_at_once_and_accepted_work_finishes():
    # Capacity: 8 rows per 50 ms = 160/s. Offer ~10x that for a bounded time and count.
    config = config_for(slow_demo(50, max_queue=32, timeout_s=10))
    with running_gateway(config) as gw:
        statuses: list[int] = []
        refusal_times: list[float] = []
        depth_seen: list[int] = []

        def client(i: int) -> None:
            started = time.monotonic()
            status, body = predict(gw.http_url, float(i))
            if status == 200:
                assert body["predictions"] == [[2.0 * i]]
            elif status == 429:
                refusal_times.append(time.monotonic() - started)
            statuses.append(status)

        def watch_depth():
            for _ in range(40):
                depth_seen.append(gw.call(_depth(gw)))
                time.sleep(0.025)

        watcher = threading.Thread(target=watch_depth)
        watcher.start()
        with concurrent.futures.ThreadPoolExecutor(64) as pool:
            list(pool.map(client, range(1600)))
        watcher.join()
        assert set(statuses) <= {200, 429}
        assert statuses.count(429) > 0 and statuses.count(200) > 0
        assert len(statuses) == 1600  # every request got exactly one answer
        assert max(depth_seen) <= 32  # the queue never grew past its bound
        assert sorted(refusal_times)[len(refusal_times) // 2] < 0.5  # refused at once, not after waiting
        status, body = predict(gw.http_url, 5.0)  # serving normally afterwards
        assert status == 200 and body["predictions"] == [[10.0]]


async def _depth(gw):
    return gw.gateway.scheduler.view("demo").queued_rows


def test_a_client_that_disconnects_while_queued_is_removed_and_never_sent():
    config = config_for(slow_demo(10))
    with running_gateway(config) as gw, held_slot(gw, "demo") as (release, batches):
        answers: list[tuple[int, dict]] = []
        blocker = threading.Thread(target=lambda: answers.append(predict(gw.http_url, 1.0)))
        blocker.start()
        # The blocker's batch holds the only slot until released: what comes next queues.
        wait_for(lambda: len(batches) == 1, "the blocker's batch to reach the gate")
        body = b'{"instances": [[777.0]]}'
        request = (f"POST /v1/models/demo:predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        with socket.create_connection(("127.0.0.1", gw.gateway.http_port)) as raw:
            raw.sendall(request)
            wait_for(lambda: queued(gw, "demo") == 1, "the raw client's row to be queued")
        wait_for(lambda: queued(gw, "demo") == 0, "the gone client's row to leave the queue")
        release.set()
        blocker.join(timeout=30)
        assert len(answers) == 1 and answers[0][0] == 200 and answers[0][1]["predictions"] == [[2.0]], answers
        # Only the blocker's row ever reached the predictor: its batch is the one batch sent.
        assert batches == [1]
        assert gw.stats("demo").instances == 1


def _config_file(tmp_path, call_ms: float, grace_s: float, max_batch_size: int = 8):
    path = tmp_path / "gateway.toml"
    path.write_text(f'[server]\ngrace_s = {grace_s}\n[[models]]\nname = "demo"\nbackend = "simulated"\n'
                    f'[models.simulated]\ncall_ms = {call_ms}\n[models.batching]\nmax_batch_size = {max_batch_size}\n')
    return path


def _received(url: str) -> int:
    """Requests the gateway's scheduler has taken in for demo, as GET /dashboard/data counts them."""
    status, snapshot = http_json("GET", f"{url}/dashboard/data")
    assert status == 200, snapshot
    (model,) = snapshot["models"]
    return model["counts"]["requests"]


def _fire(url: str, count: int) -> tuple[list, list[threading.Thread]]:
    results: list = []
    threads = [threading.Thread(target=lambda i=i: results.append(predict(url, float(i)))) for i in range(count)]
    for thread in threads:
        thread.start()
    return results, threads


def test_sigterm_under_load_finishes_queued_and_in_flight_work_and_exits_0(tmp_path):
    process = gateway_process(_config_file(tmp_path, call_ms=200, grace_s=10))
    url = "http://" + process.fields["http"]
    try:
        results, threads = _fire(url, 24)  # 3 batches of 8 at 200 ms each
        # A connection the gateway has not yet taken a request from is not work it owes:
        # signal only once every request is in its scheduler (queued or at the predictor).
        wait_for(lambda: _received(url) == 24, "all 24 requests to reach the gateway's scheduler")
        process.signal(signal.SIGTERM)
        for thread in threads:
            thread.join(timeout=20)
        assert len(results) == 24
        assert all(status == 200 for status, _ in results), results
        assert process.wait(timeout=20) == 0
    finally:
        process.kill()


def test_second_sigterm_ends_the_grace_period_and_answers_the_rest_503(tmp_path):
    # INFO: the gateway logs when it has taken the first signal (see below).
    process = gateway_process(_config_file(tmp_path, call_ms=1500, grace_s=60, max_batch_size=1), log_level="INFO")
    url = "http://" + process.fields["http"]
    try:
        results, threads = _fire(url, 6)  # 6 batches of 1.5 s: cannot finish quickly
        wait_for(lambda: _received(url) == 6, "all 6 requests to reach the gateway's scheduler")
        process.signal(signal.SIGTERM)
        # Only a signal that arrives after the first was handled is a second one: two sent
        # before the process runs merge into one pending signal, and the grace period would stand.
        wait_for(lambda: "stopping: finishing queued and in-flight requests" in process.log_text(),
                 "the gateway to take the first SIGTERM")
        stopped_at = time.monotonic()
        process.signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
        assert time.monotonic() - stopped_at < 5  # not the 60 s grace period
        for thread in threads:
            thread.join(timeout=10)
        assert len(results) == 6  # every client got an answer
        assert {status for status, _ in results} <= {200, 503}
        assert any(status == 503 for status, _ in results)
        assert all("shutting down" in body["error"] for status, body in results if status == 503)
    finally:
        process.kill()
