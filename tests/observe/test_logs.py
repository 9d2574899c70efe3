"""Structured logs: JSON lines, one DEBUG line per batch naming its member requests, and
repeated messages rate-limited with a count."""
from __future__ import annotations

import logging
import time

import orjson

from gateway.observe.logs import RepeatFilter
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


def test_a_repeated_message_is_written_a_few_times_per_window_then_counted_in_a_line_of_its_own():
    clock, said = FakeClock(), []
    repeats = RepeatFilter(emit=said.append, window_s=10, limit=3, clock=clock)
    written = [repeats.filter(record("refused %s", port)) for port in range(100)]
    assert written == [True] * 3 + [False] * 97
    clock.now = 10.0
    next_window = record("refused %s", 7)
    assert repeats.filter(next_window) and next_window.getMessage() == "refused 7"  # never a note on another
    [summary] = said
    assert summary.levelno == logging.WARNING and summary.name == "gateway.x" and repeats.filter(summary)
    assert summary.getMessage().startswith("97 more like 'refused 99' were not logged in the 10 s after ")
    assert summary.getMessage().endswith("(3 of them were)")
    after_that = record("refused %s", 8)
    assert repeats.filter(after_that) and after_that.getMessage() == "refused 8" and len(said) == 1


def test_the_count_is_said_before_the_next_record_of_any_kind_or_at_exit():
    clock, said = FakeClock(), []
    repeats = RepeatFilter(emit=said.append, window_s=10, limit=1, clock=clock)
    for reason in ("a", "b", "c"):
        repeats.filter(record("reload failed: %s", reason))
    clock.now = 5.0
    assert repeats.filter(record("other")) and said == []  # its window has not ended
    clock.now = 11.0
    assert repeats.filter(record("another"))
    assert [s.getMessage().split(" were")[0] for s in said] == ["2 more like 'reload failed: c'"]
    repeats.filter(record("reload failed: %s", "d"))
    repeats.filter(record("reload failed: %s", "e"))
    repeats.flush()
    assert said[-1].getMessage().startswith("1 more like 'reload failed: e'")


def test_different_messages_loggers_and_levels_are_limited_apart():
    repeats = RepeatFilter(window_s=10, limit=1, clock=FakeClock())
    assert repeats.filter(record("a"))
    assert not repeats.filter(record("a"))
    assert repeats.filter(record("b"))
    assert repeats.filter(record("a", level=logging.ERROR))
    assert repeats.filter(record("a", name="tornado.access"))
