"""The translation matrix, against the REAL predictors: every front end a client may use x
every protocol the gateway may speak to a predictor.

Front ends (rows):   v1 HTTP, OIP JSON, OIP binary (tritonclient.http), OIP gRPC
                     (tritonclient.grpc), TorchServe HTTP (/predictions), TorchServe gRPC
                     (Predictions).
Predictors (columns): Triton HTTP, Triton gRPC, KServe v1, KServe v2 HTTP, KServe v2 gRPC,
                     TorchServe HTTP (KServe envelope), TorchServe gRPC Predictions,
                     TorchServe gRPC OIP (kservev2 envelope).

Every predictor serves ``double`` (OUTPUT0 = 2 x INPUT0, FP32, rows of 4), so every cell
is expressible for numeric rows and must give exactly the right answer in the client's own
protocol (``test_cell``). What a cell cannot express is refused with 400 /
INVALID_ARGUMENT saying why, before anything reaches the predictor:

* a v1-style instance that is a JSON object, sent to a tensor predictor (it is no row of a
  tensor): ``test_an_object_instance_cannot_become_a_tensor_row``;
* a BF16 tensor sent to a v1-style predictor (v1 is JSON and BF16 has no JSON form):
  ``test_a_bf16_tensor_cannot_become_a_v1_instance``;
* BF16 written as OIP JSON, whatever the predictor: ``test_bf16_has_no_oip_json_form``;
* FP16 (and BF16) to TorchServe's OIP, which reads only typed contents and has no typed
  field for them: ``test_torchserve_oip_cannot_carry_fp16``.

And clients of every protocol arriving together share ONE batch whatever the predictor
protocol (``test_clients_of_every_protocol_share_one_batch``). One gateway per predictor
protocol (module-scoped); the predictors are the session's real servers.
"""
from __future__ import annotations

import contextlib
import threading
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import numpy as np
import orjson
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http

from tests.harness import RunningGateway, config_for, held_slot, http, http_json, queued, running_gateway, wait_for
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc
from wire.generated.torchserve import inference_pb2 as ts_pb
from wire.generated.torchserve import inference_pb2_grpc as ts_grpc

MODEL = "double"
SIGNATURE = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]}],
             "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, 4]}]}

FRONT_ENDS = ["v1-http", "oip-json", "oip-binary", "oip-grpc", "torchserve-http", "torchserve-grpc"]
V1_STYLE = ["v1-http", "torchserve-http", "torchserve-grpc"]  # JSON instances, KServe v1 semantics
# predictor protocol -> (the session fixture of its server, the model's config, whether
# the batch travels as tensors (OIP) or as v1 instances)
PREDICTORS: dict[str, tuple[str, Callable[[Any], dict], bool]] = {
    "triton-http": ("triton_server", lambda s: {"backend": "triton", "protocol": "http", "url": s.http_url}, True),
    "triton-grpc": ("triton_server", lambda s: {"backend": "triton", "protocol": "grpc", "url": s.grpc_address}, True),
    "kserve-v1": ("kserve_server", lambda s: {"backend": "kserve", "protocol": "http", "api": "v1",
                                              "url": s.http_url, **SIGNATURE}, False),
    "kserve-v2-http": ("kserve_server", lambda s: {"backend": "kserve", "protocol": "http", "api": "v2",
                                                   "url": s.http_url}, True),
    "kserve-v2-grpc": ("kserve_server", lambda s: {"backend": "kserve", "protocol": "grpc", "api": "v2",
                                                   "url": s.grpc_address}, True),
    "torchserve-http": ("torchserve_server", lambda s: {"backend": "torchserve", "protocol": "http",
                                                        "url": s.http_url, **SIGNATURE}, False),
    "torchserve-grpc": ("torchserve_server", lambda s: {"backend": "torchserve", "protocol": "grpc", "api": "v1",
                                                        "url": s.grpc_address, **SIGNATURE}, False),
    "torchserve-oip": ("torchserve_oip_server", lambda s: {"backend": "torchserve", "protocol": "grpc", "api": "v2",
                                                           "url": s.grpc_address, **SIGNATURE}, True),
}
TENSOR_PREDICTORS = [name for name, (_, _, tensors) in PREDICTORS.items() if tensors]
ROW_PREDICTORS = [name for name, (_, _, tensors) in PREDICTORS.items() if not tensors]


def cells(front_ends: list[str], predictors: list[str]) -> Any:
    """Parameters (front_end, predictor) with ids like ``v1-http->triton-http``."""
    return pytest.mark.parametrize(
        "front_end, predictor", [pytest.param(f, p, id=f"{f}->{p}") for p in predictors for f in front_ends],
        indirect=["predictor"])


