"""The batcher process of `serve --workers N`: the one scheduler, and its workers' keeper.

It starts the models (the scheduler, the predictors' clients) and the batcher's socket,
serves both front ends itself on the gateway's ports (it is the first of the N: its own
requests reach the scheduler without a message, and N workers cost N processes, not N+1,
on the cores they share), then starts N-1 worker processes (`gateway.workers.worker`) on
the same ports, and prints one READY line once every worker has said READY. Then:

* **A worker that dies** is logged and started again (after a pause that grows while it
  keeps dying, up to 5 s); the clients it was serving see their connections close, and
  its requests still queued here are cancelled: nothing hangs.
* **SIGHUP** reloads the models here first (so a new model is batched before any worker
  takes a request for it), then in every worker.
* **SIGTERM or SIGINT** drains: this process and every worker stop taking requests and
  finish their own, which are batched here until the last worker has gone; then the
  models close. A second signal hurries it: what is still queued is answered 503.

Port 0 means one free port for all workers: it is reserved here with SO_REUSEPORT (bound,
never listening, so it takes no connection) before the workers bind it.

It knows the service, the scheduler, the batcher's channel and how to start a process;
no front end.
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

from gateway.batching.scheduler import BatchScheduler
from gateway.config import GatewayConfig, ServerConfig
from gateway.front_ends import FrontEnds
from gateway.server import answers_written, connection_cap, install_signals, raise_open_files_limit, reload_models
from gateway.service import InferenceService
from gateway.telemetry import resolve as resolve_tracing
from gateway.telemetry import start as start_telemetry
from gateway.workers.batcher import Batcher

log = logging.getLogger(__name__)
READY_TIMEOUT_S = 120.0   # a worker learns its models' signatures from their predictors before READY
MAX_RESTART_PAUSE_S = 5.0


class WorkerProcess:
    """One worker: its command, its process, started again when it dies."""

    def __init__(self, index: int, command: list[str]) -> None:
        self.index = index
        self.command = command
        self.process: asyncio.subprocess.Process | None = None
        self._stdout: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int:
        return self.process.pid if self.process is not None else 0

    async def start(self) -> None:
        """Start it and wait for its READY line (RuntimeError if it exits or stays silent)."""
        # Its own session: signals reach it from here alone (a terminal's ctrl-c or a group
        # kill would otherwise come twice, and a second signal hurries a drain). If this
        # process dies, the batcher's socket closes with it, which stops the worker.
        self.process = await asyncio.create_subprocess_exec(
            *self.command, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, start_new_session=True)
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

    @staticmethod
    async def _drain(stdout: asyncio.StreamReader) -> None:
        while await stdout.readline():  # nothing else is printed there; keep the pipe from filling
            pass

    def signal(self, signum: int) -> None:
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signum)


async def supervise(config: GatewayConfig, config_path: str | None, loop_name: str, log_level: str,
                    log_format: str) -> None:
    """Run the batcher, serving as the first worker, and `config.server.workers` - 1 more
    until SIGTERM or SIGINT."""
    raise_open_files_limit()
    loop = asyncio.get_running_loop()
    directory = tempfile.mkdtemp(prefix="batching-gateway-")  # private (0700): the socket and the config
    reserved: list[socket.socket] = []
    telemetry = start_telemetry(resolve_tracing(config.tracing))
    service = InferenceService(config, BatchScheduler(loop, telemetry.batches), telemetry)
    batcher = Batcher(service, os.path.join(directory, "batcher.sock"))
    workers: list[WorkerProcess] = []
    front_ends: FrontEnds | None = None
    stopping = asyncio.Event()
    drained = False
    try:
        await service.start()
        await batcher.start()
        service.views = lambda name, *args: batcher.view(name, args)  # its own front ends see the whole gateway
        server = _with_reserved_ports(config.server, reserved)
        front_ends = FrontEnds(service, dataclasses.replace(config, server=server), connection_cap(server.max_connections))
        await front_ends.start()
        config_file = os.path.join(directory, "config.pickle")
        with open(config_file, "wb") as handle:
            pickle.dump(dataclasses.replace(config, server=server), handle)
        command = [sys.executable, "-m", "gateway.workers.worker", config_file, batcher.path, "--loop", loop_name,
                   "--log-level", log_level, "--log-format", log_format,
                   *(("--config-path", config_path) if config_path else ())]
        workers = [WorkerProcess(index, command) for index in range(1, server.workers)]
        await asyncio.gather(*(worker.start() for worker in workers))
        watchers = [loop.create_task(_keep_running(worker, stopping)) for worker in workers]
        _install_signals(loop, stopping, service, workers, config_path)
        # Logged before READY: whoever waits for READY may read the PIDs at once.
        log.info("workers: 0 (pid %d, the batcher), %s", os.getpid(),
                 ", ".join(f"{w.index} (pid {w.pid})" for w in workers))
        print(f"READY http={server.host}:{server.http_port} grpc={server.host}:{server.grpc_port} "
              f"models={','.join(m.name for m in config.models)} loop={loop_name} workers={server.workers}",
              flush=True)
        await stopping.wait()
        log.info("stopping: the workers finish their requests (grace %s s)", config.server.grace_s)
        await front_ends.stop_accepting()
        for worker in workers:
            worker.signal(signal.SIGTERM)
        await _wait_for_exits(workers, config.server.grace_s + 15.0)
        for watcher in watchers:
            watcher.cancel()
        await service.close(config.server.grace_s)  # what this process's own clients still wait for
        drained = True
        await answers_written(service)
    finally:
        for worker in workers:
            if worker.process is not None and worker.process.returncode is None:
                worker.process.kill()
                await worker.process.wait()
        if not drained:
            await service.close(0.0)
        if front_ends is not None:
            await front_ends.close()
        await batcher.close()
        await asyncio.to_thread(telemetry.shutdown)
        for held in reserved:
            held.close()
        shutil.rmtree(directory, ignore_errors=True)


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


async def _keep_running(worker: WorkerProcess, stopping: asyncio.Event) -> None:
    pause = 0.1
    while True:
        assert worker.process is not None
        status = await worker.process.wait()
        if stopping.is_set():
            return
        log.error("worker %d (pid %d) exited with status %s: its clients' connections closed; starting it again",
                  worker.index, worker.pid, status)
        await asyncio.sleep(pause)
        pause = min(pause * 2, MAX_RESTART_PAUSE_S)
        try:
            await worker.start()
        except RuntimeError as error:
            log.error("%s", error)
            continue
        log.info("worker %d started again (pid %d)", worker.index, worker.pid)
        pause = 0.1


async def _wait_for_exits(workers: list[WorkerProcess], timeout_s: float) -> None:
    waits = [worker.process.wait() for worker in workers if worker.process is not None]
    try:
        await asyncio.wait_for(asyncio.gather(*waits), timeout_s)
    except TimeoutError:
        log.warning("workers still running %g s after SIGTERM: killing them", timeout_s)


def _install_signals(loop: asyncio.AbstractEventLoop, stopping: asyncio.Event, service: InferenceService,
                     workers: list[WorkerProcess], config_path: str | None) -> None:
    def hurry() -> None:
        service.scheduler.hurry()
        for worker in workers:
            worker.signal(signal.SIGTERM)  # a worker's second signal hurries it too

    async def reload() -> None:
        assert config_path is not None
        if await reload_models(service, config_path) is None:
            return
        for worker in workers:  # after the batcher: a new model is batched before any worker takes it
            worker.signal(signal.SIGHUP)

    install_signals(loop, stopping, hurry, None if config_path is None else reload)
