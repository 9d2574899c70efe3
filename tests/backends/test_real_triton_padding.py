"""Variable-length inputs through the gateway to the REAL Triton (its own batching off).

Two Python-backend models are loaded into the session's Triton through its
model-repository API, as they would be written for padded batches:

* ``seq_tokens`` (per token): TOKENS FP32 [-1, -1] and LENGTH INT32 [-1, 1]; HIDDEN FP32
  [-1, -1, 2], each real position t of a row being [2 x token, mean of the row's real
  tokens]: the answer depends on the real length, read from LENGTH.
* ``seq_pooled`` (pooled): TOKENS FP32 [-1, -1] and MASK INT32 [-1, -1]; POOLED FP32 [-1, 2]
  = [sum, count] of the tokens where MASK is 1: it depends on the mask.

The gateway pads with -1, so a model that ignored LENGTH or MASK would answer differently.
Each answer through the gateway, under concurrency, is compared EXACTLY with Triton's own
answer to that request sent alone, with no padding.
"""
from __future__ import annotations

import concurrent.futures
import contextlib

import grpc
import numpy as np
import pytest
import tritonclient.http as triton_http

from tests.harness import config_for, http_json, running_gateway
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc

TOKENS_CODE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS").as_numpy()
            lengths = pb_utils.get_input_tensor_by_name(request, "LENGTH").as_numpy()[:, 0]
            hidden = np.full(tokens.shape + (2,), 99.0, dtype=np.float32)  # beyond a row's length: anything
            for row, n in enumerate(lengths):
                real = tokens[row, :n]
                hidden[row, :n, 0] = real * 2
                hidden[row, :n, 1] = real.mean(dtype=np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("HIDDEN", hidden)]))
        return responses
"""
POOLED_CODE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS").as_numpy()
            mask = pb_utils.get_input_tensor_by_name(request, "MASK").as_numpy()
            pooled = np.array([[tokens[row][mask[row] == 1].sum(dtype=np.float32), mask[row].sum()]
                               for row in range(len(tokens))], dtype=np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("POOLED", pooled)]))
        return responses
"""
MODELS = {
    "seq_tokens": (TOKENS_CODE, {
        "input": [{"name": "TOKENS", "data_type": "TYPE_FP32", "dims": [-1]},
                  {"name": "LENGTH", "data_type": "TYPE_INT32", "dims": [1]}],
        "output": [{"name": "HIDDEN", "data_type": "TYPE_FP32", "dims": [-1, 2]}]}),
    "seq_pooled": (POOLED_CODE, {
        "input": [{"name": "TOKENS", "data_type": "TYPE_FP32", "dims": [-1]},
                  {"name": "MASK", "data_type": "TYPE_INT32", "dims": [-1]}],
        "output": [{"name": "POOLED", "data_type": "TYPE_FP32", "dims": [2]}]}),
}
TOKENS_INPUT = {"name": "TOKENS", "datatype": "FP32", "shape": [-1, -1], "pad": {"dim": 1, "value": -1.0}}
SIGNATURES = {
    "seq_tokens": {"inputs": [TOKENS_INPUT, {"name": "LENGTH", "datatype": "INT32", "shape": [-1, 1], "generate": "length"}],
                   "outputs": [{"name": "HIDDEN", "datatype": "FP32", "shape": [-1, -1, 2], "follows_pad": 1}]},
    "seq_pooled": {"inputs": [TOKENS_INPUT, {"name": "MASK", "datatype": "INT32", "shape": [-1, -1], "generate": "mask"}],
                   "outputs": [{"name": "POOLED", "datatype": "FP32", "shape": [-1, 2]}]},
}
OUTPUT = {"seq_tokens": "HIDDEN", "seq_pooled": "POOLED"}


@pytest.fixture(scope="module")
def sequence_models(triton_server):
    """Load the two models into the session's Triton; unload them afterwards."""
    with contextlib.ExitStack() as loaded:
        for name, (code, tensors) in MODELS.items():
            loaded.enter_context(triton_server.loaded({"name": name, "backend": "python", "max_batch_size": 64,
                                                       "instance_group": [{"kind": "KIND_CPU", "count": 1}],
                                                       **tensors}, code))
        yield triton_server


