"""The HTTP front end's connection layer (gateway/rest/connections.py): timeouts per phase,
the connection cap, request heads refused with 414 and 431, absolute-form targets, an
accept that fails for want of descriptors backing off instead of spinning, an early
refusal that keeps the connection when the body is small (http.client, aiohttp and
Triton's aio client then send their next request on it) and says `Connection: close`
otherwise, reaching a client still sending its body (a lingering close, bounded, whose
sockets count against the cap: gateway/rest/lingering.py, tested here through the
server that uses it), and the listen backlog."""
from __future__ import annotations

import asyncio
import contextlib
import errno
import http.client
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import numpy as np
import orjson
import pytest
import tornado.netutil
import tritonclient.http.aio as triton_aio
from tritonclient.utils import InferenceServerException

from gateway.rest.connections import DRAIN_BYTES
from tests.harness import RunningGateway, config_for, http_json, running_gateway
from tests.processes import ServerProcess, gateway

SHORT_S = 0.5          # the timeouts under test
CLOSED_WITHIN_S = 5.0  # generous: what matters is that it happens, not when
PREDICT = b'{"instances": [[1, 2]]}'


@pytest.fixture(scope="module")
def gw() -> Iterator[RunningGateway]:
    config = config_for({"name": "demo", "backend": "simulated"},
                        server={"header_timeout_s": SHORT_S, "idle_timeout_s": SHORT_S, "body_timeout_s": SHORT_S,
                                "max_connections": 8})
    with running_gateway(config) as running:
        yield running


def address(gw: RunningGateway) -> tuple[str, int]:
    host, port = gw.http_url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


@contextlib.contextmanager
def connection(gw: RunningGateway) -> Iterator[socket.socket]:
    with socket.create_connection(address(gw), timeout=CLOSED_WITHIN_S) as sock:
        yield sock


def predict_request(target: str = "/v1/models/demo:predict", extra_headers: bytes = b"") -> bytes:
    return (b"POST %s HTTP/1.1\r\nHost: gw\r\nContent-Length: %d\r\n%s\r\n%s"
            % (target.encode(), len(PREDICT), extra_headers, PREDICT))


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin1").split("\r\n")
    headers = {name.lower(): value.strip() for name, value in (line.split(":", 1) for line in lines[1:])}
    while len(body) < int(headers.get("content-length", 0)):
        chunk = sock.recv(65536)
        assert chunk
        body += chunk
    return int(lines[0].split()[1]), headers, body


def closed_by_server(sock: socket.socket) -> bool:
    """True when the server closes the connection (EOF or reset) within CLOSED_WITHIN_S."""
    sock.settimeout(CLOSED_WITHIN_S)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


# -- pipelining ----------------------------------------------------------------------------

def test_pipelined_requests_are_read_one_at_a_time_and_answered_in_order(gw):
    """HTTP/1.1 pipelining holds at most one request of a connection in the gateway: the
    next is read only once the previous answer is written, so a client that pipelines
    without reading is pushed back by TCP, as a gRPC stream's is by its window."""
    before = gw.stats("demo").batches
    bodies = [orjson.dumps({"instances": [[i, i]]}) for i in range(20)]
    with connection(gw) as sock:
        sock.sendall(b"".join(b"POST /v1/models/demo:predict HTTP/1.1\r\nHost: gw\r\nContent-Length: %d\r\n\r\n%s"
                              % (len(body), body) for body in bodies))
        reader = sock.makefile("rb")
        for i in range(len(bodies)):
            assert reader.readline().split()[1] == b"200"
            length = 0
            while (line := reader.readline()) != b"\r\n":
                name, _, value = line.decode("latin1").partition(":")
                length = int(value) if name.lower() == "content-length" else length
            assert orjson.loads(reader.read(length))["predictions"] == [[2 * i, 2 * i]]
    # Read together, they would have shared batches (each call takes 5 ms); one at a time, never.
    assert gw.stats("demo").batches - before == len(bodies)


# -- timeouts -------------------------------------------------------------------------------

def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout(gw):
    with connection(gw) as sock:
        assert closed_by_server(sock)


def test_a_head_sent_too_slowly_is_cut_off_after_the_header_timeout(gw):
    with connection(gw) as sock:
        sock.sendall(b"POST /v1/models/demo:predict HTTP/1.1\r\n")
        for _ in range(4):  # slowloris: a header line now and then, never the end of the head
            time.sleep(SHORT_S / 2)
            with contextlib.suppress(OSError):
                sock.sendall(b"X-Slow: 1\r\n")
        assert closed_by_server(sock)


