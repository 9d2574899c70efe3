"""Several replicas of one model: batches go to the replica with the fewest in flight; an
unreachable replica is taken out (its batch retried elsewhere) and put back when it answers;
replicas come and go (found by a resolver, or listed anew by a reload) without a batch lost."""
from __future__ import annotations

import asyncio
import concurrent.futures

import numpy as np
import pytest

from backends.oip_http import OipHttpBackend
from backends.replicas import ReplicaSet
from gateway import config as gateway_config
from tests.harness import config_for, http_json, running_gateway, scraped, wait_for
from tests.processes import predictor_calls, simulated_predictor
from tools.processes import free_port
from wire.tensors import Tensor

SIGNATURE = {"inputs": [{"name": "INPUT0", "datatype": "FP32"}], "outputs": [{"name": "OUTPUT0", "datatype": "FP32"}]}




def in_rotation(gw) -> float:
    return scraped(gw.http_url, "gateway_replicas_in_rotation", "demo")


def inflight_limit(gw) -> float:
    return scraped(gw.http_url, "gateway_batches_in_flight_limit", "demo")


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
            assert predictor_calls(first) > 0 and predictor_calls(second) > 0  # least-in-flight spreads the batches
            assert inflight_limit(gw) == 4  # max_inflight is per replica in rotation

            first.kill()
            assert set(burst(gw, 32)) == {200}  # batches sent to the dead replica were retried
            before = predictor_calls(second)
            assert set(burst(gw, 32)) == {200}
            assert predictor_calls(second) > before
            # The dead one is out (tried first: both idle, the first listed wins).
            assert in_rotation(gw) == 1
            assert inflight_limit(gw) == 2  # its slots left with it

            restarted = simulated_predictor("--call-ms", "30", http_port=int(first.fields["http"]),
                                            grpc_port=int(first.fields["grpc"]))
            # The background probe puts it back once its readiness check passes.
            wait_for(lambda: in_rotation(gw) == 2, "the probe to put the restarted replica back in rotation")
            assert set(burst(gw, 64)) == {200}
            assert predictor_calls(restarted) > 0
    finally:
        for predictor in (first, second, restarted):
            if predictor is not None:
                predictor.stop()


def url(predictor_or_port) -> str:
    port = predictor_or_port if isinstance(predictor_or_port, int) else predictor_or_port.fields["http"]
    return f"http://127.0.0.1:{port}"


def batch(value: float) -> list[Tensor]:
    return [Tensor("INPUT0", "FP32", np.full((2, 1), value, dtype=np.float32))]


async def answered(replicas: ReplicaSet, value: float) -> bool:
    outputs = await replicas.infer(batch(value))
    return bool(np.array_equal(outputs[0].data, np.full((2, 1), 2 * value, dtype=np.float32)))


async def test_replicas_a_resolver_finds_join_once_ready_and_those_it_no_longer_finds_drain_and_leave():
    """The resolver is the test's own list, as DNS would answer for a headless Service."""
    listed: list[str] = []

    async def resolve() -> list[str]:
        return list(listed)

    first = simulated_predictor("--call-ms", "150")
    late_port = free_port()
    late = None
    replicas = ReplicaSet(lambda address: OipHttpBackend(address, "demo"), resolve=resolve, refresh_s=0.05,
                          probe_interval_s=0.05, seed=url(first))
    try:
        listed.append(url(first))
        await replicas.start()
        assert replicas.addresses() == [url(first)] and replicas.in_rotation() == 1

        # Listed before it is up: it does not join, and no batch goes to it or fails for it.
        listed.append(url(late_port))
        await wait_async(lambda: len(replicas.addresses()) == 2, "the resolver's new address to be taken")
        assert replicas.in_rotation() == 1
        assert all(await asyncio.gather(*(answered(replicas, i) for i in range(12))))
        assert predictor_calls(first) == 12

        # Up: its readiness check passes and it joins; batches reach it.
        late = simulated_predictor("--call-ms", "150", http_port=late_port)
        await wait_async(lambda: replicas.in_rotation() == 2, "the new replica to pass its readiness check")
        assert all(await asyncio.gather(*(answered(replicas, i) for i in range(12))))
        assert predictor_calls(late) > 0

        # No longer found while a batch is at it: it leaves the rotation, that batch is answered, no new one reaches it.
        slow = asyncio.ensure_future(asyncio.gather(*(answered(replicas, i) for i in range(2))))  # one at each
        await wait_async(lambda: all(r.inflight for r in replicas.replicas), "a batch at each replica")
        listed.remove(url(late_port))
        await wait_async(lambda: replicas.in_rotation() == 1, "the vanished replica to leave the rotation")
        assert all(await slow)
        late_calls = predictor_calls(late)
        assert all(await asyncio.gather(*(answered(replicas, i) for i in range(12))))
        assert predictor_calls(late) == late_calls
        assert replicas.addresses() == [url(first)] and len(replicas.replicas) == 1  # closed once its batch returned

        # A resolver that fails, or finds nothing, keeps the replicas there are.
        listed.clear()
        await asyncio.sleep(0.2)
        assert replicas.addresses() == [url(first)] and await answered(replicas, 7.0)
    finally:
        await replicas.close()
        for predictor in (first, late):
            if predictor is not None:
                predictor.stop()


async def wait_async(condition, what: str, timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def test_url_may_list_replicas():
    parsed = gateway_config.parse({"models": [{"name": "m", "backend": "triton", "protocol": "grpc",
                                               "url": ["127.0.0.1:1", "127.0.0.1:2"]}]})
    assert parsed.models[0].predictor.addresses == ("127.0.0.1:1", "127.0.0.1:2")
    with pytest.raises(gateway_config.ConfigError, match="same replica twice"):
        gateway_config.parse({"models": [{"name": "m", "backend": "triton", "protocol": "grpc",
                                          "url": ["127.0.0.1:1", "127.0.0.1:1"]}]})
    with pytest.raises(gateway_config.ConfigError, match="http://"):
        gateway_config.parse({"models": [{"name": "m", "backend": "kserve", "url": ["http://a:1", "b:2"]}]})
