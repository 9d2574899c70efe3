"""backends/http.py: the pooled keep-alive HTTP/1.1 client, against small real servers on loopback."""
from __future__ import annotations

import asyncio
import gzip

import pytest

from backends.http import HttpPredictor
from wire.errors import BadPredictorAnswer, Unavailable


class RawServer:
    """A server on 127.0.0.1 answering each request with `answer(request_bytes)` (bytes, or a
    list of pieces sent apart, None among them closing the connection), counting connections;
    an answer of None closes the connection instead."""

    def __init__(self, answer):
        self.answer = answer
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aexit__(self, *exc) -> None:
        assert self.server is not None
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                answer = self.answer(request)
                if answer is None:
                    break
                pieces = answer if isinstance(answer, list) else [answer]
                for piece in pieces:
                    if piece is None:  # the answer ends with the connection
                        return
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0.01)
                if b"Connection: close" in b"".join(pieces):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


async def test_keeps_one_connection_alive_across_requests_and_sends_the_request_as_given():
    server = RawServer(lambda request: ok(b'{"a": 1}', b"X-Thing: yes\r\n"))
    async with server as url:
        client = HttpPredictor(url + "/prefix", "m")
        for _ in range(3):
            status, headers, body = await client.request("POST", "/infer", b"xyz", {"Content-Type": "application/json"})
            assert (status, body, headers.get("x-thing"), headers["X-THING"]) == (200, b'{"a": 1}', "yes", "yes")
        await client.close()
    assert server.connections == 1
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /prefix/infer HTTP/1.1"
    assert b"Content-Type: application/json" in lines and b"Content-Length: 3" in lines and body == b"xyz"
    assert not any(line.lower().startswith((b"accept-encoding", b"user-agent")) for line in lines)


async def test_reads_chunked_split_and_until_close_answers():
    chunked = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", b"lo\r\n6;x=1\r\n world\r\n0\r\n\r\n"]
    async with RawServer(lambda request: chunked) as url:
        client = HttpPredictor(url, "m")
        assert (await client.request("GET", "/"))[::2] == (200, b"hello world")
        assert (await client.request("GET", "/"))[::2] == (200, b"hello world")
        await client.close()
    async with RawServer(lambda request: [b"HTTP/1.0 200 OK\r\n\r\npart one ", b"part two", None]) as url:
        client = HttpPredictor(url, "m")
        assert (await client.request("GET", "/"))[::2] == (200, b"part one part two")
        assert (await client.request("GET", "/"))[::2] == (200, b"part one part two")  # on a new connection
        await client.close()


async def test_a_closed_keep_alive_connection_is_replaced_and_a_hang_up_is_unavailable():
    answers = iter([ok(b"1", b"Connection: close\r\n"), ok(b"2")])
    server = RawServer(lambda request: next(answers))
    async with server as url:
        client = HttpPredictor(url, "m")
        assert (await client.request("GET", "/"))[2] == b"1"
        assert (await client.request("GET", "/"))[2] == b"2"
        await client.close()
    assert server.connections == 2
    async with RawServer(lambda request: None) as url:
        client = HttpPredictor(url, "m")
        with pytest.raises(Unavailable, match="unreachable"):
            await client.post("/", b"{}", {})
        assert await client.probe("/") == (0, b"")
        await client.close()


async def test_a_statuses_body_and_a_timeout():
    async with RawServer(lambda request: b"HTTP/1.1 400 Bad\r\nContent-Length: 17\r\n\r\n{\"error\": \"nope\"}") as url:
        client = HttpPredictor(url, "m")
        status, _, body = await client.request("POST", "/", b"{}")
        assert (status, body) == (400, b'{"error": "nope"}')
        await client.close()
    async with RawServer(lambda request: []) as url:  # reads the request, never answers
        client = HttpPredictor(url, "m")
        with pytest.raises(Unavailable, match="in time"):
            await client.request("GET", "/", timeout_s=0.2)
        await client.close()


async def test_an_unasked_compressed_answer_is_inflated_and_garbage_is_unusable():
    async with RawServer(lambda request: ok(gzip.compress(b"plain"), b"Content-Encoding: gzip\r\n")) as url:
        client = HttpPredictor(url, "m")
        assert (await client.request("GET", "/"))[2] == b"plain"
        await client.close()
    async with RawServer(lambda request: ok(b"not gzip", b"Content-Encoding: gzip\r\n")) as url:
        client = HttpPredictor(url, "m")
        with pytest.raises(BadPredictorAnswer):
            await client.request("GET", "/")
        await client.close()
    async with RawServer(lambda request: b"HTTP/1.1 2x0 OK\r\n\r\n") as url:
        client = HttpPredictor(url, "m")
        with pytest.raises(Unavailable):
            await client.request("GET", "/")
        await client.close()


async def test_the_pool_bounds_requests_in_flight_and_a_cancelled_call_drops_its_connection():
    release = asyncio.Event()
    in_flight = 0
    most = 0

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal in_flight, most
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                in_flight += 1
                most = max(most, in_flight)
                await release.wait()
                in_flight -= 1
                writer.write(ok(b"x"))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(slow, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    client = HttpPredictor(url, "m", pool_size=2)
    calls = [asyncio.ensure_future(client.request("GET", "/")) for _ in range(5)]
    await asyncio.sleep(0.2)
    assert most == 2
    calls[0].cancel()
    release.set()
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert isinstance(results[0], asyncio.CancelledError)
    assert [r[2] for r in results[1:]] == [b"x"] * 4
    assert len(client._open) <= 2  # the cancelled call's connection was not put back
    await client.close()
    server.close()
