"""Open Inference Protocol over gRPC (Triton, KServe v2, TorchServe): ModelInfer with raw contents.

TorchServe 0.12 (``service_envelope=kservev2``, ``ts_open_inference_protocol=true``) speaks
the same messages with three quirks, each a clearly named option here rather than a second
client: its service has another name (``service``, ``TORCHSERVE_OIP_SERVICE``), it reads
only the typed ``contents`` (``typed_contents``), and its outputs come back flattened, as
FP64 and named after the inputs (``restore_outputs``: batch shape, datatype and name from
the model's signature).

Holds the OIP gRPC client only; the messages are `wire.codecs.oip_grpc`'s, the channel
`backends.grpc`'s. It knows nothing of the gateway.
"""
from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import grpc
from google.protobuf import json_format

from backends import errors
from backends.base import Backend
from backends.grpc import GrpcPredictor
from backends.metadata import signature_from_proto
from wire.codecs import oip_grpc
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc
from wire.tensors import NUMPY_DTYPES, RAW_ONLY, ModelSignature, Tensor, TensorSpec, shape_fits
from wire.tracing import current_batch

OIP_SERVICE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name
# TorchServe 0.12 serves the Open Inference Protocol under its own package name.
TORCHSERVE_OIP_SERVICE = "org.pytorch.serve.grpc.openinference.GRPCInferenceService"


class OipGrpcBackend(Backend):
    def __init__(self, address: str, model: str, tls: bool = False, ca_file: str = "", *,
                 service: str = OIP_SERVICE, typed_contents: bool = False,
                 restore_outputs: bool = False, signature: ModelSignature | None = None,
                 reads_model_config: bool = False) -> None:
        self.grpc = GrpcPredictor(address, model, lambda channel: _stub(channel, service), tls=tls, ca_file=ca_file)
        self.model = model
        self.service = service                   # the OIP service's full gRPC name
        self.typed_contents = typed_contents     # send typed `contents`, not raw_input_contents
        self.restore_outputs = restore_outputs   # un-flatten outputs, cast to the signature's types
        self._signature = signature              # from config, else learned from metadata()
        self.reads_model_config = reads_model_config  # Triton's model configuration; KServe and TorchServe have none

    async def start(self) -> None:
        self.grpc.open()

    async def infer(self, inputs: list[Tensor]) -> list[Tensor]:
        batch = current_batch.get()
        request = oip_grpc.encode_request(inputs, self.model, typed=self.typed_contents,
                                          parameters=batch.parameters if batch is not None else None)
        response = await self.grpc.call("ModelInfer", request)
        with errors.reading_answer(self.model):
            outputs = oip_grpc.decode_response(response)
        if self.restore_outputs:
            outputs = restore_flattened_outputs(self.model, outputs, inputs, self._signature)
        return outputs

    async def ready(self) -> bool:
        response = await self.grpc.probe("ModelReady", pb.ModelReadyRequest(name=self.model))
        return response is not None and response.ready

    async def metadata(self) -> tuple[ModelSignature, list[str]] | None:
        response = await self.grpc.probe("ModelMetadata", pb.ModelMetadataRequest(name=self.model))
        if response is None:
            return None
        signature, versions = signature_from_proto(response)
        if signature.inputs and self._signature is None:
            self._signature = signature
        if not signature.inputs and self.restore_outputs and self._signature is not None:
            # TorchServe describes no tensors: the configured signature stands, with its versions.
            return self._signature, versions
        return signature, versions

    async def model_config(self) -> dict[str, Any] | None:
        response = await self.grpc.probe("ModelConfig", pb.ModelConfigRequest(name=self.model))
        if response is None:
            return None
        return json_format.MessageToDict(response.config, preserving_proto_field_name=True)

    async def close(self) -> None:
        await self.grpc.close()


def _stub(channel: grpc.aio.Channel, service: str) -> Any:
    """The OIP stub, for the standard service name or another one with the same methods."""
    if service == OIP_SERVICE:
        return pb_grpc.GRPCInferenceServiceStub(channel)
    methods = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods
    return SimpleNamespace(**{
        method.name: channel.unary_unary(
            f"/{service}/{method.name}",
            request_serializer=getattr(pb, method.input_type.name).SerializeToString,
            response_deserializer=getattr(pb, method.output_type.name).FromString)
        for method in methods
    })


def restore_flattened_outputs(model: str, outputs: list[Tensor], inputs: list[Tensor],
                              signature: ModelSignature | None) -> list[Tensor]:
    """Give outputs that come back flattened (``[12]`` for a ``[3, 4]`` batch), as FP64 and
    named after the inputs (TorchServe's kservev2 envelope) their batch shape, and the
    datatype and name the model's signature declares (matched by name, else by position)."""
    rows = inputs[0].data.shape[0]
    specs = signature.outputs if signature is not None else ()
    by_name = {spec.name: spec for spec in specs}
    restored = []
    for index, tensor in enumerate(outputs):
        spec = by_name.get(tensor.name) or (specs[index] if len(specs) == len(outputs) else None)
        source = inputs[index] if index < len(inputs) else None
        data = tensor.data.reshape(_batch_shape(model, tensor, rows, spec, source))
        datatype = spec.datatype if spec is not None else tensor.datatype
        if datatype != tensor.datatype:
            if "BYTES" in (datatype, tensor.datatype) or datatype in RAW_ONLY:  # never rounded to BF16
                raise errors.unusable(
                    model, f"output '{tensor.name}' is {tensor.datatype}, the model declares {datatype}")
            cast = data.astype(NUMPY_DTYPES[datatype])
            if cast.dtype.kind in "iub" and not (cast == data).all():
                raise errors.unusable(model, f"output '{tensor.name}' has values that are not {datatype}")
            data = cast
        restored.append(Tensor(spec.name if spec is not None else tensor.name, datatype, data))
    return restored


def _batch_shape(model: str, tensor: Tensor, rows: int, spec: TensorSpec | None,
                 source: Tensor | None) -> list[int]:
    shape, count = list(tensor.data.shape), tensor.data.size
    if len(shape) >= 2 and shape[0] == rows:
        return shape  # not flattened
    if rows == 0 or count % rows:
        raise errors.unusable(model, f"output '{tensor.name}' has {count} elements, "
                                     f"which is not {rows} rows of equal size")
    per_row = count // rows
    declared = list(spec.shape[1:]) if spec is not None else None
    if spec is not None and declared is not None and -1 not in declared:
        if math.prod(declared) != per_row:
            raise errors.unusable(model, f"output '{tensor.name}' has {per_row} elements per row, "
                                         f"the model declares shape {list(spec.shape)}")
        return [rows, *declared]
    if source is not None:  # most often an output is shaped like the input it comes from
        inner = list(source.data.shape[1:])
        if math.prod(inner) == per_row and (declared is None or shape_fits(declared, inner)):
            return [rows, *inner]
    if declared is not None and declared.count(-1) == 1:
        known = math.prod(d for d in declared if d != -1)
        if known and per_row % known == 0:
            return [rows, *(per_row // known if d == -1 else d for d in declared)]
    return [rows, per_row]
