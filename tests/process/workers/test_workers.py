"""`serve --workers N` (gateway/process/workers): N protocol processes on the same ports batch as
one. Real processes: the gateway as users start it, a predictor that records the batches
it gets (and holds them, so that what arrives meanwhile queues), clients on many
connections, which the kernel spreads over the workers (checked, per connection, in /proc)."""
from __future__ import annotations

import concurrent.futures
import contextlib
import http.client
import http.server
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import orjson
import pytest

from tests.harness import http_json, scraped, wait_for
from tests.http_stub import JsonHandler, serving
from tests.predictors.harness import SMALL_BATCH_CODE, SMALL_BATCH_CONFIG
from tests.processes import ServerProcess, python_module
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc

WORKERS = 2


# -- the predictor and the gateway ------------------------------------------------------------

class RecordingPredictor:
    """A KServe v1 predictor that records each call's rows and how many calls it had at once;
    with `hold` set, every call waits for `release`."""

    def __init__(self) -> None:
        self.batches: list[list[list[float]]] = []
        self.concurrent = 0
        self.most_concurrent = 0
        self.lock = threading.Lock()
        self.hold = False
        self.release = threading.Event()

    @contextlib.contextmanager
    def serving(self) -> Iterator[str]:
        predictor = self

        class Handler(JsonHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                rows = self.read_json()["instances"]
                with predictor.lock:
                    predictor.batches.append(rows)
                    predictor.concurrent += 1
                    predictor.most_concurrent = max(predictor.most_concurrent, predictor.concurrent)
                try:
                    if predictor.hold:
                        predictor.release.wait(60)  # a bound only: the test releases it
                    time.sleep(0.002)
                finally:
                    with predictor.lock:
                        predictor.concurrent -= 1
                self.answer_json({"predictions": [[2 * x for x in row] for row in rows]})

            def do_GET(self) -> None:  # noqa: N802 - KServe v1 readiness: GET /v1/models/<name>
                self.answer_json({"name": self.path.rsplit("/", 1)[-1], "ready": True})

        try:
            with serving(Handler) as url:
                yield url
        finally:
            self.release.set()


MODEL = '''[[models]]
name = "{name}"
backend = "kserve"
api = "v1"
url = "{url}"
[[models.inputs]]
name = "INPUT0"
datatype = "FP32"
[[models.outputs]]
name = "OUTPUT0"
datatype = "FP32"
[models.batching]
max_batch_size = 64
max_inflight = 1
'''


@contextlib.contextmanager
def gateway_with_workers(config: Path, workers: int = WORKERS, tmpdir: Path | None = None) -> Iterator[ServerProcess]:
    """`--workers`; `tmpdir`: the temporary folder its batcher keeps its folder in (TMPDIR)."""
    env = {**os.environ, "TMPDIR": str(tmpdir)} if tmpdir is not None else None
    process = python_module("gateway", "serve", "--config", str(config), "--http-port", "0", "--grpc-port", "0",
                            "--workers", str(workers), "--log-level", "INFO", ready_timeout=60, env=env)
    try:
        yield process
    finally:
        pids = worker_pids(process)
        process.stop()
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in pids:  # never left behind, whatever the test did
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def worker_pids(process: ServerProcess) -> list[int]:
    """The workers' PIDs now, as the supervisor logged them (started, or started again);
    worker 0 is the batcher's own process."""
    pids: dict[int, int] = {}
    for index, pid in re.findall(r"(\d+) \(pid (\d+)[,)]", process.log_text()):
        pids[int(index)] = int(pid)
    for index, pid in re.findall(r"worker (\d+) started again \(pid (\d+)\)", process.log_text()):
        pids[int(index)] = int(pid)
    return list(pids.values())


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def owner_of(connection: http.client.HTTPConnection, server_port: int, pids: list[int]) -> int | None:
    """Which process holds the server side of a client's TCP connection (from /proc)."""
    assert connection.sock is not None
    client_port = connection.sock.getsockname()[1]
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = fields[1], fields[2]
        if int(local.split(":")[1], 16) == server_port and int(remote.split(":")[1], 16) == client_port:
            inode = fields[9]
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd) == f"socket:[{inode}]":
                    return pid
    return None


def post(connection: http.client.HTTPConnection, model: str, value: float) -> tuple[int, dict]:
    connection.request("POST", f"/v1/models/{model}:predict", orjson.dumps({"instances": [[value]]}),
                       {"Content-Type": "application/json"})
    response = connection.getresponse()
    return response.status, orjson.loads(response.read())


