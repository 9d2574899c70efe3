"""The gRPC engine: grpc.aio unary calls with raw bytes both ways.

The request is serialised once from JSON with the project's generated descriptors
(`google.protobuf.json_format`); answers are counted, never decoded. It must not know
about the runner, statistics or reports.
"""
from __future__ import annotations

import contextlib
from typing import Any

from tools.loadgen.config import Config
from tools.loadgen.engines.base import USER_AGENT, Answer, Engine, Slot


def grpc_method(call: str) -> tuple[str, Any]:
    """`package.Service/Method` (or `package.Service.Method`) -> (wire path, input message class),
    from the descriptors this project generates (and the gRPC health service)."""
    from google.protobuf import descriptor_pool, message_factory

    from wire.generated import pool
    from wire.generated.inference import grpc_service_pb2  # noqa: F401  (registers its descriptors)

    service_name, _, method_name = call.replace("/", ".").rpartition(".")
    if not service_name or not method_name:
        raise ValueError(f"--call must look like package.Service/Method, got {call!r}")
    service = None
    pools = [pool.POOL, descriptor_pool.Default()]
    with contextlib.suppress(ImportError):
        from grpc_health.v1 import health_pb2  # noqa: F401  (registers grpc.health.v1)
    for candidate in pools:
        try:
            service = candidate.FindServiceByName(service_name)
            break
        except KeyError:
            continue
    if service is None:
        raise ValueError(f"unknown gRPC service {service_name!r} (known: inference.GRPCInferenceService, "
                         f"grpc.health.v1.Health)")
    method = service.methods_by_name.get(method_name)
    if method is None:
        raise ValueError(f"service {service_name} has no method {method_name!r} "
                         f"(it has {', '.join(sorted(service.methods_by_name))})")
    return f"/{service.full_name}/{method.name}", message_factory.GetMessageClass(method.input_type)


def grpc_payload(call: str, body: bytes) -> tuple[str, bytes]:
    """The wire path and the serialised request built from JSON (empty body: empty message)."""
    from google.protobuf import json_format
    path, message_class = grpc_method(call)
    message = message_class()
    if body.strip():
        try:
            json_format.Parse(body.decode(), message)
        except json_format.ParseError as exc:
            raise ValueError(f"request JSON does not fit {message_class.DESCRIPTOR.full_name}: {exc}") from None
    return path, message.SerializeToString()


class GrpcEngine(Engine):
    def __init__(self, config: Config) -> None:
        self.config = config
        self.path, self.payload = grpc_payload(config.call, config.body)
        self.metadata = tuple((name.lower(), value) for name, value in config.headers) or None
        self.channels: list[Any] = []
        self.callables: list[Any] = []

    async def start(self) -> None:
        import grpc
        self._grpc = grpc
        target = self.config.target.removeprefix("grpc://")
        for _ in range(self.config.connections):
            channel = grpc.aio.insecure_channel(target, options=[
                ("grpc.use_local_subchannel_pool", 1),  # each channel its own TCP connection
                ("grpc.max_receive_message_length", -1),
                ("grpc.primary_user_agent", USER_AGENT),
            ])
            self.channels.append(channel)
            # Raw bytes both ways: serialised once, answers never decoded.
            self.callables.append(channel.unary_unary(self.path))

    def new_slot(self, index: int) -> Slot:
        slot = Slot(index)
        slot.connection = self.callables[index % len(self.callables)]  # workers spread over the channels
        return slot

    async def call(self, slot: Slot) -> Answer:
        try:
            answer = await slot.connection(self.payload, timeout=self.config.timeout, metadata=self.metadata)
        except self._grpc.aio.AioRpcError as exc:
            code = exc.code().name
            return code, 0, f"{code}: {exc.details()}"
        return "OK", len(answer), None

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close(grace=None)
