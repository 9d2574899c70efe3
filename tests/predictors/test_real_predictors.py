"""The predictor harness works: the REAL Triton and KServe servers, talked to DIRECTLY
(no gateway), answer 2 x INPUT0 over every protocol, report how many calls they got,
and leave no process behind when stopped."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc

from tests.predictors.harness import KServeServer, PredictorProcess, TritonServer, http_ok, http_post_json
from tools.predictor_envs import ensure_env
from tools.processes import ServerStartError, is_alive, pids_in_group

SIGNATURE_INPUTS = [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, -1]}]
SIGNATURE_OUTPUTS = [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, -1]}]


def oip_json_request(rows: list[list[float]]) -> dict:
    flat = [x for row in rows for x in row]
    return {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [len(rows), len(rows[0])], "data": flat}]}


def grpc_infer(address: str, data: np.ndarray) -> np.ndarray:
    client = triton_grpc.InferenceServerClient(address)
    try:
        tensor = triton_grpc.InferInput("INPUT0", list(data.shape), "FP32")
        tensor.set_data_from_numpy(data)  # sent as raw_input_contents
        return client.infer("double", [tensor]).as_numpy("OUTPUT0")
    finally:
        client.close()


# --- Triton -------------------------------------------------------------------------------


def test_triton_http_json_infer_doubles_and_counts_one_execution(triton_server: TritonServer) -> None:
    executions, inferences = triton_server.execution_count(), triton_server.inference_count()
    batches_of_two = triton_server.batch_size_counts().get(2, 0)
    rows = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.5]]
    status, body = http_post_json(f"{triton_server.http_url}/v2/models/double/infer", oip_json_request(rows))
    assert status == 200, body
    (output,) = body["outputs"]
    assert output["name"] == "OUTPUT0" and output["datatype"] == "FP32" and output["shape"] == [2, 3]
    assert output["data"] == [2.0, 4.0, 6.0, 8.0, 10.0, 13.0]
    assert triton_server.executions_reaching(executions + 1) == executions + 1  # one request -> one execution
    assert triton_server.inference_count() == inferences + 2  # of two rows
    assert triton_server.batch_size_counts().get(2, 0) == batches_of_two + 1


def test_triton_grpc_infer_via_tritonclient_doubles_and_counts_one_execution(triton_server: TritonServer) -> None:
    executions = triton_server.execution_count()
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(grpc_infer(triton_server.grpc_address, data), data * 2)
    assert triton_server.executions_reaching(executions + 1) == executions + 1


def test_triton_metadata_and_batch_limit(triton_server: TritonServer) -> None:
    metadata = triton_server.metadata()
    assert metadata["inputs"] == SIGNATURE_INPUTS and metadata["outputs"] == SIGNATURE_OUTPUTS
    executions = triton_server.execution_count()
    status, body = http_post_json(
        f"{triton_server.http_url}/v2/models/double/infer", oip_json_request([[1.0]] * 65)
    )
    assert status == 400 and "batch-size must be <= 64" in body["error"]
    assert triton_server.execution_count() == executions  # rejected before execution


# --- KServe -------------------------------------------------------------------------------


def test_kserve_v1_predict_doubles_and_is_logged(kserve_server: KServeServer) -> None:
    before = len(kserve_server.calls())
    status, body = http_post_json(
        f"{kserve_server.http_url}/v1/models/double:predict", {"instances": [[1, 2.5], [3, 4], [5, 6]]}
    )
    assert status == 200, body
    assert body == {"predictions": [[2, 5.0], [6, 8], [10, 12]]}
    calls = kserve_server.calls()[before:]
    assert [(c["protocol"], c["batch_size"]) for c in calls] == [("v1", 3)]


def test_kserve_v2_rest_infer_doubles_and_is_logged(kserve_server: KServeServer) -> None:
    before = len(kserve_server.calls())
    status, body = http_post_json(
        f"{kserve_server.http_url}/v2/models/double/infer", oip_json_request([[1.0, 2.0], [3.0, 4.0]])
    )
    assert status == 200, body
    (output,) = body["outputs"]
    assert output["name"] == "OUTPUT0" and output["shape"] == [2, 2] and output["data"] == [2.0, 4.0, 6.0, 8.0]
    calls = kserve_server.calls()[before:]
    assert [(c["protocol"], c["batch_size"]) for c in calls] == [("v2", 2)]


def test_kserve_v2_grpc_infer_via_tritonclient_doubles_and_is_logged(kserve_server: KServeServer) -> None:
    before = len(kserve_server.calls())
    data = np.arange(15, dtype=np.float32).reshape(5, 3)
    np.testing.assert_array_equal(grpc_infer(kserve_server.grpc_address, data), data * 2)
    calls = kserve_server.calls()[before:]
    assert [(c["protocol"], c["batch_size"]) for c in calls] == [("v2", 5)]


def test_kserve_metadata(kserve_server: KServeServer) -> None:
    metadata = kserve_server.metadata()
    assert metadata["name"] == "double"
    assert metadata["inputs"] == SIGNATURE_INPUTS and metadata["outputs"] == SIGNATURE_OUTPUTS


def test_kserve_bad_input_is_400_or_invalid_argument_and_not_logged(kserve_server: KServeServer) -> None:
    before = len(kserve_server.calls())
    url = kserve_server.http_url
    status, _ = http_post_json(f"{url}/v1/models/double:predict", {"instances": ["not a number"]})
    assert status == 400
    bad_shape = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2, 3], "data": [1, 2, 3, 4]}]}
    status, _ = http_post_json(f"{url}/v2/models/double/infer", bad_shape)
    assert status == 400
    with pytest.raises(triton_grpc.InferenceServerException) as excinfo:
        grpc_infer(kserve_server.grpc_address, np.arange(4, dtype=np.float32))  # rank 1, not [rows, n]
    assert excinfo.value.status() == str(grpc.StatusCode.INVALID_ARGUMENT)
    assert kserve_server.calls()[before:] == []


# --- lifecycle ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["triton", "kserve"])
def test_stop_leaves_no_process_behind(kind: str, tmp_path: pathlib.Path) -> None:
    server_class = TritonServer if kind == "triton" else KServeServer
    server = server_class.start(ensure_env(kind), tmp_path)
    try:
        pids = server.process.group_pids()
        assert server.process.pid in pids
        assert http_ok(f"{server.http_url}/v2/health/ready")
    finally:
        code = server.stop()
    assert code == 0, server.process.log_tail()  # a clean shutdown, not a SIGKILL
    for pid in pids:
        # A SIGKILLed orphan may linger as a zombie where PID 1 does not reap: it runs nothing.
        assert not is_alive(pid), f"process {pid} of {kind} outlived stop()"
    assert not http_ok(f"{server.http_url}/v2/health/ready", timeout=0.5)


PARENT_SCRIPT = """
import pathlib, sys
from tests.predictors.harness import KServeServer, TritonServer
server_class = TritonServer if sys.argv[1] == "triton" else KServeServer
server = server_class.start(pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3]))
print(server.process.pid, flush=True)
sys.stdin.read()  # until killed
"""


@pytest.mark.parametrize("kind", ["triton", "kserve"])
def test_a_server_exits_when_the_test_process_dies_without_stopping_it(kind: str, tmp_path: pathlib.Path) -> None:
    repo = pathlib.Path(__file__).resolve().parents[2]
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT_SCRIPT, kind, str(ensure_env(kind)), str(tmp_path)],
        cwd=repo, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        server_pid = int(parent.stdout.readline())
        assert pids_in_group(server_pid), "server not running"
    finally:
        parent.kill()  # SIGKILL: no finalizer, no stop() -- only the stdin watchdog is left
        parent.wait()
        parent.stdout.close()
        parent.stdin.close()
    deadline = time.monotonic() + 20
    while pids_in_group(server_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    leftovers = pids_in_group(server_pid)
    for pid in leftovers:  # do not leak them into the rest of the session if the test fails
        os.kill(pid, signal.SIGKILL)
    assert not leftovers, f"{kind} outlived its parent:\n{(tmp_path / (kind + '.log')).read_text()[-3000:]}"


def test_a_process_dying_before_ready_raises_with_its_log(tmp_path: pathlib.Path) -> None:
    cmd = [sys.executable, "-c", "import sys; print('model failed to load', flush=True); sys.exit(3)"]
    process = PredictorProcess("doomed", cmd, tmp_path, ready_probe=lambda: False, ready_timeout=30)
    with pytest.raises(ServerStartError, match=r"(?s)exited with code 3.*model failed to load"):
        process.start()
