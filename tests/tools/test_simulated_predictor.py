"""The simulated predictor server (`python -m tools.simulated_predictor`), run as its own
process and driven by real clients."""
from __future__ import annotations

import http.client
import signal
import subprocess
import sys
import time

import grpc
import numpy as np
import orjson
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from tritonclient.utils import InferenceServerException

from tools.processes import SIMULATED_PREDICTOR_MODULE, ServerProcess, python_module_command, simulated_predictor_args
from wire.codecs.oip_json import HEADER_LENGTH
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc

START_TIMEOUT_S = 30
STOP_TIMEOUT_S = 10


def _start(*extra: str, command: list[str] | None = None) -> ServerProcess:
    """The predictor on free 127.0.0.1 ports, run by `command` (default: `python -m
    tools.simulated_predictor`)."""
    launcher = command or python_module_command(SIMULATED_PREDICTOR_MODULE)
    return ServerProcess([*launcher, *simulated_predictor_args(*extra)], name="simulated predictor",
                         ready_timeout=START_TIMEOUT_S).start()


def _stop(running: ServerProcess) -> int:
    """SIGTERM must stop it; returns its exit code."""
    if running.popen is not None and running.popen.poll() is None:
        running.signal(signal.SIGTERM)
        try:
            running.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            running.kill()
            raise AssertionError("predictor did not stop on SIGTERM") from None
    code = running.stop()
    assert code is not None
    return code


@pytest.fixture(scope="module")
def start_predictor():
    started: list[ServerProcess] = []

    def start(*extra: str, command: list[str] | None = None) -> ServerProcess:
        running = _start(*extra, command=command)
        started.append(running)
        return running

    yield start
    codes = []
    for running in started:
        codes.append(_stop(running))
    assert codes == [0] * len(started), f"predictors did not all exit 0 on SIGTERM: {codes}"


@pytest.fixture(scope="module")
def predictor(start_predictor) -> ServerProcess:
    return start_predictor("--model", "demo", "--call-ms", "1")


@pytest.fixture
def fresh(predictor):
    """The shared predictor with zeroed stats and no faults, restored afterwards."""
    post(predictor, "/control", {"fail_status": 0, "extra_delay_ms": 0, "wrong_rows": False})
    post(predictor, "/stats/reset", {})
    yield predictor
    post(predictor, "/control", {"fail_status": 0, "extra_delay_ms": 0, "wrong_rows": False})


def request(running: ServerProcess, method: str, path: str, body: bytes | None = None,
            headers: dict | None = None) -> tuple[int, dict, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", running.port("http"), timeout=10)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def post(running: ServerProcess, path: str, document) -> tuple[int, dict]:
    status, _, body = request(running, "POST", path, orjson.dumps(document), {"Content-Type": "application/json"})
    return status, orjson.loads(body)


def get(running: ServerProcess, path: str) -> tuple[int, dict]:
    status, _, body = request(running, "GET", path)
    return status, orjson.loads(body)


def oip_body(rows: list[list[float]]) -> dict:
    return {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [len(rows), len(rows[0])],
                        "data": [x for row in rows for x in row]}]}


# -- protocols ------------------------------------------------------------------------

def test_v1_predict_doubles(fresh):
    status, document = post(fresh, "/v1/models/demo:predict", {"instances": [[1, 2], [3, 4.5]]})
    assert status == 200
    assert document == {"predictions": [[2.0, 4.0], [6.0, 9.0]]}
    assert get(fresh, "/v1/models/demo") == (200, {"name": "demo", "ready": True})


def test_oip_json_infer(fresh):
    body = oip_body([[1, 2, 3], [4, 5, 6]]) | {"id": "req-7"}
    status, headers, raw = request(fresh, "POST", "/v2/models/demo/infer", orjson.dumps(body))
    assert status == 200
    assert headers["Content-Type"] == "application/json"
    assert HEADER_LENGTH not in headers
    document = orjson.loads(raw)
    assert document["model_name"] == "demo" and document["id"] == "req-7"
    assert document["outputs"] == [
        {"name": "OUTPUT0", "datatype": "FP32", "shape": [2, 3], "data": [2.0, 4.0, 6.0, 8.0, 10.0, 12.0]}
    ]
    status, _, raw = request(fresh, "POST", "/v2/models/demo/versions/1/infer", orjson.dumps(oip_body([[1.5]])))
    assert status == 200 and orjson.loads(raw)["outputs"][0]["data"] == [3.0]


