"""The gateway in front of the REAL Triton server (tritonserver from nvidia-pytriton, its
own batching off), over HTTP (JSON and binary) and gRPC. Triton's own statistics show
that concurrent clients became fewer model executions."""
from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as triton_grpc

from tests.backends.clients import fire_mixed
from tests.harness import config_for, http_json, running_gateway
from tests.predictors.harness import SMALL_BATCH_CODE, SMALL_BATCH_CONFIG

N = 60


@pytest.mark.parametrize("protocol, binary", [("http", False), ("http", True), ("grpc", False)])
def test_concurrent_clients_of_both_protocols_become_fewer_triton_executions(triton_server, protocol, binary):
    url = triton_server.http_url if protocol == "http" else triton_server.grpc_address
    model = {"name": "double", "backend": "triton", "protocol": protocol, "url": url, "binary_data": binary,
             "batching": {"max_batch_size": 64}}
    with running_gateway(config_for(model)) as gw:
        executions = triton_server.execution_count("double")
        inferences = triton_server.inference_count("double")
        batch_ids = fire_mixed(gw.http_url, gw.grpc_address, "double", N)
        executed = triton_server.executions_reaching(executions + gw.stats("double").batches, "double") - executions
        assert triton_server.inference_count("double") - inferences == N  # every row reached Triton once
        assert executed < N, "requests were not merged"
        assert executed == gw.stats("double").batches
        assert len(set(batch_ids)) == executed


def test_gateway_serves_tritons_metadata_and_readiness(triton_server):
    model = {"name": "double", "backend": "triton", "protocol": "grpc", "url": triton_server.grpc_address}
    with running_gateway(config_for(model)) as gw:
        status, metadata = http_json("GET", f"{gw.http_url}/v2/models/double")
        assert status == 200
        assert metadata["inputs"][0]["name"] == "INPUT0" and metadata["inputs"][0]["datatype"] == "FP32"
        assert metadata["outputs"][0]["name"] == "OUTPUT0"
        assert http_json("GET", f"{gw.http_url}/v2/models/double/ready")[0] == 200


def test_tritonclient_grpc_through_the_gateway_to_triton(triton_server):
    model = {"name": "double", "backend": "triton", "protocol": "grpc", "url": triton_server.grpc_address}
    with running_gateway(config_for(model)) as gw:
        client = triton_grpc.InferenceServerClient(gw.grpc_address)
        data = np.arange(40, dtype=np.float32).reshape(10, 4)
        tensor = triton_grpc.InferInput("INPUT0", [10, 4], "FP32")
        tensor.set_data_from_numpy(data)
        result = client.infer("double", [tensor])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data * 2)
        client.close()


def test_a_request_larger_than_max_batch_size_is_split_and_reassembled(triton_server):
    model = {"name": "double", "backend": "triton", "protocol": "http", "url": triton_server.http_url,
             "batching": {"max_batch_size": 8}}
    with running_gateway(config_for(model)) as gw:
        executions = triton_server.execution_count("double")
        rows = [[float(i), float(i + 1)] for i in range(20)]
        status, body = http_json("POST", f"{gw.http_url}/v1/models/double:predict", {"instances": rows})
        assert status == 200
        assert body["predictions"] == [[2 * a, 2 * b] for a, b in rows]
        assert triton_server.executions_reaching(executions + 3, "double") - executions == 3  # 8 + 8 + 4
        assert len(body["batchId"].split(",")) == 3


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_configuration_of_a_triton_model_is_tritons_own_with_the_gateways_batching(triton_server, protocol):
    url = triton_server.http_url if protocol == "http" else triton_server.grpc_address
    model = {"name": "double", "backend": "triton", "protocol": protocol, "url": url,
             "batching": {"max_batch_size": 8}}
    with running_gateway(config_for(model)) as gw:
        own = http_json("GET", f"{triton_server.http_url}/v2/models/double/config")[1]
        status, config = http_json("GET", f"{gw.http_url}/v2/models/double/config")
    assert status == 200
    assert own["max_batch_size"] == 64 and "dynamic_batching" not in own
    assert config["max_batch_size"] == 8 and "dynamic_batching" in config
    assert config["model_transaction_policy"] == {"decoupled": False}
    assert [(i["name"], i["data_type"], [int(d) for d in i["dims"]]) for i in config["input"]] == \
        [(i["name"], i["data_type"], [int(d) for d in i["dims"]]) for i in own["input"]]
    assert config["backend"] == own["backend"]  # Triton's own fields pass through


def test_triton_parameters_from_clients_never_reach_triton(triton_server):
    """Triton's HTTP endpoint refuses `triton_*` request parameters with 400; tritonclient's
    C++ gRPC client sends one on every request. The gateway keeps them to itself."""
    model = {"name": "double", "backend": "triton", "protocol": "http", "url": triton_server.http_url}
    with running_gateway(config_for(model)) as gw:
        status, body = http_json("POST", f"{gw.http_url}/v2/models/double/infer", {
            "id": "with-params", "parameters": {"triton_enable_empty_final_response": True, "timeout": 5_000_000},
            "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]})
    assert status == 200, body
    assert body["id"] == "with-params" and body["outputs"][0]["data"] == [2, 4]


@pytest.fixture
def small_batch_model(triton_server):
    """Triton serving SMALL_BATCH_CONFIG's model (max_batch_size 4) for one test."""
    with triton_server.loaded(SMALL_BATCH_CONFIG, SMALL_BATCH_CODE) as name:
        yield name


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_an_untuned_gateway_sends_triton_no_more_rows_than_the_model_takes(triton_server, small_batch_model,
                                                                          protocol):
    """No [models.batching] (max_batch_size 32): Triton's max_batch_size 4 caps the batches.
    Triton refuses a larger batch whole (400 "batch-size must be <= 4": what a request of 10
    rows got before the cap), and a request of 10 rows is split to fit, as the gateway's own
    max_batch_size would split it."""
    url = triton_server.http_url if protocol == "http" else triton_server.grpc_address
    model = {"name": "small", "backend": "triton", "protocol": protocol, "url": url,
             "backend_model": small_batch_model}
    with running_gateway(config_for(model)) as gw:
        assert http_json("GET", f"{gw.http_url}/v2/models/small/config")[1]["max_batch_size"] == 4
        rows = [[float(i), float(i + 1)] for i in range(10)]
        status, body = http_json("POST", f"{gw.http_url}/v1/models/small:predict", {"instances": rows})
        assert status == 200, body
        assert body["predictions"] == [[2 * a, 2 * b] for a, b in rows]
        assert len(body["batchId"].split(",")) == 3  # 4 + 4 + 2
        fire_mixed(gw.http_url, gw.grpc_address, "small", 24)  # each client gets its own row back, doubled
        assert gw.stats("small").batches >= 3 + 24 / 4
        # A reload that retunes the model keeps the cap: 16 asked for, 4 taken.
        gw.call(gw.gateway.service.reconfigure(config_for({**model, "batching": {"max_batch_size": 16}}), 1.0))
        assert http_json("GET", f"{gw.http_url}/v2/models/small/config")[1]["max_batch_size"] == 4
        status, body = http_json("POST", f"{gw.http_url}/v1/models/small:predict", {"instances": rows})
        assert status == 200 and len(body["batchId"].split(",")) == 3, body
    assert max(triton_server.batch_size_counts(small_batch_model)) <= 4
    [stats] = triton_server.model_stats(small_batch_model)["model_stats"]
    assert int(stats["inference_stats"]["fail"]["count"]) == 0  # not one batch refused

