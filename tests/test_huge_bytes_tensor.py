"""A huge BYTES tensor for an FP32 model (issue 36): refused from its header, while the other
clients of the same process keep being answered.

The hostile body, as the issue found it: a 64 MB binary OIP body (gzip'd to about 64 KB)
declaring 16 M empty BYTES elements for an FP32 model, over HTTP, and the same over gRPC
raw_input_contents. Before, the gateway decoded every element in Python before it checked
the datatype: the 400 came after seconds, and every other client of that process waited as
long. Now the model's check runs on the tensor's header, before its payload is decoded
(`gateway.service.InferenceService.decode`).

Real processes: the gateway as users start it (one process, and `--workers 2`), good
clients on connections held by each of its processes (told apart in /proc), the bad client
beside them. What is asserted is the order of events, never a duration: over HTTP, a good
client of the bad request's own process is answered after the bad body was sent and before
its 400 arrived (the body is inflated in a thread and never decoded: the loop stays free).
Over gRPC likewise
with the message gzip'd by its client (inflated in a thread, never decoded); as sent, 64 MB
take a while to arrive, and good clients are answered meanwhile whatever the gateway does
after, so there `test_a_hostile_tensor_is_refused_before_its_payload_is_decoded` holds
both front ends to the order itself, in process: the check, and no decoding of that
payload at all.
"""
from __future__ import annotations

import gzip
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.client import HTTPConnection

import grpc
import numpy as np
import orjson
import pytest

from tests.harness import config_for, http, running_gateway, wait_for
from tests.process.workers.test_workers import connections_on_every_worker, owner_of, worker_pids
from tests.processes import ServerProcess, gateway
from wire.codecs import raw
from wire.codecs.limits import DEFAULT_LIMITS
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc

# As many 4-byte empty elements as fit in the default max_body_bytes beside the JSON header.
COUNT = (DEFAULT_LIMITS.max_body_bytes - 4096) // raw.LENGTH_BYTES
PROBLEM = "is FP32, got BYTES"
GOOD_REQUESTS = 3000  # per good client, a bound only: each stops when the bad request is answered

MODEL = """[[models]]
name = "demo"
backend = "simulated"
[[models.inputs]]
name = "INPUT0"
datatype = "FP32"
shape = [-1, -1]
"""


def hostile_header(count: int = COUNT) -> bytes:
    return orjson.dumps({"inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [1, count],
                                     "parameters": {"binary_data_size": raw.LENGTH_BYTES * count}}]})


@pytest.fixture(scope="module")
def hostile_http_body() -> tuple[bytes, bytes]:
    """(JSON header, the whole body gzip'd): generated, never a file in git."""
    header = hostile_header()
    return header, gzip.compress(header + bytes(raw.LENGTH_BYTES * COUNT), 9)


def hostile_grpc_message() -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name="demo")
    message.inputs.add(name="INPUT0", datatype="BYTES", shape=[1, COUNT])
    message.raw_input_contents.append(bytes(raw.LENGTH_BYTES * COUNT))
    return message


@pytest.fixture(scope="module", params=[1, 2], ids=["one-process", "workers-2"])
def served(request, tmp_path_factory) -> Iterator[ServerProcess]:
    config = tmp_path_factory.mktemp("huge-bytes") / "gateway.toml"
    config.write_text(MODEL)
    process = gateway(config, log_level="INFO", workers=request.param)
    try:
        yield process
    finally:
        process.stop()


