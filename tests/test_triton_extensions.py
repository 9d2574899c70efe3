"""Triton's model configuration and statistics extensions (gateway/models/triton.py), read by the
real tritonclient over HTTP and gRPC, as perf_analyzer and Triton users read them."""
from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from tritonclient.utils import InferenceServerException

from tests.harness import config_for, http_json, running_gateway

STATS_KEYS = {"name", "version", "last_inference", "inference_count", "execution_count", "inference_stats",
              "response_stats", "batch_stats", "memory_usage"}
INFERENCE_STATS_KEYS = {"success", "fail", "queue", "compute_input", "compute_infer", "compute_output",
                        "cache_hit", "cache_miss"}


@pytest.fixture(scope="module")
def gw():
    config = config_for({"name": "demo", "backend": "simulated", "batching": {"max_batch_size": 16}},
                        {"name": "other", "backend": "simulated"})
    with running_gateway(config) as running:
        yield running


def infer_http(gw, rows: int) -> None:
    client = triton_http.InferenceServerClient(gw.http_url.removeprefix("http://"))
    tensor = triton_http.InferInput("INPUT0", [rows, 3], "FP32")
    tensor.set_data_from_numpy(np.ones((rows, 3), np.float32))
    client.infer("demo", [tensor])


def test_the_configuration_is_the_gateways_view_of_the_model(gw):
    config = triton_http.InferenceServerClient(gw.http_url.removeprefix("http://")).get_model_config("demo")
    assert config["name"] == "demo"
    assert config["max_batch_size"] == 16  # the gateway's
    assert "dynamic_batching" in config
    assert config["model_transaction_policy"] == {"decoupled": False}
    assert config["input"] == [{"name": "INPUT0", "data_type": "TYPE_FP32", "format": "FORMAT_NONE",
                                "dims": [-1], "optional": False}]  # without the batch dimension
    assert config["output"] == [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}]
    assert http_json("GET", f"{gw.http_url}/v2/models/demo/versions/1/config")[1] == config


def test_grpc_model_config_says_the_same(gw):
    with triton_grpc.InferenceServerClient(gw.grpc_address) as client:
        config = client.get_model_config("demo", as_json=True)["config"]
    assert config["max_batch_size"] == 16
    assert config["input"][0]["name"] == "INPUT0" and config["input"][0]["data_type"] == "TYPE_FP32"
    assert config["input"][0]["dims"] == ["-1"]  # protobuf's JSON spells int64 as strings
    assert "dynamic_batching" in config


def test_statistics_count_rows_batches_and_times_from_the_gateways_counters(gw):
    client = triton_http.InferenceServerClient(gw.http_url.removeprefix("http://"))
    before = client.get_inference_statistics("demo")["model_stats"][0]
    infer_http(gw, 3)
    infer_http(gw, 20)  # split into batches of at most 16
    after = client.get_inference_statistics("demo")["model_stats"][0]
    assert set(after) == STATS_KEYS and set(after["inference_stats"]) == INFERENCE_STATS_KEYS
    assert after["version"].isdigit()
    assert after["inference_count"] - before["inference_count"] == 23
    assert after["execution_count"] == gw.stats("demo").batches
    stats = after["inference_stats"]
    assert stats["success"]["count"] - before["inference_stats"]["success"]["count"] == 2  # requests
    assert stats["queue"]["ns"] > 0 and stats["compute_infer"]["ns"] > 0
    sizes = {entry["batch_size"]: entry["compute_infer"]["count"] for entry in after["batch_stats"]}
    assert max(sizes) <= 16 and sum(size * count for size, count in sizes.items()) == after["inference_count"]
    assert after["last_inference"] > 0


def test_failures_are_counted(gw):
    client = triton_http.InferenceServerClient(gw.http_url.removeprefix("http://"))
    before = client.get_inference_statistics("demo")["model_stats"][0]["inference_stats"]["fail"]["count"]
    status, _ = http_json("POST", f"{gw.http_url}/v2/models/demo/infer", {"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1]}]}, headers={"X-Request-Timeout-Ms": "0.001"})
    assert status == 504
    after = client.get_inference_statistics("demo")["model_stats"][0]["inference_stats"]["fail"]["count"]
    assert after == before + 1


def test_statistics_of_every_model_over_both_protocols(gw):
    status, every = http_json("GET", f"{gw.http_url}/v2/models/stats")
    assert status == 200 and {entry["name"] for entry in every["model_stats"]} == {"demo", "other"}
    with triton_grpc.InferenceServerClient(gw.grpc_address) as client:
        over_grpc = client.get_inference_statistics(as_json=True)
        one = client.get_inference_statistics("other", as_json=True)
    assert {entry["name"] for entry in over_grpc["model_stats"]} == {"demo", "other"}
    assert [entry["name"] for entry in one["model_stats"]] == ["other"]


def test_an_unknown_model_is_404_over_http_and_not_found_over_grpc(gw):
    assert http_json("GET", f"{gw.http_url}/v2/models/nope/config")[0] == 404
    assert http_json("GET", f"{gw.http_url}/v2/models/nope/stats")[0] == 404
    with triton_grpc.InferenceServerClient(gw.grpc_address) as client, \
            pytest.raises(InferenceServerException, match="nope"):
        client.get_model_config("nope")


def test_server_metadata_lists_the_extensions(gw):
    extensions = http_json("GET", f"{gw.http_url}/v2")[1]["extensions"]
    assert {"binary_tensor_data", "model_configuration", "statistics"} <= set(extensions)
