"""The batcher process of `serve --workers N`: the one scheduler, and its workers' keeper.

It starts the models (the scheduler, the predictors' clients) and the batcher's socket,
serves both front ends itself on the gateway's ports (it is the first of the N: its own
requests reach the scheduler without a message, and N workers cost N processes, not N+1,
on the cores they share), then starts N-1 worker processes (`python -m gateway worker`, `WorkerRole`) on
the same ports, and prints one READY line once every worker has said READY. Then:

* **A worker that dies** is logged and started again (after a pause that grows while it
  keeps dying, up to 5 s); the clients it was serving see their connections close, and
  its requests still queued here are cancelled: nothing hangs.
* **SIGHUP** reloads the models here first (so a new model is batched before any worker
  takes a request for it), then in every worker.
* **SIGTERM or SIGINT** drains: this process and every worker stop taking requests and
  finish their own, which are batched here until the last worker has gone; then the
  models close. A second signal hurries it: what is still queued is answered 503.

* **A worker started again** reads the config the gateway serves now (rewritten here on
  every reload); a reload that comes while a worker starts reaches it once it is READY.

Port 0 means one free port for all workers: it is reserved here with SO_REUSEPORT (bound,
never listening, so it takes no connection) before the workers bind it. The socket and the
workers' config live in a private folder named by this process's PID (a successor removes
one whose batcher died without cleaning up); the bearer token is never written there, it
reaches the workers in their environment.

It is a role of the one gateway assembly (`gateway.process.roles`, `gateway.process.server.Gateway`),
which it does not import: the command line runs the batcher as `serve` with this role.
It knows the scheduler, the batcher's channel, the views and how to start a process; no
front end.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import pickle
import shutil
import signal
import socket
import sys
import tempfile
from typing import TYPE_CHECKING

from gateway.batching.scheduler import Scheduler
from gateway.config import GatewayConfig, ServerConfig
from gateway.observe.views import LocalViews, Views
from gateway.process.roles import SingleProcess
from gateway.process.workers.batcher import Batcher, BatcherViews
from gateway.telemetry.spans import Telemetry

if TYPE_CHECKING:
    from gateway.service import InferenceService

log = logging.getLogger(__name__)
FOLDER_PREFIX = "batching-gateway-"
TOKEN_VARIABLE = "BATCHING_GATEWAY_WORKER_TOKEN"  # the bearer token, from the batcher to its workers
READY_TIMEOUT_S = 120.0   # a worker learns its models' signatures from their predictors before READY
MAX_RESTART_PAUSE_S = 5.0


class WorkerProcess:
    """One worker: its command, its process, started again when it dies."""

    def __init__(self, index: int, command: list[str], environment: dict[str, str] | None = None) -> None:
        self.index = index
        self.command = command
        self.environment = environment  # None: this process's own
        self.process: asyncio.subprocess.Process | None = None
        self._stdout: asyncio.Task[None] | None = None
        self.ready = False  # it said READY: its signal handlers are installed

    @property
    def pid(self) -> int:
        return self.process.pid if self.process is not None else 0

    async def start(self) -> None:
        """Start it and wait for its READY line (RuntimeError if it exits or stays silent)."""
        # Its own session: signals reach it from here alone (a terminal's ctrl-c or a group
        # kill would otherwise come twice, and a second signal hurries a drain). If this
        # process dies, the batcher's socket closes with it, which stops the worker.
        self.ready = False
        self.process = await asyncio.create_subprocess_exec(
            *self.command, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, start_new_session=True,
            env=self.environment)
        assert self.process.stdout is not None
        try:
            line = await asyncio.wait_for(self.process.stdout.readline(), READY_TIMEOUT_S)
        except TimeoutError:
            self.process.kill()
            raise RuntimeError(f"worker {self.index} did not say READY within {READY_TIMEOUT_S:g} s") from None
        if not line.startswith(b"READY"):
            await self.process.wait()
            raise RuntimeError(f"worker {self.index} exited with status {self.process.returncode} before READY")
        self._stdout = asyncio.get_running_loop().create_task(self._drain(self.process.stdout))
        self.ready = True

    @staticmethod
    async def _drain(stdout: asyncio.StreamReader) -> None:
        while await stdout.readline():  # nothing else is printed there; keep the pipe from filling
            pass

    def signal(self, signum: int) -> None:
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signum)


class BatcherRole(SingleProcess):
    """The batcher of `serve --workers N` (see the module): this process's scheduler decides
    every batch of the gateway, fed by its own front ends and by N-1 worker processes."""

    def __init__(self, workers: int, config_path: str | None, loop_name: str, log_level: str, log_format: str) -> None:
        super().__init__()
        self.count = workers
        self.ready_note = f" workers={workers}"
        self.drains = "the workers finish their requests"
        _remove_left_behind()
        # Private (0700): the socket and the config. Named by this process, so that a
        # successor can tell it was left behind by a batcher that died (kill -9).
        self._directory = tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-")
        self._config_file = os.path.join(self._directory, "config.pickle")
        self._options = ["--loop", loop_name, "--log-level", log_level, "--log-format", log_format,
                         *(("--config-path", config_path) if config_path else ())]
        self._reserved: list[socket.socket] = []
        self._server: ServerConfig | None = None
        self.batcher: Batcher | None = None
        self.workers: list[WorkerProcess] = []
        self._watchers: list[asyncio.Task[None]] = []
        self._stopping = False
        self._reloads = 0  # reloads applied here so far: a worker started before the last one catches up

    async def scheduler(self, loop: asyncio.AbstractEventLoop, telemetry: Telemetry) -> Scheduler:
        scheduler = await super().scheduler(loop, telemetry)
        assert self.local is not None
        self.batcher = Batcher(self.local, os.path.join(self._directory, "batcher.sock"))
        return scheduler

    def views(self, service: InferenceService) -> Views:
        assert self.batcher is not None and self.local is not None
        self.batcher.views = BatcherViews(LocalViews(self.local, service.models, service.metrics), self.batcher)
        return self.batcher.views

    def server(self, settings: ServerConfig) -> ServerConfig:
        if self._server is None:
            self._server = _with_reserved_ports(settings, self._reserved)
        return self._server

    async def serving(self, service: InferenceService) -> None:
        """Start the workers on the same ports (once its models are batched here) and wait
        for every one's READY."""
        assert self.batcher is not None
        await self.batcher.start()
        self._write_config(service.config)
        command = [sys.executable, "-m", "gateway", "worker", self._config_file, self.batcher.path, *self._options]
        # The bearer token reaches a worker in its environment, never in a file.
        environment = {**os.environ, TOKEN_VARIABLE: service.config.server.auth_token}
        self.workers = [WorkerProcess(index, command, environment) for index in range(1, self.count)]
        await asyncio.gather(*(self._start(worker) for worker in self.workers))
        self._watchers = [asyncio.get_running_loop().create_task(self._keep_running(worker)) for worker in self.workers]
        # Logged before READY: whoever waits for READY may read the PIDs at once.
        log.info("workers: 0 (pid %d, the batcher), %s", os.getpid(),
                 ", ".join(f"{w.index} (pid {w.pid})" for w in self.workers))

    def _write_config(self, config: GatewayConfig) -> None:
        """The config a worker starts with: the one served now (rewritten on every reload,
        so that a worker started again serves the models the gateway serves)."""
        assert self._server is not None
        partial = self._config_file + ".new"
        with open(partial, "wb") as handle:
            pickle.dump(dataclasses.replace(config, server=dataclasses.replace(self._server, auth_token="")), handle)
        os.replace(partial, self._config_file)  # a worker starting now reads the old file or the new, whole

    async def draining(self, grace_s: float) -> None:
        """The workers finish their own requests (batched here) and exit, before the service closes."""
        self._stopping = True
        for worker in self.workers:
            worker.signal(signal.SIGTERM)
        await _wait_for_exits(self.workers, grace_s + 15.0)
        for watcher in self._watchers:
            watcher.cancel()

    def hurry(self) -> None:
        for worker in self.workers:
            worker.signal(signal.SIGTERM)  # a worker's second signal hurries it too

    async def reloaded(self, config: GatewayConfig) -> None:
        self._reloads += 1
        self._write_config(config)
        for worker in self.workers:  # after the batcher: a new model is batched before any worker takes it
            if worker.ready:  # one still starting catches up once READY (see _start): a SIGHUP could kill it
                worker.signal(signal.SIGHUP)

    async def _start(self, worker: WorkerProcess) -> None:
        """Start a worker; if the config was reloaded while it started (it may have read the
        file before), it reloads too once its handlers are installed."""
        reloads = self._reloads
        await worker.start()
        if self._reloads != reloads:
            worker.signal(signal.SIGHUP)

    async def close(self) -> None:
        self._stopping = True
        for watcher in self._watchers:
            watcher.cancel()
        for worker in self.workers:
            if worker.process is not None and worker.process.returncode is None:
                worker.process.kill()
                await worker.process.wait()
        if self.batcher is not None:
            await self.batcher.close()
        for held in self._reserved:
            held.close()
        shutil.rmtree(self._directory, ignore_errors=True)
        await super().close()  # the shared quotas' store, when [shared] is configured

    async def _keep_running(self, worker: WorkerProcess) -> None:
        pause = 0.1
        while True:
            assert worker.process is not None
            status = await worker.process.wait()
            if self._stopping:
                return
            log.error("worker %d (pid %d) exited with status %s: its clients' connections closed; starting it again",
                      worker.index, worker.pid, status)
            await asyncio.sleep(pause)
            pause = min(pause * 2, MAX_RESTART_PAUSE_S)
            try:
                await self._start(worker)
            except RuntimeError as error:
                log.error("%s", error)
                continue
            log.info("worker %d started again (pid %d)", worker.index, worker.pid)
            pause = 0.1