@pytest.fixture(scope="module")
def gateways() -> Iterator[tuple[contextlib.ExitStack, dict[str, RunningGateway]]]:
    """One gateway per predictor protocol, started when first needed, stopped with the module."""
    with contextlib.ExitStack() as stack:
        yield stack, {}


@pytest.fixture
def predictor(request, gateways) -> tuple[str, Any, RunningGateway]:
    """(predictor protocol, its real server, a gateway serving `double` through it)."""
    name = request.param
    fixture, model_config, _ = PREDICTORS[name]
    server = request.getfixturevalue(fixture)
    stack, running = gateways
    if name not in running:
        models = [{"name": MODEL, **model_config(server)}]
        if name == "torchserve-oip":  # the same model declared FP16: what typed contents cannot carry
            models.append({**models[0], "name": "double_fp16", "backend_model": MODEL, "inputs": [
                {"name": "INPUT0", "datatype": "FP16", "shape": [-1, 4]}]})
        running[name] = stack.enter_context(running_gateway(config_for(*models)))
    return name, server, running[name]


def rows_for(front_end: str, predictor: str, count: int = 2) -> np.ndarray:
    """Rows unique to the cell, exactly representable (and doubled) in FP32."""
    seed = zlib.crc32(f"{front_end}/{predictor}".encode()) % 1000
    return np.array([[seed + 10 * i + j + 0.5 for j in range(4)] for i in range(count)], dtype=np.float32)


# -- one client per front end: send rows, return (the answer as an FP32 array, the batch id)

def via_v1_http(gw: RunningGateway, rows: np.ndarray) -> tuple[np.ndarray, str]:
    status, body = http_json("POST", f"{gw.http_url}/v1/models/{MODEL}:predict", {"instances": rows.tolist()})
    assert status == 200, body
    return np.array(body["predictions"], np.float32), body["batchId"]


def via_oip_json(gw: RunningGateway, rows: np.ndarray) -> tuple[np.ndarray, str]:
    request = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": list(rows.shape),
                           "data": rows.ravel().tolist()}]}
    status, body = http_json("POST", f"{gw.http_url}/v2/models/{MODEL}/infer", request)
    assert status == 200, body
    (output,) = body["outputs"]
    assert (output["name"], output["datatype"], output["shape"]) == ("OUTPUT0", "FP32", list(rows.shape))
    return np.array(output["data"], np.float32).reshape(output["shape"]), body["parameters"]["batch_id"]


def via_oip_binary(gw: RunningGateway, rows: np.ndarray) -> tuple[np.ndarray, str]:
    client = triton_http.InferenceServerClient(gw.http_url.removeprefix("http://"))
    try:
        tensor = triton_http.InferInput("INPUT0", list(rows.shape), "FP32")
        tensor.set_data_from_numpy(rows, binary_data=True)
        result = client.infer(MODEL, [tensor], outputs=[triton_http.InferRequestedOutput("OUTPUT0", binary_data=True)])
    finally:
        client.close()
    (output,) = result.get_response()["outputs"]
    assert (output["datatype"], output["parameters"]["binary_data_size"]) == ("FP32", rows.nbytes)
    return result.as_numpy("OUTPUT0"), result.get_response()["parameters"]["batch_id"]


def via_oip_grpc(gw: RunningGateway, rows: np.ndarray) -> tuple[np.ndarray, str]:
    client = triton_grpc.InferenceServerClient(gw.grpc_address)
    try:
        tensor = triton_grpc.InferInput("INPUT0", list(rows.shape), "FP32")
        tensor.set_data_from_numpy(rows)
        result = client.infer(MODEL, [tensor])
    finally:
        client.close()
    (output,) = result.get_response().outputs
    assert (output.name, output.datatype) == ("OUTPUT0", "FP32")
    return result.as_numpy("OUTPUT0"), result.get_response().parameters["batch_id"].string_param


def via_torchserve_http(gw: RunningGateway, rows: np.ndarray) -> tuple[np.ndarray, str]:
    # One instance is sent as TorchServe users do, a bare JSON list; several as {"instances": [...]}.
    body = rows[0].tolist() if len(rows) == 1 else {"instances": rows.tolist()}
    status, headers, payload = http("POST", f"{gw.http_url}/predictions/{MODEL}", orjson.dumps(body))
    assert status == 200, payload
    answer = orjson.loads(payload)
    return np.array([answer] if len(rows) == 1 else answer["predictions"], np.float32), headers["X-Batch-Id"]


def via_torchserve_grpc(gw: RunningGateway, rows: np.ndarray) -> tuple[np.ndarray, str]:
    request = ts_pb.PredictionsRequest(model_name=MODEL, input={"data": orjson.dumps({"instances": rows.tolist()})})
    with grpc.insecure_channel(gw.grpc_address) as channel:
        response, call = ts_grpc.InferenceAPIsServiceStub(channel).Predictions.with_call(request, timeout=30)
    return np.array(orjson.loads(response.prediction)["predictions"], np.float32), dict(call.trailing_metadata())["batch-id"]


