"""A tenant's rights hold at every message, not only when its request or stream arrived
(issue 45, item 1; docs/tenants.md).

A request is admitted when its head arrives; a `ModelStreamInfer` stream when it opens.
After a reload removes its tenant or rotates its key out, the next message of an open
stream ends the stream UNAUTHENTICATED, and a request whose body was still arriving is
refused 401; after a rename, the stream's messages are the renamed tenant's, held to its
quotas. Nothing is served as a tenant no longer declared (which the scheduler would hold
to no quota, at weight 1). `[server] max_stream_age_s` bounds how long a stream stays
open. No key nor its digest reaches an answer."""
from __future__ import annotations

import contextlib
import hashlib
import pickle
import queue
import signal
import socket
import time
from collections.abc import Iterator
from typing import Any

import grpc
import orjson
import pytest

from gateway import config as gateway_config
from gateway.access.front_door import Admitted, FrontDoor
from gateway.access.keys import Directory, Tenant, digest
from tests.harness import running_gateway
from tests.processes import gateway as gateway_process
from wire.errors import PermissionDenied, Unauthenticated
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc

KEY = "sk-limited-5a5a5a5a5a5a5a5a"
ROTATED = "sk-limited-rotated-6b6b6b6b6b"
OTHER = "sk-other-0123456789abcdef"
MODELS = [{"name": name, "backend": "simulated", "simulated": {"call_ms": 1}} for name in ("demo", "encoder", "private")]


def sha256(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def config(*tenants: dict[str, Any], server: dict[str, Any] | None = None) -> gateway_config.GatewayConfig:
    """The three models; `other` (a tenant that stays, so tenants stay declared) and these."""
    return gateway_config.parse({
        "models": MODELS, "server": {"http_port": 0, "grpc_port": 0, **(server or {})},
        "tenants": [*tenants, {"name": "other", "key_sha256": [sha256(OTHER)]}]})


def limited(name: str = "limited", key: str = KEY) -> dict[str, Any]:
    """The issue's tenant: two models, 5 requests a second."""
    return {"name": name, "key_sha256": [sha256(key)], "models": ["demo", "encoder"], "requests_per_second": 5}


def message(model: str, request_id: str) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model, id=request_id)
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1]).contents.fp32_contents.append(3)
    return request


class Stream:
    """One ModelStreamInfer stream, written one message at a time."""

    def __init__(self, address: str, key: str) -> None:
        self.channel = grpc.insecure_channel(address)
        self.outbox: queue.Queue[pb.ModelInferRequest | None] = queue.Queue()
        self.answers = pb_grpc.GRPCInferenceServiceStub(self.channel).ModelStreamInfer(
            iter(self.outbox.get, None), timeout=60, metadata=(("authorization", f"Bearer {key}"),))

    def send(self, model: str, request_id: str = "") -> pb.ModelStreamInferResponse:
        """The message's answer; grpc.RpcError when the stream ends instead."""
        self.outbox.put(message(model, request_id))
        return next(self.answers)

    def burst(self, model: str, count: int) -> list[str]:
        """`count` messages at once; each answer's error message ("" when answered)."""
        for i in range(count):
            self.outbox.put(message(model, str(i)))
        return [next(self.answers).error_message for _ in range(count)]

    def close(self) -> None:
        self.outbox.put(None)
        self.channel.close()


@contextlib.contextmanager
def stream(address: str, key: str = KEY) -> Iterator[Stream]:
    opened = Stream(address, key)
    try:
        yield opened
    finally:
        opened.close()


def reload(gw, fresh: gateway_config.GatewayConfig) -> None:
    gw.call(gw.gateway.service.reconfigure(fresh, 1.0))


def assert_refused_for_its_key(error: grpc.RpcError) -> None:
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED, error
    details = error.details() or ""
    # By the door that found the key gone, or (under --workers, while the stream's worker has
    # not reloaded yet) by the batcher, which no longer declares the tenant.
    assert "no longer valid" in details or "is no longer declared" in details, details
    for secret in (KEY, ROTATED, sha256(KEY), sha256(ROTATED)):
        assert secret not in details


# -- the door, by itself ------------------------------------------------------------------------

