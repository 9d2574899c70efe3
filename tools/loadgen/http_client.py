"""A lean keep-alive HTTP/1.1 client connection on asyncio.Protocol.

`HttpConnection` writes a prebuilt request and reads one response (Content-Length,
chunked, or until close; no body for HEAD, 1xx, 204 and 304), about 4x cheaper per request
than aiohttp. Bytes in, `(status, body)` out: it must not know about configs, engines,
statistics or reports.
"""
from __future__ import annotations

import asyncio


class HttpConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection: send a prebuilt request, read one response.

    `send` returns a future of `(status, body)`; it fails with TimeoutError, with
    ConnectionResetError when the server closes the connection, or with ConnectionError
    on a malformed response."""

    __slots__ = ("transport", "buffer", "waiter", "closed", "head_only", "head", "got_data", "timer")

    def __init__(self, head_only: bool) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future | None = None
        self.closed = False
        self.head_only = head_only
        # status, header end, body length (-1 chunked, -2 until close), close after it
        self.head: tuple[int, int, int, bool] | None = None
        self.got_data = False
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        if self.head is not None and self.head[2] == -2:  # body ends with the connection
            status, end, _, _ = self.head
            self._finish(status, bytes(self.buffer[end:]))
        else:
            self.waiter = None
            waiter.set_exception(ConnectionResetError("connection closed by the server"
                                                      + ("" if self.got_data else " before answering")))

    def data_received(self, data: bytes) -> None:
        self.got_data = True
        self.buffer += data
        if self.waiter is not None:
            try:
                self._parse()
            except ValueError as exc:  # a Content-Length or chunk size that is not a number
                self._fail(f"malformed HTTP response: {exc}")

    def send(self, request: bytes, timeout: float) -> asyncio.Future:
        assert self.transport is not None, "send before the connection was made"
        loop = asyncio.get_running_loop()
        self.waiter = waiter = loop.create_future()
        self.head = None
        self.got_data = False
        self.buffer.clear()
        self.timer = loop.call_later(timeout, self._on_timeout)
        self.transport.write(request)
        return waiter

    def _on_timeout(self) -> None:
        waiter, self.waiter = self.waiter, None
        self.abort()
        if waiter is not None and not waiter.done():
            waiter.set_exception(TimeoutError())

    def abort(self) -> None:
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
        if self.transport is not None:
            self.transport.abort()

    def _finish(self, status: int, body: bytes) -> None:
        waiter, self.waiter = self.waiter, None
        if self.timer is not None:
            self.timer.cancel()
        if waiter is not None and not waiter.done():
            waiter.set_result((status, body))

    def _parse(self) -> None:
        buffer = self.buffer
        while self.head is None:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buffer[:end]).decode("latin-1")
            lines = head.split("\r\n")
            try:
                status = int(lines[0].split(" ", 2)[1])
            except (IndexError, ValueError):
                self._fail(f"bad status line {lines[0][:80]!r}")
                return
            if 100 <= status < 200:  # 100 Continue and friends: the real answer follows
                del buffer[:end + 4]
                continue
            length, close = -2, False
            for line in lines[1:]:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name == "content-length":
                    length = int(value.strip())
                elif name == "transfer-encoding" and "chunked" in value.lower():
                    length = -1
                elif name == "connection" and value.strip().lower() == "close":
                    close = True
            if self.head_only or status in (204, 304):
                length = 0
            if length == -2:
                close = True
            self.head = (status, end + 4, length, close)
        status, start, length, close = self.head
        if length >= 0:
            if len(buffer) < start + length:
                return
            body = bytes(buffer[start:start + length])
        elif length == -1:
            dechunked = self._dechunk(start)
            if dechunked is None:
                return
            body = dechunked
        else:
            return  # until close: connection_lost finishes it
        if close:
            self.abort()
        self._finish(status, body)

    def _dechunk(self, position: int) -> bytes | None:
        buffer = self.buffer
        parts: list[bytes] = []
        while True:
            line_end = buffer.find(b"\r\n", position)
            if line_end < 0:
                return None
            size = int(bytes(buffer[position:line_end]).split(b";")[0].strip() or b"0", 16)
            position = line_end + 2
            if size == 0:
                # trailers (usually none) end with an empty line
                if buffer.find(b"\r\n\r\n", position - 2) < 0:
                    return None
                return b"".join(parts)
            if len(buffer) < position + size + 2:
                return None
            parts.append(bytes(buffer[position:position + size]))
            position += size + 2

    def _fail(self, message: str) -> None:
        waiter, self.waiter = self.waiter, None
        self.abort()
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionError(message))
