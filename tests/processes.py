"""Start the project's own servers as real processes and stop them by PID.

Both the gateway (`python -m gateway serve`) and the simulated predictor
(`python -m backends.simulated.server`) print one `READY key=value ...` line when they
listen; `Process.fields` holds those values."""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class Process:
    """`command` until it prints READY (stderr kept in `log`); stopped by PID."""

    def __init__(self, command: list[str], env: dict[str, str] | None = None, ready_timeout: float = 30) -> None:
        self.log = tempfile.TemporaryFile()
        self.popen = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                      start_new_session=True, env=env)
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: lines.put(self.popen.stdout.readline()), daemon=True).start()
        try:
            line = lines.get(timeout=ready_timeout)
        except queue.Empty:
            line = ""
        if not line.startswith("READY"):
            self.kill()
            raise RuntimeError(f"{command} did not start: {line!r}\n{self.log_text()[-3000:]}")
        self.fields = dict(part.split("=", 1) for part in line.split()[1:])

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log_text(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def signal(self, signum: int) -> None:
        os.killpg(self.pid, signum)

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout=timeout)

    def stop(self, timeout: float = 20) -> int:
        """SIGTERM, wait, then SIGKILL; returns the exit code."""
        if self.popen.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.popen.returncode

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.signal(signal.SIGKILL)
            self.popen.wait(timeout=10)


def python_module(*args: str, **kwargs) -> Process:
    """`python -m ARGS` with this interpreter."""
    return Process([sys.executable, "-m", *args], **kwargs)


class PredictorProcess(Process):
    """The simulated predictor: its READY line gives bare port numbers."""

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.fields['http']}"

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.fields['grpc']}"


def simulated_predictor(*options: str, http_port: int = 0, grpc_port: int = 0) -> PredictorProcess:
    return PredictorProcess([sys.executable, "-m", "backends.simulated.server", "--host", "127.0.0.1",
                             "--http-port", str(http_port), "--grpc-port", str(grpc_port), *options])


def gateway(config_path: Path, log_level: str = "WARNING") -> Process:
    return python_module("gateway", "serve", "--config", str(config_path),
                         "--http-port", "0", "--grpc-port", "0", "--log-level", log_level)
