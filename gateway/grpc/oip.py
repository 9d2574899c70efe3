"""inference.GRPCInferenceService on the gateway: decode, call the service, encode.

Knows the service and the OIP protobuf codec, never a backend protocol. Errors and counts
go through `gateway.grpc.rpc`; the client's deadline becomes the request's deadline, and a
cancelled call is dropped from the scheduler's queue.
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
from google.protobuf import json_format

from gateway.grpc.rpc import Servicer, add_servicer, in_band, rpc, stream
from gateway.lifecycle import Call
from gateway.service import InferenceService
from wire.codecs import oip_grpc
from wire.codecs.limits import Limits
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc


class InferenceServicer(Servicer, pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self, service: InferenceService, limits: Limits) -> None:
        super().__init__(service)
        self.limits = limits

    @rpc()
    async def ServerLive(self, request: pb.ServerLiveRequest,
                         context: grpc.aio.ServicerContext) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    @rpc()
    async def ServerReady(self, request: pb.ServerReadyRequest,
                          context: grpc.aio.ServicerContext) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=await self.service.ready())

    @rpc()
    async def ModelReady(self, request: pb.ModelReadyRequest,
                         context: grpc.aio.ServicerContext) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(ready=await self.service.model(request.name, request.version).ready())

    @rpc()
    async def ServerMetadata(self, request: pb.ServerMetadataRequest,
                             context: grpc.aio.ServicerContext) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(**self.service.server_metadata())

    @rpc()
    async def ModelMetadata(self, request: pb.ModelMetadataRequest,
                            context: grpc.aio.ServicerContext) -> pb.ModelMetadataResponse:
        response = pb.ModelMetadataResponse()
        json_format.ParseDict(self.service.model(request.name, request.version).describe(), response)
        return response

    @rpc()
    async def ModelConfig(self, request: pb.ModelConfigRequest,
                          context: grpc.aio.ServicerContext) -> pb.ModelConfigResponse:
        config = await self.service.model_config(self.service.model(request.name, request.version))
        response = pb.ModelConfigResponse()
        json_format.ParseDict({"config": config}, response, ignore_unknown_fields=True)
        return response

    @rpc()
    async def ModelStatistics(self, request: pb.ModelStatisticsRequest,
                              context: grpc.aio.ServicerContext) -> pb.ModelStatisticsResponse:
        response = pb.ModelStatisticsResponse()
        json_format.ParseDict(self.service.model_statistics(request.name, request.version), response)
        return response

    @rpc(front_end="oip_grpc")
    async def ModelInfer(self, request: pb.ModelInferRequest, context: grpc.aio.ServicerContext,
                         call: Call) -> pb.ModelInferResponse:
        return await self._infer(request, call)

    @stream(front_end="oip_grpc_stream")
    async def ModelStreamInfer(self, requests: AsyncIterator[pb.ModelInferRequest],
                               context: grpc.aio.ServicerContext) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Triton's bidirectional stream. Each request is submitted as it arrives, so it
        batches with every other client; answers go back in the order the requests came,
        each with its request's id; an error goes back in band and the stream stays open.
        When the client closes or cancels the stream, what it still has queued is dropped."""
        answers: asyncio.Queue[asyncio.Task[pb.ModelStreamInferResponse] | None] = asyncio.Queue()

        async def answer(request: pb.ModelInferRequest, call: Call) -> pb.ModelStreamInferResponse:
            return pb.ModelStreamInferResponse(infer_response=await self._infer(request, call))

        async def read() -> None:
            try:
                async for request in requests:
                    answers.put_nowait(asyncio.create_task(
                        in_band(self, "oip_grpc_stream", request, context, answer, _stream_error)))
            finally:
                answers.put_nowait(None)

        reader = asyncio.create_task(read())
        try:
            while (task := await answers.get()) is not None:
                yield await task
            await reader  # the client's half-close, or its read error
        finally:
            reader.cancel()
            while not answers.empty():
                if (task := answers.get_nowait()) is not None:
                    task.cancel()

    async def _infer(self, request: pb.ModelInferRequest, call: Call) -> pb.ModelInferResponse:
        decoded = oip_grpc.decode_request(request, self.limits)
        outcome = await self.service.infer_tensors(
            self.service.model(request.model_name, request.model_version), decoded, call)
        return oip_grpc.encode_response(
            request.model_name, request.model_version, request.id, outcome.outputs, {"batch_id": outcome.batch_id})


def _stream_error(request: pb.ModelInferRequest, message: str) -> pb.ModelStreamInferResponse:
    # The failed request's id and model ride along, so a client can tell which one failed.
    return pb.ModelStreamInferResponse(error_message=message, infer_response=pb.ModelInferResponse(
        model_name=getattr(request, "model_name", ""), id=getattr(request, "id", "")))


def add_to_server(service: InferenceService, limits: Limits, server: grpc.aio.Server) -> None:
    """Register the OIP servicer (malformed messages answered INVALID_ARGUMENT, see rpc)."""
    add_servicer(server, InferenceServicer(service, limits), pb.DESCRIPTOR.services_by_name["GRPCInferenceService"],
                 limits.max_body_bytes)