def test_a_kept_alive_connection_serves_requests_then_closes_when_idle(gw):
    with connection(gw) as sock:
        for _ in range(3):
            sock.sendall(predict_request())
            status, _, body = read_response(sock)
            assert status == 200 and orjson.loads(body)["predictions"] == [[2, 4]]
        assert closed_by_server(sock)


def test_a_body_that_stops_arriving_is_cut_off_after_the_body_timeout(gw):
    with connection(gw) as sock:
        sock.sendall(b"POST /v1/models/demo:predict HTTP/1.1\r\nHost: gw\r\nContent-Length: 100\r\n\r\n[1")
        assert closed_by_server(sock)
    assert http_json("POST", f"{gw.http_url}/v1/models/demo:predict", orjson.loads(PREDICT))[0] == 200


def test_timeouts_are_counted_in_metrics(gw):
    with connection(gw) as sock:
        assert closed_by_server(sock)
    status, _, exposition = _get(gw, "/metrics")
    timed_out = next(line for line in exposition.decode().splitlines()
                     if line.startswith("gateway_http_connections_timed_out_total "))
    assert float(timed_out.split()[1]) >= 1


# -- the connection cap ------------------------------------------------------------------------

def open_connections(gw: RunningGateway) -> int:
    return gw.gateway.front_ends.http_server.stats.open


def wait_for_open_connections(gw: RunningGateway, count: int) -> None:
    deadline = time.monotonic() + CLOSED_WITHIN_S
    while open_connections(gw) != count:
        assert time.monotonic() < deadline, f"{open_connections(gw)} connections open, expected {count}"
        time.sleep(0.02)


def test_beyond_max_connections_a_new_connection_gets_503_and_is_closed(gw):
    wait_for_open_connections(gw, 0)  # earlier tests' connections are gone
    held = [socket.create_connection(address(gw)) for _ in range(8)]
    try:
        wait_for_open_connections(gw, 8)
        with connection(gw) as extra:
            status, headers, body = read_response(extra)
            assert status == 503
            assert headers["retry-after"] == "1" and headers["connection"] == "close"
            assert "server.max_connections" in orjson.loads(body)["error"]
            assert closed_by_server(extra)
    finally:
        for sock in held:
            sock.close()
    wait_for_open_connections(gw, 0)
    assert http_json("POST", f"{gw.http_url}/v1/models/demo:predict", orjson.loads(PREDICT))[0] == 200


# -- request heads ------------------------------------------------------------------------------

def test_a_request_target_over_8_kib_gets_414(gw):
    with connection(gw) as sock:
        sock.sendall(predict_request("/v1/models/demo:predict?pad=" + "x" * 100_000))
        status, headers, body = read_response(sock)
        assert status == 414 and headers["connection"] == "close"
        assert "request target" in orjson.loads(body)["error"]


def test_a_header_block_over_64_kib_gets_431(gw):
    headers_70k = b"".join(b"X-Filler-%d: %s\r\n" % (i, b"y" * 1000) for i in range(70))
    with connection(gw) as sock:
        sock.sendall(predict_request(extra_headers=headers_70k))
        status, _, body = read_response(sock)
        assert status == 431
        assert "headers" in orjson.loads(body)["error"]
    assert http_json("POST", f"{gw.http_url}/v1/models/demo:predict", orjson.loads(PREDICT))[0] == 200


def test_an_absolute_form_target_is_served_as_its_path(gw):
    with connection(gw) as sock:
        sock.sendall(predict_request("http://gateway.example:8080/v1/models/demo:predict"))
        status, _, body = read_response(sock)
        assert status == 200 and orjson.loads(body)["predictions"] == [[2, 4]]


def test_an_absolute_form_target_keeps_its_query(gw):
    with connection(gw) as sock:
        sock.sendall(b"GET http://gw/v2/models/demo/ready?verbose=1 HTTP/1.1\r\nHost: other\r\n\r\n")
        status, _, _ = read_response(sock)
        assert status == 200


# -- accept failures -------------------------------------------------------------------------------

class _ExhaustedListener:
    """A listening socket whose accept fails as it does at the open-files limit."""

    def accept(self):
        raise OSError(errno.EMFILE, "Too many open files")


def test_an_accept_that_fails_for_want_of_descriptors_backs_off_then_resumes(gw):
    server = gw.gateway.front_ends.http_server
    before = server.stats.accept_failures

    async def exhaust() -> None:
        server._on_acceptable(_ExhaustedListener(), 0)

    gw.call(exhaust())
    assert server.stats.accept_failures == before + 1
    # Accepting resumes by itself once the backoff has passed.
    assert http_json("POST", f"{gw.http_url}/v1/models/demo:predict", orjson.loads(PREDICT))[0] == 200


