"""TorchServe's gRPC inference API on the gateway (embedded simulated model):
`InferenceAPIsService/Ping` and `Predictions` with the body in `input["data"]` (raw bytes
are an upload: `wire.codecs.torchserve`), errors as
gRPC status codes, reflection of the service (with google.rpc.Status), and batching with
OIP gRPC clients of the same model."""
from __future__ import annotations

import concurrent.futures

import grpc
import numpy as np
import orjson
import pytest
from google.protobuf import descriptor_pool, empty_pb2
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from tests.harness import config_for, running_gateway
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc
from wire.generated.torchserve import inference_pb2 as ts_pb
from wire.generated.torchserve import inference_pb2_grpc as ts_grpc

SERVICE = "org.pytorch.serve.grpc.inference.InferenceAPIsService"


@pytest.fixture(scope="module")
def gw():
    config = config_for({"name": "demo", "backend": "simulated", "simulated": {"call_ms": 20}})
    with running_gateway(config) as running:
        yield running


@pytest.fixture(scope="module")
def channel(gw):
    with grpc.insecure_channel(gw.grpc_address) as channel:
        yield channel


@pytest.fixture(scope="module")
def stub(channel):
    return ts_grpc.InferenceAPIsServiceStub(channel)


def predictions(stub, body, model="demo", key="data", **kwargs):
    request = ts_pb.PredictionsRequest(model_name=model, input={key: orjson.dumps(body)}, **kwargs)
    response, call = stub.Predictions.with_call(request, timeout=30)
    return orjson.loads(response.prediction), dict(call.trailing_metadata())


def test_ping_reports_healthy(stub):
    response = stub.Ping(empty_pb2.Empty())
    assert orjson.loads(response.health) == {"status": "Healthy"}


def test_one_instance_gets_its_prediction_alone_with_a_batch_id(stub):
    answer, trailers = predictions(stub, [1, 2, 3, 4])
    assert answer == [2, 4, 6, 8]
    assert trailers["batch-id"]


def test_instances_form_and_the_body_key_and_a_version(stub):
    answer, _ = predictions(stub, {"instances": [[1, 2], [3, 4]]}, key="body", model_version="1")
    assert answer == {"predictions": [[2, 4], [6, 8]]}
    assert predictions(stub, {"data": [0.5]})[0] == [1.0]


@pytest.mark.parametrize("request_kwargs, code, message", [
    ({"model_name": "nope", "input": {"data": b"[1]"}}, grpc.StatusCode.NOT_FOUND, "not served"),
    ({"model_name": "demo", "model_version": "9", "input": {"data": b"[1]"}}, grpc.StatusCode.NOT_FOUND, "version"),
    # Raw bytes are an upload: to a model without a BYTES input, a 400 naming the config key.
    ({"model_name": "demo", "input": {"image": b"[1]"}}, grpc.StatusCode.INVALID_ARGUMENT, 'datatype = "BYTES"'),
    ({"model_name": "demo", "input": {"data": b"\x89PNG"}}, grpc.StatusCode.INVALID_ARGUMENT, "is an upload"),
    ({"model_name": "demo", "input": {}}, grpc.StatusCode.INVALID_ARGUMENT, "input map is empty"),
    ({"model_name": "demo", "input": {"data": b'{"instances": []}'}}, grpc.StatusCode.INVALID_ARGUMENT, "empty"),
    ({"model_name": "demo", "input": {"data": b'["x"]'}}, grpc.StatusCode.INVALID_ARGUMENT, "datatype FP32"),
])
def test_errors_are_grpc_status_codes(stub, request_kwargs, code, message):
    with pytest.raises(grpc.RpcError) as caught:
        stub.Predictions(ts_pb.PredictionsRequest(**request_kwargs), timeout=30)
    assert caught.value.code() == code
    assert message in caught.value.details()


def test_a_deadline_shorter_than_the_wait_is_honoured(stub):
    request = ts_pb.PredictionsRequest(model_name="demo", input={"data": b"[1]"})
    with pytest.raises(grpc.RpcError) as caught:
        stub.Predictions(request, timeout=0.005)  # the predictor takes 20 ms
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


def test_streaming_methods_are_unimplemented(stub):
    request = ts_pb.PredictionsRequest(model_name="demo", input={"data": b"[1]"})
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.StreamPredictions(request, timeout=10))
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_reflection_describes_the_torchserve_service_without_proto_files(channel):
    database = ProtoReflectionDescriptorDatabase(channel)
    assert SERVICE in set(database.get_services())
    pool = descriptor_pool.DescriptorPool(database)
    method = pool.FindServiceByName(SERVICE).FindMethodByName("Predictions")
    assert {f.name: f.number for f in method.input_type.fields} == {
        "model_name": 1, "model_version": 2, "input": 3, "sequence_id": 4}
    status = method.output_type.fields_by_name["status"]
    assert (status.number, status.message_type.full_name) == (3, "google.rpc.Status")
    ping = pool.FindServiceByName(SERVICE).FindMethodByName("Ping")
    assert ping.input_type.full_name == "google.protobuf.Empty"


def test_torchserve_and_oip_grpc_clients_share_batches_and_each_gets_its_own_rows(gw, channel, stub):
    oip = pb_grpc.GRPCInferenceServiceStub(channel)

    def one(i):
        row = [float(i), i + 0.25, -float(i)]
        if i % 2:
            return predictions(stub, row)[0]
        request = pb.ModelInferRequest(model_name="demo")
        request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 3])
        request.raw_input_contents.append(np.array([row], np.float32).tobytes())
        return np.frombuffer(oip.ModelInfer(request, timeout=30).raw_output_contents[0], np.float32).tolist()

    before = gw.stats("demo").batches
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(one, range(60)))
    for i, answer in enumerate(answers):
        assert answer == [2.0 * i, 2 * i + 0.5, -2.0 * i]
    assert gw.stats("demo").batches - before < 60