CLIENTS = {"v1-http": via_v1_http, "oip-json": via_oip_json, "oip-binary": via_oip_binary, "oip-grpc": via_oip_grpc,
           "torchserve-http": via_torchserve_http, "torchserve-grpc": via_torchserve_grpc}


# -- the matrix ---------------------------------------------------------------------------

@cells(FRONT_ENDS, list(PREDICTORS))
def test_cell(front_end, predictor):
    name, _, gw = predictor
    rows = rows_for(front_end, name)
    answer, batch_id = CLIENTS[front_end](gw, rows)
    np.testing.assert_array_equal(answer, rows * 2)
    assert batch_id


# -- what a cell cannot express: 400 / INVALID_ARGUMENT saying why ----------------------------

def v1_style_status(gw: RunningGateway, front_end: str, instance: Any) -> tuple[int | str, str]:
    """Send one instance through a v1-style front end; (HTTP status or gRPC code name, message)."""
    if front_end == "v1-http":
        status, body = http_json("POST", f"{gw.http_url}/v1/models/{MODEL}:predict", {"instances": [instance]})
        return status, body.get("error", "")
    if front_end == "torchserve-http":
        status, body = http_json("POST", f"{gw.http_url}/predictions/{MODEL}", {"data": instance})
        return status, body.get("message", "")
    request = ts_pb.PredictionsRequest(model_name=MODEL, input={"data": orjson.dumps({"data": instance})})
    with grpc.insecure_channel(gw.grpc_address) as channel:
        try:
            ts_grpc.InferenceAPIsServiceStub(channel).Predictions(request, timeout=30)
        except grpc.RpcError as error:
            return error.code().name, error.details()
    return "OK", ""


@cells(V1_STYLE, TENSOR_PREDICTORS)
def test_an_object_instance_cannot_become_a_tensor_row(front_end, predictor):
    # (A v1 predictor takes any JSON instance as it is: there the cell is expressible.)
    _, _, gw = predictor
    status, message = v1_style_status(gw, front_end, {"pixels": [1, 2, 3, 4]})
    assert status in (400, "INVALID_ARGUMENT")
    assert "an instance that is a JSON object cannot be expressed as a row of it" in message


def bf16_status(gw: RunningGateway, front_end: str, model: str = MODEL, datatype: str = "BF16") -> tuple[Any, str]:
    data = np.array([[0x3F80, 0x4000, 0x7FC0, 0x0001]], np.uint16)  # bfloat16 bit patterns
    if datatype == "FP16":
        data = data.view(np.float16)
    if front_end == "oip-binary":
        header = orjson.dumps({"inputs": [{"name": "INPUT0", "datatype": datatype, "shape": [1, 4],
                                           "parameters": {"binary_data_size": data.nbytes}}]})
        status, _, body = http("POST", f"{gw.http_url}/v2/models/{model}/infer", header + data.tobytes(),
                               headers={"Inference-Header-Content-Length": str(len(header))})
        return status, orjson.loads(body)["error"]
    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name="INPUT0", datatype=datatype, shape=[1, 4])
    request.raw_input_contents.append(data.tobytes())
    with grpc.insecure_channel(gw.grpc_address) as channel:
        try:
            pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)
        except grpc.RpcError as error:
            return error.code().name, error.details()
    return "OK", ""


@cells(["oip-binary", "oip-grpc"], ROW_PREDICTORS)
def test_a_bf16_tensor_cannot_become_a_v1_instance(front_end, predictor):
    # (A tensor predictor takes BF16 in raw form: tests/backends/test_real_triton_tensors.py.)
    _, _, gw = predictor
    status, message = bf16_status(gw, front_end)
    assert status in (400, "INVALID_ARGUMENT")
    assert "is BF16, which has no JSON form, and v1 instances and predictions are JSON" in message


@cells(["oip-json"], list(PREDICTORS))
def test_bf16_has_no_oip_json_form(front_end, predictor):
    _, _, gw = predictor
    request = {"inputs": [{"name": "INPUT0", "datatype": "BF16", "shape": [1, 4], "data": [1, 2, 3, 4]}]}
    status, body = http_json("POST", f"{gw.http_url}/v2/models/{MODEL}/infer", request)
    assert status == 400
    assert "BF16 has no JSON form; send it in binary form" in body["error"]


@cells(["oip-binary", "oip-grpc"], ["torchserve-oip"])
def test_torchserve_oip_cannot_carry_fp16(front_end, predictor):
    _, server, gw = predictor
    calls = len(server.calls())
    status, message = bf16_status(gw, front_end, model="double_fp16", datatype="FP16")
    assert status in (400, "INVALID_ARGUMENT")
    assert "FP16 has no typed contents field, and this predictor reads only typed contents" in message
    assert len(server.calls()) == calls  # refused before TorchServe saw it