def connections_on_every_worker(process: ServerProcess, count: int) -> list[http.client.HTTPConnection]:
    """`count` open connections, at least one held by each worker."""
    pids = worker_pids(process)
    connections: list[http.client.HTTPConnection] = []
    owners: set[int | None] = set()
    for _ in range(200):
        connection = http.client.HTTPConnection("127.0.0.1", process.port("http"), timeout=60)
        connection.connect()
        time.sleep(0.005)  # accepted by its worker
        connections.append(connection)
        owners.add(owner_of(connection, process.port("http"), pids))
        if len(connections) >= count and owners >= set(pids):
            return connections
    raise AssertionError(f"200 connections never reached every worker: {owners} of {pids}")


@pytest.fixture
def predictor() -> Iterator[tuple[RecordingPredictor, str]]:
    recording = RecordingPredictor()
    with recording.serving() as url:
        yield recording, url


# -- one gateway ---------------------------------------------------------------------------

def test_one_ready_line_names_the_workers_and_every_worker_serves_the_ports(tmp_path, predictor):
    recording, url = predictor
    config = tmp_path / "gateway.toml"
    config.write_text(MODEL.format(name="demo", url=url))
    with gateway_with_workers(config) as gw:
        assert gw.fields["workers"] == str(WORKERS)
        pids = worker_pids(gw)
        assert len(pids) == WORKERS and all(alive(pid) for pid in pids)
        connections = connections_on_every_worker(gw, 4)
        for index, connection in enumerate(connections):
            status, body = post(connection, "demo", index)
            assert status == 200 and body["predictions"] == [[2.0 * index]]
            connection.close()


def test_requests_at_different_workers_leave_in_one_batch_and_max_inflight_holds_for_the_gateway(
        tmp_path, predictor):
    recording, url = predictor
    config = tmp_path / "gateway.toml"
    config.write_text(MODEL.format(name="demo", url=url))
    with gateway_with_workers(config) as gw:
        connections = connections_on_every_worker(gw, 12)
        recording.hold = True
        with concurrent.futures.ThreadPoolExecutor(len(connections)) as pool:
            try:
                first = pool.submit(post, connections[0], "demo", 1000)
                wait_for(lambda: recording.batches, "the first request to be held at the predictor")
                rest = [pool.submit(post, connection, "demo", index)
                        for index, connection in enumerate(connections[1:])]
                # Released only once every other request, from either worker, waits at the batcher.
                wait_for(lambda: scraped(gw.http_url, "gateway_queue_depth", "demo") == len(rest),
                         f"{len(rest)} requests queued at the batcher")
            finally:
                recording.hold = False
                recording.release.set()
            answers = [first.result(), *(future.result() for future in rest)]
        assert all(status == 200 for status, _ in answers)
        assert [body["predictions"] for _, body in answers[1:]] == [[[2.0 * i]] for i in range(len(rest))]
        # The workers' requests, queued together at the one batcher, left as one batch.
        assert sorted(row[0] for row in recording.batches[1]) == sorted(float(i) for i in range(len(rest)))
        assert len(recording.batches) == 2
        # Under load from every worker, one batch at a time (max_inflight = 1 for the gateway).
        recording.batches.clear()
        with concurrent.futures.ThreadPoolExecutor(len(connections)) as pool:
            loads = [pool.submit(lambda c: [post(c, "demo", 1)[0] for _ in range(20)], c) for c in connections]
            assert all(statuses == [200] * 20 for statuses in (f.result() for f in loads))
        assert recording.most_concurrent == 1 and len(recording.batches) < 20 * len(connections)
        for connection in connections:
            connection.close()


