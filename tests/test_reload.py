"""SIGHUP reloads the config file: models added, removed and re-tuned, with requests in
flight finishing normally; a broken file keeps the running config."""
from __future__ import annotations

import signal
import threading

from tests.harness import http_json, wait_for
from tests.processes import gateway as gateway_process

DEMO = '[[models]]\nname = "demo"\nbackend = "simulated"\n[models.simulated]\ncall_ms = 50\n'
EXTRA = '[[models]]\nname = "extra"\nbackend = "simulated"\n'


def predict(url: str, model: str) -> int:
    return http_json("POST", f"{url}/v1/models/{model}:predict", {"instances": [[1]]})[0]


def test_sighup_adds_retunes_and_removes_models_without_dropping_requests(tmp_path):
    path = tmp_path / "gateway.toml"
    path.write_text(DEMO)
    process = gateway_process(path, log_level="INFO")
    url = "http://" + process.fields["http"]
    statuses: list[int] = []
    stop = threading.Event()

    def traffic():
        for _ in range(400):  # bounded
            if stop.is_set():
                return
            statuses.append(predict(url, "demo"))

    clients = [threading.Thread(target=traffic) for _ in range(4)]
    try:
        for client in clients:
            client.start()
        assert predict(url, "extra") == 404
        path.write_text(DEMO + '[models.batching]\nmax_batch_size = 2\n' + EXTRA)
        process.signal(signal.SIGHUP)
        wait_for(lambda: predict(url, "extra") == 200, "the reload adding extra")
        path.write_text("this is [not toml")
        process.signal(signal.SIGHUP)
        wait_for(lambda: "config error" in process.log_text(), "the broken file to be read and refused")
        assert predict(url, "extra") == 200  # a broken file changes nothing
        path.write_text(DEMO)
        process.signal(signal.SIGHUP)
        wait_for(lambda: predict(url, "extra") == 404, "the reload removing extra")
        stop.set()
        for client in clients:
            client.join(timeout=30)
        assert statuses and set(statuses) == {200}  # nothing dropped across three reloads
        assert process.stop() == 0
    finally:
        stop.set()
        process.kill()
    log = process.log_text()
    assert "config error" in log and "added ['extra']" in log and "removed ['extra']" in log
    assert "retuned ['demo']" in log
