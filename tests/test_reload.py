"""SIGHUP reloads the config file: models added, removed and re-tuned, with requests in
flight finishing normally; a broken file keeps the running config."""
from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import logging
import signal
import threading

from gateway import config as gateway_config
from gateway.process.server import reload_models
from tests.harness import http_json, running_gateway, scraped, wait_for
from tests.http_stub import JsonHandler, serving
from tests.processes import gateway as gateway_process
from tests.processes import predictor_calls, simulated_predictor

DEMO = '[[models]]\nname = "demo"\nbackend = "simulated"\n[models.simulated]\ncall_ms = 50\n'
EXTRA = '[[models]]\nname = "extra"\nbackend = "simulated"\n'


def predict(url: str, model: str) -> int:
    return http_json("POST", f"{url}/v1/models/{model}:predict", {"instances": [[1]]})[0]


def clients_of(url: str, statuses: list[int], stop: threading.Event, requests: int) -> list[threading.Thread]:
    """Four clients (not started) that send `demo` at most `requests` requests each, one after
    another, until `stop`, and note each status."""
    def traffic() -> None:
        for _ in range(requests):  # bounded
            if stop.is_set():
                return
            statuses.append(predict(url, "demo"))
    return [threading.Thread(target=traffic) for _ in range(4)]


def test_sighup_adds_retunes_and_removes_models_without_dropping_requests(tmp_path):
    path = tmp_path / "gateway.toml"
    path.write_text(DEMO)
    process = gateway_process(path, log_level="INFO")
    url = "http://" + process.fields["http"]
    statuses: list[int] = []
    stop = threading.Event()
    clients = clients_of(url, statuses, stop, requests=400)
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


def test_a_reload_that_changes_a_models_batch_form_lets_queued_requests_finish_in_their_own(tmp_path):
    """`demo` moves from a KServe v1 predictor (instances) to the simulated one (tensors)
    while requests wait behind a held batch: each finishes on the v1 predictor, in the form
    it was admitted in (they were once sent to the new predictor in the old form: 400);
    requests after the reload go to the new one."""
    held, seen = threading.Event(), []

    class V1Predictor(JsonHandler):
        def do_POST(self) -> None:  # noqa: N802
            rows = self.read_json()["instances"]
            seen.append(len(rows))
            if len(seen) == 1:
                held.wait(30)
            self.answer_json({"predictions": [[2 * x for x in row] for row in rows]})

        def do_GET(self) -> None:  # noqa: N802
            self.answer_json({"ready": True})

    with serving(V1Predictor) as predictor_url:
        v1 = (f'[[models]]\nname = "demo"\nbackend = "kserve"\napi = "v1"\nurl = "{predictor_url}"\n'
              '[[models.inputs]]\nname = "INPUT0"\ndatatype = "FP32"\n'
              '[[models.outputs]]\nname = "OUTPUT0"\ndatatype = "FP32"\n')
        path = tmp_path / "gateway.toml"
        path.write_text(v1)
        process = gateway_process(path, log_level="INFO")
        url = "http://" + process.fields["http"]
        try:
            with concurrent.futures.ThreadPoolExecutor(6) as pool:
                try:
                    blocker = pool.submit(predict, url, "demo")
                    wait_for(lambda: len(seen) == 1, "the first batch held at the v1 predictor")
                    queued = [pool.submit(predict, url, "demo") for _ in range(5)]
                    wait_for(lambda: scraped(url, "gateway_queue_depth", "demo") == 5, "five requests queued")
                    path.write_text('[[models]]\nname = "demo"\nbackend = "simulated"\n'
                                    '[[models.inputs]]\nname = "INPUT0"\ndatatype = "FP32"\nshape = [-1, -1]\n'
                                    '[[models.outputs]]\nname = "OUTPUT0"\ndatatype = "FP32"\nshape = [-1, -1]\n')
                    process.signal(signal.SIGHUP)
                    wait_for(lambda: "reload: replaced ['demo']" in process.log_text(), "the reload")
                    assert predict(url, "demo") == 200  # a new request: the simulated predictor
                finally:
                    held.set()
                assert blocker.result(30) == 200
                assert [future.result(30) for future in queued] == [200] * 5
            assert sum(seen) == 6  # the blocker and the five queued, all on the v1 predictor
        finally:
            assert process.stop() == 0


def test_a_reload_that_lists_other_replicas_takes_them_in_place_with_nothing_lost(tmp_path):
    """Two replicas, then three (the new one joins once ready), then the first alone (the
    others drain and leave): the model keeps its queue and what it learned, no request fails."""
    predictors = [simulated_predictor("--call-ms", "20") for _ in range(3)]
    urls = [f"http://127.0.0.1:{p.fields['http']}" for p in predictors]

    def config(listed: list[str]) -> str:
        return (f'[[models]]\nname = "demo"\nbackend = "kserve"\napi = "v1"\nurl = {listed!r}\n'
                '[[models.inputs]]\nname = "INPUT0"\ndatatype = "FP32"\n'
                '[[models.outputs]]\nname = "OUTPUT0"\ndatatype = "FP32"\n')

    path = tmp_path / "gateway.toml"
    path.write_text(config(urls[:2]))
    process = gateway_process(path, log_level="INFO")
    url = "http://" + process.fields["http"]
    statuses: list[int] = []
    stop = threading.Event()
    clients = clients_of(url, statuses, stop, requests=1500)

    def replicas() -> float:
        return scraped(url, "gateway_predictor_replicas", "demo")

    try:
        for client in clients:
            client.start()
        wait_for(lambda: len(statuses) > 20, "traffic to flow")
        path.write_text(config(urls))
        process.signal(signal.SIGHUP)
        wait_for(lambda: replicas() == 3, "the third replica to join")
        wait_for(lambda: predictor_calls(predictors[2]) > 0, "a batch to reach the third replica")
        path.write_text(config(urls[:1]))
        process.signal(signal.SIGHUP)
        wait_for(lambda: replicas() == 1, "the others to leave")
        drained = len(statuses) + 40  # the batches they had in flight have returned by then
        wait_for(lambda: len(statuses) > drained, "the leaving replicas' last batches to return")
        left = [predictor_calls(p) for p in predictors[1:]]
        more = len(statuses) + 100
        wait_for(lambda: len(statuses) > more, "more traffic, on the one replica left")
        assert [predictor_calls(p) for p in predictors[1:]] == left  # those that left get nothing new
        stop.set()
        for client in clients:
            client.join(timeout=30)
        assert statuses and set(statuses) == {200}
        assert process.stop() == 0
    finally:
        stop.set()
        process.kill()
        for predictor in predictors:
            predictor.stop()
    log = process.log_text()
    assert log.count("replicas ['demo']") == 2 and "replaced" not in log


