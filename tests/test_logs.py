"""Structured logs: JSON lines, one DEBUG line per batch naming its member requests, and
repeated messages rate-limited with a count."""
from __future__ import annotations

import logging
import time

import orjson

from gateway.logs import RepeatFilter
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


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def record(message: str, *args: object, level: int = logging.WARNING, name: str = "gateway.x") -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, message, args, None)


def test_a_repeated_message_is_written_a_few_times_per_window_then_counted():
    clock = FakeClock()
    repeats = RepeatFilter(window_s=10, limit=3, clock=clock)
    written = [repeats.filter(record("refused %s", port)) for port in range(100)]
    assert written == [True] * 3 + [False] * 97
    clock.now = 10.0
    next_window = record("refused %s", 7)
    assert repeats.filter(next_window)
    assert next_window.getMessage() == "refused 7 [97 more like this in the last 10 s were not logged]"
    after_that = record("refused %s", 8)
    assert repeats.filter(after_that) and after_that.getMessage() == "refused 8"


def test_different_messages_loggers_and_levels_are_limited_apart():
    repeats = RepeatFilter(window_s=10, limit=1, clock=FakeClock())
    assert repeats.filter(record("a"))
    assert not repeats.filter(record("a"))
    assert repeats.filter(record("b"))
    assert repeats.filter(record("a", level=logging.ERROR))
    assert repeats.filter(record("a", name="tornado.access"))
