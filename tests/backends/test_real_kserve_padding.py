"""Variable-length inputs through the gateway to the REAL KServe model server, unmodified:
its model ``double`` (OUTPUT0 = 2 x INPUT0, any [rows, n]) over v2 REST, v2 gRPC, and v1
(where the padded batch travels as instances). KServe's call log shows requests of
different lengths merged; each answer equals KServe's answer for that request alone."""
from __future__ import annotations

import concurrent.futures

import numpy as np
import pytest

from tests.harness import config_for, http_json, running_gateway
from tests.predictors.harness import http_post_json

SIGNATURE = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, -1], "pad": {"dim": 1, "value": 0}}],
             "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, -1], "follows_pad": 1}]}


def alone(kserve_server, rows: np.ndarray) -> np.ndarray:
    """KServe's own answer to one request sent straight to it (v2 REST)."""
    body = {"id": "alone", "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": list(rows.shape),
                                       "data": rows.ravel().tolist()}]}
    status, answer = http_post_json(f"{kserve_server.http_url}/v2/models/double/infer", body)
    assert status == 200, answer
    return np.array(answer["outputs"][0]["data"], np.float32).reshape(answer["outputs"][0]["shape"])


@pytest.mark.parametrize("protocol, api", [("http", "v2"), ("grpc", "v2"), ("http", "v1")])
def test_requests_of_different_lengths_share_kserve_calls_and_get_exactly_their_answer(kserve_server, protocol, api):
    url = kserve_server.http_url if protocol == "http" else kserve_server.grpc_address
    model = {"name": "double", "backend": "kserve", "protocol": protocol, "url": url, "api": api, **SIGNATURE,
             "batching": {"max_batch_size": 16, "max_latency_ms": 20, "buckets": [4, 8, 16, 32]}}
    rng = np.random.default_rng(3)
    sent = [rng.uniform(-100, 100, (int(rng.integers(1, 3)), int(rng.integers(1, 30)))).astype(np.float32)
            for _ in range(30)]

    def client(rows: np.ndarray) -> np.ndarray:
        body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": list(rows.shape), "data": rows.ravel().tolist()}]}
        status, answer = http_json("POST", f"{gw.http_url}/v2/models/double/infer", body)
        assert status == 200, answer
        return np.array(answer["outputs"][0]["data"], np.float32).reshape(answer["outputs"][0]["shape"])

    with running_gateway(config_for(model)) as gw:
        before = len(kserve_server.calls())
        with concurrent.futures.ThreadPoolExecutor(10) as pool:
            answers = list(pool.map(client, sent))
        calls = kserve_server.calls()[before:]
        stats = gw.stats("double")
    assert len(calls) == stats.batches < len(sent), "requests of different lengths were not merged"
    assert {call["protocol"] for call in calls} == {api}
    for rows, answer in zip(sent, answers, strict=True):
        np.testing.assert_array_equal(answer, alone(kserve_server, rows))
    assert stats.real_elements == sum(rows.size for rows in sent)


def test_ragged_v1_instances_reach_a_v1_predictor_padded_and_come_back_at_their_own_lengths(kserve_server):
    model = {"name": "double", "backend": "kserve", "protocol": "http", "url": kserve_server.http_url, "api": "v1",
             **SIGNATURE}
    with running_gateway(config_for(model)) as gw:
        status, answer = http_json("POST", f"{gw.http_url}/v1/models/double:predict",
                                   {"instances": [[1.5, 2.0, 3.0], [4.0], [5.0, 6.0]]})
    assert status == 200, answer
    assert answer["predictions"] == [[3.0, 4.0, 6.0], [8.0], [10.0, 12.0]]
