"""Build the grpc.aio server: OIP servicer + standard health service + server reflection."""
from __future__ import annotations

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

from gateway.config import ServerConfig
from gateway.grpc import oip, torchserve
from gateway.grpc.auth import KeyInterceptor
from gateway.grpc.rpc import OpenStreams
from gateway.service import InferenceService
from wire.codecs.limits import Limits
from wire.generated import pool
from wire.generated.inference import grpc_service_pb2 as pb

INFERENCE_SERVICE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name


def build_server(service: InferenceService, limits: Limits, settings: ServerConfig, max_connections: int,
                 streams: OpenStreams) -> tuple[grpc.aio.Server, health.aio.HealthServicer]:
    # Installed when the gateway starts with keys to check (a reload cannot add the first: gateway.service).
    interceptors = [KeyInterceptor(service)] if service.keys_checked else []
    server = grpc.aio.server(interceptors=interceptors, options=[
        ("grpc.max_receive_message_length", limits.max_body_bytes),
        ("grpc.max_send_message_length", 2**31 - 1),
        ("grpc.so_reuseport", 1 if settings.workers > 1 else 0),  # workers share the port (gateway.process.workers)
        # A compressed message reaches the servicers' deserializers still compressed; they
        # inflate it within max_body_bytes (gateway.grpc.rpc). grpc itself inflates a whole
        # message before it checks the size limit, so one small message could take gigabytes.
        ("grpc.per_message_decompression", 0),
        *connection_options(settings, max_connections),
    ])
    oip.add_to_server(service, limits, server, streams)
    torchserve_service = torchserve.add_to_server(service, limits, server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    pool.add_file(health_pb2.DESCRIPTOR)
    pool.add_file(reflection_pb2.DESCRIPTOR)
    reflection.enable_server_reflection(
        [INFERENCE_SERVICE, torchserve_service, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
         reflection.SERVICE_NAME],
        server,
        pool=pool.POOL,
    )
    return server, health_servicer


def connection_options(settings: ServerConfig, max_connections: int) -> list[tuple[str, int]]:
    """gRPC's equivalents of the HTTP front end's connection guards (gateway.rest.connections)."""
    return [
        # Beyond this, gRPC closes a new connection as soon as it is accepted.
        ("grpc.max_allowed_incoming_connections", max_connections),
        ("grpc.max_concurrent_streams", settings.max_concurrent_streams),
        # The HTTP/2 (and TLS) handshake must be done within the header timeout ...
        ("grpc.server_handshake_timeout_ms", _ms(settings.header_timeout_s)),
        # ... and a connection with no call open is closed (GOAWAY) after the idle timeout.
        ("grpc.max_connection_idle_ms", _ms(settings.idle_timeout_s)),
        # Keepalive: the server checks a connection with calls open every minute (a dead peer
        # is dropped 20 s later); clients may ping every 10 s, even between calls, and one
        # that pings faster gets GOAWAY after two strikes.
        ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", MIN_CLIENT_PING_INTERVAL_MS),
        ("grpc.http2.max_ping_strikes", 2),
    ]


KEEPALIVE_TIME_MS = 60_000
KEEPALIVE_TIMEOUT_MS = 20_000
MIN_CLIENT_PING_INTERVAL_MS = 10_000


def _ms(seconds: float) -> int:
    return min(int(seconds * 1000), 2**31 - 1)


async def set_serving(health_servicer: health.aio.HealthServicer, serving: bool) -> None:
    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    for name in ("", INFERENCE_SERVICE):
        await health_servicer.set(name, status)
