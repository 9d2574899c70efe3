"""TorchServe's gRPC inference API on the gateway, for TorchServe users:
``org.pytorch.serve.grpc.inference.InferenceAPIsService`` with ``Ping`` and ``Predictions``
(the streaming methods answer UNIMPLEMENTED).

``Predictions`` reads the ``input`` map as ``wire.codecs.torchserve`` says: the JSON forms
in ``input["data"]`` (or ``"body"``), or any other map (raw bytes, several entries) as one
upload row, both through ``InferenceService.infer``, so it batches with every
other client of the model. Errors are gRPC status codes, the code the gateway error carries
(`gateway.grpc.rpc`); the batch id is in the trailing metadata ``batch-id``.
"""
from __future__ import annotations

import grpc
import orjson
from google.protobuf import empty_pb2

from gateway.grpc.rpc import Servicer, add_servicer, rpc
from gateway.lifecycle import Call
from gateway.service import InferenceService
from wire.codecs import torchserve
from wire.codecs.limits import Limits
from wire.generated.torchserve import inference_pb2 as ts_pb
from wire.generated.torchserve import inference_pb2_grpc as ts_grpc

TORCHSERVE_SERVICE = ts_pb.DESCRIPTOR.services_by_name["InferenceAPIsService"].full_name


class TorchServeServicer(Servicer, ts_grpc.InferenceAPIsServiceServicer):
    def __init__(self, service: InferenceService, limits: Limits) -> None:
        super().__init__(service)
        self.limits = limits

    @rpc()
    async def Ping(self, request: empty_pb2.Empty, context: grpc.aio.ServicerContext) -> ts_pb.TorchServeHealthResponse:
        healthy = await self.service.ready()
        health = orjson.dumps({"status": "Healthy" if healthy else "Unhealthy"}, option=orjson.OPT_INDENT_2)
        return ts_pb.TorchServeHealthResponse(health=health.decode())

    @rpc(front_end="torchserve_grpc")
    async def Predictions(self, request: ts_pb.PredictionsRequest, context: grpc.aio.ServicerContext,
                          call: Call) -> ts_pb.PredictionResponse:
        served = self.service.model(request.model_name, request.model_version)
        decoded = torchserve.decode_grpc(request.input, self.limits)
        answer = await self.service.infer(served, decoded, call)
        context.set_trailing_metadata((("batch-id", answer.batch_id),))
        return ts_pb.PredictionResponse(prediction=torchserve.encode_answer(answer.for_client(), decoded.single)[0])


def add_to_server(service: InferenceService, limits: Limits, server: grpc.aio.Server) -> str:
    """Register the servicer; return the service's full name (for reflection)."""
    add_servicer(server, TorchServeServicer(service, limits), ts_pb.DESCRIPTOR.services_by_name["InferenceAPIsService"],
                 limits.max_body_bytes)
    return TORCHSERVE_SERVICE
