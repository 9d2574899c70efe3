"""Tensors through the gateway to the REAL Triton, exactly: every OIP datatype at the
edges of its type, several inputs and outputs per model, requested-output selection and
version paths. Clients are the real tritonclient.http (binary tensor extension) and
tritonclient.grpc (raw contents), plus plain OIP JSON and KServe v1 bodies.

Triton's test models (tests/predictors/triton_server.py): ``identity`` (PyTriton; one
optional input INPUT_<DT> per datatype, each output OUTPUT_<DT> its input) and
``identity_bf16`` (a plain Python-backend model: PyTriton cannot express BF16). The
gateway serves ``identity`` as Triton describes it (13 inputs), and per datatype a model
``id_<DT>`` that declares just INPUT_<DT> -> OUTPUT_<DT> of the same Triton model, and
``multi`` with three inputs and three outputs.
"""
from __future__ import annotations

import grpc
import ml_dtypes
import numpy as np
import orjson
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from tritonclient.utils import InferenceServerException

from tests.datatypes import DATATYPES, JSON_DATATYPES, assert_exact, binary_sample, json_data, json_sample
from tests.harness import config_for, http, http_json, running_gateway
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc

IDENTITY_DATATYPES = [dt for dt in DATATYPES if dt != "BF16"]  # what the PyTriton identity model has
MULTI = ["FP32", "INT64", "BYTES"]


def models(url: str, protocol: str, binary: bool) -> list[dict]:
    common = {"backend": "triton", "protocol": protocol, "url": url, "binary_data": binary,
              "batching": {"max_batch_size": 64}}

    def declared(name: str, backend_model: str, datatypes: list[str]) -> dict:
        return {"name": name, "backend_model": backend_model, **common,
                "inputs": [{"name": f"INPUT_{dt}", "datatype": dt, "shape": [-1, -1]} for dt in datatypes],
                "outputs": [{"name": f"OUTPUT_{dt}", "datatype": dt, "shape": [-1, -1]} for dt in datatypes]}

    return [{"name": "identity", **common},  # its signature read from Triton's metadata
            *(declared(f"id_{dt}", "identity", [dt]) for dt in IDENTITY_DATATYPES),
            declared("id_BF16", "identity_bf16", ["BF16"]),
            declared("multi", "identity", MULTI)]


ROUTES = {"http": ("http", True), "grpc": ("grpc", False), "http-json": ("http", False)}


@pytest.fixture(scope="module", params=["http", "grpc"])
def gw(request, triton_server):
    """The gateway in front of Triton over HTTP (binary extension) or gRPC (raw contents)."""
    protocol, binary = ROUTES[request.param]
    url = triton_server.http_url if protocol == "http" else triton_server.grpc_address
    with running_gateway(config_for(*models(url, protocol, binary))) as running:
        yield running


@pytest.fixture(scope="module")
def json_gw(triton_server):
    """The gateway in front of Triton over HTTP in JSON mode (binary_data = false)."""
    with running_gateway(config_for(*models(triton_server.http_url, "http", False))) as running:
        yield running


def to_client(array: np.ndarray, datatype: str) -> np.ndarray:
    """What a tritonclient user holds: BF16 as ml_dtypes.bfloat16, the rest as is."""
    return array.view(ml_dtypes.bfloat16) if datatype == "BF16" else array


def from_client(array: np.ndarray, datatype: str) -> np.ndarray:
    return array.view(np.uint16) if datatype == "BF16" else array


def infer_http(gw, model: str, sent: dict[str, tuple[str, np.ndarray]], outputs: list[str] | None = None,
               version: str = "") -> triton_http.InferResult:
    client = triton_http.InferenceServerClient(gw.http_url.removeprefix("http://"))
    try:
        inputs = []
        for name, (datatype, array) in sent.items():
            item = triton_http.InferInput(name, list(array.shape), datatype)
            item.set_data_from_numpy(to_client(array, datatype), binary_data=True)
            inputs.append(item)
        wanted = [triton_http.InferRequestedOutput(name, binary_data=True) for name in outputs] if outputs else None
        return client.infer(model, inputs, outputs=wanted, model_version=version)
    finally:
        client.close()


def infer_grpc(gw, model: str, sent: dict[str, tuple[str, np.ndarray]], outputs: list[str] | None = None,
               version: str = "") -> triton_grpc.InferResult:
    client = triton_grpc.InferenceServerClient(gw.grpc_address)
    try:
        inputs = []
        for name, (datatype, array) in sent.items():
            item = triton_grpc.InferInput(name, list(array.shape), datatype)
            item.set_data_from_numpy(to_client(array, datatype))
            inputs.append(item)
        wanted = [triton_grpc.InferRequestedOutput(name) for name in outputs] if outputs else None
        return client.infer(model, inputs, outputs=wanted, model_version=version)
    finally:
        client.close()