def test_a_requests_deadline_counts_the_time_it_spent_in_its_worker(tmp_path, predictor):
    """A request whose body takes 0.6 s to reach a worker, with a 1 s deadline, behind a held
    predictor: answered 504 once 1 s has passed since it arrived at the worker, not 1 s after
    it reached the batcher (1.6 s)."""
    recording, url = predictor
    config = tmp_path / "gateway.toml"
    config.write_text(MODEL.format(name="demo", url=url))
    with gateway_with_workers(config) as gw:
        pids = worker_pids(gw)
        on_worker = next(c for c in connections_on_every_worker(gw, 2)
                         if owner_of(c, gw.port("http"), pids) != pids[0])  # not the batcher's own process
        recording.hold = True
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            try:
                blocker = pool.submit(post, http.client.HTTPConnection("127.0.0.1", gw.port("http"), timeout=60),
                                      "demo", 1)
                wait_for(lambda: recording.batches, "the blocker to be held at the predictor")
                body = orjson.dumps({"instances": [[2.0]]})
                started = time.monotonic()
                on_worker.putrequest("POST", "/v1/models/demo:predict")
                for name, value in (("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                                    ("X-Request-Timeout-Ms", "1000")):
                    on_worker.putheader(name, value)
                on_worker.endheaders()
                time.sleep(0.6)  # the body arrives slowly: the client's deadline runs meanwhile
                on_worker.send(body)
                response = on_worker.getresponse()
                answered_after = time.monotonic() - started
                answer = orjson.loads(response.read())
            finally:
                recording.hold = False
                recording.release.set()
            assert blocker.result()[0] == 200
        assert response.status == 504, answer
        assert "in the queue" in answer["error"]  # queued at the batcher in time, expired there
        # Its deadline ran from its arrival at the worker: answered at 1 s (a margin for a busy
        # machine), not at 1.6 s, which a clock started at the batcher would give.
        assert 1.0 <= answered_after < 1.4, answered_after
        on_worker.close()


def sockets_to(port: int, pid: int) -> int:
    """How many TCP connections process `pid` holds to 127.0.0.1:`port` (from /proc)."""
    inodes = {fields[9] for fields in (line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:])
              if int(fields[2].split(":")[1], 16) == port and fields[3] == "01"}  # remote port, ESTABLISHED
    held = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            held += os.readlink(fd).removeprefix("socket:[").removesuffix("]") in inodes
    return held


def test_workers_build_no_predictor_clients_and_learn_what_the_batchers_know(tmp_path, predictor):
    """A worker calls no predictor: it holds no connection to one, and what its models learn
    from their predictors (a signature nobody declared, readiness) it asks the batcher."""
    recording, url = predictor
    config = tmp_path / "gateway.toml"
    config.write_text(MODEL.format(name="demo", url=url) + '''
[[models]]
name = "sim"
backend = "simulated"
''')
    with gateway_with_workers(config) as gw:
        pids = worker_pids(gw)
        on_worker = next(c for c in connections_on_every_worker(gw, 2)
                         if owner_of(c, gw.port("http"), pids) != pids[0])
        assert post(on_worker, "demo", 3)[0] == 200
        # The simulated model's signature, declared nowhere, learned by the batcher from its
        # predictor and by the worker from the batcher: instances need its input's name.
        on_worker.request("GET", "/v2/models/sim")
        described = orjson.loads(on_worker.getresponse().read())
        assert [spec["name"] for spec in described["inputs"]] == ["INPUT0"]
        on_worker.request("POST", "/v1/models/sim:predict", orjson.dumps({"instances": [[1.0, 2.0]]}))
        response = on_worker.getresponse()
        assert response.status == 200 and orjson.loads(response.read())["predictions"] == [[2.0, 4.0]]
        on_worker.request("GET", "/v2/models/demo/ready")  # the batcher's client asks the predictor
        ready = on_worker.getresponse()
        assert ready.status == 200, ready.read()
        ready.read()
        predictor_port = int(url.rsplit(":", 1)[1].split("/")[0])
        assert sockets_to(predictor_port, pids[0]) >= 1  # the batcher's client, kept alive
        assert all(sockets_to(predictor_port, pid) == 0 for pid in pids[1:])
        on_worker.close()


def test_metrics_statistics_and_readiness_describe_the_whole_gateway(tmp_path, predictor):
    recording, url = predictor
    config = tmp_path / "gateway.toml"
    config.write_text(MODEL.format(name="demo", url=url))
    with gateway_with_workers(config) as gw:
        connections = connections_on_every_worker(gw, 6)
        for connection in connections:
            for value in range(5):
                assert post(connection, "demo", value)[0] == 200
            connection.close()
        answered = 5 * len(connections)
        for _ in range(3):  # whichever worker answers, the same whole-gateway figures
            status, text = _send(gw, "GET", "/metrics")
            assert status == 200
            assert f'gateway_requests_total{{code="200",model="demo",protocol="v1"}} {answered}.0' in text
            assert f'gateway_batched_instances_total{{model="demo"}} {answered}.0' in text
            status, statistics = http_json("GET", f"{gw.http_url}/v2/models/demo/stats")
            assert status == 200 and statistics["model_stats"][0]["inference_count"] == answered
            status, live = http_json("GET", f"{gw.http_url}/dashboard/data")
            assert status == 200 and live["models"][0]["counts"]["answered"] == answered
        assert http_json("GET", f"{gw.http_url}/v2/models/nope/stats")[0] == 404
        assert http_json("GET", f"{gw.http_url}/v2/health/ready")[0] == 200


def test_every_front_end_works_through_the_workers(tmp_path, predictor):
    recording, url = predictor
    config = tmp_path / "gateway.toml"
    config.write_text(MODEL.format(name="demo", url=url))
    with gateway_with_workers(config) as gw:
        status, body = http_json("POST", f"{gw.http_url}/v2/models/demo/infer", {"inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [3]}]})
        assert status == 200 and body["outputs"][0]["data"] == [6.0]
        status, text = _send(gw, "POST", "/predictions/demo", b"[4]")
        assert status == 200 and orjson.loads(text) == [8.0]  # TorchServe's JSON form
        with grpc.insecure_channel(gw.grpc_address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            request = pb.ModelInferRequest(model_name="demo", id="g")
            request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1]).contents.fp32_contents.append(5)
            assert stub.ModelInfer(request, timeout=10).id == "g"
            answers = list(stub.ModelStreamInfer(iter([request, request]), timeout=10))
            assert [a.infer_response.id for a in answers] == ["g", "g"] and not answers[0].error_message
            statistics = stub.ModelStatistics(pb.ModelStatisticsRequest(name="demo"), timeout=10)
            assert statistics.model_stats[0].inference_count >= 4
        status, _ = _send(gw, "POST", "/v1/models/demo:predict", b'{"instances": [[1]')
        assert status == 400  # a bad input is the worker's to refuse, as in one process


# -- lifecycle ------------------------------------------------------------------------------

def test_a_killed_worker_is_restarted_and_its_clients_get_errors_never_hangs(tmp_path, predictor):
    recording, url = predictor
    config = tmp_path / "gateway.toml"
    config.write_text(MODEL.format(name="demo", url=url))
    with gateway_with_workers(config) as gw:
        connections = connections_on_every_worker(gw, 4)
        victim = next(pid for pid in worker_pids(gw) if pid != gw.pid)  # a worker process, not the batcher
        on_victim = [c for c in connections if owner_of(c, gw.port("http"), [victim]) == victim]
        recording.hold = True
        with concurrent.futures.ThreadPoolExecutor(len(on_victim)) as pool:
            held = [pool.submit(post, connection, "demo", 1) for connection in on_victim]
            # Killed while its requests are in: one batch held at the predictor, the rest queued.
            wait_for(lambda: len(recording.batches) == 1
                     and scraped(gw.http_url, "gateway_queue_depth", "demo") == len(on_victim) - len(recording.batches[0]),
                     "the victim's requests held at the predictor and queued at the batcher")
            os.kill(victim, signal.SIGKILL)
            for future in held:  # an error (the connection closed), within its timeout, not a hang
                with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
                    future.result(timeout=30)
        recording.hold = False
        recording.release.set()
        wait_for(lambda: re.search(r"worker \d started again", gw.log_text()) is not None, "the worker's restart")
        assert re.search(r"worker \d \(pid \d+\) exited with status -9", gw.log_text()), gw.log_text()
        assert len([pid for pid in worker_pids(gw) if alive(pid)]) == WORKERS
        fresh = connections_on_every_worker(gw, 4)  # both workers serve again
        assert all(post(connection, "demo", 2)[0] == 200 for connection in fresh)
        for connection in connections + fresh:
            connection.close()


def test_reload_and_drain_reach_every_worker(tmp_path, predictor):
    recording, url = predictor
    config = tmp_path / "gateway.toml"
    # A grace longer than the test's waits: what is held when SIGTERM comes is answered, not cut off.
    server = "[server]\ngrace_s = 60\n"
    config.write_text(server + MODEL.format(name="demo", url=url))
    with gateway_with_workers(config) as gw:
        config.write_text(server + MODEL.format(name="demo", url=url) + MODEL.format(name="added", url=url))
        gw.signal(signal.SIGHUP)
        connections = connections_on_every_worker(gw, 6)
        deadline = time.monotonic() + 20
        pending = list(connections)
        while pending and time.monotonic() < deadline:  # every worker takes the new model
            pending = [c for c in pending if post(c, "added", 1)[0] != 200]
            time.sleep(0.05)
        assert not pending, "a worker never took the reloaded model"
        # SIGTERM drains every worker: what they hold is answered, then everything exits.
        recording.hold = True
        recording.batches.clear()  # the "added" calls above
        pids = worker_pids(gw)
        with concurrent.futures.ThreadPoolExecutor(len(connections)) as pool:
            try:
                held = [pool.submit(post, connection, "demo", 1) for connection in connections]
                # Every request is in: one batch held at the predictor, the rest queued behind it.
                wait_for(lambda: len(recording.batches) == 1
                         and scraped(gw.http_url, "gateway_queue_depth", "demo") == len(connections) - len(recording.batches[0]),
                         "one batch held at the predictor and the other requests queued at the batcher")
                os.kill(gw.pid, signal.SIGTERM)
                # Released only once the batcher and every worker process have begun to drain.
                wait_for(lambda: "stopping: the workers finish their requests" in gw.log_text()
                         and gw.log_text().count("stopping: finishing queued and in-flight requests") == WORKERS - 1,
                         "the batcher and every worker to begin draining")
            finally:
                recording.hold = False
                recording.release.set()
            assert [future.result(timeout=60)[0] for future in held] == [200] * len(connections)
        assert gw.wait(30) == 0
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [pid for pid in pids if alive(pid)]


def test_a_worker_started_again_serves_the_config_the_gateway_serves_now(tmp_path, predictor):
    """Reloaded, then a worker killed: started again, it serves the models added by the
    reload (it once read the config of the gateway's start, and answered them 404)."""
    recording, url = predictor
    config = tmp_path / "gateway.toml"
    config.write_text(MODEL.format(name="demo", url=url))
    with gateway_with_workers(config) as gw:
        config.write_text(MODEL.format(name="demo", url=url) + MODEL.format(name="added", url=url))
        os.kill(gw.pid, signal.SIGHUP)
        wait_for(lambda: gw.log_text().count("reload: added ['added']") == WORKERS, "every process to reload")
        victim = next(pid for pid in worker_pids(gw) if pid != gw.pid)
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: re.search(r"worker \d started again", gw.log_text()) is not None, "the worker's restart")
        restarted = next(pid for pid in worker_pids(gw) if pid not in (gw.pid, victim))
        on_restarted = [c for c in connections_on_every_worker(gw, 8)
                        if owner_of(c, gw.port("http"), [restarted]) == restarted]
        assert on_restarted and all(post(connection, "added", 1)[0] == 200 for connection in on_restarted)


def test_reloads_while_a_worker_starts_never_kill_it(tmp_path, predictor):
    """SIGHUPs every 50 ms while a worker starts again: it starts once, and serves what the
    reloads brought (the config it started with, or its own reload once READY)."""
    recording, url = predictor
    config = tmp_path / "gateway.toml"
    config.write_text(MODEL.format(name="demo", url=url))
    with gateway_with_workers(config) as gw:
        victim = next(pid for pid in worker_pids(gw) if pid != gw.pid)
        os.kill(victim, signal.SIGKILL)
        config.write_text(MODEL.format(name="demo", url=url) + MODEL.format(name="added", url=url))
        restarted = time.monotonic()
        while re.search(r"worker \d started again", gw.log_text()) is None:
            assert time.monotonic() - restarted < 30, "the worker never started again"
            os.kill(gw.pid, signal.SIGHUP)
            time.sleep(0.05)
        for _ in range(10):  # and a few more once it runs
            os.kill(gw.pid, signal.SIGHUP)
            time.sleep(0.05)
        assert len(re.findall(r"exited with status", gw.log_text())) == 1, gw.log_text()  # the kill, nothing after
        fresh = next(pid for pid in worker_pids(gw) if pid not in (gw.pid, victim))
        on_fresh = [c for c in connections_on_every_worker(gw, 8) if owner_of(c, gw.port("http"), [fresh]) == fresh]
        assert on_fresh and all(post(connection, "added", 1)[0] == 200 for connection in on_fresh)


def test_a_drain_past_grace_answers_every_request_through_every_worker(tmp_path, predictor):
    """40 requests or more at a held predictor, over HTTP and gRPC, through every worker; SIGTERM
    with a 1 s grace: each gets an answer (503 / UNAVAILABLE for what grace could not
    finish), never an empty close."""
    recording, url = predictor
    config = tmp_path / "gateway.toml"
    config.write_text("[server]\ngrace_s = 1.0\n" + MODEL.format(name="demo", url=url))
    with gateway_with_workers(config) as gw:
        connections = connections_on_every_worker(gw, 20)
        channels = [grpc.insecure_channel(f"127.0.0.1:{gw.port('grpc')}",
                                          options=[("grpc.use_local_subchannel_pool", 1)]) for _ in range(20)]

        def over_grpc(channel: grpc.Channel) -> str:
            request = pb.ModelInferRequest(model_name="demo")
            request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1]).contents.fp32_contents.append(1.0)
            try:
                pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=60)
                return "OK"
            except grpc.RpcError as error:
                return f"{error.code().name}: {error.details()}"

        # At least 20 connections (more when it took more to reach every worker), a thread each:
        # every request is sent before the signal, none waits for a thread and comes after it.
        requests = len(connections) + len(channels)
        recording.hold = True
        with concurrent.futures.ThreadPoolExecutor(requests) as pool:
            try:
                over_http = [pool.submit(post, connection, "demo", 1) for connection in connections]
                grpc_calls = [pool.submit(over_grpc, channel) for channel in channels]
                wait_for(lambda: len(recording.batches) == 1
                         and scraped(gw.http_url, "gateway_queue_depth", "demo") == requests - len(recording.batches[0]),
                         "one batch held at the predictor and the other requests queued at the batcher")
                stopped = time.monotonic()
                os.kill(gw.pid, signal.SIGTERM)
                http_answers = [future.result(timeout=30) for future in over_http]
                grpc_answers = [future.result(timeout=30) for future in grpc_calls]
            finally:
                recording.hold = False
                recording.release.set()
        assert all(status == 503 for status, _ in http_answers), http_answers
        assert all(answer.startswith("UNAVAILABLE: the gateway is shutting down") for answer in grpc_answers), grpc_answers
        assert gw.wait(30) == 0
        assert time.monotonic() - stopped < 10  # grace, then the workers' exit: no longer
        for channel in channels:
            channel.close()


