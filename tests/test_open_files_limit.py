"""At its open-files limit the gateway neither spins nor floods its log, and recovers; and
how that limit sets each front end's connection cap (gateway/process/server.py).

The gateway runs with a low RLIMIT_NOFILE (soft = hard, so it cannot raise it) and a client
opens more idle connections than the limit, to both front ends. Connections beyond
`max_connections` are refused at once; the ones it holds are closed by the header timeout.
Meanwhile its CPU stays low and its log small; a normal client is served as soon as the
idle connections are gone, and after that everything is as before.
"""
from __future__ import annotations

import contextlib
import logging
import resource
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from gateway.process.server import RESERVED_OPEN_FILES, connection_cap
from tests.processes import gateway
from tools.processes import ServerProcess
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc

OPEN_FILES = 256
IDLE_PER_FRONT_END = 300       # each front end alone is offered more than the whole limit
HEADER_TIMEOUT_S = 2.0
WATCH_S = 2.0                  # how long CPU and log are watched while the idle connections hold
MAX_CPU_SHARE = 0.25           # of one core, while watched (a spinning accept loop takes 1.0)
MAX_LOG_GROWTH = 16 * 1024     # bytes while watched (tracebacks per accept attempt take MBs)
RECOVERY_S = 15.0


@contextlib.contextmanager
def idle_connections(address: str, count: int) -> Iterator[list[socket.socket]]:
    """`count` connections that send nothing (each may be refused or closed by the server)."""
    host, port = address.rsplit(":", 1)
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                sock.connect((host, int(port)))
            sockets.append(sock)
        yield sockets
    finally:
        for sock in sockets:
            sock.close()


def v1_predict(process: ServerProcess) -> int:
    request = urllib.request.Request(f"{process.http_url}/v1/models/demo:predict", data=b'{"instances": [[1, 2]]}')
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0  # refused, reset or timed out: not served


def grpc_live(process: ServerProcess) -> bool:
    with grpc.insecure_channel(process.grpc_address) as channel:
        try:
            return pb_grpc.GRPCInferenceServiceStub(channel).ServerLive(pb.ServerLiveRequest(), timeout=5).live
        except grpc.RpcError:
            return False


def served_within(call, deadline_s: float) -> bool:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if call():
            return True
        time.sleep(0.2)
    return False


def test_idle_connections_beyond_the_open_files_limit(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(f'[server]\nheader_timeout_s = {HEADER_TIMEOUT_S}\nidle_timeout_s = {HEADER_TIMEOUT_S}\n\n'
                      '[[models]]\nname = "demo"\nbackend = "simulated"\n')
    with gateway(config, log_level="INFO", open_files_limit=OPEN_FILES) as process:
        assert v1_predict(process) == 200
        assert f"open files: soft limit {OPEN_FILES}, hard {OPEN_FILES}" in process.log_text()
        log_before = len(process.log_text())
        with idle_connections(process.http_address, IDLE_PER_FRONT_END), \
                idle_connections(process.grpc_address, IDLE_PER_FRONT_END):
            time.sleep(0.3)  # all connected or refused
            cpu_before = process.cpu_seconds()
            time.sleep(WATCH_S)
            cpu_share = (process.cpu_seconds() - cpu_before) / WATCH_S
            log_growth = len(process.log_text()) - log_before
            print(f"at the open-files limit: CPU {cpu_share:.0%} of a core, log +{log_growth} bytes in {WATCH_S} s")
            assert cpu_share < MAX_CPU_SHARE, process.log_tail()
            assert log_growth < MAX_LOG_GROWTH, process.log_tail()
            # The header timeout frees the held connections; a normal client is then served.
            assert served_within(lambda: v1_predict(process) == 200, RECOVERY_S), process.log_tail()
            assert served_within(lambda: grpc_live(process), RECOVERY_S), process.log_tail()
        # Once the idle connections are gone, everything is normal.
        assert [v1_predict(process) for _ in range(20)] == [200] * 20
        assert all(grpc_live(process) for _ in range(5))
        assert "Traceback" not in process.log_text()


def test_the_default_cap_shares_what_the_open_files_limit_leaves_between_the_front_ends():
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert connection_cap(0) == (soft - RESERVED_OPEN_FILES) // 2


def test_a_configured_cap_is_kept_when_the_limit_allows_it():
    assert connection_cap(10) == 10


def test_a_configured_cap_beyond_the_limit_is_lowered_with_a_warning(caplog: pytest.LogCaptureFixture):
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    with caplog.at_level(logging.WARNING, logger="gateway.process.server"):
        assert connection_cap(soft * 10) == connection_cap(0)
    assert "server.max_connections" in caplog.text
