"""TorchServe's own gRPC inference API (``InferenceAPIsService/Predictions``).

The merged batch travels as ONE Predictions call whose ``input["data"]`` is the JSON
``{"instances": [rows]}``: with ``service_envelope=kserve`` and the model's ``batchSize``
1, TorchServe's handler gets the rows as one list and answers one prediction per row,
``{"predictions": [...]}`` as KServe v1 does (read by `wire.codecs.v1`), or a bare JSON
list. Batch form INSTANCES, as for KServe v1. For TorchServe's Open Inference Protocol
(``kservev2``) see ``backends.oip_grpc`` with ``TORCHSERVE_OIP_SERVICE``.

Holds the Predictions client and TorchServe's error conventions only; the channel is
`backends.grpc`'s. It knows nothing of the gateway.
"""
from __future__ import annotations

from typing import Any

import grpc
import orjson
from google.protobuf import empty_pb2

from backends import errors
from backends.base import Backend, BatchForm
from backends.grpc import GrpcPredictor
from wire.codecs import v1
from wire.errors import GatewayError, HandlerFailed, Unavailable
from wire.generated.torchserve import inference_pb2 as ts_pb
from wire.generated.torchserve import inference_pb2_grpc as ts_grpc
from wire.tensors import Tensor, rows_tensor


class TorchServeGrpcBackend(Backend):
    batch_form = BatchForm.INSTANCES

    def __init__(self, address: str, model: str, tls: bool = False, ca_file: str = "") -> None:
        self.grpc = GrpcPredictor(address, model, ts_grpc.InferenceAPIsServiceStub, tls=tls, ca_file=ca_file,
                                  translate_error=from_torchserve_error)
        self.model = model

    async def start(self) -> None:
        self.grpc.open()

    async def infer(self, inputs: list[Tensor]) -> list[Tensor]:
        rows = inputs[0].data
        request = ts_pb.PredictionsRequest(model_name=self.model, input={"data": v1.encode_request(rows)})
        response = await self.grpc.call("Predictions", request)
        return [rows_tensor(decode_predictions(self.model, response.prediction, len(rows)))]

    async def ready(self) -> bool:
        # TorchServe's Ping is the only probe on its inference port. It says Healthy a few
        # seconds before a just-started worker can serve; requests meanwhile wait in
        # TorchServe's queue.
        response = await self.grpc.probe("Ping", empty_pb2.Empty())
        if response is None:
            return False
        try:
            health = orjson.loads(response.health)
        except orjson.JSONDecodeError:
            return False
        return isinstance(health, dict) and health.get("status") == "Healthy"

    async def close(self) -> None:
        await self.grpc.close()


def decode_predictions(model: str, payload: bytes, expected: int) -> list[Any]:
    """``{"predictions": [...]}`` or a bare list, exactly one prediction per row sent."""
    with errors.reading_answer(model):
        return v1.decode_predictions(payload, expected, bare_list=True)


def from_torchserve_error(model: str, error: grpc.aio.AioRpcError) -> GatewayError:
    """TorchServe's own failures, told apart by the Java exception named in the details
    (it reports an unknown model as INTERNAL and a failing handler as UNAVAILABLE)."""
    details = error.details() or ""
    first_line = details.splitlines()[0][:300] if details else ""
    if "ModelNotFoundException" in details or "ModelVersionNotFoundException" in details:
        return Unavailable(f"model '{model}': the predictor does not serve it ({first_line})")
    if "InternalServerException" in details and "Prediction failed" in details:
        return HandlerFailed(f"model '{model}': the predictor's handler failed ({first_line})")
    return errors.from_grpc_error(model, error)
