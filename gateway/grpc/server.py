"""Build the grpc.aio server: OIP servicer + standard health service + server reflection."""
from __future__ import annotations

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

from gateway.grpc import servicer, torchserve
from gateway.grpc.auth import BearerTokenInterceptor
from gateway.service import InferenceService
from wire.codecs.limits import Limits
from wire.generated import pool
from wire.generated.inference import grpc_service_pb2 as pb

INFERENCE_SERVICE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name


def build_server(service: InferenceService, limits: Limits,
                 auth_token: str = "") -> tuple[grpc.aio.Server, health.aio.HealthServicer]:
    interceptors = [BearerTokenInterceptor(auth_token)] if auth_token else []
    server = grpc.aio.server(interceptors=interceptors, options=[
        ("grpc.max_receive_message_length", limits.max_body_bytes),
        ("grpc.max_send_message_length", 2**31 - 1),
        ("grpc.so_reuseport", 0),
    ])
    servicer.add_to_server(service, limits, server)
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


async def set_serving(health_servicer: health.aio.HealthServicer, serving: bool) -> None:
    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    for name in ("", INFERENCE_SERVICE):
        await health_servicer.set(name, status)
