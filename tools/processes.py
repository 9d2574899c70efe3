"""Start a server as its own process, know when it is ready, stop it by PID: the one
launcher of the project's tests and tools, and the one `free_port`.

The servers this project starts itself (the gateway, the simulated predictor, the
benchmark baselines, TorchServe's launcher script, Triton run directly) each print one
`READY key=value ...` line on stdout once they listen; `ServerProcess.fields` holds those
values. A server that prints none (the real KServe and Triton under PyTriton) is ready
when a `ready_probe` says so. A server runs in its own session (its PID is its process
group, so whatever it starts is stopped with it), with its output in a log file, and is
stopped with SIGTERM to the group, then SIGKILL. With `hold_stdin` it also exits by
itself if this process dies: it watches a stdin pipe only this process holds.
`SimulatedPredictorProcess` knows the simulated predictor's command line.

It must not know about tests, benchmarks or any server's protocol (tools never import
tests; tests and tools import this).
"""
from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
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


class ServerStartError(RuntimeError):
    """A server exited, or was not ready in time; the message ends with its log's tail."""


_handed_out_ports: set[int] = set()
_ports_lock = threading.Lock()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now and not yet handed out by this process.

    The port is released before the server binds it, so another program could take it in
    between; remembering handed-out ports at least keeps our own servers apart. Servers
    that can bind port 0 and say which they got (READY) should do that instead."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((LOOPBACK, 0))
            port = int(sock.getsockname()[1])
        with _ports_lock:
            if port not in _handed_out_ports:
                _handed_out_ports.add(port)
                return port