def test_a_second_signal_hurries_the_batcher_and_every_worker(tmp_path, predictor):
    recording, url = predictor
    config = tmp_path / "gateway.toml"
    config.write_text("[server]\ngrace_s = 30.0\n" + MODEL.format(name="demo", url=url))
    with gateway_with_workers(config) as gw:
        connections = connections_on_every_worker(gw, 6)  # 6 or more: a thread each, every request in before the signal
        recording.hold = True
        with concurrent.futures.ThreadPoolExecutor(len(connections)) as pool:
            try:
                held = [pool.submit(post, connection, "demo", 1) for connection in connections]
                wait_for(lambda: len(recording.batches) == 1
                         and scraped(gw.http_url, "gateway_queue_depth", "demo") == len(connections) - len(recording.batches[0]),
                         "one batch held at the predictor and the rest queued at the batcher")
                os.kill(gw.pid, signal.SIGTERM)
                wait_for(lambda: "stopping: the workers finish their requests" in gw.log_text()
                         and gw.log_text().count("stopping: finishing queued and in-flight requests") == WORKERS - 1,
                         "the batcher and every worker to begin draining")
                hurried = time.monotonic()
                os.kill(gw.pid, signal.SIGTERM)  # the second: nobody waits out the 30 s grace
                answers = [future.result(timeout=30)[0] for future in held]
                assert gw.wait(30) == 0
                took = time.monotonic() - hurried
            finally:
                recording.hold = False
                recording.release.set()
        assert answers == [503] * len(connections)
        assert took < 10, took  # against a 30 s grace


