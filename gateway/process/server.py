"""The gateway process: one asyncio loop hosting what decides batches, the service and the
front ends (`gateway.process.front_ends`), assembled once for every role (`gateway.process.roles`: one
process, the batcher of `--workers`, a worker), with start, graceful stop, reload and the
signals that drive them; the process's open-files limit, which bounds how many client
connections each front end may hold; and its allocator's trimming (`gateway.observe.memory`).

It knows the role interface, not the roles of `gateway.process.workers`."""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import resource
import signal
from collections.abc import Callable, Coroutine
from typing import Any

from gateway.batching.scheduler import Scheduler
from gateway.config import ConfigError, GatewayConfig
from gateway.config import load as load_config
from gateway.observe.memory import Trimmer
from gateway.process.front_ends import FrontEnds
from gateway.process.roles import Role, SingleProcess
from gateway.service import InferenceService
from gateway.telemetry.settings import resolve as resolve_tracing
from gateway.telemetry.spans import NO_TELEMETRY, Telemetry
from gateway.telemetry.spans import start as start_telemetry

log = logging.getLogger(__name__)
# Descriptors kept back from client connections: predictor connections, gRPC's own, files, logs.
RESERVED_OPEN_FILES = 64
MIN_EXPORT_S = 0.5  # the export of queued spans at a stop gets this much even when grace is spent


class Gateway:
    """One gateway process: what decides batches (its role's scheduler), the service every
    front end calls, and the front ends that serve it on this process's sockets
    (`FrontEnds`). Its `role` (`gateway.process.roles`) says what differs between one process, the
    batcher of `--workers` and a worker; the assembly is this one for all three."""

    def __init__(self, config: GatewayConfig, role: Role | None = None) -> None:
        self.config = config
        self.role = role if role is not None else SingleProcess()
        self.scheduler: Scheduler | None = None
        self.service: InferenceService | None = None
        self.front_ends: FrontEnds | None = None
        self.telemetry: Telemetry = NO_TELEMETRY
        self._reloading = asyncio.Lock()

    @property
    def http_port(self) -> int:
        return self.front_ends.http_port if self.front_ends is not None else 0

    @property
    def grpc_port(self) -> int:
        return self.front_ends.grpc_port if self.front_ends is not None else 0

    async def start(self) -> None:
        self.telemetry = start_telemetry(resolve_tracing(self.config.tracing))
        self.scheduler = await self.role.scheduler(asyncio.get_running_loop(), self.telemetry)
        await self.role.share(self.config.shared)  # [shared]: quotas held with the other replicas
        self.service = InferenceService(self.config, self.scheduler, self.telemetry, self.role.views, self.role.backend)
        await self.service.start()
        server = self.role.server(self.config.server)
        self.front_ends = FrontEnds(self.service, dataclasses.replace(self.config, server=server),
                                    connection_cap(server.max_connections))
        await self.front_ends.start()
        await self.role.serving(self.service)

    async def stop(self, grace_s: float | None = None) -> None:
        """Graceful stop: refuse new work (503), let queued and in-flight requests finish
        within the grace period, answer the rest 503, then close everything. Safe on a
        gateway whose start failed part way."""
        grace = self.config.server.grace_s if grace_s is None else grace_s
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace  # one grace for the whole stop, whatever its steps
        try:
            if self.front_ends is not None:
                await self.front_ends.stop_accepting()
            await self.role.draining(grace)
            if self.service is not None:
                await self.service.close(max(0.0, deadline - loop.time()))
                await answers_written(self.service)
            if self.front_ends is not None:
                await self.front_ends.close()
        finally:
            await self.role.close()
            # Off the loop, within what is left of the grace (a moment at least, for a live collector).
            await asyncio.to_thread(self.telemetry.shutdown, max(deadline - loop.time(), MIN_EXPORT_S))

    async def reload(self, path: str) -> None:
        """Re-read the config file and apply its model changes (see `reload_models`), one
        reload at a time: SIGHUPs in quick succession apply in turn, never interleaved."""
        assert self.service is not None, "reload before start"
        async with self._reloading:
            fresh = await reload_models(self.service, path)
            if fresh is not None:
                self.config = fresh
                await self.role.reloaded(fresh)

    def hurry(self) -> None:
        """End the grace period now: what is still queued or in flight is answered 503."""
        if self.scheduler is not None:
            self.scheduler.hurry()
        self.role.hurry()


async def answers_written(service: InferenceService, limit_s: float = 2.0) -> None:
    """Wait (at most `limit_s`) until every answered request has written its response,
    before the connections close."""
    deadline = asyncio.get_running_loop().time() + limit_s
    while service.active_requests and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)


