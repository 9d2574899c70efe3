"""docs/from-kserve-batcher.md, worked against the REAL KServe model server: its two gateway
configs parse and serve the batcher's own clients (the page's curl command, unchanged but
for the address), `window` keeps the batcher's semantics (five clients at once leave as one
batch, one KServe call, one batchId), and its InferenceService is the documented one."""
from __future__ import annotations

import concurrent.futures
import shlex
import subprocess
import tomllib

import orjson
import yaml

from gateway import config
from tests.harness import http_json, running_gateway
from tests.readme import block_after, commands_after

GUIDE = "docs/from-kserve-batcher.md"


def gateway_config(marker: str, kserve_url: str) -> config.GatewayConfig:
    document = tomllib.loads(block_after(marker, "toml", GUIDE))
    (model,) = document["models"]
    model["url"] = kserve_url
    model["backend_model"] = "double"  # the test predictor's model; clients still name "torchserve"
    document["server"] = {"http_port": 0, "grpc_port": 0}
    return config.parse(document)


def test_the_before_is_the_batcher_kserve_documents():
    service = yaml.safe_load(block_after("## Before", "yaml", GUIDE))
    assert service["kind"] == "InferenceService"
    assert service["spec"]["predictor"]["batcher"] == {"maxBatchSize": 32, "maxLatency": 500}


def test_the_window_config_keeps_the_batchers_semantics_for_its_clients(kserve_server):
    parsed = gateway_config("**Keeping the batcher's semantics**", kserve_server.http_url)
    batching = parsed.models[0].batching
    assert (batching.policy, batching.max_batch_size, batching.max_latency_s, batching.max_inflight) == \
        ("window", 32, 0.5, 1)
    with running_gateway(parsed) as gw:
        (command,) = commands_after("The clients do not change", GUIDE)
        done = subprocess.run(shlex.split(command.replace("localhost:8080", gw.http_url.removeprefix("http://"))),
                              capture_output=True, text=True, timeout=30, check=True)
        answer = orjson.loads(done.stdout)
        assert answer["predictions"] == [[2.0, 4.0, 6.0, 8.0]] and answer["batchId"]

        before = len(kserve_server.calls())
        url = f"{gw.http_url}/v1/models/torchserve:predict"
        with concurrent.futures.ThreadPoolExecutor(5) as pool:  # five clients within one 500 ms window
            answers = list(pool.map(lambda i: http_json("POST", url, {"instances": [[float(i)]]}), range(5)))
        assert [body["predictions"] for _, body in answers] == [[[2.0 * i]] for i in range(5)]
        assert len({body["batchId"] for _, body in answers}) == 1  # one batch, as the window made it
        calls = kserve_server.calls()[before:]
        assert [call["batch_size"] for call in calls] == [5]


def test_the_adaptive_config_serves_the_same_clients(kserve_server):
    parsed = gateway_config("**What should replace it**", kserve_server.http_url)
    assert parsed.models[0].batching.policy == "adaptive" and parsed.models[0].batching.auto_inflight
    with running_gateway(parsed) as gw:
        status, body = http_json("POST", f"{gw.http_url}/v1/models/torchserve:predict", {"instances": [[1.5, 2.0]]})
        assert status == 200 and body["predictions"] == [[3.0, 4.0]] and body["batchId"]