def _remove_left_behind() -> None:
    """Remove the folders of batchers that died without cleaning up (their PID is gone)."""
    root = tempfile.gettempdir()
    for name in os.listdir(root):
        if not name.startswith(FOLDER_PREFIX):
            continue
        owner = name[len(FOLDER_PREFIX):].split("-", 1)[0]
        path = os.path.join(root, name)
        with contextlib.suppress(OSError):  # removed meanwhile by another successor
            if owner.isdigit() and not _alive(int(owner)) and os.stat(path).st_uid == os.getuid():
                log.info("removing %s, left behind by a batcher (pid %s) that is gone", path, owner)
                shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's: not ours to judge
    return True


def _with_reserved_ports(server: ServerConfig, reserved: list[socket.socket]) -> ServerConfig:
    """The server settings the workers run with: a concrete port for each port 0, held here
    (bound with SO_REUSEPORT, not listening) so that no other program takes it."""
    ports = {}
    for key in ("http_port", "grpc_port"):
        if getattr(server, key) == 0:
            family = socket.AF_INET6 if ":" in server.host else socket.AF_INET
            held = socket.socket(family, socket.SOCK_STREAM)
            held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            held.bind((server.host, 0))
            reserved.append(held)
            ports[key] = held.getsockname()[1]
    return dataclasses.replace(server, **ports)


async def _wait_for_exits(workers: list[WorkerProcess], timeout_s: float) -> None:
    waits = [worker.process.wait() for worker in workers if worker.process is not None]
    try:
        await asyncio.wait_for(asyncio.gather(*waits), timeout_s)
    except TimeoutError:
        log.warning("workers still running %g s after SIGTERM: killing them", timeout_s)
