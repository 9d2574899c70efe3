"""inference.GRPCInferenceService on the gateway: decode, call the service, encode.

Knows the service and the OIP protobuf codec, never a backend protocol. A GatewayError
aborts the call with the code the error class carries; the client's deadline becomes the
request's deadline, and a cancelled call is dropped from the scheduler's queue.
"""
from __future__ import annotations

import logging

import grpc
from google.protobuf import json_format

from gateway.service import InferenceService
from wire.codecs import oip_grpc
from wire.codecs.limits import Limits
from wire.errors import GatewayError
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc
from wire.tracing import ClientContext

log = logging.getLogger(__name__)


def client_context(context: grpc.aio.ServicerContext, request_id: str = "") -> ClientContext:
    metadata = dict(context.invocation_metadata() or ())
    return ClientContext(request_id or metadata.get("x-request-id", ""), metadata.get("traceparent", ""))


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self, service: InferenceService, limits: Limits) -> None:
        self.service = service
        self.limits = limits

    async def ServerLive(self, request: pb.ServerLiveRequest, context: grpc.aio.ServicerContext) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request: pb.ServerReadyRequest, context: grpc.aio.ServicerContext) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=await self.service.ready())

    async def ModelReady(self, request: pb.ModelReadyRequest, context: grpc.aio.ServicerContext) -> pb.ModelReadyResponse:
        try:
            served = self.service.model(request.name, request.version)
        except GatewayError as error:
            await context.abort(error.grpc_code, error.message)
        return pb.ModelReadyResponse(ready=await served.ready())

    async def ServerMetadata(self, request: pb.ServerMetadataRequest, context: grpc.aio.ServicerContext) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(**self.service.server_metadata())

    async def ModelMetadata(self, request: pb.ModelMetadataRequest, context: grpc.aio.ServicerContext) -> pb.ModelMetadataResponse:
        try:
            served = self.service.model(request.name, request.version)
        except GatewayError as error:
            await context.abort(error.grpc_code, error.message)
        response = pb.ModelMetadataResponse()
        json_format.ParseDict(served.describe(), response)
        return response

    async def ModelInfer(self, request: pb.ModelInferRequest, context: grpc.aio.ServicerContext) -> pb.ModelInferResponse:
        model = request.model_name if request.model_name in self.service.models else "unknown"
        try:
            decoded = oip_grpc.decode_request(request, self.limits)
            requested = [o.name for o in decoded.outputs] or None
            outcome = await self.service.infer_tensors(
                request.model_name, request.model_version, decoded.inputs, requested, context.time_remaining(),
                client_context(context, request.id))
        except GatewayError as error:
            self.service.metrics.count_request(model, "oip_grpc", error.grpc_code.name)
            await context.abort(error.grpc_code, error.message)
        except Exception:
            log.exception("unexpected error in ModelInfer")
            self.service.metrics.count_request(model, "oip_grpc", grpc.StatusCode.INTERNAL.name)
            await context.abort(grpc.StatusCode.INTERNAL, "internal error")
        self.service.metrics.count_request(model, "oip_grpc", grpc.StatusCode.OK.name)
        return oip_grpc.encode_response(
            request.model_name, request.model_version, request.id, outcome.outputs, {"batch_id": outcome.batch_id})