def infer_json(gw, model: str, sent: dict[str, tuple[str, np.ndarray]], outputs: list[str] | None = None,
               path: str = "") -> tuple[int, dict]:
    document = {"inputs": [{"name": name, "datatype": dt, "shape": list(array.shape), "data": json_data(array, dt)}
                           for name, (dt, array) in sent.items()]}
    if outputs:
        document["outputs"] = [{"name": name} for name in outputs]
    return http_json("POST", f"{gw.http_url}/v2/models/{path or model}/infer", document)


def json_output(entry: dict) -> np.ndarray:
    shape = entry["shape"]
    if entry["datatype"] == "BYTES":
        array = np.empty(len(entry["data"]), dtype=object)
        array[:] = [s.encode() for s in entry["data"]]
        return array.reshape(shape)
    datatype = entry["datatype"]
    dtype = {"BOOL": "bool", "FP16": "float16", "FP32": "float32", "FP64": "float64"}.get(datatype, datatype.lower())
    return np.array(entry["data"], dtype=dtype).reshape(shape)


# -- every datatype, exactly --------------------------------------------------------------

@pytest.mark.parametrize("datatype", DATATYPES)
def test_tritonclient_http_binary_round_trips_every_datatype_exactly(gw, datatype):
    sent = binary_sample(datatype)
    result = infer_http(gw, f"id_{datatype}", {f"INPUT_{datatype}": (datatype, sent)})
    assert_exact(from_client(result.as_numpy(f"OUTPUT_{datatype}"), datatype), sent, datatype)
    assert result.get_response()["parameters"]["batch_id"]


@pytest.mark.parametrize("datatype", DATATYPES)
def test_tritonclient_grpc_round_trips_every_datatype_exactly(gw, datatype):
    sent = binary_sample(datatype)
    result = infer_grpc(gw, f"id_{datatype}", {f"INPUT_{datatype}": (datatype, sent)})
    assert_exact(from_client(result.as_numpy(f"OUTPUT_{datatype}"), datatype), sent, datatype)


@pytest.mark.parametrize("datatype", JSON_DATATYPES)
def test_oip_json_round_trips_every_json_datatype_exactly(gw, datatype):
    sent = json_sample(datatype)
    status, body = infer_json(gw, f"id_{datatype}", {f"INPUT_{datatype}": (datatype, sent)})
    assert status == 200, body
    (output,) = body["outputs"]
    assert (output["name"], output["datatype"]) == (f"OUTPUT_{datatype}", datatype)
    assert_exact(json_output(output), sent, datatype)


@pytest.mark.parametrize("datatype", JSON_DATATYPES)
def test_v1_instances_round_trip_every_json_datatype_exactly(gw, datatype):
    sent = json_sample(datatype)
    rows = [json_data(row, datatype) for row in sent]
    status, body = http_json("POST", f"{gw.http_url}/v1/models/id_{datatype}:predict", {"instances": rows})
    assert status == 200, body
    assert body["predictions"] == rows


def test_every_datatype_at_once_through_the_model_triton_describes(gw):
    status, metadata = http_json("GET", f"{gw.http_url}/v2/models/identity")
    assert status == 200
    assert [(t["name"], t["datatype"]) for t in metadata["inputs"]] == [
        (f"INPUT_{dt}", dt) for dt in IDENTITY_DATATYPES]
    sent = {f"INPUT_{dt}": (dt, binary_sample(dt)) for dt in IDENTITY_DATATYPES}
    for result in (infer_http(gw, "identity", sent), infer_grpc(gw, "identity", sent)):
        for dt in IDENTITY_DATATYPES:
            assert_exact(result.as_numpy(f"OUTPUT_{dt}"), sent[f"INPUT_{dt}"][1], dt)


def test_bf16_in_json_is_refused_with_a_clear_400(gw):
    document = {"inputs": [{"name": "INPUT_BF16", "datatype": "BF16", "shape": [1, 2], "data": [1.0, 2.0]}]}
    status, body = http_json("POST", f"{gw.http_url}/v2/models/id_BF16/infer", document)
    assert status == 400
    assert "BF16 has no JSON form" in body["error"]
    status, body = http_json("POST", f"{gw.http_url}/v1/models/id_BF16:predict", {"instances": [[1.0, 2.0]]})
    assert status == 400
    assert "BF16 has no JSON form" in body["error"]


def test_bf16_in_typed_grpc_contents_is_refused_with_invalid_argument(gw):
    request = pb.ModelInferRequest(model_name="id_BF16")
    request.inputs.add(name="INPUT_BF16", datatype="BF16", shape=[1, 2]).contents.fp32_contents.extend([1.0, 2.0])
    with grpc.insecure_channel(gw.grpc_address) as channel, pytest.raises(grpc.RpcError) as error:
        pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "BF16 has no typed contents field; send it as raw_input_contents" in error.value.details()


# -- the predictor in JSON mode -------------------------------------------------------------

@pytest.mark.parametrize("datatype", ["BF16", "BYTES", "FP32", "FP64"])
def test_in_json_mode_what_json_cannot_carry_still_reaches_triton_exactly(json_gw, datatype):
    # BF16, non-UTF-8 bytes, NaN and infinities: those tensors travel binary to Triton.
    sent = binary_sample(datatype)
    result = infer_grpc(json_gw, f"id_{datatype}", {f"INPUT_{datatype}": (datatype, sent)})
    assert_exact(from_client(result.as_numpy(f"OUTPUT_{datatype}"), datatype), sent, datatype)


