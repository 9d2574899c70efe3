"""The gateway in front of the REAL KServe model server over v1 HTTP, v2 HTTP and v2 gRPC.
KServe's own call log (one line per predict call) shows concurrent clients merged."""
from __future__ import annotations

import threading
import time

import pytest

from tests.backends.clients import fire_mixed
from tests.harness import config_for, http_json, run_clients, running_gateway, timed_predict, wait_for
from tests.predictors.harness import KServeServer
from tools.predictor_envs import ensure_env

N = 60
ROW = [1.0, 2.0, 3.0, 4.0]
SIGNATURE = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]}],
             "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, 4]}]}


@pytest.mark.parametrize("protocol, api", [("http", "v1"), ("http", "v2"), ("grpc", "v2")])
def test_concurrent_clients_of_both_protocols_become_fewer_kserve_calls(kserve_server, protocol, api):
    url = kserve_server.http_url if protocol == "http" else kserve_server.grpc_address
    model = {"name": "double", "backend": "kserve", "protocol": protocol, "url": url, "api": api, **SIGNATURE}
    with running_gateway(config_for(model)) as gw:
        before = len(kserve_server.calls())
        batch_ids = fire_mixed(gw.http_url, gw.grpc_address, "double", N)
        calls = kserve_server.calls()[before:]
        assert sum(call["batch_size"] for call in calls) == N  # every row reached KServe once
        assert len(calls) < N, "requests were not merged"
        assert {call["protocol"] for call in calls} == {api}
        assert len(calls) == gw.stats("double").batches == len(set(batch_ids))


def test_kserve_v1_opaque_instances_pass_through_untouched(kserve_server):
    # No signature declared: v1 instances travel to the v1 predictor as they are.
    model = {"name": "double", "backend": "kserve", "protocol": "http", "url": kserve_server.http_url}
    with running_gateway(config_for(model)) as gw:
        status, body = http_json("POST", f"{gw.http_url}/v1/models/double:predict", {"instances": [[1, 2], [3, 4, 5]]})
        assert status == 200
        assert body["predictions"] == [[2, 4], [6, 8, 10]]


def test_kserve_rejecting_a_batch_is_a_400_not_a_200(kserve_server):
    model = {"name": "double", "backend": "kserve", "protocol": "http", "url": kserve_server.http_url}
    with running_gateway(config_for(model)) as gw:
        status, body = http_json("POST", f"{gw.http_url}/v1/models/double:predict", {"instances": ["not a number"]})
        assert status == 400
        assert "rejected" in body["error"]


@pytest.mark.parametrize("protocol, api", [("http", "v1"), ("grpc", "v2")])
def test_kserve_killed_mid_load_then_restarted(tmp_path, protocol, api):
    """A real predictor process dies under load and comes back on the same ports: every
    client gets an answer within its deadline, and the gateway recovers by itself."""
    python = ensure_env("kserve")
    server = KServeServer.start(python, tmp_path / "first")
    restarted = None
    try:
        url = server.http_url if protocol == "http" else server.grpc_address
        model = {"name": "double", "backend": "kserve", "protocol": protocol, "url": url, "api": api,
                 **SIGNATURE, "batching": {"timeout_s": 3}}
        with running_gateway(config_for(model)) as gw:
            def outage():
                nonlocal restarted
                time.sleep(0.5)
                server.process.kill_group()
                restarted = KServeServer.start(python, tmp_path / "second",
                                               http_port=server.http_port, grpc_port=server.grpc_port)

            chaos = threading.Thread(target=outage)
            chaos.start()
            results = run_clients(gw, seconds=6.0, model="double", row=ROW)
            chaos.join(timeout=120)
            assert not chaos.is_alive() and restarted is not None, "KServe was not restarted"
            statuses = {status for status, _, _ in results}
            assert statuses <= {200, 502, 503, 504}, statuses
            assert statuses - {200}, "the outage was not seen"
            assert max(elapsed for _, elapsed, _ in results) < 3 + 1.5
            # Recovered by itself, however long KServe took to start again and the gateway to
            # reconnect (gRPC backs off): once one request succeeds, a second of traffic all succeeds.
            wait_for(lambda: timed_predict(gw, "double", ROW)[0] == 200, "a 200 after KServe came back")
            after = run_clients(gw, seconds=1.0, model="double", row=ROW)
            assert after and all(status == 200 for status, _, _ in after), {status for status, _, _ in after}
    finally:
        server.stop()
        if restarted is not None:
            restarted.stop()