# -- clients of every protocol share one batch, whatever the predictor protocol ----------------

def predictor_batch_sizes(name: str, server: Any) -> list[int]:
    """The batch sizes the predictor itself has executed so far (its own log or statistics)."""
    if name.startswith("triton"):
        return [size for size, count in sorted(server.batch_size_counts(MODEL).items()) for _ in range(count)]
    return [call["batch_size"] for call in server.calls()]


@pytest.mark.parametrize("predictor", list(PREDICTORS), indirect=True)
def test_clients_of_every_protocol_share_one_batch(predictor):
    name, server, gw = predictor
    before = predictor_batch_sizes(name, server)
    results: dict[str, tuple[np.ndarray, str]] = {}
    errors: list[Exception] = []

    def run(key: str, front_end: str, rows: np.ndarray) -> threading.Thread:
        def target() -> None:
            try:
                results[key] = (rows, *CLIENTS[front_end](gw, rows))
            except Exception as error:  # reported below, with the others
                errors.append(error)
        thread = threading.Thread(target=target, name=key)
        thread.start()
        return thread

    with held_slot(gw, MODEL) as (release, batches):
        blocker = run("blocker", "v1-http", rows_for("blocker", name, 1))
        wait_for(lambda: len(batches) == 1, "the blocker's batch to reach the gate")
        clients = [run(front_end, front_end, rows_for(f"shared/{front_end}", name, 1)) for front_end in FRONT_ENDS]
        wait_for(lambda: queued(gw, MODEL) == len(FRONT_ENDS), "every client to be queued behind the blocker")
        release.set()
        for thread in [blocker, *clients]:
            thread.join(timeout=60)
    assert not errors, errors
    for key, (rows, answer, _) in results.items():
        np.testing.assert_array_equal(answer, rows * 2, err_msg=key)
    shared = {results[front_end][2] for front_end in FRONT_ENDS}
    assert len(shared) == 1, f"the clients were answered from batches {shared}"
    assert results["blocker"][2] not in shared
    assert batches == [1, len(FRONT_ENDS)]
    # The predictor itself executed the shared batch as ONE call of all the clients' rows.
    wait_for(lambda: len(predictor_batch_sizes(name, server)) >= len(before) + 2, "the predictor's log")
    after = predictor_batch_sizes(name, server)
    assert sorted(after) == sorted(before + [1, len(FRONT_ENDS)])


FRONT_END_LABELS = {"v1-http": "KServe v1 HTTP", "oip-json": "OIP JSON", "oip-binary": "OIP binary",
                    "oip-grpc": "OIP gRPC", "torchserve-http": "TorchServe HTTP", "torchserve-grpc": "TorchServe gRPC"}
PREDICTOR_LABELS = {"triton-http": "Triton HTTP", "triton-grpc": "Triton gRPC", "kserve-v1": "KServe v1",
                    "kserve-v2-http": "KServe v2 HTTP", "kserve-v2-grpc": "KServe v2 gRPC",
                    "torchserve-http": "TorchServe HTTP", "torchserve-grpc": "TorchServe gRPC",
                    "torchserve-oip": "TorchServe gRPC OIP"}


def test_the_readme_table_is_this_matrix():
    """The docs' "Translation matrix" table (docs/protocols.md): every cell tested, and its
    notes (a)-(d) on exactly the cells whose refusals are tested above."""
    from tests.processes import ROOT
    text = (ROOT / "docs" / "protocols.md").read_text()
    section = text[text.index("## Translation matrix"):]
    section = section.split("\n## ", 1)[0]  # up to the next section, if any
    table = [[cell.strip() for cell in line.strip().strip("|").split("|")]
             for line in section.splitlines() if line.startswith("|")]
    assert table[0][1:] == [PREDICTOR_LABELS[p] for p in PREDICTORS]
    assert [row[0] for row in table[2:]] == [FRONT_END_LABELS[f] for f in FRONT_ENDS]
    expected_notes = {**{(f, p): "a" for f in V1_STYLE for p in TENSOR_PREDICTORS},
                      **{(f, p): "b" for f in ("oip-binary", "oip-grpc") for p in ROW_PREDICTORS},
                      **{("oip-json", p): "c" for p in PREDICTORS},
                      **{(f, "torchserve-oip"): "d" for f in ("oip-binary", "oip-grpc")}}
    for front_end, row in zip(FRONT_ENDS, table[2:], strict=True):
        for predictor, cell in zip(PREDICTORS, row[1:], strict=True):
            note = expected_notes.get((front_end, predictor))
            assert cell == ("tested" if note is None else f"tested ({note})"), (front_end, predictor, cell)
