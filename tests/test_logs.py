"""Structured logs: JSON lines, and one DEBUG line per batch naming its member requests."""
from __future__ import annotations

import time

import orjson

from tests.harness import http_json
from tests.processes import python_module


def test_json_logs_have_one_line_per_batch_with_request_ids(tmp_path):
    path = tmp_path / "gateway.toml"
    path.write_text('[[models]]\nname = "demo"\nbackend = "simulated"\n')
    process = python_module("gateway", "serve", "--config", str(path), "--http-port", "0", "--grpc-port", "0",
                       "--log-level", "DEBUG", "--log-format", "json")
    try:
        url = "http://" + process.fields["http"]
        status, body = http_json("POST", f"{url}/v1/models/demo:predict", {"instances": [[1]]},
                                 headers={"X-Request-Id": "req-abc-123"})
        assert status == 200
        status, _ = http_json("POST", f"{url}/v2/models/demo/infer", {"id": "oip-7", "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1]}]})
        assert status == 200
        time.sleep(0.2)
    finally:
        assert process.stop() == 0
    lines = [orjson.loads(line) for line in process.log_text().splitlines() if line.startswith("{")]
    assert lines, process.log_text()
    assert all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    batches = [line for line in lines if "batch_id" in line]
    assert len(batches) == 2
    first, second = batches
    assert first["batch_id"] == body["batchId"] and first["request_ids"] == ["req-abc-123"]
    assert first["model"] == "demo" and first["rows"] == 1 and first["outcome"] == "ok"
    assert second["request_ids"] == ["oip-7"]