def test_the_door_finds_an_admitted_request_again_by_its_keys_digest():
    before = FrontDoor(tenants=Directory({digest(KEY): Tenant("limited", frozenset({"demo"}))}))
    admitted = before.admit(f"Bearer {KEY}")
    assert admitted == "limited" and before.permit(admitted, "demo") == "limited"
    with pytest.raises(PermissionDenied):
        before.permit(admitted, "private")
    renamed = FrontDoor(tenants=Directory({digest(KEY): Tenant("renamed")}))
    assert renamed.permit(admitted, "private") == "renamed"
    for after in (FrontDoor(tenants=Directory({digest(ROTATED): Tenant("limited")})),  # rotated out
                  FrontDoor(tenants=Directory({digest(OTHER): Tenant("other")}))):     # removed
        with pytest.raises(Unauthenticated):
            after.permit(admitted, "demo")
    with pytest.raises(Unauthenticated):
        before.permit("limited", "demo")  # a name alone, without the key it came with, is no one
    token = FrontDoor(token=OTHER)
    assert token.permit(token.admit(f"Bearer {OTHER}"), "demo") == ""
    with pytest.raises(Unauthenticated):
        FrontDoor(token=ROTATED).permit(token.admit(f"Bearer {OTHER}"), "demo")
    assert FrontDoor().permit(admitted, "demo") == ""  # the door is open now: no tenant


def test_an_admitted_name_shows_its_name_alone():
    admitted = Admitted("limited", digest(KEY))
    for shown in (repr(admitted), str(admitted), f"{admitted}", orjson.dumps([admitted]).decode(),
                  pickle.dumps(admitted, protocol=pickle.HIGHEST_PROTOCOL)):
        text = shown if isinstance(shown, str) else shown.decode("latin-1")
        assert digest(KEY).hex() not in text and digest(KEY).decode("latin-1") not in text and KEY not in text
    assert type(pickle.loads(pickle.dumps(admitted))) is str


# -- gRPC: an open stream ------------------------------------------------------------------------

@pytest.mark.parametrize("change", ["removed", "rotated"])
def test_an_open_stream_ends_unauthenticated_once_a_reload_removes_its_key(change):
    """Before: after its table was removed, its messages were all served (1 of 1 on a model
    it may not call, 40 of 40 past its quota), and on a rotated key too."""
    with running_gateway(config(limited())) as gw, stream(gw.grpc_address) as opened:
        assert opened.send("demo", "before").error_message == ""
        assert "may not call model 'private'" in opened.send("private").error_message  # in band: it stays open
        reload(gw, config() if change == "removed" else config(limited(key=ROTATED)))
        with pytest.raises(grpc.RpcError) as refused:
            opened.send("demo", "after")
        assert_refused_for_its_key(refused.value)
        # New streams and calls with the old key are refused at the door, as before.
        with stream(gw.grpc_address) as again, pytest.raises(grpc.RpcError) as at_the_door:
            again.send("demo")
        assert at_the_door.value.code() == grpc.StatusCode.UNAUTHENTICATED
        if change == "rotated":
            with stream(gw.grpc_address, ROTATED) as rotated:
                assert rotated.send("demo").error_message == ""


def test_after_a_rename_an_open_streams_messages_are_the_renamed_tenants_under_its_quota():
    """Before: 40 of 40 served after the rename (a name no longer declared: no quota), and
    the model it may not call served too."""
    with running_gateway(config(limited())) as gw, stream(gw.grpc_address) as opened:
        started = time.monotonic()
        answered = opened.burst("demo", 40).count("")
        assert 1 <= answered <= 5 + 5 * (time.monotonic() - started) + 1  # its quota, before
        reload(gw, config(limited("renamed")))
        started = time.monotonic()
        errors = opened.burst("demo", 40)
        answered = errors.count("")
        assert 1 <= answered <= 5 + 5 * (time.monotonic() - started) + 1, errors
        assert all("tenant 'renamed' is over its quota" in e for e in errors if e), errors
        assert "tenant 'renamed' may not call model 'private'" in opened.send("private").error_message
        usage = {snapshot.tenant: snapshot for snapshot in gw.call(_usage(gw))}
        assert usage["renamed"].statuses.get(200) == answered


async def _usage(gw):
    return gw.gateway.scheduler.tenant_usage()


def test_under_workers_an_open_stream_ends_once_sighup_removes_its_tenant(tmp_path):
    """`--workers 2`: the stream's worker finds the key gone once it has reloaded (the
    batcher reloads first, and refuses a tenant it no longer declares meanwhile); the
    stream's messages are answered until then, and the stream ends UNAUTHENTICATED.
    Before: every message kept being served."""
    path = tmp_path / "gateway.toml"

    def write(*tenants: str) -> None:
        path.write_text("".join(f'[[models]]\nname = "{name}"\nbackend = "simulated"\n' for name in ("demo", "encoder"))
                        + "".join(tenants)
                        + f'[[tenants]]\nname = "other"\nkey_sha256 = ["{sha256(OTHER)}"]\n')

    write(f'[[tenants]]\nname = "limited"\nkey_sha256 = ["{sha256(KEY)}"]\nmodels = ["demo", "encoder"]\n')
    process = gateway_process(path, workers=2, log_level="INFO")
    try:
        with stream(process.fields["grpc"]) as opened:
            assert opened.send("demo").error_message == ""
            write()
            process.signal(signal.SIGHUP)
            refused = None
            for i in range(600):  # bounded: about 30 s of one message every 50 ms
                try:
                    assert opened.send("demo", str(i)).error_message == "", i
                except grpc.RpcError as error:
                    refused = error
                    break
                time.sleep(0.05)
            assert refused is not None, "the stream outlived its tenant"
            assert_refused_for_its_key(refused)
    finally:
        assert process.stop() == 0
    log = process.log_text()
    assert KEY not in log and sha256(KEY) not in log