def alone(triton_server, model: str, tokens: np.ndarray) -> np.ndarray:
    """Triton's own answer to one request sent straight to it, unpadded."""
    client = triton_http.InferenceServerClient(triton_server.http_url.removeprefix("http://"))
    rows, length = tokens.shape
    extra = (np.full((rows, 1), length, np.int32) if model == "seq_tokens" else np.ones((rows, length), np.int32))
    inputs = []
    for name, data in (("TOKENS", tokens), ("LENGTH" if model == "seq_tokens" else "MASK", extra)):
        tensor = triton_http.InferInput(name, list(data.shape), "FP32" if data.dtype == np.float32 else "INT32")
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    try:
        return client.infer(model, inputs).as_numpy(OUTPUT[model])
    finally:
        client.close()


def gateway_model(triton_server, model: str, protocol: str, **batching) -> dict:
    url = triton_server.http_url if protocol == "http" else triton_server.grpc_address
    return {"name": model, "backend": "triton", "protocol": protocol, "url": url, **SIGNATURES[model],
            "batching": {"max_batch_size": 16, "max_latency_ms": 20, **batching}}


def request_tokens(i: int, rng: np.random.Generator) -> np.ndarray:
    rows, length = int(rng.integers(1, 4)), int(rng.integers(1, 40))
    return (rng.standard_normal((rows, length)) * 10 + i).astype(np.float32)


def via_oip_json(gw, model: str, tokens: np.ndarray) -> np.ndarray:
    body = {"inputs": [{"name": "TOKENS", "datatype": "FP32", "shape": list(tokens.shape),
                        "data": tokens.ravel().tolist()}]}
    status, answer = http_json("POST", f"{gw.http_url}/v2/models/{model}/infer", body)
    assert status == 200, answer
    output = answer["outputs"][0]
    return np.array(output["data"], np.float32).reshape(output["shape"])


def via_grpc(gw, model: str, tokens: np.ndarray) -> np.ndarray:
    with grpc.insecure_channel(gw.grpc_address) as channel:
        request = pb.ModelInferRequest(model_name=model)
        request.inputs.add(name="TOKENS", datatype="FP32", shape=list(tokens.shape))
        request.raw_input_contents.append(tokens.tobytes())
        response = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)
    return np.frombuffer(response.raw_output_contents[0], np.float32).reshape(response.outputs[0].shape)


def via_v1(gw, model: str, tokens: np.ndarray) -> np.ndarray:
    status, answer = http_json("POST", f"{gw.http_url}/v1/models/{model}:predict", {"instances": tokens.tolist()})
    assert status == 200, answer
    return np.array(answer["predictions"], np.float32)


CLIENTS = [via_oip_json, via_grpc, via_v1]


@pytest.mark.parametrize("model", ["seq_tokens", "seq_pooled"])
@pytest.mark.parametrize("protocol, batching", [("grpc", {}), ("http", {"buckets": [8, 16, 24, 32, 40]}),
                                                ("grpc", {"buckets": [16, 40], "max_batch_cost": 120})])
def test_every_answer_equals_tritons_answer_for_that_request_alone(sequence_models, model, protocol, batching):
    rng = np.random.default_rng(7)
    sent = [request_tokens(i, rng) for i in range(36)]
    with running_gateway(config_for(gateway_model(sequence_models, model, protocol, **batching))) as gw:
        executions = sequence_models.execution_count(model)
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(lambda i: CLIENTS[i % 3](gw, model, sent[i]), range(len(sent))))
        stats = gw.stats(model)
        executed = sequence_models.executions_reaching(executions + stats.batches, model) - executions
    assert executed == stats.batches < len(sent), "requests of different lengths were not merged"
    for tokens, answer in zip(sent, answers, strict=True):
        np.testing.assert_array_equal(answer, alone(sequence_models, model, tokens))
    assert stats.real_elements == sum(t.size for t in sent)
    assert stats.padded_elements >= stats.real_elements
    if "max_batch_cost" in batching:
        assert stats.batch_cost.count == stats.batches and stats.batch_cost.sum <= 120 * stats.batches


