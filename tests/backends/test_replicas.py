"""Several replicas of one model: batches go to the replica with the fewest in flight; an
unreachable replica is taken out (its batch retried elsewhere) and put back when it answers."""
from __future__ import annotations

import concurrent.futures

import pytest

from gateway import config as gateway_config
from tests.harness import config_for, http_json, running_gateway, scraped, wait_for
from tests.processes import simulated_predictor

SIGNATURE = {"inputs": [{"name": "INPUT0", "datatype": "FP32"}], "outputs": [{"name": "OUTPUT0", "datatype": "FP32"}]}


def calls(predictor) -> int:
    return http_json("GET", f"http://127.0.0.1:{predictor.fields['http']}/stats")[1]["calls"]


def in_rotation(gw) -> float:
    return scraped(gw.http_url, "gateway_replicas_in_rotation", "demo")


def burst(gw, count: int) -> list[int]:
    def one(i):
        status, body = http_json("POST", f"{gw.http_url}/v1/models/demo:predict", {"instances": [[i]]})
        assert status != 200 or body["predictions"] == [[2 * i]]
        return status
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        return list(pool.map(one, range(count)))


def test_replicas_share_the_load_survive_a_crash_and_come_back():
    first, second = simulated_predictor("--call-ms", "30"), simulated_predictor("--call-ms", "30")
    restarted = None
    try:
        model = {"name": "demo", "backend": "kserve", "api": "v1", **SIGNATURE,
                 "url": [f"http://127.0.0.1:{p.fields['http']}" for p in (first, second)],
                 "batching": {"max_inflight": 2, "max_batch_size": 4}}
        with running_gateway(config_for(model)) as gw:
            assert set(burst(gw, 64)) == {200}
            assert calls(first) > 0 and calls(second) > 0  # least-in-flight spreads the batches

            first.kill()
            assert set(burst(gw, 32)) == {200}  # batches sent to the dead replica were retried
            before = calls(second)
            assert set(burst(gw, 32)) == {200}
            assert calls(second) > before
            # The dead one is out (tried first: both idle, the first listed wins).
            assert in_rotation(gw) == 1

            restarted = simulated_predictor("--call-ms", "30", http_port=int(first.fields["http"]),
                                            grpc_port=int(first.fields["grpc"]))
            # The background probe puts it back once its readiness check passes.
            wait_for(lambda: in_rotation(gw) == 2, "the probe to put the restarted replica back in rotation")
            assert set(burst(gw, 64)) == {200}
            assert calls(restarted) > 0
    finally:
        for predictor in (first, second, restarted):
            if predictor is not None:
                predictor.stop()


def test_url_may_list_replicas():
    parsed = gateway_config.parse({"models": [{"name": "m", "backend": "triton", "protocol": "grpc",
                                               "url": ["127.0.0.1:1", "127.0.0.1:2"]}]})
    assert parsed.models[0].predictor.addresses == ("127.0.0.1:1", "127.0.0.1:2")
    with pytest.raises(gateway_config.ConfigError, match="same replica twice"):
        gateway_config.parse({"models": [{"name": "m", "backend": "triton", "protocol": "grpc",
                                          "url": ["127.0.0.1:1", "127.0.0.1:1"]}]})
    with pytest.raises(gateway_config.ConfigError, match="http://"):
        gateway_config.parse({"models": [{"name": "m", "backend": "kserve", "url": ["http://a:1", "b:2"]}]})
