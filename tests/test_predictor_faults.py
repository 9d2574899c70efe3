"""Predictor faults, with real predictor processes: every client gets one answer within its
deadline plus a small margin, with the right status; readiness follows the predictor; the
gateway recovers by itself when the predictor comes back."""
from __future__ import annotations

import contextlib
import http.server
import signal
import socket
import threading
import time

import pytest

from tests.harness import config_for, http_json, run_clients, running_gateway, timed_predict, wait_for
from tests.processes import simulated_predictor
from tools.processes import free_port

MARGIN_S = 1.5


def model_for(predictor_fields: dict[str, str] | None, protocol: str, *, port: int | None = None,
              timeout_s: float = 5) -> dict:
    http_port = port if port is not None else int(predictor_fields["http"])
    grpc_port = port if port is not None else int(predictor_fields["grpc"])
    if protocol == "v1-http":
        model = {"backend": "kserve", "protocol": "http", "api": "v1", "url": f"http://127.0.0.1:{http_port}"}
    elif protocol == "oip-http":
        model = {"backend": "kserve", "protocol": "http", "api": "v2", "url": f"http://127.0.0.1:{http_port}"}
    else:
        model = {"backend": "triton", "protocol": "grpc", "url": f"127.0.0.1:{grpc_port}"}
    return {"name": "demo", "backend_model": "demo", **model,
            "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, -1]}],
            "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, -1]}],
            "batching": {"timeout_s": timeout_s}}


def predict(gw, value: float = 1.0, timeout: float = 30) -> tuple[int, dict, float]:
    return timed_predict(gw, "demo", [value, value], timeout)


def control(fields: dict[str, str], **knobs) -> None:
    status, _ = http_json("POST", f"http://127.0.0.1:{fields['http']}/control", knobs)
    assert status == 200


PROTOCOLS = ["v1-http", "oip-http", "oip-grpc"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_predictor_not_started_is_503_quickly_and_not_ready(protocol):
    model = model_for(None, protocol, port=free_port(), timeout_s=10)
    with running_gateway(config_for(model), wait_ready=False) as gw:
        status, body, elapsed = predict(gw)
        assert status == 503, body
        assert elapsed < 10
        assert "127.0.0.1" not in body["error"]  # no internal addresses in error bodies
        assert http_json("GET", f"{gw.http_url}/v2/models/demo/ready")[0] == 503
        assert http_json("GET", f"{gw.http_url}/v2/health/ready")[0] == 503


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_predictor_errors_and_nonsense_get_the_right_status(protocol):
    predictor = simulated_predictor("--call-ms", "1")
    try:
        with running_gateway(config_for(model_for(predictor.fields, protocol))) as gw:
            assert predict(gw)[0] == 200
            for knobs, expected in [({"fail_status": 500}, 502), ({"fail_status": 503}, 503),
                                    ({"fail_status": 400}, 400), ({"fail_status": 0, "wrong_rows": True}, 502)]:
                control(predictor.fields, **knobs)
                status, body, _ = predict(gw)
                assert status == expected, (knobs, body)
                assert body["error"]
            control(predictor.fields, fail_status=0, wrong_rows=False)
            status, body, _ = predict(gw, 3.0)
            assert status == 200 and body["predictions"] == [[6, 6]]
    finally:
        predictor.stop()


@contextlib.contextmanager
def garbage_predictor():
    """A 'predictor' that answers 200 with a body that is not a valid answer."""
    class Garbage(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = b"<html>surprise</html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Garbage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def hanging_up_predictor():
    """A 'predictor' that accepts connections and closes them at once."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            with contextlib.suppress(OSError):
                connection, _ = listener.accept()
                connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


@pytest.mark.parametrize("protocol", ["v1-http", "oip-http"])
def test_garbage_is_502_and_hang_ups_are_503(protocol):
    with garbage_predictor() as port, running_gateway(config_for(model_for(None, protocol, port=port)),
                                                       wait_ready=False) as gw:
        status, body, _ = predict(gw)
        assert status == 502 and "unusable" in body["error"] or "not JSON" in body["error"]
    with hanging_up_predictor() as port, running_gateway(config_for(model_for(None, protocol, port=port)),
                                                          wait_ready=False) as gw:
        status, body, elapsed = predict(gw)
        assert status == 503, body
        assert elapsed < 5


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_predictor_killed_mid_load_then_restarted(protocol):
    timeout_s = 2.0
    predictor = simulated_predictor("--call-ms", "10")
    ports = {"http_port": int(predictor.fields["http"]), "grpc_port": int(predictor.fields["grpc"])}
    restarted = None
    try:
        with running_gateway(config_for(model_for(predictor.fields, protocol, timeout_s=timeout_s))) as gw:
            def outage():
                nonlocal restarted
                time.sleep(0.7)
                predictor.kill()
                time.sleep(1.0)
                restarted = simulated_predictor("--call-ms", "10", **ports)

            chaos = threading.Thread(target=outage)
            chaos.start()
            results = run_clients(gw, seconds=5.0)
            chaos.join(timeout=60)
            assert not chaos.is_alive() and restarted is not None, "the predictor was not restarted"
            statuses = {status for status, _, _ in results}
            assert statuses <= {200, 502, 503, 504}, statuses
            assert statuses - {200}, "the outage was not seen"
            assert max(elapsed for _, elapsed, _ in results) < timeout_s + MARGIN_S
            # Recovered by itself, however long the restart and the reconnection took (gRPC
            # backs off): once one request succeeds, a second of traffic all succeeds.
            wait_for(lambda: predict(gw)[0] == 200, "a 200 after the predictor came back")
            after = run_clients(gw, seconds=1.0)
            assert after and all(status == 200 for status, _, _ in after), {status for status, _, _ in after}
            assert http_json("GET", f"{gw.http_url}/v2/models/demo/ready")[0] == 200
    finally:
        predictor.kill()
        if restarted is not None:
            restarted.stop()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_hung_predictor_costs_each_request_at_most_its_deadline(protocol):
    timeout_s = 1.0
    predictor = simulated_predictor("--call-ms", "5")
    try:
        with running_gateway(config_for(model_for(predictor.fields, protocol, timeout_s=timeout_s))) as gw:
            assert predict(gw)[0] == 200
            predictor.signal(signal.SIGSTOP)
            try:
                results = run_clients(gw, seconds=2.0, workers=6)
                assert {status for status, _, _ in results} == {504}
                assert max(elapsed for _, elapsed, _ in results) < timeout_s + MARGIN_S
                assert http_json("GET", f"{gw.http_url}/v2/models/demo/ready", timeout=10)[0] == 503
            finally:
                predictor.signal(signal.SIGCONT)
            deadline = time.monotonic() + 10
            while predict(gw)[0] != 200:
                assert time.monotonic() < deadline, "did not recover after SIGCONT"
                time.sleep(0.1)
    finally:
        predictor.stop()