def test_a_hung_replica_taken_off_the_list_does_not_stall_its_model(tmp_path):
    """An autoscaler's scale-down while a replica hangs: two replicas at one batch in flight
    each (max_inflight's default), the first hung with a batch at it, then a reload lists
    the healthy one alone. The hung batch is counted apart from the slots of the replicas
    in rotation: requests are answered by the healthy replica while it is still out, and
    its own request gets its deadline error, not a hang."""
    hung, healthy = simulated_predictor("--call-ms", "5"), simulated_predictor("--call-ms", "5")
    urls = [f"http://127.0.0.1:{p.fields['http']}" for p in (hung, healthy)]

    def config(listed: list[str]) -> str:
        return (f'[[models]]\nname = "demo"\nbackend = "kserve"\napi = "v1"\nurl = {listed!r}\n'
                '[[models.inputs]]\nname = "INPUT0"\ndatatype = "FP32"\n'
                '[[models.outputs]]\nname = "OUTPUT0"\ndatatype = "FP32"\n'
                '[models.batching]\ntimeout_s = 10\n')

    path = tmp_path / "gateway.toml"
    path.write_text(config(urls))
    process = gateway_process(path)
    url = "http://" + process.fields["http"]
    try:
        assert http_json("POST", f"{urls[0]}/control", {"extra_delay_ms": 3_600_000})[0] == 200
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            stuck = pool.submit(predict, url, "demo")  # both idle: the first listed, the hung one, takes it
            wait_for(lambda: scraped(url, "gateway_batches_in_flight", "demo") == 1, "a batch at the hung replica")
            assert predictor_calls(healthy) == 0
            path.write_text(config(urls[1:]))
            process.signal(signal.SIGHUP)
            wait_for(lambda: scraped(url, "gateway_predictor_replicas", "demo") == 1,
                     "the hung replica to leave the rotation")
            answered = [predict(url, "demo") for _ in range(8)]  # one after another: one batch each
            still_out = not stuck.done()
            assert answered == [200] * 8 and predictor_calls(healthy) == 8
            assert still_out, "the healthy replica answered only after the hung batch was given up"
            assert stuck.result(timeout=60) == 504  # its deadline error: nothing is lost
    finally:
        process.kill()
        for predictor in (hung, healthy):
            predictor.stop()


def test_a_reload_that_changes_only_tenants_says_which_by_name_and_never_a_key(tmp_path, caplog):
    """Tenants added, removed, changed (a weight) and rekeyed (a key file rotated), with the
    models as they were: the reload's line names each, and holds no key nor digest.
    Before: "reload: no changes"."""
    keys = {"a": "sk-a-0123456789abcdef", "b": "sk-b-0123456789abcdef", "b2": "sk-b-rotated-9876543210",
            "c": "sk-c-0123456789abcdef", "d": "sk-d-0123456789abcdef"}
    digest = {name: hashlib.sha256(key.encode()).hexdigest() for name, key in keys.items()}
    key_file = tmp_path / "b.key"
    key_file.write_text(keys["b"] + "\n")

    def tenants(*tables: str) -> str:
        return DEMO + "".join(f"[[tenants]]\n{table}\n" for table in tables)

    a = f'name = "a"\nkey_sha256 = ["{digest["a"]}"]'
    b = f'name = "b"\nkey_file = "{key_file}"'
    c = f'name = "c"\nkey_sha256 = ["{digest["c"]}"]'
    path = tmp_path / "gateway.toml"
    path.write_text(tenants(a, b, c))
    started = gateway_config.load(path)
    with running_gateway(dataclasses.replace(started, server=dataclasses.replace(started.server, http_port=0,
                                                                                 grpc_port=0))) as gw:
        key_file.write_text(keys["b2"] + "\n")
        path.write_text(tenants(b, c + "\nweight = 3", f'name = "d"\nkey_sha256 = ["{digest["d"]}"]'))
        with caplog.at_level(logging.INFO, logger="gateway.process.server"):
            assert gw.call(reload_models(gw.gateway.service, str(path))) is not None
            assert gw.call(reload_models(gw.gateway.service, str(path))) is not None  # the same again
    lines = [record.getMessage() for record in caplog.records if record.getMessage().startswith("reload: ")]
    assert lines == ["reload: tenants added ['d'], tenants removed ['a'], tenants changed ['c'], "
                     "tenant keys changed ['b']", "reload: no changes"], lines
    for secret in (*keys.values(), *digest.values()):
        assert all(secret not in line for line in lines)
