"""tools.processes: a server is READY or killed with its log in the error; stop returns its
exit code, and stopping twice is harmless."""
from __future__ import annotations

import sys
import time

import pytest

from tools.processes import ServerProcess

# Prints READY with a host:port and a bare port, then waits for SIGTERM (exit code 0).
READY_SERVER = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("READY http=127.0.0.1:1234 grpc=5678 models=demo", flush=True)
while True:
    time.sleep(1)
"""


def test_ready_fields_and_addresses_then_stop_by_pid(tmp_path):
    server = ServerProcess([sys.executable, "-c", READY_SERVER], log_path=tmp_path / "logs" / "s.log").start()
    try:
        assert server.fields == {"http": "127.0.0.1:1234", "grpc": "5678", "models": "demo"}
        assert server.http_url == "http://127.0.0.1:1234" and server.grpc_address == "127.0.0.1:5678"
        assert server.rss_kb() > 0
    finally:
        assert server.stop() == 0
    assert server.stop() == 0  # already stopped: nothing to do


def test_a_command_that_never_says_ready_is_killed_and_its_log_reported():
    server = ServerProcess([sys.executable, "-c", "import sys; sys.stderr.write('no luck'); print('HELLO')"],
                           name="grumpy")
    with pytest.raises(RuntimeError) as caught:
        server.start()
    assert "grumpy did not start (stdout 'HELLO\\n')" in str(caught.value) and "no luck" in str(caught.value)
    assert server.popen is not None and server.popen.poll() is not None


def test_a_server_that_ignores_sigterm_is_killed():
    stubborn = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "print('READY http=1', flush=True); time.sleep(60)")
    server = ServerProcess([sys.executable, "-c", stubborn], stop_timeout=0.5).start()
    assert server.stop() == -9


# Starts a child in its own process group (as TorchServe's launcher starts Java and workers),
# both burning CPU, then says READY.
BUSY_FAMILY = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
signal.signal(signal.SIGTERM, lambda *_: (child.kill(), sys.exit(0)))
print("READY", flush=True)
end = time.monotonic() + 30
while time.monotonic() < end:
    pass
"""


def test_group_cpu_counts_the_server_and_what_it_started(tmp_path):
    server = ServerProcess([sys.executable, "-c", BUSY_FAMILY], log_path=tmp_path / "busy.log").start()
    try:
        time.sleep(0.5)
        own, group = server.cpu_seconds(), server.group_cpu_seconds()
        assert group > own > 0  # the child's CPU is the group's too
    finally:
        server.stop()
