"""TorchServe's own gRPC inference API (``InferenceAPIsService/Predictions``).

The merged batch travels as ONE Predictions call whose ``input["data"]`` is the JSON
``{"instances": [rows]}``: with ``service_envelope=kserve`` and the model's ``batchSize``
1, TorchServe's handler gets the rows as one list and answers one prediction per row,
``{"predictions": [...]}`` (a bare JSON list is accepted too). Batch form INSTANCES, as for
KServe v1. For TorchServe's Open Inference Protocol (``kservev2``) see
``backends.oip_grpc`` with ``TORCHSERVE_OIP_SERVICE``.
"""
from __future__ import annotations

from typing import Any

import grpc
import orjson
from google.protobuf import empty_pb2

from backends import errors
from backends.base import Backend, BatchForm
from backends.grpc_channel import open_channel
from backends.oip_grpc import PROBE_TIMEOUT_S
from wire.codecs import v1
from wire.errors import BadPredictorAnswer, GatewayError, PredictorFailed, Unavailable
from wire.generated.torchserve import inference_pb2 as ts_pb
from wire.generated.torchserve import inference_pb2_grpc as ts_grpc
from wire.tensors import Tensor
from wire.tracing import predictor_headers

# TorchServe 0.12 serves the Open Inference Protocol under its own package name.
TORCHSERVE_OIP_SERVICE = "org.pytorch.serve.grpc.openinference.GRPCInferenceService"


class TorchServeGrpcBackend(Backend):
    batch_form = BatchForm.INSTANCES

    def __init__(self, address: str, model: str, version: str = "", tls: bool = False,
                 ca_file: str = "") -> None:
        self.address = address.removeprefix("grpc://")
        self.model = model
        self.version = version
        self.tls = tls
        self.ca_file = ca_file
        self._channel: grpc.aio.Channel | None = None
        self._stub: ts_grpc.InferenceAPIsServiceStub | None = None

    async def start(self) -> None:
        self._channel = open_channel(self.address, self.tls, self.ca_file)
        self._stub = ts_grpc.InferenceAPIsServiceStub(self._channel)

    async def infer(self, inputs: list[Tensor]) -> list[Tensor]:
        rows = inputs[0].data
        body = orjson.dumps({"instances": rows.tolist()}, option=orjson.OPT_SERIALIZE_NUMPY)
        request = ts_pb.PredictionsRequest(model_name=self.model, model_version=self.version, input={"data": body})
        try:
            response = await self._stub.Predictions(request, metadata=tuple(predictor_headers().items()))
        except grpc.aio.AioRpcError as error:
            raise from_torchserve_error(self.model, error) from None
        return [v1.rows_tensor(decode_predictions(self.model, response.prediction, len(rows)))]

    async def ready(self) -> bool:
        # TorchServe's Ping is the only probe on its inference port. It says Healthy a few
        # seconds before a just-started worker can serve; requests meanwhile wait in
        # TorchServe's queue.
        try:
            response = await self._stub.Ping(empty_pb2.Empty(), timeout=PROBE_TIMEOUT_S)
        except grpc.aio.AioRpcError:
            return False
        try:
            health = orjson.loads(response.health)
        except orjson.JSONDecodeError:
            return False
        return isinstance(health, dict) and health.get("status") == "Healthy"

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()


def decode_predictions(model: str, payload: bytes, expected: int) -> list[Any]:
    """``{"predictions": [...]}`` or a bare list, exactly one prediction per row sent."""
    try:
        document = orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise errors.unreadable(model, "the prediction is not JSON") from None
    predictions = document.get("predictions") if isinstance(document, dict) else document
    if not isinstance(predictions, list):
        raise errors.unreadable(model, "the prediction is neither {\"predictions\": [...]} nor a list")
    if len(predictions) != expected:
        raise BadPredictorAnswer(f"model '{model}': the predictor returned {len(predictions)} predictions "
                                 f"for {expected} instances")
    return predictions


def from_torchserve_error(model: str, error: grpc.aio.AioRpcError) -> GatewayError:
    """TorchServe's own failures, told apart by the Java exception named in the details
    (it reports an unknown model as INTERNAL and a failing handler as UNAVAILABLE)."""
    details = error.details() or ""
    first_line = details.splitlines()[0][:300] if details else ""
    if "ModelNotFoundException" in details or "ModelVersionNotFoundException" in details:
        return Unavailable(f"model '{model}': the predictor does not serve it ({first_line})")
    if "InternalServerException" in details and "Prediction failed" in details:
        return PredictorFailed(f"model '{model}': the predictor failed ({first_line})")
    return errors.from_grpc_error(model, error)