@pytest.mark.parametrize("model", ["seq_tokens", "seq_pooled"])
def test_ragged_v1_instances_each_get_their_own_rows_answer(sequence_models, model):
    instances = [[1.5, 2.0, 3.25], [4.0], [5.0, 6.5, 7.0, 8.0, 9.5], [10.0, 11.0]]
    with running_gateway(config_for(gateway_model(sequence_models, model, "grpc", buckets=[4, 8]))) as gw:
        status, answer = http_json("POST", f"{gw.http_url}/v1/models/{model}:predict", {"instances": instances})
    assert status == 200, answer
    for row, prediction in zip(instances, answer["predictions"], strict=True):
        expected = alone(sequence_models, model, np.array([row], np.float32))[0]
        np.testing.assert_array_equal(np.array(prediction, np.float32), expected)
    if model == "seq_tokens":
        assert [len(p) for p in answer["predictions"]] == [3, 1, 5, 2]  # per token, cut back per instance


def test_bad_inputs_get_clear_errors_and_the_gateway_keeps_serving(sequence_models):
    model = gateway_model(sequence_models, "seq_tokens", "grpc", buckets=[8, 16], max_batch_cost=64)
    with running_gateway(config_for(model)) as gw:
        def infer(tokens: list[list[float]], extra: dict | None = None) -> tuple[int, dict]:
            inputs = [{"name": "TOKENS", "datatype": "FP32", "shape": [len(tokens), len(tokens[0])],
                       "data": [x for row in tokens for x in row]}]
            return http_json("POST", f"{gw.http_url}/v2/models/seq_tokens/infer", {"inputs": inputs + ([extra] if extra else [])})

        status, body = infer([[1.0] * 17])
        assert (status, body["error"]) == (400, "length 17 is beyond the largest bucket, 16 (batching.buckets): send at most 16")
        status, body = infer([[1.0] * 16] * 5)  # 5 rows x 16 > 64: split into parts of 4 rows, answered whole
        assert status == 200 and body["outputs"][0]["shape"] == [5, 16, 2]
        status, body = infer([[1.0]], {"name": "LENGTH", "datatype": "INT32", "shape": [1, 1], "data": [1]})
        assert status == 400 and "takes inputs ['TOKENS']" in body["error"]
        with grpc.insecure_channel(gw.grpc_address) as channel:
            request = pb.ModelInferRequest(model_name="seq_tokens")
            request.inputs.add(name="TOKENS", datatype="FP32", shape=[1, 20])
            request.raw_input_contents.append(np.ones((1, 20), np.float32).tobytes())
            with pytest.raises(grpc.RpcError) as error:
                pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "beyond the largest bucket" in error.value.details()
        status, body = http_json("POST", f"{gw.http_url}/v1/models/seq_tokens:predict",
                                 {"instances": [[[1.0], [2.0]], [[1.0, 2.0]]]})
        assert status == 400 and "instances have shape [2, 1] but the model expects [-1]" in body["error"]
        np.testing.assert_array_equal(via_oip_json(gw, "seq_tokens", np.ones((1, 3), np.float32)),
                                      alone(sequence_models, "seq_tokens", np.ones((1, 3), np.float32)))


def test_ragged_instances_for_a_dimension_not_declared_variable_are_refused(triton_server):
    model = {"name": "double", "backend": "triton", "protocol": "grpc", "url": triton_server.grpc_address,
             "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, -1]}],
             "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, -1]}]}
    with running_gateway(config_for(model)) as gw:
        status, body = http_json("POST", f"{gw.http_url}/v1/models/double:predict", {"instances": [[1, 2], [3]]})
        assert status == 400
        assert "no dimension of 'INPUT0' is declared variable (pad = { dim = 1, value = 0 }" in body["error"]
        assert http_json("POST", f"{gw.http_url}/v1/models/double:predict", {"instances": [[1, 2]]})[1]["predictions"] \
            == [[2.0, 4.0]]
