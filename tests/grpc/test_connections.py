"""The gRPC front end's connection guards (gateway/grpc/server.py `connection_options`),
observed as a client sees them on the wire: raw HTTP/2 frames on a socket."""
from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest

from tests.harness import RunningGateway, config_for, running_gateway
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc

HEADER_TIMEOUT_S = 0.5
IDLE_TIMEOUT_S = 1.5  # apart from the header timeout, so that each test sees its own
WAIT_S = 5.0
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS, PING, GOAWAY = 0x4, 0x6, 0x7
SETTINGS_MAX_CONCURRENT_STREAMS = 0x3
ENHANCE_YOUR_CALM = 0xB
MAX_CONNECTIONS = 3


@dataclass
class Frame:
    type: int
    flags: int
    payload: bytes


@pytest.fixture(scope="module")
def gw() -> Iterator[RunningGateway]:
    config = config_for({"name": "demo", "backend": "simulated"},
                        server={"header_timeout_s": HEADER_TIMEOUT_S, "idle_timeout_s": IDLE_TIMEOUT_S,
                                "max_connections": MAX_CONNECTIONS, "max_concurrent_streams": 7})
    with running_gateway(config) as running:
        yield running


def frame(kind: int, payload: bytes = b"", flags: int = 0) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", 0) + payload


@contextlib.contextmanager
def connection(gw: RunningGateway, handshake: bool = True) -> Iterator[socket.socket]:
    host, port = gw.grpc_address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=WAIT_S) as sock:
        if handshake:
            sock.sendall(PREFACE + frame(SETTINGS))
        yield sock


def frames_until_closed(sock: socket.socket) -> list[Frame]:
    """Every frame the server sends until it closes the connection (within WAIT_S)."""
    frames, data = [], b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            data += chunk
            while len(data) >= 9 and len(data) >= 9 + int.from_bytes(data[:3], "big"):
                length = int.from_bytes(data[:3], "big")
                frames.append(Frame(data[3], data[4], data[9:9 + length]))
                data = data[9 + length:]
    return frames


def goaway(frames: list[Frame]) -> tuple[int, bytes]:
    """The (error code, debug text) of the GOAWAY among `frames`."""
    payload = next(f.payload for f in frames if f.type == GOAWAY)
    return int.from_bytes(payload[4:8], "big"), payload[8:]


def test_the_server_advertises_its_bound_on_concurrent_streams(gw):
    with connection(gw) as sock:
        sock.settimeout(WAIT_S)
        first = sock.recv(65536)
    assert first[3] == SETTINGS
    payload = first[9:9 + int.from_bytes(first[:3], "big")]
    settings = dict(struct.unpack(">HI", payload[i:i + 6]) for i in range(0, len(payload), 6))
    assert settings[SETTINGS_MAX_CONCURRENT_STREAMS] == 7


def test_a_connection_that_never_speaks_http2_is_closed_after_the_header_timeout(gw):
    with connection(gw, handshake=False) as sock:
        _, text = goaway(frames_until_closed(sock))
    assert b"handshake timeout" in text


def test_a_connection_with_no_call_open_is_closed_after_the_idle_timeout(gw):
    with connection(gw) as sock:
        _, text = goaway(frames_until_closed(sock))
    assert text == b"connection idle"


def test_a_client_that_pings_too_often_is_sent_away(gw):
    with connection(gw) as sock:
        # One write: the server sends its GOAWAY after the third ping and closes, so a
        # ping written after that would meet a closed socket.
        sock.sendall(frame(PING, b"12345678") * 6)
        code, text = goaway(frames_until_closed(sock))
    assert code == ENHANCE_YOUR_CALM and text == b"too_many_pings"


def test_beyond_max_connections_a_new_connection_is_closed_at_once(gw):
    with contextlib.ExitStack() as held:
        for _ in range(MAX_CONNECTIONS):
            sock = held.enter_context(connection(gw))
            assert sock.recv(65536)[3] == SETTINGS  # accepted and served
        with connection(gw) as extra:
            assert frames_until_closed(extra) == []
    # Once they are gone, calls are served again.
    with grpc.insecure_channel(gw.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        assert stub.ServerLive(pb.ServerLiveRequest(), timeout=WAIT_S, wait_for_ready=True).live
