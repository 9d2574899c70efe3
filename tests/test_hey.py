"""`hey` (the Debian package, a real unmodified HTTP load generator) against the KServe v1
endpoint of a gateway started as `batching-gateway serve` would be: bounded to 200
requests from 8 workers, every one answered 200 with no errors by hey's own summary, and
the gateway's /metrics show the requests were merged into fewer batches.

tools/run_tests.sh installs hey (`apt-get install -y hey`) when it is missing; this test
fails, never skips, without it."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import http, metric
from tests.processes import gateway

REQUESTS, WORKERS = 200, 8
CONFIG = """
[[models]]
name = "demo"
backend = "simulated"
[models.simulated]
call_ms = 20            # one slot busy 20 ms per batch: 8 concurrent clients pile up behind it
"""


@pytest.mark.parametrize("gateway_workers", [1, 2], ids=["one-process", "workers-2"])
def test_hey_against_the_v1_endpoint_all_200_and_merged(tmp_path, gateway_workers):
    hey = shutil.which("hey")
    assert hey, "hey is not installed: run tools/run_tests.sh (it runs apt-get install -y hey) or install it"
    config = tmp_path / "gateway.toml"
    config.write_text(CONFIG)
    process = gateway(config, workers=gateway_workers)
    try:
        http_url = "http://" + process.fields["http"]
        result = subprocess.run(
            [hey, "-n", str(REQUESTS), "-c", str(WORKERS), "-t", "30", "-m", "POST", "-T", "application/json",
             "-d", '{"instances": [[1, 2, 3, 4]]}', f"{http_url}/v1/models/demo:predict"],
            capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 0, result.stderr
        summary = result.stdout
        codes = {code: int(count) for code, count in re.findall(r"\[(\d{3})\]\s+(\d+) responses", summary)}
        assert codes == {"200": REQUESTS}, summary
        assert "Error distribution" not in summary, summary
        status, _, body = http("GET", f"{http_url}/metrics")
        assert status == 200
        exposition = body.decode()
        assert metric(exposition, "gateway_batched_instances_total", "demo") == REQUESTS
        batches = metric(exposition, "gateway_batches_total", "demo")
        assert batches < REQUESTS / 2, f"{REQUESTS} requests from {WORKERS} workers went out in {batches} batches"
        ok = sum(s.value for f in text_string_to_metric_families(exposition) for s in f.samples
                 if s.name == "gateway_requests_total" and s.labels.get("protocol") == "v1"
                 and s.labels.get("code") == "200")
        assert ok == REQUESTS
    finally:
        assert process.stop() == 0