def test_oip_binary_infer_with_tritonclient_http(fresh):
    client = triton_http.InferenceServerClient(url=fresh.http_address)
    try:
        data = np.arange(12, dtype=np.float32).reshape(4, 3)
        infer_input = triton_http.InferInput("INPUT0", list(data.shape), "FP32")
        infer_input.set_data_from_numpy(data, binary_data=True)
        result = client.infer("demo", [infer_input],
                              outputs=[triton_http.InferRequestedOutput("OUTPUT0", binary_data=True)])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data * 2)
        assert result.get_output("OUTPUT0")["parameters"]["binary_data_size"] == data.nbytes
        # JSON output for a binary input, when the output does not ask for binary.
        result = client.infer("demo", [infer_input],
                              outputs=[triton_http.InferRequestedOutput("OUTPUT0", binary_data=False)])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data * 2)
        assert "binary_data_size" not in result.get_output("OUTPUT0").get("parameters", {})
    finally:
        client.close()


def test_oip_binary_response_headers(fresh):
    data = np.array([[1, 2]], dtype=np.float32)
    header = orjson.dumps({
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 2],
                    "parameters": {"binary_data_size": data.nbytes}}],
        "parameters": {"binary_data_output": True},
    })
    status, headers, raw = request(fresh, "POST", "/v2/models/demo/infer", header + data.tobytes(),
                                   {HEADER_LENGTH: str(len(header))})
    assert status == 200
    assert headers["Content-Type"] == "application/octet-stream"
    length = int(headers[HEADER_LENGTH])
    document = orjson.loads(raw[:length])
    assert document["outputs"][0]["parameters"] == {"binary_data_size": 8}
    np.testing.assert_array_equal(np.frombuffer(raw[length:], dtype="<f4"), [2.0, 4.0])


def test_oip_grpc_infer_and_metadata_with_tritonclient_grpc(fresh):
    client = triton_grpc.InferenceServerClient(url=fresh.grpc_address)
    try:
        data = np.array([[1, -2], [3.5, 0]], dtype=np.float32)
        infer_input = triton_grpc.InferInput("INPUT0", list(data.shape), "FP32")
        infer_input.set_data_from_numpy(data)
        result = client.infer("demo", [infer_input], request_id="g1",
                              outputs=[triton_grpc.InferRequestedOutput("OUTPUT0")])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data * 2)
        response = result.get_response()
        assert (response.id, response.model_name, response.model_version) == ("g1", "demo", "1")
        assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("demo")
        assert "binary_tensor_data" in client.get_server_metadata().extensions
        metadata = client.get_model_metadata("demo", as_json=True)
        assert metadata["name"] == "demo" and metadata["platform"] == "simulated"
        assert metadata["versions"] == ["1"]
        assert metadata["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": ["-1", "-1"]}]
        assert metadata["outputs"] == [{"name": "OUTPUT0", "datatype": "FP32", "shape": ["-1", "-1"]}]
        with pytest.raises(InferenceServerException) as caught:
            client.get_model_metadata("nope")
        assert caught.value.status() == "StatusCode.NOT_FOUND"
    finally:
        client.close()