class GoodClients:
    """One closed-loop good client per connection (one on each of the gateway's processes),
    each answer recorded as an event beside the bad client's, in the order they happened."""

    def __init__(self, process: ServerProcess) -> None:
        self.port = process.port("http")
        self.pids = worker_pids(process) or [process.pid]
        count = len(self.pids)
        if count > 1:  # connected, and owned by each of the processes between them
            self.connections = connections_on_every_worker(process, count)
        else:
            self.connections = [HTTPConnection("127.0.0.1", self.port, timeout=120)]
            self.connections[0].connect()
        self.events: list[tuple[str, int | None]] = []  # (what, the process it happened at)
        self.failures: list[str] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._client, args=(connection,)) for connection in self.connections]

    def event(self, what: str, pid: int | None = None) -> None:
        with self.lock:
            self.events.append((what, pid))

    def owner(self, connection: HTTPConnection) -> int:
        """The process holding the server side of a connection, once one has accepted it."""
        if len(self.pids) == 1:
            return self.pids[0]
        found: list[int | None] = [None]

        def accepted() -> bool:
            found[0] = owner_of(connection, self.port, self.pids)
            return found[0] is not None

        wait_for(accepted, "a worker to accept the connection")
        assert found[0] is not None
        return found[0]

    def _client(self, connection: HTTPConnection) -> None:
        pid = self.owner(connection)
        for i in range(GOOD_REQUESTS):
            if self.stop.is_set():
                return
            connection.request("POST", "/v1/models/demo:predict", orjson.dumps({"instances": [[i, 1.0]]}),
                               {"Content-Type": "application/json"})
            response = connection.getresponse()
            body = orjson.loads(response.read())
            if response.status != 200 or body["predictions"] != [[2.0 * i, 2.0]]:
                self.failures.append(f"{response.status} {body}")
                return
            self.event("good", pid)

    def __enter__(self) -> GoodClients:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=120)
        for connection in self.connections:
            connection.close()
        assert not any(thread.is_alive() for thread in self.threads), "a good client hung"

    def answered_between(self, first: str, last: str) -> set[int | None]:
        """The processes whose good client was answered at least twice between these two
        events: one answer may be one the process had already written when it began on the
        bad request; a second one it wrote while it had the bad request in hand."""
        with self.lock:
            names = [name for name, _ in self.events]
            start, end = names.index(first), names.index(last)
            answers = Counter(pid for name, pid in self.events[start + 1:end] if name == "good")
            return {pid for pid, count in answers.items() if count >= 2}

    def wait_for_an_answer_from_each(self) -> None:
        """Every good client answered at least once: they are all running."""
        deadline = time.monotonic() + 60
        while {pid for name, pid in list(self.events) if name == "good"} < set(self.pids):
            assert time.monotonic() < deadline and not self.failures, (self.failures, self.events[-5:])
            time.sleep(0.01)


def test_a_huge_gzip_bytes_body_for_an_fp32_model_is_refused_while_its_process_keeps_answering(
        served, hostile_http_body):
    header, body = hostile_http_body
    with GoodClients(served) as good:
        good.wait_for_an_answer_from_each()
        bad = HTTPConnection("127.0.0.1", good.port, timeout=120)
        bad.connect()
        bad_pid = good.owner(bad)
        bad.request("POST", "/v2/models/demo/infer", body, {
            "Content-Type": "application/octet-stream", "Content-Encoding": "gzip",
            "Inference-Header-Content-Length": str(len(header))})
        good.event("bad sent")  # http.client returns once the whole body is written
        response = bad.getresponse()
        answer = orjson.loads(response.read())
        good.event("bad answered")
        # The connection is kept: the next request on it is served.
        bad.request("POST", "/v1/models/demo:predict", b'{"instances": [[1, 2]]}', {"Content-Type": "application/json"})
        again = bad.getresponse()
        assert (again.status, orjson.loads(again.read())["predictions"]) == (200, [[2.0, 4.0]])
        bad.close()
    assert not good.failures, good.failures
    assert response.status == 400 and PROBLEM in answer["error"], answer
    assert bad_pid in good.answered_between("bad sent", "bad answered"), (bad_pid, good.events[-20:])


