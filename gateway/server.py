"""The gateway process: one asyncio loop hosting the Tornado and grpc.aio front ends,
the scheduler and the backend clients, with start and graceful stop; and the process's
open-files limit, which bounds how many client connections each front end may hold."""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import resource
import signal
import ssl
from pathlib import Path

import grpc
import tornado.netutil
from grpc_health.v1 import health

from gateway.batching.scheduler import BatchScheduler
from gateway.config import ConfigError, GatewayConfig, ServerConfig
from gateway.config import load as load_config
from gateway.grpc.server import build_server, set_serving
from gateway.rest.app import make_app
from gateway.rest.connections import ConnectionLimits, GuardedHTTPServer
from gateway.service import InferenceService

log = logging.getLogger(__name__)
# Descriptors kept back from client connections: predictor connections, gRPC's own, files, logs.
RESERVED_OPEN_FILES = 64


class Gateway:
    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.scheduler: BatchScheduler | None = None
        self.service: InferenceService | None = None
        self.http_port = 0
        self.grpc_port = 0
        self._http_server: GuardedHTTPServer | None = None
        self._grpc_server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None

    async def start(self) -> None:
        server = self.config.server
        self.scheduler = BatchScheduler(asyncio.get_running_loop())
        self.service = InferenceService(self.config, self.scheduler)
        await self.service.start()
        app = make_app(self.service, self.config.limits, server.auth_token)
        max_connections = connection_cap(server.max_connections)
        self._http_server = GuardedHTTPServer(
            app, limits=ConnectionLimits(server.header_timeout_s, server.body_timeout_s, server.idle_timeout_s,
                                         max_connections),
            # Handlers refuse over-limit bodies with a 413 of their own; this is the backstop.
            max_body_size=self.config.limits.max_body_bytes + 1,
            ssl_options=_server_ssl_context(server))
        self.service.metrics.watch_connections(self._http_server.stats)
        sockets = tornado.netutil.bind_sockets(server.http_port, server.host)
        self._http_server.add_sockets(sockets)
        self.http_port = sockets[0].getsockname()[1]
        grpc_server, self._health = build_server(self.service, self.config.limits, server, max_connections)
        self._grpc_server = grpc_server
        address = f"[{server.host}]" if ":" in server.host else server.host
        if server.tls_cert_file:
            credentials = grpc.ssl_server_credentials([(
                Path(server.tls_key_file).read_bytes(), Path(server.tls_cert_file).read_bytes())])
            self.grpc_port = grpc_server.add_secure_port(f"{address}:{server.grpc_port}", credentials)
        else:
            self.grpc_port = grpc_server.add_insecure_port(f"{address}:{server.grpc_port}")
        if self.grpc_port == 0:
            raise OSError(f"cannot bind gRPC port {server.grpc_port} on {server.host}")
        await grpc_server.start()
        await set_serving(self._health, True)

    async def stop(self, grace_s: float | None = None) -> None:
        """Graceful stop: refuse new work (503), let queued and in-flight requests finish
        within the grace period, answer the rest 503, then close everything."""
        grace = self.config.server.grace_s if grace_s is None else grace_s
        if self._health is not None:
            await set_serving(self._health, False)
        if self._http_server is not None:
            self._http_server.stop()  # no new connections
        if self.service is not None:
            await self.service.close(grace)
            # Let every answered request write its response before connections close.
            flush_deadline = asyncio.get_running_loop().time() + 2.0
            while self.service.active_requests and asyncio.get_running_loop().time() < flush_deadline:
                await asyncio.sleep(0.01)
        if self._grpc_server is not None:
            await self._grpc_server.stop(grace=0.5)
        if self._http_server is not None:
            await self._http_server.close_all_connections()

    async def reload(self, path: str) -> None:
        """Re-read the config file and apply its model changes (server and limits changes
        need a restart: they are reported, not applied)."""
        try:
            fresh = load_config(path)
        except ConfigError as error:
            log.error("reload: config error, keeping the running config: %s", error)
            return
        fresh = dataclasses.replace(fresh, server=self.config.server, limits=self.config.limits)
        assert self.service is not None, "reload before start"
        changes = await self.service.reconfigure(fresh, self.config.server.grace_s)
        self.config = fresh
        log.info("reload: %s", ", ".join(f"{kind} {names}" for kind, names in changes.items() if names) or "no changes")

    def hurry(self) -> None:
        """End the grace period now: what is still queued or in flight is answered 503."""
        if self.scheduler is not None:
            self.scheduler.hurry()


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


def _server_ssl_context(server: ServerConfig) -> ssl.SSLContext | None:
    if not server.tls_cert_file:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(server.tls_cert_file, server.tls_key_file)
    return context


async def serve(config: GatewayConfig, config_path: str | None = None) -> None:
    """Run until SIGTERM or SIGINT, then stop gracefully; a second signal hurries the stop.
    SIGHUP reloads `config_path` (models added, removed, re-tuned); a bad file is logged
    and the running config kept."""
    raise_open_files_limit()
    gateway = Gateway(config)
    await gateway.start()
    stopping = asyncio.Event()

    def on_signal() -> None:
        if stopping.is_set():
            log.warning("second signal: answering what is left with 503 and exiting")
            gateway.hurry()
        stopping.set()

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal)
    if config_path is not None:
        reloads: set[asyncio.Task] = set()  # held so a reload is not collected mid-flight

        def on_hangup() -> None:
            task = loop.create_task(gateway.reload(config_path))
            reloads.add(task)
            task.add_done_callback(reloads.discard)

        loop.add_signal_handler(signal.SIGHUP, on_hangup)
    # Only now: a signal sent as soon as READY is seen must find its handler installed.
    print(f"READY http={config.server.host}:{gateway.http_port} grpc={config.server.host}:{gateway.grpc_port} "
          f"models={','.join(m.name for m in config.models)} loop={_loop_name(loop)}", flush=True)
    await stopping.wait()
    log.info("stopping: finishing queued and in-flight requests (grace %s s)", config.server.grace_s)
    await gateway.stop()


def _loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """"uvloop" or "asyncio": which event loop the gateway runs on (see `gateway.cli`)."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
