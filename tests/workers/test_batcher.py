"""The batcher's side of the workers' channel (gateway/workers/batcher.py, channel.py):
/metrics of several processes summed into one exposition, and the frames both sides speak."""
from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.workers.batcher import merge_expositions
from gateway.workers.channel import Channel, ChannelClosed


def exposition(requests: int, connections: int, waits: list[float]) -> bytes:
    registry = CollectorRegistry()
    counter = Counter("gateway_requests", "Requests", ["code"], registry=registry)
    counter.labels("200").inc(requests)
    Gauge("gateway_http_connections", "Open", registry=registry).set(connections)
    histogram = Histogram("gateway_queue_wait_seconds", "Wait", buckets=(0.01, 0.1), registry=registry)
    for wait in waits:
        histogram.observe(wait)
    return generate_latest(registry)


def samples(text: bytes) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text.decode()) for s in family.samples}


def test_expositions_of_several_processes_sum_into_one():
    merged = samples(merge_expositions([exposition(3, 1, [0.005]), exposition(4, 2, [0.05, 0.5])]))
    assert merged[("gateway_requests_total", (("code", "200"),))] == 7
    assert merged[("gateway_http_connections", ())] == 3
    assert merged[("gateway_queue_wait_seconds_bucket", (("le", "0.01"),))] == 1
    assert merged[("gateway_queue_wait_seconds_bucket", (("le", "+Inf"),))] == 3
    assert merged[("gateway_queue_wait_seconds_count", ())] == 3


def test_the_merged_exposition_keeps_each_familys_type_and_help():
    text = merge_expositions([exposition(1, 0, []), exposition(1, 0, [])]).decode()
    assert "# TYPE gateway_requests_total counter" in text and "# HELP gateway_requests_total Requests" in text
    assert "# TYPE gateway_queue_wait_seconds histogram" in text


async def test_a_channel_carries_messages_in_order_one_frame_per_loop_turn_and_says_when_closed(tmp_path):
    received: asyncio.Queue = asyncio.Queue()
    frames = []

    async def serve(reader, writer):
        channel = Channel(reader, writer)
        try:
            while True:
                frame = await channel.receive()
                frames.append(len(frame))
                for message in frame:
                    received.put_nowait(message)
        except ChannelClosed:
            received.put_nowait(None)

    server = await asyncio.start_unix_server(serve, str(tmp_path / "s.sock"))
    reader, writer = await asyncio.open_unix_connection(str(tmp_path / "s.sock"))
    channel = Channel(reader, writer)
    for index in range(100):
        channel.send(("submit", index, b"x" * index))
    messages = [await received.get() for _ in range(100)]
    assert [m[1] for m in messages] == list(range(100)) and messages[7][2] == b"x" * 7
    assert frames == [100]  # sent in one loop turn: one frame
    channel.close()
    assert await received.get() is None
    server.close()
