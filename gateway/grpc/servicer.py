"""inference.GRPCInferenceService on the gateway: decode, call the service, encode.

Knows the service and the OIP protobuf codec, never a backend protocol. Errors and counts
go through `gateway.grpc.rpc`; the client's deadline becomes the request's deadline, and a
cancelled call is dropped from the scheduler's queue.
"""
from __future__ import annotations

import grpc
from google.protobuf import json_format

from gateway.grpc.rpc import Servicer, add_servicer, client_context, rpc
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
    async def ModelInfer(self, request: pb.ModelInferRequest,
                         context: grpc.aio.ServicerContext) -> pb.ModelInferResponse:
        decoded = oip_grpc.decode_request(request, self.limits)
        outcome = await self.service.infer_tensors(
            self.service.model(request.model_name, request.model_version), decoded.inputs,
            [o.name for o in decoded.outputs], context.time_remaining(), client_context(context, request.id))
        return oip_grpc.encode_response(
            request.model_name, request.model_version, request.id, outcome.outputs, {"batch_id": outcome.batch_id})


def add_to_server(service: InferenceService, limits: Limits, server: grpc.aio.Server) -> None:
    """Register the OIP servicer (malformed messages answered INVALID_ARGUMENT, see rpc)."""
    add_servicer(server, InferenceServicer(service, limits), pb.DESCRIPTOR.services_by_name["GRPCInferenceService"])