def test_the_token_stays_out_of_files_and_a_killed_batchers_folder_is_removed_by_its_successor(tmp_path, predictor):
    recording, url = predictor
    config = tmp_path / "gateway.toml"
    config.write_text('[server]\nauth_token_env = "WORKERS_FOLDER_TOKEN"\n' + MODEL.format(name="demo", url=url))
    os.environ["WORKERS_FOLDER_TOKEN"] = "s3cret-in-no-file"
    # A temporary folder of the test's own: any batcher starting on this machine removes a dead
    # batcher's folder it finds, and one of another test run (beside this one) did so once
    # between the kill and the successor, which then had nothing left to remove.
    # Short (tmp_path is too long for the batcher's AF_UNIX socket path).
    tmpdir = Path(tempfile.mkdtemp(prefix="bgw-"))
    try:
        with gateway_with_workers(config, tmpdir=tmpdir) as gw:
            [folder] = tmpdir.glob(f"batching-gateway-{gw.pid}-*")
            assert all(b"s3cret-in-no-file" not in path.read_bytes() for path in folder.iterdir() if path.is_file())
            auth = {"Authorization": "Bearer s3cret-in-no-file"}
            on_workers = connections_on_every_worker(gw, 4)
            for connection in on_workers:  # every process knows the token, workers too
                connection.request("POST", "/v1/models/demo:predict", orjson.dumps({"instances": [[1.0]]}), auth)
                response = connection.getresponse()
                assert response.status == 200, response.read()
                response.read()
                connection.close()
            workers = worker_pids(gw)[1:]
            os.kill(gw.pid, signal.SIGKILL)  # no clean-up: the folder stays behind
            wait_for(lambda: not any(alive(pid) for pid in workers), "the workers to stop with their batcher gone")
            assert folder.exists()
        with gateway_with_workers(config, tmpdir=tmpdir) as successor:
            assert not folder.exists()
            assert "left behind by a batcher" in successor.log_text()
    finally:
        del os.environ["WORKERS_FOLDER_TOKEN"]
        shutil.rmtree(tmpdir, ignore_errors=True)


