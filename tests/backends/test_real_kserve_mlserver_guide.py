"""docs/from-mlserver.md, worked against the REAL KServe model server over the Open
Inference Protocol: the page's gateway config (MLServer's settings, as the `window` policy)
parses and serves, and its tritonclient snippet, unchanged but for the address, prints
what the page says; a request larger than max_batch_size is split and put back in order."""
from __future__ import annotations

import subprocess
import sys
import tomllib

import numpy as np
import tritonclient.http as httpclient

from gateway import config
from tests.harness import running_gateway
from tests.readme import block_after

GUIDE = "docs/from-mlserver.md"


def test_the_pages_config_and_client_work_as_written(kserve_server):
    document = tomllib.loads(block_after("## After", "toml", GUIDE))
    (model,) = document["models"]
    model["url"] = kserve_server.http_url
    document["server"] = {"http_port": 0, "grpc_port": 0}
    parsed = config.parse(document)
    batching = parsed.models[0].batching
    assert (batching.policy, batching.max_batch_size, batching.max_latency_s) == ("window", 32, 0.5)
    with running_gateway(parsed) as gw:
        address = gw.http_url.removeprefix("http://")
        snippet = block_after("Your OIP clients keep their code", "python", GUIDE).replace("localhost:8080", address)
        done = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "[[2.0, 4.0, 6.0, 8.0], [10.0, 12.0, 14.0, 16.0]]"

        # Rows, not requests: 40 rows are two batches (32 + 8), answered in their order.
        before = len(kserve_server.calls())
        client = httpclient.InferenceServerClient(address)
        rows = np.arange(160, dtype=np.float32).reshape(40, 4)
        tensor = httpclient.InferInput("INPUT0", [40, 4], "FP32")
        tensor.set_data_from_numpy(rows)
        np.testing.assert_array_equal(client.infer("double", [tensor]).as_numpy("OUTPUT0"), 2 * rows)
        assert sorted(call["batch_size"] for call in kserve_server.calls()[before:]) == [8, 32]
