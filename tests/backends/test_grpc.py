"""The gRPC plumbing: failures become gateway errors, probes never raise (no server needed)."""
from __future__ import annotations

import pytest

from backends.grpc import GrpcPredictor
from tools.processes import free_port
from wire.errors import Unavailable
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc


async def test_an_unreachable_predictor_is_unavailable_and_not_ready():
    predictor = GrpcPredictor(f"grpc://127.0.0.1:{free_port()}", "m", pb_grpc.GRPCInferenceServiceStub)
    assert predictor.address.startswith("127.0.0.1:")
    with pytest.raises(Unavailable, match="model 'm'"):
        await predictor.call("ModelInfer", pb.ModelInferRequest(model_name="m"))
    assert await predictor.probe("ModelReady", pb.ModelReadyRequest(name="m")) is None
    await predictor.close()
    await predictor.close()  # closing twice is harmless
