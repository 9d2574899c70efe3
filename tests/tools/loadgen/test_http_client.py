"""tools.loadgen.http_client, through the fast engine: chunked and connection-close answers,
no keep-alive, and a malformed answer reported as an error."""
from __future__ import annotations

import asyncio

from tests.tools.loadgen.support import run


async def test_fast_engine_reads_chunked_and_connection_close_answers(local_server):
    chunked = await run(target=f"{local_server.url}/chunked", requests=20, concurrency=2)
    assert chunked.statuses == {"200": 20} and chunked.bytes_received == 20 * 15
    closing = await run(target=f"{local_server.url}/close", requests=20, concurrency=2)
    assert closing.statuses == {"200": 20} and closing.bytes_received == 20 * 3
    no_keepalive = await run(target=f"{local_server.url}/ok", requests=20, concurrency=2, keepalive=False)
    assert no_keepalive.statuses == {"200": 20} and local_server.seen.paths["/ok"] == 20


async def test_fast_engine_reports_a_malformed_answer_as_an_error():
    async def answer(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: lots\r\n\r\n")
        await writer.drain()
        await reader.read()  # until the client hangs up

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        result = await run(target=f"http://127.0.0.1:{port}/", requests=3, concurrency=1)
    finally:
        server.close()
    assert result.transport_errors == 3 and result.statuses == {}
    assert all("malformed HTTP response" in message for message in result.errors)