def test_a_stream_past_max_stream_age_answers_what_it_read_then_ends_unavailable():
    with running_gateway(config(limited(), server={"max_stream_age_s": 0.5})) as gw, \
            stream(gw.grpc_address, OTHER) as opened:
        assert opened.send("demo", "first").infer_response.id == "first"
        with pytest.raises(grpc.RpcError) as ended:
            for i in range(200):  # bounded (about 4 s): the stream ends 0.5 s after it opened
                assert opened.send("demo", str(i)).error_message == ""
                time.sleep(0.02)
        assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "max_stream_age_s" in (ended.value.details() or "")
        with stream(gw.grpc_address, OTHER) as again:  # the client opens another, presenting its key again
            assert again.send("demo").error_message == ""


def test_max_stream_age_is_a_server_key_zero_is_no_limit():
    assert config().server.max_stream_age_s == 0
    assert config(server={"max_stream_age_s": 3600}).server.max_stream_age_s == 3600
    with pytest.raises(gateway_config.ConfigError, match="server.max_stream_age_s"):
        config(server={"max_stream_age_s": -1})


# -- HTTP: a body still arriving --------------------------------------------------------------

def test_an_http_request_whose_body_arrives_across_the_reload_is_refused():
    """The head is admitted (its 100 Continue says so), the reload removes its tenant, then
    the body arrives: 401, as a request sent after the reload gets. Before: 200."""
    body = orjson.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [3]}]})
    with running_gateway(config(limited())) as gw:
        host, port = gw.http_url.removeprefix("http://").split(":")

        def head(key: str) -> bytes:
            return (f"POST /v2/models/demo/infer HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                    "Expect: 100-continue\r\n\r\n").encode()

        def answer(connection: socket.socket) -> tuple[int, bytes]:
            received = b""
            while b"\r\n\r\n" not in received or len(received.partition(b"\r\n\r\n")[2]) < _length(received):
                chunk = connection.recv(65536)
                if not chunk:
                    break
                received += chunk
            status_line, _, rest = received.partition(b"\r\n")
            return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]

        with socket.create_connection((host, int(port)), timeout=30) as control:
            control.sendall(head(KEY))
            assert control.recv(100).startswith(b"HTTP/1.1 100")
            control.sendall(body)
            assert answer(control)[0] == 200
        with socket.create_connection((host, int(port)), timeout=30) as slow:
            slow.sendall(head(KEY))
            assert slow.recv(100).startswith(b"HTTP/1.1 100")  # admitted: its body may come
            reload(gw, config())
            slow.sendall(body)
            status, payload = answer(slow)
        assert status == 401, payload
        assert KEY not in payload.decode() and sha256(KEY) not in payload.decode()
        assert "no longer valid" in orjson.loads(payload)["error"]


def _length(received: bytes) -> int:
    head = received.partition(b"\r\n\r\n")[0].decode("latin-1").lower()
    for line in head.split("\r\n"):
        name, _, value = line.partition(":")
        if name == "content-length":
            return int(value)
    return 0



def test_with_the_token_alone_a_stream_is_checked_again_too(monkeypatch):
    """No tenants, `[server] auth_token_env`: calls and streams run as the token's nameless
    tenant; a reload naming another token ends an open stream at its next message."""
    monkeypatch.setenv("GATEWAY_TOKEN", OTHER)
    monkeypatch.setenv("NEXT_TOKEN", ROTATED)

    def token_config(variable: str) -> gateway_config.GatewayConfig:
        return gateway_config.parse({"models": MODELS, "server": {"http_port": 0, "grpc_port": 0,
                                                                  "auth_token_env": variable}})

    with running_gateway(token_config("GATEWAY_TOKEN")) as gw, stream(gw.grpc_address, OTHER) as opened:
        assert opened.send("demo").error_message == ""
        with grpc.insecure_channel(gw.grpc_address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            answer = stub.ModelInfer(message("demo", "unary"), timeout=10,
                                     metadata=(("authorization", f"Bearer {OTHER}"),))
            assert answer.id == "unary"
        reload(gw, token_config("NEXT_TOKEN"))
        with pytest.raises(grpc.RpcError) as refused:
            opened.send("demo")
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert OTHER not in (refused.value.details() or "")
        with stream(gw.grpc_address, ROTATED) as again:
            assert again.send("demo").error_message == ""