def test_a_listening_socket_added_while_serving_is_served_too(gw):
    server = gw.gateway.front_ends.http_server
    later = tornado.netutil.bind_sockets(0, "127.0.0.1")

    async def add() -> None:
        server.add_sockets(later)

    gw.call(add())
    port = later[0].getsockname()[1]
    status, _ = http_json("POST", f"http://127.0.0.1:{port}/v1/models/demo:predict", orjson.loads(PREDICT), timeout=5)
    assert status == 200


def _get(gw: RunningGateway, path: str) -> tuple[int, dict[str, str], bytes]:
    with connection(gw) as sock:
        sock.sendall(b"GET %s HTTP/1.1\r\nHost: gw\r\n\r\n" % path.encode())
        return read_response(sock)


@pytest.fixture(scope="module")
def small_limits() -> Iterator[RunningGateway]:
    config = config_for({"name": "demo", "backend": "simulated"}, max_body_bytes=8_000_000, max_json_bytes=50_000)
    with running_gateway(config) as running:
        yield running


def urllib_post(url: str, body: bytes) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def http_client_post(url: str, body: bytes) -> tuple[int, bytes]:
    host, port = url.removeprefix("http://").split("/", 1)[0].rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("POST", "/" + url.split("/", 3)[3], body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


@pytest.mark.parametrize("client", [urllib_post, http_client_post], ids=["urllib", "http.client"])
@pytest.mark.parametrize("size, limit", [(24_000_000, "exceeds the limit"), (7_000_000, "max_json_bytes")])
def test_an_early_refusal_reaches_clients_that_write_their_whole_body_before_reading(small_limits, client, size, limit):
    """Refused from its head alone (413), the body unread: the answer is not lost to a reset
    (these clients got 0 of 10 before the connection lingered at its close). The bodies are
    larger than what the kernel's buffers hold, so the client is still sending at the close."""
    url = f"{small_limits.http_url}/v1/models/demo:predict"
    body = b'{"instances": [' + b"[1]," * (size // 4) + b"[1]]}"
    answers = [client(url, body) for _ in range(10)]
    assert [status for status, _ in answers] == [413] * 10
    assert limit in orjson.loads(answers[0][1])["error"]
    assert http_json("POST", url, {"instances": [[1.0]]})[0] == 200  # and the gateway keeps serving


def test_a_lingering_close_is_bounded_in_time_for_a_client_that_never_stops_sending(small_limits):
    host, port = small_limits.http_url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port))) as client:
        client.sendall(b"POST /v1/models/demo:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n")
        answer = client.recv(65536)
        assert answer.startswith(b"HTTP/1.1 413"), answer
        client.settimeout(0.05)
        started = time.monotonic()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            while time.monotonic() - started < 30:  # a client that keeps sending: the gateway closes first
                with contextlib.suppress(TimeoutError, socket.timeout):
                    client.send(b"x" * 65536)
        assert time.monotonic() - started < 30


def test_a_chunked_body_whose_chunk_size_line_is_too_long_gets_400_not_a_reset(gw):
    with socket.create_connection(address(gw), timeout=10) as client:
        client.sendall(b"POST /v1/models/demo:predict HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                       + b"1" + b"0" * 99 + b"\r\n")  # a chunk-size line of 102 bytes: Tornado reads 64 at most
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), answer[:200]
    assert "chunked body is malformed" in orjson.loads(body)["error"]
    assert http_json("POST", f"{gw.http_url}/v1/models/demo:predict", {"instances": [[1.0]]})[0] == 200


# -- an answer before the body: keep-alive, or Connection: close -----------------------------------

SMALL_JSON_LIMIT = 20_000   # max_json_bytes below DRAIN_BYTES: its 413 comes before a body that is drained
OIP_GOOD = orjson.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]})
ROUNDS = 20                 # refused-then-good rounds per client


@pytest.fixture(scope="module")
def early() -> Iterator[RunningGateway]:
    """The default timeouts (a kept-alive client is never cut off by them here)."""
    config = config_for({"name": "demo", "backend": "simulated"}, max_json_bytes=SMALL_JSON_LIMIT)
    with running_gateway(config) as running:
        yield running


def accepted(gw: RunningGateway) -> int:
    return gw.gateway.front_ends.http_server.stats.accepted