def test_grpc_typed_contents_with_raw_stub(fresh):
    with grpc.insecure_channel(fresh.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        message = pb.ModelInferRequest(model_name="demo")
        message.inputs.add(name="INPUT0", datatype="FP32", shape=[3, 1],
                           contents=pb.InferTensorContents(fp32_contents=[1.0, 2.5, -4.0]))
        response = stub.ModelInfer(message, timeout=10)
    assert len(response.outputs) == 1 and list(response.outputs[0].shape) == [3, 1]
    assert len(response.raw_output_contents) == 1
    np.testing.assert_array_equal(np.frombuffer(response.raw_output_contents[0], dtype="<f4"), [2.0, 5.0, -8.0])


def test_metadata_and_health_with_tritonclient_http(fresh):
    expected_tensor = {"name": "INPUT0", "datatype": "FP32", "shape": [-1, -1]}
    client = triton_http.InferenceServerClient(url=fresh.http_address)
    try:
        assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("demo")
        assert client.get_server_metadata()["name"] == "simulated-predictor"
        metadata = client.get_model_metadata("demo")
        assert metadata["name"] == "demo" and metadata["versions"] == ["1"] and metadata["platform"] == "simulated"
        assert metadata["inputs"] == [expected_tensor]
        assert metadata["outputs"] == [expected_tensor | {"name": "OUTPUT0"}]
        assert not client.is_model_ready("nope")  # 404 -> not ready
    finally:
        client.close()
    assert get(fresh, "/v2/health/live") == (200, {"live": True})
    assert get(fresh, "/v2/health/ready") == (200, {"ready": True})
    assert get(fresh, "/v2/models/demo/ready") == (200, {"name": "demo", "ready": True})
    assert get(fresh, "/v2/models/demo/versions/1")[1]["name"] == "demo"


# -- its own view: stats and cost ---------------------------------------------------------

def test_stats_count_one_call_per_request_and_reset(fresh):
    assert get(fresh, "/stats") == (200, {"calls": 0, "instances": 0, "batch_sizes": []})
    assert post(fresh, "/v1/models/demo:predict", {"instances": [[1], [2], [3], [4]]})[0] == 200
    assert request(fresh, "POST", "/v2/models/demo/infer", orjson.dumps(oip_body([[1], [2]])))[0] == 200
    with grpc.insecure_channel(fresh.grpc_address) as channel:
        message = pb.ModelInferRequest(model_name="demo")
        message.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1])
        message.raw_input_contents.append(np.float32([7]).tobytes())
        pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(message, timeout=10)
    assert get(fresh, "/stats") == (200, {"calls": 3, "instances": 7, "batch_sizes": [4, 2, 1]})
    assert post(fresh, "/stats/reset", {}) == (200, {"calls": 0, "instances": 0, "batch_sizes": []})
    assert get(fresh, "/stats")[1]["calls"] == 0


def test_each_call_pays_its_cost(start_predictor):
    slow = start_predictor("--call-ms", "50", "--per-instance-ms", "10")
    started = time.monotonic()
    status, document = post(slow, "/v1/models/demo:predict", {"instances": [[1], [2], [3]]})
    elapsed = time.monotonic() - started
    assert status == 200 and document == {"predictions": [[2.0], [4.0], [6.0]]}
    assert elapsed >= 0.050 + 3 * 0.010


# -- errors ---------------------------------------------------------------------------------

@pytest.mark.parametrize("path, body", [
    ("/v1/models/demo:predict", b'{"instances": "nope"}'),
    ("/v1/models/demo:predict", b"not json"),
    ("/v1/models/demo:predict", b'{"instances": [[1, 2], [3]]}'),
    ("/v2/models/demo/infer", b'{"inputs": []}'),
    ("/v2/models/demo/infer",
     orjson.dumps({"inputs": [{"name": "WRONG", "datatype": "FP32", "shape": [1], "data": [1]}]})),
    ("/v2/models/demo/infer",
     orjson.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2], "data": [1]}]})),
    ("/v2/models/demo/infer", orjson.dumps(oip_body([[1]]) | {"outputs": [{"name": "NOPE"}]})),
])
def test_bad_input_is_400_with_error_body(fresh, path, body):
    status, headers, raw = request(fresh, "POST", path, body)
    assert status == 400
    document = orjson.loads(raw)
    assert set(document) == {"error"} and document["error"]
    assert get(fresh, "/stats")[1]["calls"] == 0  # rejected before the model paid for a call