def test_in_json_mode_fp16_is_refused_by_triton_itself(json_gw):
    # Triton takes no FP16 in JSON ("use the binary data format"): the gateway passes its 400 on.
    status, body = infer_json(json_gw, "id_FP16", {"INPUT_FP16": ("FP16", json_sample("FP16"))})
    assert status == 400
    assert "FP16" in body["error"] and "rejected" in body["error"]


# -- several inputs and outputs, requested outputs, versions -------------------------------

def multi_inputs(rows: int = 3) -> dict[str, tuple[str, np.ndarray]]:
    return {f"INPUT_{dt}": (dt, json_sample(dt, rows)) for dt in MULTI}


def test_several_inputs_and_outputs(gw):
    sent = multi_inputs()
    status, body = infer_json(gw, "multi", sent)
    assert status == 200, body
    # No outputs requested: all of them, in the order the predictor answers them.
    assert sorted(o["name"] for o in body["outputs"]) == sorted(f"OUTPUT_{dt}" for dt in MULTI)
    for output in body["outputs"]:
        assert_exact(json_output(output), sent[output["name"].replace("OUTPUT", "INPUT")][1], output["name"])


@pytest.mark.parametrize("client", ["oip_json", "tritonclient.http", "tritonclient.grpc"])
def test_requested_outputs_only_those_in_the_requested_order(gw, client):
    sent = multi_inputs()
    wanted = ["OUTPUT_BYTES", "OUTPUT_FP32"]
    if client == "oip_json":
        status, body = infer_json(gw, "multi", sent, outputs=wanted)
        assert status == 200, body
        names = [o["name"] for o in body["outputs"]]
        arrays = {o["name"]: json_output(o) for o in body["outputs"]}
    else:
        result = (infer_http if client == "tritonclient.http" else infer_grpc)(gw, "multi", sent, outputs=wanted)
        response = result.get_response()
        names = [o["name"] for o in response["outputs"]] if isinstance(response, dict) else [
            o.name for o in response.outputs]
        arrays = {name: result.as_numpy(name) for name in names}
    assert names == wanted
    for name in wanted:
        assert_exact(arrays[name], sent[name.replace("OUTPUT", "INPUT")][1], name)


def test_an_unknown_requested_output_is_a_400_and_invalid_argument(gw):
    status, body = infer_json(gw, "multi", multi_inputs(), outputs=["OUTPUT_FP32", "NOPE"])
    assert status == 400
    assert "no output named NOPE" in body["error"]
    with pytest.raises(InferenceServerException) as error:
        infer_grpc(gw, "multi", multi_inputs(), outputs=["NOPE"])
    assert error.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "NOPE" in error.value.message()


def test_v1_instances_of_a_model_with_several_inputs_are_objects(gw):
    sent = multi_inputs(2)
    instances = [{name: json_data(array[i], dt) for name, (dt, array) in sent.items()} for i in range(2)]
    status, body = http_json("POST", f"{gw.http_url}/v1/models/multi:predict", {"instances": instances})
    assert status == 200, body
    assert body["predictions"] == [{k.replace("INPUT", "OUTPUT"): v for k, v in instance.items()}
                                   for instance in instances]


def test_a_missing_input_is_a_400(gw):
    sent = multi_inputs()
    del sent["INPUT_INT64"]
    status, body = infer_json(gw, "multi", sent)
    assert status == 400
    assert "INPUT_INT64" in body["error"]


def test_version_paths_serve_the_version_triton_has_and_404_others(gw):
    sent = multi_inputs()
    status, body = infer_json(gw, "multi", sent, path="multi/versions/1")
    assert status == 200, body
    assert body["model_version"] == "1"
    assert http_json("GET", f"{gw.http_url}/v2/models/multi/versions/1")[1]["versions"] == ["1"]
    assert http_json("GET", f"{gw.http_url}/v2/models/multi/versions/1/ready")[0] == 200
    status, body = infer_json(gw, "multi", sent, path="multi/versions/2")
    assert status == 404
    assert "no version '2'" in body["error"]
    assert http_json("GET", f"{gw.http_url}/v2/models/multi/versions/2")[0] == 404
    result = infer_grpc(gw, "multi", sent, version="1")
    assert_exact(result.as_numpy("OUTPUT_INT64"), sent["INPUT_INT64"][1], "INT64")
    assert infer_http(gw, "multi", sent, version="1").get_response()["model_version"] == "1"
    with pytest.raises(InferenceServerException) as error:
        infer_grpc(gw, "multi", sent, version="2")
    assert error.value.status() == "StatusCode.NOT_FOUND"
    status, _, _ = http("POST", f"{gw.http_url}/v2/models/multi/versions/2/infer", orjson.dumps({"inputs": []}))
    assert status == 404  # an unknown version is a 404 whatever the body