@pytest.mark.parametrize("compressed", [False, True], ids=["as-sent", "gzip-message"])
def test_a_huge_raw_bytes_message_for_an_fp32_model_is_refused_while_every_process_keeps_answering(
        served, compressed):
    """As the issue sent it, 64 MB on the wire; and the same message gzip'd by its client (the
    gateway inflates it itself, off the event loop), which reaches the gateway at once."""
    data = hostile_grpc_message().SerializeToString()
    if compressed:
        data = gzip.compress(data, 9)
    with GoodClients(served) as good, grpc.insecure_channel(served.fields["grpc"]) as channel:
        infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",  # the bytes as they are
                                    response_deserializer=pb.ModelInferResponse.FromString)
        grpc.channel_ready_future(channel).result(timeout=30)  # connected: the bad call starts at once
        good.wait_for_an_answer_from_each()
        good.event("bad sent")
        with pytest.raises(grpc.RpcError) as refused:
            infer(data, timeout=120)
        good.event("bad answered")
    assert not good.failures, good.failures
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert PROBLEM in (refused.value.details() or "")
    assert good.answered_between("bad sent", "bad answered") == set(good.pids), good.events[-20:]


# -- the order itself, in process ---------------------------------------------------------------------

@pytest.fixture
def decoded(monkeypatch) -> list[str]:
    """The datatype of each payload decoded (`raw.to_array`), in order, while the test runs."""
    seen: list[str] = []
    to_array = raw.to_array

    def recording(name, datatype, shape, count, data):
        seen.append(datatype)
        return to_array(name, datatype, shape, count, data)

    monkeypatch.setattr(raw, "to_array", recording)
    return seen


def test_a_hostile_tensor_is_refused_before_its_payload_is_decoded(decoded):
    """The model's check comes before the payload is decoded, over both front ends: the
    hostile tensor's elements are never read. Scaled down: the order is what is asserted."""
    count = 100_000
    demo = {"name": "demo", "backend": "simulated",
            "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, -1]}]}
    with running_gateway(config_for(demo)) as gw:
        header = hostile_header(count)
        status, _, payload = http("POST", f"{gw.http_url}/v2/models/demo/infer", header + bytes(4 * count),
                                  headers={"Inference-Header-Content-Length": str(len(header))})
        assert (status, PROBLEM in orjson.loads(payload)["error"]) == (400, True), payload
        message = pb.ModelInferRequest(model_name="demo")
        message.inputs.add(name="INPUT0", datatype="BYTES", shape=[1, count])
        message.raw_input_contents.append(bytes(4 * count))
        with grpc.insecure_channel(gw.grpc_address) as channel, pytest.raises(grpc.RpcError) as refused:
            pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(message, timeout=30)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and PROBLEM in refused.value.details()
        assert decoded == []
        # A good binary request is still decoded, and answered.
        good = np.array([[1.0, 2.0]], dtype=np.float32)
        good_header = orjson.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 2],
                                                "parameters": {"binary_data_size": 8}}]})
        status, _, payload = http("POST", f"{gw.http_url}/v2/models/demo/infer", good_header + good.tobytes(),
                                  headers={"Inference-Header-Content-Length": str(len(good_header))})
        assert status == 200 and orjson.loads(payload)["outputs"][0]["data"] == [2.0, 4.0], payload
        assert decoded == ["FP32"]


def test_more_rows_than_the_queue_holds_are_refused_before_the_payload_is_decoded(decoded):
    """A request declaring more rows than `max_queue` could never be queued: refused (413) by
    its header, its payload never decoded (before, it was decoded and then refused)."""
    demo = {"name": "demo", "backend": "simulated", "batching": {"max_queue": 8},
            "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 1]}]}
    with running_gateway(config_for(demo)) as gw:
        for rows in (9, 8):
            header = orjson.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [rows, 1],
                                               "parameters": {"binary_data_size": 4 * rows}}]})
            status, _, payload = http("POST", f"{gw.http_url}/v2/models/demo/infer", header + bytes(4 * rows),
                                      headers={"Inference-Header-Content-Length": str(len(header))})
            if rows == 9:
                assert status == 413 and b"9 instances but model 'demo' queues at most 8" in payload, payload
                assert decoded == []
            else:
                assert status == 200, payload
                assert decoded == ["FP32"]
