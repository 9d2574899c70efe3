"""What one gateway process serves on its sockets: the HTTP (Tornado) and gRPC (grpc.aio)
front ends, built around an `InferenceService`, bound, started and stopped together.

It is the assembly of the protocol side, apart from what decides batches (the scheduler,
which the service holds): a process that serves requests needs this and a service; where
batches are decided is the service's business. It knows the front ends' constructors and
the server settings, no handler, no codec and no predictor.
"""
from __future__ import annotations

import ssl
from pathlib import Path

import grpc
import tornado.netutil
from grpc_health.v1 import health

from gateway.config import GatewayConfig, ServerConfig
from gateway.grpc.rpc import OpenStreams
from gateway.grpc.server import build_server, set_serving
from gateway.rest.app import make_front_end
from gateway.rest.connections import ConnectionLimits, GuardedHTTPServer
from gateway.service import InferenceService


class FrontEnds:
    """Both front ends of one process, listening once `start` returns."""

    def __init__(self, service: InferenceService, config: GatewayConfig, max_connections: int) -> None:
        self.service = service
        self.config = config
        self.max_connections = max_connections
        self.http_port = 0
        self.grpc_port = 0
        self.http_server: GuardedHTTPServer | None = None
        self._grpc_server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None
        self._streams = OpenStreams()

    async def start(self) -> None:
        server, limits = self.config.server, self.config.limits
        self.http_server = GuardedHTTPServer(
            make_front_end(self.service, limits, server.lean_routes),
            limits=ConnectionLimits(server.header_timeout_s, server.body_timeout_s, server.idle_timeout_s,
                                    self.max_connections),
            # Handlers refuse over-limit bodies with a 413 of their own; this is the backstop.
            max_body_size=limits.max_body_bytes + 1,
            ssl_options=_server_ssl_context(server))
        self.service.metrics.watch_connections(self.http_server.stats)
        # Several workers serve one port (gateway.process.workers): the kernel spreads connections.
        sockets = tornado.netutil.bind_sockets(server.http_port, server.host, backlog=server.http_listen_backlog,
                                               reuse_port=server.workers > 1)
        self.http_server.add_sockets(sockets)
        self.http_port = sockets[0].getsockname()[1]
        grpc_server, self._health = build_server(self.service, limits, server, self.max_connections, self._streams)
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

    async def stop_accepting(self) -> None:
        """Say not serving (gRPC health), take no new HTTP connections and read no more of
        the open gRPC streams (each ends once it has answered what it read)."""
        if self._health is not None:
            await set_serving(self._health, False)
        self._streams.end()
        if self.http_server is not None:
            self.http_server.stop()

    async def close(self) -> None:
        """Close both front ends and every connection they still hold."""
        if self._grpc_server is not None:
            await self._grpc_server.stop(grace=0.5)
        if self.http_server is not None:
            await self.http_server.close_all_connections()


def _server_ssl_context(server: ServerConfig) -> ssl.SSLContext | None:
    if not server.tls_cert_file:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(server.tls_cert_file, server.tls_key_file)
    return context