async def reload_models(service: InferenceService, path: str) -> GatewayConfig | None:
    """Re-read the config file at `path` and apply its model changes to `service`; the
    config now running, or None if the file is broken (logged; the running config kept).
    Server, limits and [shared] changes need a restart: they are kept as they are."""
    try:
        # Off the loop: the file and every key file are read (a slow disk or mount must not stall serving).
        fresh = await asyncio.to_thread(load_config, path)
        fresh = dataclasses.replace(fresh, server=service.config.server, limits=service.config.limits,
                                    shared=service.config.shared)
        changes = await service.reconfigure(fresh, service.config.server.grace_s)  # its tenants' keys read first
    except ConfigError as error:
        log.error("reload: config error, keeping the running config: %s", error)
        return None
    log.info("reload: %s", ", ".join(f"{kind} {names}" for kind, names in changes.items() if names) or "no changes")
    return fresh


def raise_open_files_limit() -> None:
    """Raise the soft open-files limit to the hard one (the common soft limit, 1,024, is
    reached by about a thousand idle clients) and log both."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _NR_OPEN if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as error:
            log.warning("open files: soft limit %d, hard %s; cannot raise the soft limit: %s", soft, _limit(hard), error)
            return
        log.info("open files: soft limit raised from %d to the hard limit, %s", soft, _limit(hard))
    else:
        log.info("open files: soft limit %s, hard %s", _limit(soft), _limit(hard))


_NR_OPEN = 1 << 20  # Linux's default ceiling (fs.nr_open) when the hard limit is unlimited


def _limit(value: int) -> str:
    return "unlimited" if value == resource.RLIM_INFINITY else str(value)


def connection_cap(configured: int) -> int:
    """Client connections each front end may hold: `server.max_connections`, or (0) what the
    open-files limit leaves after RESERVED_OPEN_FILES, shared by the two front ends. A
    configured cap the limit cannot honour is lowered, with a warning."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    open_files = _NR_OPEN if soft == resource.RLIM_INFINITY else soft
    available = max(1, (open_files - RESERVED_OPEN_FILES) // 2)
    if configured == 0:
        return available
    if configured > available:
        log.warning("server.max_connections %d is more than %d open files allow per front end; using %d",
                    configured, open_files, available)
        return available
    return configured


async def serve(config: GatewayConfig, config_path: str | None = None, role: Role | None = None) -> None:
    """Run until SIGTERM or SIGINT (or, for a worker, until its batcher has gone), then stop
    gracefully; a second signal hurries the stop. SIGHUP reloads `config_path` (models
    added, removed, re-tuned); a bad file is logged and the running config kept."""
    raise_open_files_limit()
    trimmer = Trimmer()  # in every role: each process gives back what large messages left (gateway.observe.memory)
    trimmer.start()
    gateway = Gateway(config, role)
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    started = asyncio.Event()

    async def reload() -> None:
        await started.wait()  # a SIGHUP during the start is applied once it is done, never kills it
        assert config_path is not None
        await gateway.reload(config_path)

    # Before the start: its signals must not find the default actions (SIGHUP's terminates).
    install_signals(loop, stopping, gateway.hurry, None if config_path is None else reload)
    try:
        await gateway.start()
        started.set()
        lost = loop.create_task(gateway.role.lost.wait())
        lost.add_done_callback(lambda _: stopping.set())
        server = gateway.role.server(config.server)
        print(f"READY http={server.host}:{gateway.http_port} grpc={server.host}:{gateway.grpc_port} "
              f"models={','.join(m.name for m in config.models)} loop={_loop_name(loop)}{gateway.role.ready_note}",
              flush=True)
        await stopping.wait()  # set at once by a signal that came during the start
        lost.cancel()
        log.info("stopping: %s (grace %s s)", gateway.role.drains, config.server.grace_s)
    finally:
        await gateway.stop()
        await trimmer.stop()


def install_signals(loop: asyncio.AbstractEventLoop, stopping: asyncio.Event, hurry: Callable[[], None],
                    reload: Callable[[], Coroutine[Any, Any, object]] | None) -> None:
    """SIGTERM and SIGINT set `stopping`; a second one also calls `hurry` (what is left is
    answered 503). SIGHUP runs `reload` (None: no config file to re-read)."""
    def on_stop() -> None:
        if stopping.is_set():
            log.warning("second signal: answering what is left with 503 and exiting")
            hurry()
        stopping.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_stop)
    if reload is None:
        return
    reloads: set[asyncio.Task[object]] = set()  # held so a reload is not collected mid-flight

    def on_hangup() -> None:
        task = loop.create_task(reload())
        reloads.add(task)
        task.add_done_callback(reloads.discard)

    loop.add_signal_handler(signal.SIGHUP, on_hangup)


def _loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """"uvloop" or "asyncio": which event loop the gateway runs on (see `gateway.cli`)."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