EARLY_REFUSALS = [
    # (id, path, body, headers, status): each refused from the head alone, its body unread
    ("unknown-model", "/v2/models/absent/infer", OIP_GOOD, {}, 404),
    ("unknown-version", "/v2/models/demo/versions/9/infer", OIP_GOOD, {}, 404),
    ("json-over-max_json_bytes", "/v1/models/demo:predict", b" " * (SMALL_JSON_LIMIT + 1), {}, 413),
    ("bad-timeout-header", "/v2/models/demo/infer", OIP_GOOD, {"X-Request-Timeout-Ms": "soon"}, 400),
    ("unsupported-content-encoding", "/v2/models/demo/infer", OIP_GOOD, {"Content-Encoding": "br"}, 415),
    ("no-body", "/v2/models/absent/infer", b"", {}, 404),
    ("largest-drained-body", "/v2/models/absent/infer", b" " * DRAIN_BYTES, {}, 404),
]


@pytest.mark.parametrize("case_id, path, body, headers, status", EARLY_REFUSALS, ids=[c[0] for c in EARLY_REFUSALS])
def test_after_a_refusal_before_a_small_body_http_client_sends_its_next_request_on_the_same_connection(
        early, case_id, path, body, headers, status):
    """Before, the gateway closed the connection after such an answer without saying so, and
    http.client's next request on it failed (RemoteDisconnected)."""
    client = http.client.HTTPConnection(*address(early), timeout=30)
    try:
        client.request("POST", path, body, headers)
        refused = client.getresponse()
        refused.read()
        assert refused.status == status
        assert refused.getheader("Connection") is None  # kept alive
        sock = client.sock
        client.request("POST", "/v2/models/demo/infer", OIP_GOOD)
        answer = client.getresponse()
        assert answer.status == 200 and orjson.loads(answer.read())["outputs"][0]["data"] == [2, 4]
        assert client.sock is sock  # the same connection, not a new one
    finally:
        client.close()


def test_after_a_401_http_client_sends_its_next_request_on_the_same_connection(monkeypatch):
    monkeypatch.setenv("GATEWAY_TOKEN", "s3cret")
    with running_gateway(config_for({"name": "demo", "backend": "simulated"},
                                    server={"auth_token_env": "GATEWAY_TOKEN"})) as gw:
        client = http.client.HTTPConnection(*address(gw), timeout=30)
        try:
            client.request("POST", "/v2/models/demo/infer", OIP_GOOD, {"Authorization": "Bearer wrong"})
            refused = client.getresponse()
            refused.read()
            assert refused.status == 401 and refused.getheader("Connection") is None
            sock = client.sock
            client.request("POST", "/v2/models/demo/infer", OIP_GOOD, {"Authorization": "Bearer s3cret"})
            assert client.getresponse().status == 200 and client.sock is sock
        finally:
            client.close()


def test_a_drained_body_is_never_read_as_a_request(early):
    """The body of a refused request is dropped whole, even when it looks like a request."""
    smuggled = b"GET /metrics HTTP/1.1\r\nHost: gw\r\n\r\n"
    with connection(early) as sock:
        sock.sendall(b"POST /v2/models/absent/infer HTTP/1.1\r\nHost: gw\r\nContent-Length: %d\r\n\r\n%s"
                     % (len(smuggled), smuggled))
        assert read_response(sock)[0] == 404
        sock.sendall(predict_request())
        status, _, body = read_response(sock)
        assert status == 200 and orjson.loads(body)["predictions"] == [[2, 4]]


@pytest.mark.parametrize("case_id, head", [
    ("body-over-DRAIN_BYTES", b"Content-Length: %d\r\n" % (DRAIN_BYTES + 1)),
    ("chunked", b"Transfer-Encoding: chunked\r\n"),  # its length is unknown when the answer goes
    ("expect-100-continue", b"Content-Length: 100\r\nExpect: 100-continue\r\n"),  # it may never be sent
])
def test_a_refusal_before_a_large_or_unknown_body_says_connection_close_then_closes(early, case_id, head):
    with connection(early) as sock:
        sock.sendall(b"POST /v2/models/absent/infer HTTP/1.1\r\nHost: gw\r\n%s\r\n" % head)
        status, headers, _ = read_response(sock)
        assert status == 404 and headers.get("connection") == "close"
        assert closed_by_server(sock)


def test_aiohttp_keeps_its_one_connection_through_refusals(early):
    """Before, aiohttp's next request after a 404 failed ("Server disconnected") or, when it
    saw the close in time, went on a new connection."""
    async def rounds() -> list[str]:
        outcomes = []
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as session:
            for _ in range(ROUNDS):
                for path, expected in (("/v2/models/absent/infer", 404), ("/v2/models/demo/infer", 200)):
                    try:
                        async with session.post(early.http_url + path, data=OIP_GOOD) as answer:
                            await answer.read()
                            outcomes.append("ok" if answer.status == expected else f"status {answer.status}")
                    except aiohttp.ClientError as error:
                        outcomes.append(repr(error))
        return outcomes

    before = accepted(early)
    outcomes = asyncio.run(rounds())
    assert [outcome for outcome in outcomes if outcome != "ok"] == []
    assert accepted(early) - before == 1