def test_bad_binary_header_is_400(fresh):
    status, _, raw = request(fresh, "POST", "/v2/models/demo/infer", b"{}", {HEADER_LENGTH: "x"})
    assert status == 400 and HEADER_LENGTH in orjson.loads(raw)["error"]
    status, _, raw = request(fresh, "POST", "/v2/models/demo/infer", b"{}", {HEADER_LENGTH: "99"})
    assert status == 400 and "error" in orjson.loads(raw)


def test_bad_input_over_grpc_is_invalid_argument(fresh):
    with grpc.insecure_channel(fresh.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        message = pb.ModelInferRequest(model_name="demo")
        message.inputs.add(name="INPUT0", datatype="FP32", shape=[2, 2])
        message.raw_input_contents.append(b"\x00" * 12)  # 3 floats for a shape of 4
        with pytest.raises(grpc.RpcError) as caught:
            stub.ModelInfer(message, timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "needs 16" in caught.value.details()
        message = pb.ModelInferRequest(model_name="demo")
        message.inputs.add(name="OTHER", datatype="FP32", shape=[1],
                           contents=pb.InferTensorContents(fp32_contents=[1.0]))
        with pytest.raises(grpc.RpcError) as caught:
            stub.ModelInfer(message, timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_unknown_model_is_404_and_not_found(fresh):
    for method, path in [("POST", "/v1/models/other:predict"), ("GET", "/v1/models/other"),
                         ("GET", "/v2/models/other"), ("GET", "/v2/models/other/ready"),
                         ("POST", "/v2/models/other/infer"), ("POST", "/v2/models/demo/versions/9/infer")]:
        status, _, raw = request(fresh, method, path, orjson.dumps(oip_body([[1]])) if method == "POST" else None)
        assert status == 404, path
        assert "error" in orjson.loads(raw)
    assert request(fresh, "GET", "/no/such/route")[0] == 404
    with grpc.insecure_channel(fresh.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        for call, message in [(stub.ModelInfer, pb.ModelInferRequest(model_name="other")),
                              (stub.ModelReady, pb.ModelReadyRequest(name="other")),
                              (stub.ModelMetadata, pb.ModelMetadataRequest(name="other"))]:
            with pytest.raises(grpc.RpcError) as caught:
                call(message, timeout=10)
            assert caught.value.code() == grpc.StatusCode.NOT_FOUND


# -- fault knobs --------------------------------------------------------------------------------

def test_tornado_s_own_errors_are_json_with_their_reason_phrase(fresh):
    status, headers, raw = request(fresh, "DELETE", "/v1/models/demo:predict")
    assert status == 405 and headers["Content-Type"].startswith("application/json")
    assert orjson.loads(raw) == {"error": "Method Not Allowed"}


def test_control_fail_status(fresh):
    assert post(fresh, "/control", {"fail_status": 500}) == (
        200, {"fail_status": 500, "extra_delay_ms": 0.0, "wrong_rows": False})
    status, document = post(fresh, "/v1/models/demo:predict", {"instances": [[1]]})
    assert status == 500 and "injected" in document["error"]
    status, _, _ = request(fresh, "POST", "/v2/models/demo/infer", orjson.dumps(oip_body([[1]])))
    assert status == 500
    with grpc.insecure_channel(fresh.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        message = pb.ModelInferRequest(model_name="demo")
        message.inputs.add(name="INPUT0", datatype="FP32", shape=[1],
                           contents=pb.InferTensorContents(fp32_contents=[1.0]))
        with pytest.raises(grpc.RpcError) as caught:
            stub.ModelInfer(message, timeout=10)
        assert caught.value.code() == grpc.StatusCode.INTERNAL
        post(fresh, "/control", {"fail_status": 503})
        with pytest.raises(grpc.RpcError) as caught:
            stub.ModelInfer(message, timeout=10)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert post(fresh, "/v1/models/demo:predict", {"instances": [[1]]})[0] == 503
    assert get(fresh, "/stats")[1]["calls"] == 0  # a refused call never reached the model
    post(fresh, "/control", {"fail_status": 0})
    assert post(fresh, "/v1/models/demo:predict", {"instances": [[1]]})[0] == 200


def test_control_wrong_rows(fresh):
    post(fresh, "/control", {"wrong_rows": True})
    status, document = post(fresh, "/v1/models/demo:predict", {"instances": [[1], [2], [3]]})
    assert status == 200 and document["predictions"] == [[2.0], [4.0]]
    status, _, raw = request(fresh, "POST", "/v2/models/demo/infer", orjson.dumps(oip_body([[1], [2]])))
    assert status == 200 and orjson.loads(raw)["outputs"][0]["shape"] == [1, 1]
    with grpc.insecure_channel(fresh.grpc_address) as channel:
        message = pb.ModelInferRequest(model_name="demo")
        message.inputs.add(name="INPUT0", datatype="FP32", shape=[3, 2])
        message.raw_input_contents.append(np.ones((3, 2), dtype=np.float32).tobytes())
        response = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(message, timeout=10)
    assert list(response.outputs[0].shape) == [2, 2] and len(response.raw_output_contents[0]) == 16


def test_control_extra_delay(fresh):
    post(fresh, "/control", {"extra_delay_ms": 80})
    started = time.monotonic()
    assert post(fresh, "/v1/models/demo:predict", {"instances": [[1]]})[0] == 200
    assert time.monotonic() - started >= 0.080
    assert get(fresh, "/control") == (200, {"fail_status": 0, "extra_delay_ms": 80.0, "wrong_rows": False})


@pytest.mark.parametrize("body", [{"fail_status": 200}, {"fail_status": "500"}, {"extra_delay_ms": -1},
                                  {"wrong_rows": 1}, {"colour": "red"}, [1]])
def test_control_rejects_bad_knobs(fresh, body):
    status, document = post(fresh, "/control", body)
    assert status == 400 and document["error"]
    assert get(fresh, "/control")[1] == {"fail_status": 0, "extra_delay_ms": 0.0, "wrong_rows": False}


def test_fault_flags_on_the_command_line(start_predictor):
    failing = start_predictor("--fail-status", "503", "--extra-delay-ms", "1")
    status, document = post(failing, "/v1/models/demo:predict", {"instances": [[1]]})
    assert status == 503 and document["error"]
    assert get(failing, "/control")[1] == {"fail_status": 503, "extra_delay_ms": 1.0, "wrong_rows": False}


# -- internal errors (a model that breaks, patched in a child process) -------------------------

_BROKEN = """
import sys
from backends.simulated import model
from tools.simulated_predictor import server

async def broken(self, inputs):
    raise RuntimeError("secret internal detail")

model.SimulatedModel.predict = broken
sys.exit(server.main(sys.argv[1:]))
"""


def test_internal_error_is_500_without_details(start_predictor):
    broken = start_predictor("--model", "demo", command=[sys.executable, "-c", _BROKEN])
    status, _, raw = request(broken, "POST", "/v2/models/demo/infer", orjson.dumps(oip_body([[1]])))
    assert status == 500 and orjson.loads(raw) == {"error": "internal error"}
    status, _, raw = request(broken, "POST", "/v1/models/demo:predict", b'{"instances": [[1]]}')
    assert status == 500 and orjson.loads(raw) == {"error": "internal error"}
    with grpc.insecure_channel(broken.grpc_address) as channel:
        message = pb.ModelInferRequest(model_name="demo")
        message.inputs.add(name="INPUT0", datatype="FP32", shape=[1],
                           contents=pb.InferTensorContents(fp32_contents=[1.0]))
        with pytest.raises(grpc.RpcError) as caught:
            pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(message, timeout=10)
    assert caught.value.code() == grpc.StatusCode.INTERNAL
    assert caught.value.details() == "internal error"
    assert "secret internal detail" in broken.log_text()  # logged, with its traceback


def test_python_dash_m_package_runs_the_server():
    running = ServerProcess(python_module_command(SIMULATED_PREDICTOR_MODULE, "--http-port", "0", "--grpc-port", "0",
                                                  "--model", "m2"), ready_timeout=START_TIMEOUT_S)
    try:
        running.start()
        assert running.ready_line.startswith("READY http=")
        assert get(running, "/v1/models/m2") == (200, {"name": "m2", "ready": True})
    finally:
        assert _stop(running) == 0