def test_a_config_error_exits_2_before_anything_starts(tmp_path):
    config = tmp_path / "gateway.toml"
    config.write_text('[server]\nworkers = 0\n[[models]]\nname = "demo"\nbackend = "simulated"\n')
    with pytest.raises(RuntimeError, match=r"server.workers"):
        python_module("gateway", "serve", "--config", str(config), ready_timeout=20)


def _send(gw: ServerProcess, method: str, path: str, body: bytes | None = None,
          headers: dict[str, str] | None = None) -> tuple[int, str]:
    """One request on a connection of its own, its body sent as it is (JSON or not)."""
    connection = http.client.HTTPConnection("127.0.0.1", gw.port("http"), timeout=10)
    try:
        connection.request(method, path, body, {"Content-Type": "application/json", **(headers or {})})
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def test_padding_priorities_deadlines_and_the_token_hold_through_the_workers(tmp_path):
    config = tmp_path / "gateway.toml"
    config.write_text('''[server]
auth_token_env = "WORKERS_TEST_TOKEN"
[[models]]
name = "enc"
backend = "simulated"
simulated = { call_ms = 5 }
[[models.inputs]]
name = "INPUT0"
datatype = "FP32"
shape = [-1, -1]
pad = { dim = 1, value = 0 }
[[models.outputs]]
name = "OUTPUT0"
datatype = "FP32"
shape = [-1, -1]
follows_pad = 1
[models.batching]
slo_ms = 500
priority_levels = 2
''')
    os.environ["WORKERS_TEST_TOKEN"] = "s3cret"  # read by the supervisor when it parses the config
    try:
        with gateway_with_workers(config) as gw:
            url = f"{gw.http_url}/v1/models/enc:predict"
            assert http_json("POST", url, {"instances": [[1.0]]})[0] == 401
            auth = {"Authorization": "Bearer s3cret"}
            status, body = http_json("POST", url, {"instances": [[1.0, 2.0, 3.0], [4.0]]}, headers=auth)
            assert status == 200 and body["predictions"] == [[2.0, 4.0, 6.0], [8.0]]  # each at its own length
            status, body = http_json("POST", f"{gw.http_url}/v2/models/enc/infer", {
                "parameters": {"priority": 1, "timeout": 400000}, "inputs": [
                    {"name": "INPUT0", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]}, headers=auth)
            assert status == 200 and body["outputs"][0]["data"] == [2.0, 4.0]
            status, body = http_json("POST", f"{gw.http_url}/v2/models/enc/infer", {"parameters": {"priority": 3},
                                     "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1]}]},
                                     headers=auth)
            assert status == 400 and "batching.priority_levels" in body["error"]  # the batcher's refusal, relayed
            status, text = _send(gw, "GET", "/metrics", headers=auth)
            assert 'gateway_priority_requests_total{level="1",model="enc"} 1.0' in text
    finally:
        del os.environ["WORKERS_TEST_TOKEN"]



ENCODER = '''[[models]]
name = "encoder"
backend = "simulated"
[models.simulated]
task = "embed"
call_ms = 2
[models.batching]
max_batch_size = 8
max_batch_tokens = 64
'''


def _samples(gw: ServerProcess) -> list[tuple[str, dict, float]]:
    """Every sample of the gateway's /metrics: (name, labels, value)."""
    from prometheus_client.parser import text_string_to_metric_families

    status, text = _send(gw, "GET", "/metrics", None)
    assert status == 200
    return [(sample.name, sample.labels, sample.value)
            for family in text_string_to_metric_families(text) for sample in family.samples]


def test_embedding_clients_at_every_worker_get_their_own_vectors_in_token_capped_batches(tmp_path):
    from backends.simulated.encoder import vector

    config = tmp_path / "gateway.toml"
    config.write_text(ENCODER)
    with gateway_with_workers(config) as gw:
        connections = connections_on_every_worker(gw, 6)

        def embed(index: int) -> tuple[int, dict]:
            connection = connections[index]
            texts = [f"client {index} text {i}" + "x" * (4 * i) for i in range(5)]
            connection.request("POST", "/v1/embeddings", orjson.dumps({"model": "encoder", "input": texts}),
                               {"Content-Type": "application/json"})
            response = connection.getresponse()
            answer = orjson.loads(response.read())
            ok = response.status == 200 and all(
                item["embedding"] == pytest.approx(vector(texts[item["index"]].encode()).tolist(), rel=1e-6)
                for item in answer["data"])
            return response.status, {"ok": ok, "tokens": answer.get("usage", {}).get("prompt_tokens")}

        with concurrent.futures.ThreadPoolExecutor(len(connections)) as pool:
            results = list(pool.map(embed, range(len(connections))))
        assert all(status == 200 and result["ok"] for status, result in results), results
        # The rows' token counts crossed the channel: no batch cost more than 64 tokens (rows x
        # longest), and every request was split to fit.
        costs = {labels.get("le"): value for name, labels, value in _samples(gw)
                 if name.startswith("gateway_batch_cost") and labels.get("model") == "encoder"}
        assert costs["64"] == costs["+Inf"] > 0, costs
        status, body = http_json("POST", f"{gw.http_url}/v1/embeddings",
                                 {"model": "encoder", "input": "x", "dimensions": 4})
        assert status == 400 and "'dimensions' is passed only" in body["error"]["message"]
        for connection in connections:
            connection.close()


RERANKER = '''[[models]]
name = "reranker"
backend = "simulated"
[models.simulated]
task = "rerank"
call_ms = 2
[models.batching]
max_batch_size = 8
'''


def test_rerank_clients_at_every_worker_get_their_own_scores_best_first(tmp_path):
    from backends.simulated.reranker import score

    config = tmp_path / "gateway.toml"
    config.write_text(RERANKER)
    with gateway_with_workers(config) as gw:
        connections = connections_on_every_worker(gw, 6)

        def rerank(index: int) -> tuple[int, bool]:
            connection = connections[index]
            query, documents = f"query of client {index}", [f"document {i} of client {index}" for i in range(12)]
            connection.request("POST", "/v2/rerank", orjson.dumps({"model": "reranker", "query": query,
                                                                   "documents": documents}),
                               {"Content-Type": "application/json"})
            response = connection.getresponse()
            results = orjson.loads(response.read()).get("results", [])
            own = [score(query.encode(), document.encode()) for document in documents]
            expected = sorted(range(12), key=lambda i: -own[i])
            ok = [item["index"] for item in results] == expected and all(
                item["relevance_score"] == pytest.approx(own[item["index"]], rel=1e-6) for item in results)
            return response.status, ok

        with concurrent.futures.ThreadPoolExecutor(len(connections)) as pool:
            results = list(pool.map(rerank, range(len(connections))))
        assert all(status == 200 and ok for status, ok in results), results
        for connection in connections:
            connection.close()


def test_an_untuned_gateway_keeps_to_tritons_max_batch_size_through_the_workers(tmp_path, triton_server):
    """The batcher reads the real Triton model's max_batch_size (4) and caps the whole
    gateway's batches there: requests of 10 rows at every worker are split to fit, and
    Triton refuses none (it would refuse a batch of more than 4 whole)."""
    with triton_server.loaded(SMALL_BATCH_CONFIG, SMALL_BATCH_CODE) as backend_model:
        config = tmp_path / "gateway.toml"
        config.write_text(f'[[models]]\nname = "small"\nbackend = "triton"\nurl = "{triton_server.http_url}"\n'
                          f'backend_model = "{backend_model}"\n')
        with gateway_with_workers(config) as gw:
            url = f"http://127.0.0.1:{gw.port('http')}"
            wait_for(lambda: http_json("GET", f"{url}/v2/models/small/ready")[0] == 200, "the model ready")
            connections = connections_on_every_worker(gw, 4)

            def predict(index: int) -> tuple[int, bool]:
                rows = [[float(index), float(i)] for i in range(10)]
                connections[index].request("POST", "/v1/models/small:predict", orjson.dumps({"instances": rows}),
                                           {"Content-Type": "application/json"})
                response = connections[index].getresponse()
                answer = orjson.loads(response.read())
                return response.status, answer.get("predictions") == [[2 * a, 2 * b] for a, b in rows]

            with concurrent.futures.ThreadPoolExecutor(len(connections)) as pool:
                results = list(pool.map(predict, range(len(connections))))
            for connection in connections:
                connection.close()
        assert results == [(200, True)] * len(connections)
        assert max(triton_server.batch_size_counts(backend_model)) <= 4
        [stats] = triton_server.model_stats(backend_model)["model_stats"]
        assert int(stats["inference_stats"]["fail"]["count"]) == 0
