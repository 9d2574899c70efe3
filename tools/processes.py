"""Start a server as its own process, read its READY line, stop it by PID.

The servers this project starts for tests and tools (the gateway, the simulated predictor,
the benchmark baselines) each print one `READY key=value ...` line on stdout once they
listen; `ServerProcess.fields` holds those values. A server runs in its own session (its
PID is its process group), with its stderr in a log file, and is stopped with SIGTERM, then
SIGKILL. `SimulatedPredictorProcess` knows the simulated predictor's command line.

It must not know about tests, benchmarks or any server's protocol (tools never import
tests; tests and tools import this).
"""
from __future__ import annotations

import contextlib
import os
import queue
import resource
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Any, Self

ROOT = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0
KILL_TIMEOUT_S = 10.0
LOOPBACK = "127.0.0.1"


def python_module_command(module: str, *args: str) -> list[str]:
    """`python -m MODULE ARGS` with this interpreter."""
    return [sys.executable, "-m", module, *args]


class ServerProcess:
    """`command` (run from the repository root) until it prints READY; stopped by PID.

    `start()` launches it and waits for READY (`spawn()` then `wait_ready()`, for callers
    that must note the process between the two). Its stderr goes to `log_path`, or to an
    anonymous temporary file when there is none; `log_text()` reads either."""

    def __init__(self, command: list[str], *, name: str | None = None, env: dict[str, str] | None = None,
                 log_path: Path | None = None, ready_timeout: float = READY_TIMEOUT_S,
                 stop_timeout: float = STOP_TIMEOUT_S, open_files_limit: int | None = None) -> None:
        self.command = command
        self.open_files_limit = open_files_limit  # RLIMIT_NOFILE, soft and hard, for the child alone
        self.name = name or " ".join(command)
        self.env = env
        self.log_path = log_path
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.popen: subprocess.Popen[str] | None = None
        self.ready_line = ""
        self.fields: dict[str, str] = {}
        self._log: IO[bytes] | None = None  # the anonymous log, when there is no log_path

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> Self:
        self.spawn()
        self.wait_ready()
        return self

    def spawn(self) -> None:
        """Launch the command in its own session; READY is not awaited."""
        # Not `with`: the anonymous log stays open for log_text(); a named one closes below
        # (the child keeps its own descriptor).
        log: IO[bytes]
        if self.log_path is None:
            self._log = log = tempfile.TemporaryFile()  # noqa: SIM115
        else:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            log = open(self.log_path, "wb")  # noqa: SIM115
        try:
            self.popen = subprocess.Popen(
                self.command, cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=log, text=True, start_new_session=True, preexec_fn=self._limit_open_files,
            )
        finally:
            if self.log_path is not None:
                log.close()

    def _limit_open_files(self) -> None:
        # Runs in the child between fork and exec.
        if self.open_files_limit is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.open_files_limit, self.open_files_limit))

    def wait_ready(self) -> None:
        """Read the first stdout line; anything but READY within `ready_timeout` kills the
        process and raises RuntimeError with the end of its log."""
        popen = self._running()
        stdout = popen.stdout
        assert stdout is not None
        lines: queue.Queue[str] = queue.Queue()
        # A thread, because a pipe read cannot time out; it ends with the line or with EOF.
        threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
        try:
            line = lines.get(timeout=self.ready_timeout)
        except queue.Empty:
            line = ""
        if line.split()[:1] != ["READY"]:
            self.kill()
            raise RuntimeError(f"{self.name} did not start (stdout {line!r}); its log:\n{self.log_tail()}")
        self.ready_line = line
        self.fields = dict(part.split("=", 1) for part in line.split()[1:])

    def signal(self, signum: int) -> None:
        """Send `signum` to the server's process group."""
        os.killpg(self.pid, signum)

    def wait(self, timeout: float) -> int:
        return self._running().wait(timeout=timeout)

    def stop(self, timeout: float | None = None) -> int | None:
        """SIGTERM, wait up to `timeout` (default `stop_timeout`), then SIGKILL; returns the
        exit code (None if it never started). Stopping a stopped server does nothing."""
        popen = self.popen
        if popen is None:
            return None
        if popen.poll() is None:
            try:
                self.signal(signal.SIGTERM)
                popen.wait(timeout=self.stop_timeout if timeout is None else timeout)
            except subprocess.TimeoutExpired:
                self.kill()
            except ProcessLookupError:  # it exited between poll() and the signal
                popen.wait(timeout=KILL_TIMEOUT_S)
        self._close_stdout()
        return popen.returncode

    def kill(self) -> None:
        """SIGKILL now, and reap it."""
        popen = self.popen
        if popen is None:
            return
        if popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
                self.signal(signal.SIGKILL)
            popen.wait(timeout=KILL_TIMEOUT_S)
        self._close_stdout()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- what it printed and where it listens ------------------------------------------

    @property
    def pid(self) -> int:
        return self._running().pid

    def port(self, key: str) -> int:
        """The port of a READY field, written `PORT` or `HOST:PORT`."""
        return int(self.fields[key].rsplit(":", 1)[-1])

    @property
    def http_address(self) -> str:
        """`127.0.0.1:PORT` of the READY line's `http` field (servers started here listen on loopback)."""
        return f"{LOOPBACK}:{self.port('http')}"

    @property
    def http_url(self) -> str:
        return f"http://{self.http_address}"

    @property
    def grpc_address(self) -> str:
        return f"{LOOPBACK}:{self.port('grpc')}"

    def log_text(self) -> str:
        """Everything the server wrote to stderr so far."""
        if self._log is not None:
            self._log.seek(0)
            return self._log.read().decode(errors="replace")
        if self.log_path is not None:
            try:
                return self.log_path.read_text(errors="replace")
            except OSError:
                return ""
        return ""

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_text()[-chars:]

    def rss_kb(self) -> int:
        """The server's resident memory (VmRSS), in KiB."""
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError(f"no VmRSS for {self.name}")

    def cpu_seconds(self) -> float:
        """The CPU time the server has used so far (user + system), in seconds."""
        with open(f"/proc/{self.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime in ticks

    def group_cpu_seconds(self) -> float:
        """The CPU time of the server's whole process group so far (a server that starts
        others, e.g. TorchServe's Java front end and its Python workers, is all of them);
        processes that already exited are not counted."""
        total = 0.0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue  # it exited meanwhile
            if int(fields[2]) == self.pid:  # its process group: the server runs in its own session
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total

    def _running(self) -> subprocess.Popen[str]:
        if self.popen is None:
            raise RuntimeError(f"{self.name} was never started")
        return self.popen

    def _close_stdout(self) -> None:
        if self.popen is not None and self.popen.stdout is not None:
            self.popen.stdout.close()


SIMULATED_PREDICTOR_MODULE = "tools.simulated_predictor"


def simulated_predictor_args(*options: str, http_port: int = 0, grpc_port: int = 0) -> list[str]:
    """The simulated predictor's flags: on 127.0.0.1 (port 0: a free one), then `options`
    such as `--call-ms 5`."""
    return ["--host", LOOPBACK, "--http-port", str(http_port), "--grpc-port", str(grpc_port), *options]


def simulated_predictor_command(*options: str, http_port: int = 0, grpc_port: int = 0) -> list[str]:
    """`python -m tools.simulated_predictor` with `simulated_predictor_args`."""
    return python_module_command(SIMULATED_PREDICTOR_MODULE,
                                 *simulated_predictor_args(*options, http_port=http_port, grpc_port=grpc_port))


class SimulatedPredictorProcess(ServerProcess):
    """The simulated predictor (`python -m tools.simulated_predictor`) as its own process;
    its READY line gives bare port numbers (`READY http=PORT grpc=PORT`)."""

    def __init__(self, *options: str, http_port: int = 0, grpc_port: int = 0, **kwargs: Any) -> None:
        kwargs.setdefault("name", "simulated predictor")
        super().__init__(simulated_predictor_command(*options, http_port=http_port, grpc_port=grpc_port), **kwargs)