def test_tritons_aio_client_keeps_its_one_connection_through_unknown_models(early):
    """Triton's aio client (tritonclient.http.aio, unmodified), as its example
    simple_http_aio_infer_client.py uses it: a good request, one for "wrong_model_name", a
    good one again, on a pool of one connection."""
    async def rounds() -> None:
        client = triton_aio.InferenceServerClient(early.http_url.removeprefix("http://"), conn_limit=1)
        tensor = triton_aio.InferInput("INPUT0", [1, 2], "FP32")
        tensor.set_data_from_numpy(np.array([[1, 2]], np.float32))
        try:
            for _ in range(ROUNDS):
                result = await client.infer("demo", [tensor])
                assert result.as_numpy("OUTPUT0").tolist() == [[2, 4]]
                with pytest.raises(InferenceServerException) as refused:
                    await client.infer("wrong_model_name", [tensor])
                assert refused.value.message().startswith("Request for unknown model"), refused.value.message()
            assert (await client.infer("demo", [tensor])).as_numpy("OUTPUT0").tolist() == [[2, 4]]
        finally:
            await client.close()

    before = accepted(early)
    asyncio.run(rounds())
    assert accepted(early) - before == 1


# -- lingering sockets and max_connections ----------------------------------------------------------

CAP = 20                # max_connections
HUGE_BODIES = 200       # connections that declare a 10 GB body, read the 413 and stay open
FD_SLACK = 8            # descriptors beyond the baseline and the cap: a refused connection, a good client's


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def v1_status(process: ServerProcess) -> int:
    request = urllib.request.Request(f"{process.http_url}/v1/models/demo:predict", data=PREDICT)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_sockets_lingering_after_early_413s_count_against_max_connections(tmp_path: Path):
    """Before, a lingering socket no longer counted as open: 200 such clients held about
    baseline + 200 descriptors with max_connections = 20."""
    config = tmp_path / "gateway.toml"
    config.write_text(f'[server]\nmax_connections = {CAP}\n\n[[models]]\nname = "demo"\nbackend = "simulated"\n')
    with gateway(config) as process:
        host, port = process.http_address.rsplit(":", 1)
        assert v1_status(process) == 200
        baseline = descriptors(process.pid)
        held: list[socket.socket] = []
        most = baseline
        try:
            for _ in range(HUGE_BODIES):
                sock = socket.create_connection((host, int(port)), timeout=30)
                held.append(sock)
                sock.sendall(b"POST /v1/models/demo:predict HTTP/1.1\r\nHost: gw\r\nContent-Length: 10000000000\r\n\r\n")
                assert sock.recv(65536).startswith(b"HTTP/1.1 413")
                most = max(most, descriptors(process.pid))
            assert v1_status(process) == 200  # a good client is served meanwhile
        finally:
            for sock in held:
                sock.close()
        print(f"descriptors: {baseline} at rest, at most {most} with {HUGE_BODIES} lingering clients, cap {CAP}")
        assert most <= baseline + CAP + FD_SLACK


# -- the listen backlog ------------------------------------------------------------------------------

def listen_backlogs(port: int) -> list[int]:
    """The backlog of each socket listening on `port`: what `ss` shows as a listening socket's
    Send-Q (the kernel's sk_max_ack_backlog, which /proc/net/tcp does not show)."""
    listing = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, timeout=30, check=True)
    return [int(line.split()[2]) for line in listing.stdout.splitlines()]


def somaxconn() -> int:
    return int(Path("/proc/sys/net/core/somaxconn").read_text())


def test_the_http_listen_backlog_defaults_to_somaxconns_usual_4096_not_tornados_128(early):
    assert listen_backlogs(early.gateway.http_port) == [min(4096, somaxconn())]


def test_the_http_listen_backlog_is_a_setting_applied_by_every_worker(tmp_path: Path):
    config = tmp_path / "gateway.toml"
    config.write_text('[server]\nhttp_listen_backlog = 1000\n\n[[models]]\nname = "demo"\nbackend = "simulated"\n')
    with gateway(config, workers=2) as process:
        port = int(process.http_address.rsplit(":", 1)[1])
        assert listen_backlogs(port) == [min(1000, somaxconn())] * 2  # one socket per process (SO_REUSEPORT)
