"""The TorchServe harness works: the REAL TorchServe 0.12, talked to DIRECTLY (no gateway),
doubles through each envelope and protocol the gateway uses, shows the quirks the gateway
must handle (OIP service name, typed contents only, flattened FP64 outputs), logs one
handler call per request (batchSize 1), and leaves no process behind when stopped."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import grpc
import numpy as np
import orjson
import pytest
from google.protobuf import empty_pb2

from tests.predictors.harness import TorchServeServer, http_get, http_ok, http_post_json
from tools.predictor_envs import ensure_env
from tools.processes import is_alive, pids_in_group
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.torchserve import inference_pb2 as ts_pb
from wire.generated.torchserve import inference_pb2_grpc as ts_grpc

OIP_SERVICE = "org.pytorch.serve.grpc.openinference.GRPCInferenceService"


def oip_infer(address: str, request: pb.ModelInferRequest) -> pb.ModelInferResponse:
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(f"/{OIP_SERVICE}/ModelInfer",
                                   request_serializer=pb.ModelInferRequest.SerializeToString,
                                   response_deserializer=pb.ModelInferResponse.FromString)
        return call(request, timeout=30)


def test_kserve_envelope_over_http_doubles_all_rows_in_one_handler_call(torchserve_server: TorchServeServer) -> None:
    before = len(torchserve_server.calls())
    status, body = http_post_json(f"{torchserve_server.http_url}/v1/models/double:predict",
                                  {"instances": [[1, 2, 3, 4], [0.5, 0, -1, 8], [1, 1, 1, 1]]})
    assert status == 200, body
    assert body == {"predictions": [[2, 4, 6, 8], [1, 0, -2, 16], [2, 2, 2, 2]]}
    calls = torchserve_server.calls()[before:]
    assert [(c["envelope"], c["batch_size"]) for c in calls] == [("kserve", 3)]
    assert torchserve_server.describe()[0]["batchSize"] == 1


def test_its_own_grpc_predictions_and_ping(torchserve_server: TorchServeServer) -> None:
    before = len(torchserve_server.calls())
    with grpc.insecure_channel(torchserve_server.grpc_address) as channel:
        stub = ts_grpc.InferenceAPIsServiceStub(channel)
        assert orjson.loads(stub.Ping(empty_pb2.Empty(), timeout=10).health) == {"status": "Healthy"}
        body = orjson.dumps({"instances": [[1, 2, 3, 4], [5, 6, 7, 8]]})
        response = stub.Predictions(ts_pb.PredictionsRequest(model_name="double", input={"data": body}), timeout=30)
        assert orjson.loads(response.prediction) == {"predictions": [[2, 4, 6, 8], [10, 12, 14, 16]]}
        with pytest.raises(grpc.RpcError) as caught:  # how TorchServe reports an unknown model
            stub.Predictions(ts_pb.PredictionsRequest(model_name="nope", input={"data": body}), timeout=30)
        assert caught.value.code() == grpc.StatusCode.INTERNAL and "ModelNotFoundException" in caught.value.details()
    assert [c["batch_size"] for c in torchserve_server.calls()[before:]] == [2]


def test_its_oip_grpc_reads_typed_contents_and_answers_flattened_fp64(torchserve_oip_server: TorchServeServer) -> None:
    before = len(torchserve_oip_server.calls())
    request = pb.ModelInferRequest(model_name="double")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[3, 4]).contents.fp32_contents.extend(range(12))
    response = oip_infer(torchserve_oip_server.grpc_address, request)
    (output,) = response.outputs
    # The quirks backends/oip_grpc.py restores: named after the input, flattened, FP64.
    assert (output.name, output.datatype, list(output.shape)) == ("INPUT0", "FP64", [12])
    assert list(output.contents.fp64_contents) == [2.0 * x for x in range(12)]
    assert [c["batch_size"] for c in torchserve_oip_server.calls()[before:]] == [3]
    # raw_input_contents are ignored: the handler gets no data and the call fails.
    raw = pb.ModelInferRequest(model_name="double")
    raw.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 4])
    raw.raw_input_contents.append(np.ones((1, 4), np.float32).tobytes())
    with pytest.raises(grpc.RpcError):
        oip_infer(torchserve_oip_server.grpc_address, raw)


def test_stop_leaves_no_process_and_no_file_outside_the_workdir(tmp_path: pathlib.Path) -> None:
    server = TorchServeServer.start(ensure_env("torchserve"), tmp_path)
    try:
        pids = server.process.group_pids()
        assert len(pids) >= 4  # supervisor script, torchserve launcher, Java frontend, worker
        memory = server.memory()
        assert sum(memory.values()) < 1.5 * 2**30, memory
        assert http_ok(f"{server.http_url}/ping")
        assert (tmp_path / "tmp" / ".model_server.pid").is_file()  # TMPDIR in the workdir
    finally:
        code = server.stop()
    assert code == 0, server.process.log_tail()
    for pid in pids:
        assert not is_alive(pid), f"process {pid} of TorchServe outlived stop()"
    assert not (tmp_path / "tmp").exists()
    assert (tmp_path / "logs" / "ts_log.log").is_file()  # LOG_LOCATION in the workdir
    with pytest.raises(OSError):
        http_get(f"{server.http_url}/ping", timeout=0.5)


PARENT_SCRIPT = """
import pathlib, sys
from tests.predictors.harness import TorchServeServer
server = TorchServeServer.start(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]))
print(server.process.pid, flush=True)
sys.stdin.read()  # until killed
"""


def test_torchserve_exits_when_the_test_process_dies_without_stopping_it(tmp_path: pathlib.Path) -> None:
    repo = pathlib.Path(__file__).resolve().parents[2]
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT_SCRIPT, str(ensure_env("torchserve")), str(tmp_path)],
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
    deadline = time.monotonic() + 40
    while pids_in_group(server_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    leftovers = pids_in_group(server_pid)
    for pid in leftovers:  # do not leak them into the rest of the session if the test fails
        os.kill(pid, signal.SIGKILL)
    assert not leftovers, f"TorchServe outlived its parent:\n{(tmp_path / 'torchserve.log').read_text()[-3000:]}"
