"""Open Inference Protocol over gRPC (Triton, KServe v2): ModelInfer with raw contents."""
from __future__ import annotations

from pathlib import Path

import grpc

from backends import errors
from backends.base import Backend
from backends.metadata import signature_from_proto
from gateway.codecs import oip_grpc
from gateway.errors import InvalidInput
from gateway.generated.inference import grpc_service_pb2 as pb
from gateway.generated.inference import grpc_service_pb2_grpc as pb_grpc
from gateway.tensors import ModelSignature, Tensor

MAX_MESSAGE_BYTES = 256 * 1024 * 1024
PROBE_TIMEOUT_S = 2.0


class OipGrpcBackend(Backend):
    def __init__(self, address: str, model: str, version: str = "", tls: bool = False,
                 ca_file: str = "") -> None:
        self.address = address.removeprefix("grpc://")
        self.model = model
        self.version = version
        self.tls = tls
        self.ca_file = ca_file
        self._channel: grpc.aio.Channel | None = None
        self._stub: pb_grpc.GRPCInferenceServiceStub | None = None

    async def start(self) -> None:
        # One HTTP/2 channel multiplexes every batch; it reconnects by itself after a restart.
        options = [
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.keepalive_time_ms", 30_000),
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1_000),
        ]
        if self.tls:
            root = Path(self.ca_file).read_bytes() if self.ca_file else None
            credentials = grpc.ssl_channel_credentials(root_certificates=root)
            self._channel = grpc.aio.secure_channel(self.address, credentials, options=options)
        else:
            self._channel = grpc.aio.insecure_channel(self.address, options=options)
        self._stub = pb_grpc.GRPCInferenceServiceStub(self._channel)

    async def infer(self, inputs: list[Tensor]) -> list[Tensor]:
        request = oip_grpc.encode_request(inputs, self.model, self.version)
        try:
            response = await self._stub.ModelInfer(request)
        except grpc.aio.AioRpcError as error:
            raise errors.from_grpc_error(self.model, error) from None
        try:
            return oip_grpc.decode_response(response)
        except InvalidInput as exc:
            raise errors.unreadable(self.model, exc.message) from None

    async def ready(self) -> bool:
        try:
            response = await self._stub.ModelReady(
                pb.ModelReadyRequest(name=self.model, version=self.version), timeout=PROBE_TIMEOUT_S)
            return response.ready
        except grpc.aio.AioRpcError:
            return False

    async def metadata(self) -> tuple[ModelSignature, list[str]] | None:
        try:
            response = await self._stub.ModelMetadata(
                pb.ModelMetadataRequest(name=self.model, version=self.version), timeout=PROBE_TIMEOUT_S)
        except grpc.aio.AioRpcError:
            return None
        return signature_from_proto(response)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
