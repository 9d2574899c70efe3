"""The command line, run as users run it: a real process, stopped by PID."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.harness import http_json


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gateway", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def read_ready_line(process: subprocess.Popen, timeout: float = 30) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if line.startswith("READY"):
            return dict(part.split("=", 1) for part in line.split()[1:])
        if not line and process.poll() is not None:
            raise AssertionError(f"gateway exited: {process.stderr.read()}")
    raise AssertionError("gateway did not print READY")


def stop(process: subprocess.Popen) -> int:
    os.killpg(process.pid, signal.SIGTERM)
    try:
        return process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise


def test_serve_with_no_arguments_but_ports_answers_on_the_embedded_demo_model():
    process = start("serve", "--http-port", "0", "--grpc-port", "0", "--log-level", "WARNING")
    try:
        ready = read_ready_line(process)
        assert ready["models"] == "demo"
        assert ready["loop"] == "asyncio"  # the default; uvloop is opt-in
        url = "http://" + ready["http"]
        status, body = http_json("POST", f"{url}/v1/models/demo:predict", {"instances": [[1, 2, 3, 4]]})
        assert status == 200 and body["predictions"] == [[2, 4, 6, 8]]
    finally:
        assert stop(process) == 0
    assert process.poll() is not None


def test_serve_with_a_config_file(tmp_path):
    path = tmp_path / "gateway.toml"
    path.write_text('[[models]]\nname = "twice"\nbackend = "simulated"\n[models.batching]\nmax_batch_size = 8\n')
    process = start("serve", "--config", str(path), "--host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0")
    try:
        ready = read_ready_line(process)
        assert ready["models"] == "twice"
        status, body = http_json("POST", f"http://{ready['http']}/v1/models/twice:predict", {"instances": [[3]]})
        assert status == 200 and body["predictions"] == [[6]]
    finally:
        assert stop(process) == 0


def test_serve_on_uvloop_when_asked():
    process = start("serve", "--loop", "uvloop", "--http-port", "0", "--grpc-port", "0", "--log-level", "WARNING")
    try:
        ready = read_ready_line(process)
        assert ready["loop"] == "uvloop"
        status, body = http_json("POST", f"http://{ready['http']}/v1/models/demo:predict", {"instances": [[1, 2]]})
        assert status == 200 and body["predictions"] == [[2, 4]]
    finally:
        assert stop(process) == 0


def test_a_config_error_exits_2_naming_the_key(tmp_path):
    path = tmp_path / "gateway.toml"
    path.write_text('[[models]]\nname = "m"\n[models.batching]\nmax_batch_size = -3\n')
    result = subprocess.run([sys.executable, "-m", "gateway", "serve", "--config", str(path)],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "models[0].batching.max_batch_size" in result.stderr and ">= 1" in result.stderr


def test_check_config(tmp_path):
    path = tmp_path / "gateway.toml"
    path.write_text('[[models]]\nname = "m"\n')
    ok = subprocess.run([sys.executable, "-m", "gateway", "check-config", str(path)], capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0 and "ok" in ok.stdout
    path.write_text('[[models]]\nname = "m"\nbackend = "nope"\n')
    bad = subprocess.run([sys.executable, "-m", "gateway", "check-config", str(path)], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "models[0].backend" in bad.stderr