class ServerProcess:
    """`command` until it is ready (its READY line, or `ready_probe`); stopped by PID.

    `start()` launches it and waits until it is ready (`spawn()` then `wait_ready()`, for
    callers that must note the process between the two). It runs from `cwd` (the repository
    root unless told). Its stderr (and, with a probe, its stdout) goes to `log_path`, or to
    an anonymous temporary file when there is none; `log_text()` reads either. `cleanup`
    folders are removed once it has stopped."""

    def __init__(self, command: Sequence[str | os.PathLike[str]], *, name: str | None = None,
                 env: dict[str, str] | None = None, log_path: Path | None = None,
                 ready_timeout: float = READY_TIMEOUT_S, stop_timeout: float = STOP_TIMEOUT_S,
                 open_files_limit: int | None = None, ready_probe: Callable[[], bool] | None = None,
                 cwd: Path = ROOT, hold_stdin: bool = False, cleanup: Sequence[Path] = ()) -> None:
        self.command = [str(part) for part in command]
        self.open_files_limit = open_files_limit  # RLIMIT_NOFILE, soft and hard, for the child alone
        self.name = name or " ".join(self.command)
        self.env = env
        self.log_path = log_path
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.ready_probe = ready_probe
        self.cwd = cwd
        self.hold_stdin = hold_stdin
        self.cleanup = list(cleanup)
        self.popen: subprocess.Popen[str] | None = None
        self.ready_line = ""
        self.fields: dict[str, str] = {}
        self.startup_seconds: float | None = None
        self._log: IO[bytes] | None = None  # the anonymous log, when there is no log_path

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> Self:
        started = time.monotonic()
        self.spawn()
        self.wait_ready()
        self.startup_seconds = time.monotonic() - started
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
        # The open-files limit is set by prlimit(1), not a preexec_fn: Python code between fork
        # and exec runs the parent's fork handlers, and gRPC's deadlock in a process with gRPC
        # threads (a test process hung in Popen once, its child stuck before exec).
        command = self.command if self.open_files_limit is None else [
            "prlimit", f"--nofile={self.open_files_limit}:{self.open_files_limit}", *self.command]
        try:
            self.popen = subprocess.Popen(
                command, cwd=self.cwd, env=self.env,
                # A pipe only we hold reaches EOF however this process dies: a server watching
                # it (the predictors' --exit-on-stdin-eof) cannot outlive us.
                stdin=subprocess.PIPE if self.hold_stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE if self.ready_probe is None else log,
                stderr=log, text=True, start_new_session=True,
            )
        finally:
            if self.log_path is not None:
                log.close()

    def wait_ready(self) -> None:
        """Read the first stdout line (or ask `ready_probe` until it says yes); anything but
        READY within `ready_timeout`, or an exit first, stops the process and raises
        ServerStartError with the end of its log."""
        if self.ready_probe is not None:
            self._probe_until_ready(self.ready_probe)
            return
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
            raise ServerStartError(f"{self.name} did not start (stdout {line!r}); its log:\n{self.log_tail()}")
        self.ready_line = line
        self.fields = dict(part.split("=", 1) for part in line.split()[1:])

    def _probe_until_ready(self, ready: Callable[[], bool]) -> None:
        popen = self._running()
        deadline = time.monotonic() + self.ready_timeout
        while not ready():
            if popen.poll() is not None:
                self.stop()
                raise ServerStartError(f"{self.name} exited with code {popen.returncode} before it was ready; "
                                       f"its log:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise ServerStartError(f"{self.name} not ready after {self.ready_timeout:.0f} s; its log:\n"
                                       f"{self.log_tail()}")
            time.sleep(0.1)

    @property
    def returncode(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def is_running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def group_pids(self) -> list[int]:
        """Live PIDs of the server's process group (the server and everything it started)."""
        return pids_in_group(self.pid)

    def signal(self, signum: int) -> None:
        """Send `signum` to the server's process group."""
        os.killpg(self.pid, signum)

    def wait(self, timeout: float) -> int:
        return self._running().wait(timeout=timeout)

    def stop(self, timeout: float | None = None) -> int | None:
        """SIGTERM the process group, wait up to `timeout` (default `stop_timeout`) for all
        of it, then SIGKILL what is left; returns the server's exit code (None if it never
        started). Stopping a stopped server does nothing."""
        popen = self.popen
        if popen is None:
            return None
        limit = self.stop_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        if popen.poll() is None:
            try:
                self.signal(signal.SIGTERM)
                popen.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                self.kill()
            except ProcessLookupError:  # it exited between poll() and the signal
                popen.wait(timeout=KILL_TIMEOUT_S)
        # The leader is gone; what it started gets the rest of the time, then SIGKILL.
        while pids_in_group(popen.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        self._kill_group(popen.pid)
        self._finished()
        return popen.returncode

    def kill(self) -> None:
        """SIGKILL the whole process group now, and reap the server (a crash, for tests)."""
        popen = self.popen
        if popen is None:
            return
        if popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
                self.signal(signal.SIGKILL)
            popen.wait(timeout=KILL_TIMEOUT_S)
        self._kill_group(popen.pid)
        self._close_stdout()

    @staticmethod
    def _kill_group(pgid: int) -> None:
        """SIGKILL what is left of a group and wait (bounded) until nothing of it runs."""
        if not pids_in_group(pgid):
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        deadline = time.monotonic() + KILL_TIMEOUT_S
        while pids_in_group(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)

    def _finished(self) -> None:
        self._close_stdout()
        if self.popen is not None and self.popen.stdin is not None:
            self.popen.stdin.close()
        for folder in self.cleanup:
            shutil.rmtree(folder, ignore_errors=True)

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
            # pread, not seek and read: the child writes its stderr through the same open file,
            # whose offset both share; a seek(0) here would land its next line at the start,
            # over what it wrote before (one full run lost a reload's log line so).
            fd = self._log.fileno()
            return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")
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
        return process_rss_kb(self.pid)

    def cpu_seconds(self) -> float:
        """The CPU time the server has used so far (user + system), in seconds."""
        return process_cpu_seconds(self.pid)

    def group_cpu_seconds(self) -> float:
        """The CPU time of the server's whole process group so far (a server that starts
        others, e.g. TorchServe's Java front end and its Python workers, is all of them);
        processes that already exited are not counted."""
        return sum(process_cpu_seconds(pid) for pid in pids_in_group(self.pid))

    def tree_cpu_seconds(self) -> float:
        """The CPU time of the server and the processes it started that still run (a
        gateway's workers, in sessions of their own), summed."""
        return sum(process_cpu_seconds(pid) for pid in (self.pid, *child_pids(self.pid)))

    def _running(self) -> subprocess.Popen[str]:
        if self.popen is None:
            raise RuntimeError(f"{self.name} was never started")
        return self.popen

    def _close_stdout(self) -> None:
        if self.popen is not None and self.popen.stdout is not None:
            self.popen.stdout.close()


def _stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state ppid pgrp ... utime
    stime ...), or None once the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()


def is_alive(pid: int) -> bool:
    """True while `pid` runs; a zombie (dead, not yet reaped by its parent) is not alive."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def pids_in_group(pgid: int) -> list[int]:
    """PIDs of live (non-zombie) processes whose process group is `pgid` (Linux /proc)."""
    pids = []
    for entry in os.listdir("/proc"):
        fields = _stat(entry) if entry.isdigit() else None
        if fields is not None and fields[0] != "Z" and int(fields[2]) == pgid:
            pids.append(int(entry))
    return pids


def child_pids(pid: int) -> list[int]:
    """PIDs of the processes `pid` started that still run (Linux /proc), wherever their
    process group is (a gateway's workers run in sessions of their own)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                found += [int(child) for child in (task / "children").read_text().split()]
    return found


def process_rss_kb(pid: int) -> int:
    """A process's resident memory (VmRSS), in KiB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


def process_cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) `pid` has used so far, in seconds; 0 if it is gone."""
    fields = _stat(pid)
    if fields is None:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime in ticks


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


def redis_ping(port: int, timeout: float = 1.0) -> bool:
    """Whether a Redis (or Valkey) server answers PING on 127.0.0.1:`port` (RESP, no client library)."""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisProcess(ServerProcess):
    """Debian's `redis-server` on 127.0.0.1:`port` (a free one unless told: the same port
    again to start it anew after a stop), in memory only (no snapshot, no append-only file),
    ready once it answers PING; stopped by PID like every server here."""

    def __init__(self, port: int = 0, **kwargs: Any) -> None:
        self.redis_port = port or free_port()
        binary = shutil.which("redis-server") or "redis-server"
        kwargs.setdefault("name", f"redis-server :{self.redis_port}")
        kwargs.setdefault("ready_probe", lambda: redis_ping(self.redis_port))
        super().__init__([binary, "--port", str(self.redis_port), "--bind", LOOPBACK, "--save", "",
                          "--appendonly", "no", "--protected-mode", "no", "--loglevel", "warning"], **kwargs)

    @property
    def url(self) -> str:
        return f"redis://{LOOPBACK}:{self.redis_port}/0"
