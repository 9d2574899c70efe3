"""The gRPC front end on the embedded simulated model: OIP via the real tritonclient.grpc,
raw stubs with typed and raw contents, the health service, reflection, status codes."""
from __future__ import annotations

import time

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from tritonclient.utils import InferenceServerException

from tests.harness import config_for, running_gateway
from tests.processes import gateway as gateway_process
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc


@pytest.fixture(scope="module")
def gw():
    config = config_for({"name": "demo", "backend": "simulated", "simulated": {"call_ms": 20}})
    with running_gateway(config) as running:
        yield running


@pytest.fixture(scope="module")
def stub(gw):
    with grpc.insecure_channel(gw.grpc_address) as channel:
        yield pb_grpc.GRPCInferenceServiceStub(channel)


def test_tritonclient_grpc_infer_and_metadata(gw):
    client = triton_grpc.InferenceServerClient(gw.grpc_address)
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("demo")
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    tensor = triton_grpc.InferInput("INPUT0", [3, 4], "FP32")
    tensor.set_data_from_numpy(data)
    result = client.infer("demo", [tensor], request_id="r1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data * 2)
    response = result.get_response()
    assert response.id == "r1"
    assert response.parameters["batch_id"].string_param
    metadata = client.get_model_metadata("demo")
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [("INPUT0", "FP32", [-1, -1])]
    assert client.get_server_metadata().name == "batching-gateway"
    client.close()


def test_typed_contents_are_accepted(stub):
    request = pb.ModelInferRequest(model_name="demo")
    tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 3])
    tensor.contents.fp32_contents.extend([1, 2, 3])
    response = stub.ModelInfer(request)
    out = np.frombuffer(response.raw_output_contents[0], dtype=np.float32)
    np.testing.assert_array_equal(out, [2, 4, 6])
    assert list(response.outputs[0].shape) == [1, 3]


@pytest.mark.parametrize("build, code, message", [
    (lambda r: r.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 3]).contents.fp32_contents.extend([1]),
     grpc.StatusCode.INVALID_ARGUMENT, "needs 3"),
    (lambda r: (r.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 2]), r.raw_input_contents.append(b"\0" * 7)),
     grpc.StatusCode.INVALID_ARGUMENT, "7 bytes"),
    (lambda r: r.inputs.add(name="INPUT0", datatype="FP16", shape=[1, 1]),
     grpc.StatusCode.INVALID_ARGUMENT, "raw_input_contents"),
    (lambda r: r.inputs.add(name="INPUT0", datatype="NOPE", shape=[1, 1]),
     grpc.StatusCode.INVALID_ARGUMENT, "unknown datatype"),
    (lambda r: None, grpc.StatusCode.INVALID_ARGUMENT, "no inputs"),
])
def test_bad_grpc_requests_get_invalid_argument(stub, build, code, message):
    request = pb.ModelInferRequest(model_name="demo")
    build(request)
    with pytest.raises(grpc.RpcError) as caught:
        stub.ModelInfer(request)
    assert caught.value.code() == code
    assert message in caught.value.details()


def test_unknown_model_is_not_found(stub):
    request = pb.ModelInferRequest(model_name="absent")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1]).contents.fp32_contents.append(1)
    with pytest.raises(grpc.RpcError) as caught:
        stub.ModelInfer(request)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as caught:
        stub.ModelMetadata(pb.ModelMetadataRequest(name="absent"))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_tritonclient_grpc_sees_errors(gw):
    client = triton_grpc.InferenceServerClient(gw.grpc_address)
    tensor = triton_grpc.InferInput("INPUT0", [1, 2], "INT32")
    tensor.set_data_from_numpy(np.ones((1, 2), np.int32))
    with pytest.raises(InferenceServerException, match="is FP32"):
        client.infer("demo", [tensor])
    client.close()


def test_health_service_reports_serving(gw):
    with grpc.insecure_channel(gw.grpc_address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "inference.GRPCInferenceService"):
            response = health.Check(health_pb2.HealthCheckRequest(service=service))
            assert response.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_and_describes_services_without_proto_files(gw):
    with grpc.insecure_channel(gw.grpc_address) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        services = set(database.get_services())
        assert {"inference.GRPCInferenceService", "grpc.health.v1.Health"} <= services
        pool = descriptor_pool.DescriptorPool(database)
        infer = pool.FindServiceByName("inference.GRPCInferenceService").FindMethodByName("ModelInfer")
        assert infer.input_type.full_name == "inference.ModelInferRequest"
        fields = {f.name: f.number for f in infer.input_type.fields}
        assert fields["raw_input_contents"] == 7


def test_a_grpc_deadline_shorter_than_the_wait_is_honoured(gw, stub):
    request = pb.ModelInferRequest(model_name="demo")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1]).contents.fp32_contents.append(1)
    with pytest.raises(grpc.RpcError) as caught:
        stub.ModelInfer(request, timeout=0.005)  # the predictor takes 20 ms
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


def test_the_priority_metadata_is_read_as_on_every_other_front_end(gw):
    """x-request-priority is validated on OIP gRPC as it is on TorchServe's gRPC and every
    HTTP front end (the `priority` parameter, when given, wins)."""
    with grpc.insecure_channel(gw.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        request = pb.ModelInferRequest(model_name="demo")
        request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1]).contents.fp32_contents.append(1)
        with pytest.raises(grpc.RpcError) as caught:
            stub.ModelInfer(request, timeout=10, metadata=[("x-request-priority", "high")])
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "X-Request-Priority" in caught.value.details()
        stub.ModelInfer(request, timeout=10, metadata=[("x-request-priority", "1")])


def resident_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return int(status.read().split("VmRSS:")[1].split()[0]) / 1024


def retained_mb(pid: int, settle_s: float = 5.0) -> float:
    """The process's RSS once its allocator has given back what it can: the least seen over
    `settle_s`. The gateway trims its allocator on its own schedule, about once a second
    after large messages (gateway/observe/memory.py), so one read at an instant may come before or
    after a trim; what a cache holds, no trim gives back."""
    least = resident_mb(pid)
    deadline = time.monotonic() + settle_s
    while time.monotonic() < deadline:
        time.sleep(0.25)
        least = min(least, resident_mb(pid))
    return least


def test_no_request_message_outlives_its_request(tmp_path):
    """Distinct 8 MB messages to a gateway process: its memory stops growing once the
    allocator has what one message takes (a cache once kept the last 64 messages: 58 to
    633 MB, and held idle)."""
    config = tmp_path / "gateway.toml"
    config.write_text('[limits]\nmax_body_bytes = 16777216\n[[models]]\nname = "demo"\nbackend = "simulated"\n')
    with gateway_process(config) as process, grpc.insecure_channel(
            process.fields["grpc"], options=[("grpc.max_send_message_length", 16 << 20)]) as channel:
        infer = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer

        def send_distinct(first: int, count: int) -> float:
            for index in range(first, first + count):
                request = pb.ModelInferRequest(model_name="absent", raw_input_contents=[index.to_bytes(4, "big") * (2 << 20)])
                with pytest.raises(grpc.RpcError):  # refused (no inputs), after the message was read and sniffed
                    infer(request, timeout=30)
            return retained_mb(process.pid)

        settled = send_distinct(0, 30)  # the allocator's and gRPC's own buffers reach their size
        # 480 MB more pass through. What stays is the allocator's slack, which depends on how
        # fast the messages come: up to 140 MB seen on an idle machine (so a bound of 120 failed
        # one run in two), 30 under load. A cache of the last 64 messages would keep 34 more
        # than it held when settled: 272 MB on top of the slack.
        assert send_distinct(30, 60) - settled < 210
