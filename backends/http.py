"""Pooled keep-alive HTTP/1.1 plumbing shared by the HTTP predictor clients (asyncio only).

The HTTP counterpart of `backends.grpc`: a client holds one `HttpPredictor` and posts to
its predictor's paths through it; failures come back as gateway errors (`backends.errors`).
A lean client on `asyncio.Protocol` rather than aiohttp: one request per connection at a
time, Content-Length, chunked or until-close answers, so a call costs a fraction of
aiohttp's CPU (see README Performance). It knows no body format (the clients and
`wire.codecs` do) and nothing of the gateway.
"""
from __future__ import annotations

import asyncio
import ssl
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from backends import errors
from wire.codecs import content_encoding
from wire.errors import GatewayError, Unavailable
from wire.tracing import CallClock, current_batch, predictor_headers

CONNECT_TIMEOUT_S = 5.0
PROBE_TIMEOUT_S = 2.0
MAX_ANSWER_BYTES = 256 * 1024 * 1024  # a compressed answer inflates to at most this (as gRPC's message limit)
_ONE_WRITE_BYTES = 64 * 1024  # smaller bodies leave with their head in one write (one segment, no copy to speak of)


class ResponseHeaders(dict[str, str]):
    """An answer's headers, looked up by name in any case (kept lower-cased)."""

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def get(self, name: str, default: Any = None) -> Any:
        return super().get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection: one request and its answer at a time.

    `exchange` writes a request and returns a future of `(status, headers, body)`; it fails
    with ConnectionError when the predictor closes the connection or answers malformed."""

    __slots__ = ("transport", "buffer", "waiter", "closed", "head", "chunks", "chunk_at", "clock")

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[tuple[int, ResponseHeaders, bytes]] | None = None
        self.closed = False
        # status, headers, where the body starts, its length (-1 chunked, -2 until close), close after it
        self.head: tuple[int, ResponseHeaders, int, int, bool] | None = None
        self.chunks: list[bytes] = []  # a chunked body's chunks so far
        self.chunk_at = 0  # where the next chunk's size line starts
        self.clock: CallClock | None = None  # the exchange's, stamped when it leaves and when its answer is whole

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is None or self.waiter.done():
            return
        if self.head is not None and self.head[3] == -2:  # the body ends with the connection
            status, headers, start, _, _ = self.head
            self._answer(status, headers, bytes(self.buffer[start:]))
        else:
            self._fail("the predictor closed the connection")

    def exchange(self, head: bytes, body: bytes | None,
                 clock: CallClock | None = None) -> asyncio.Future[tuple[int, ResponseHeaders, bytes]]:
        assert self.transport is not None and self.waiter is None
        self.waiter = waiter = asyncio.get_running_loop().create_future()
        self.head = None
        self.clock = clock
        self.buffer.clear()
        if self.closed or self.transport.is_closing():  # closed between connecting and now
            self._fail("the predictor closed the connection")
            return waiter
        if not body:
            self.transport.write(head)
        elif len(body) <= _ONE_WRITE_BYTES:
            self.transport.write(head + body)
        else:
            self.transport.writelines((head, body))  # a large body is not copied into one buffer
        if clock is not None:
            clock.leaving()
        return waiter

    def data_received(self, data: bytes) -> None:
        if self.waiter is None:  # nothing asked: a predictor talking out of turn is not reused
            self.abort()
            return
        self.buffer += data
        try:
            self._parse()
        except ValueError as exc:  # a status, length or chunk size that is not a number
            self._fail(f"malformed HTTP answer: {exc}")

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _parse(self) -> None:
        buffer = self.buffer
        while self.head is None:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = bytes(buffer[:end]).decode("latin-1").split("\r\n")
            version, status_text = lines[0].split(" ", 2)[:2]
            status = int(status_text)
            if 100 <= status < 200:  # 100 Continue and friends: the real answer follows
                del buffer[:end + 4]
                continue
            headers = ResponseHeaders()
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            connection = headers.get("connection", "").lower()
            close = connection == "close" or (version == "HTTP/1.0" and connection != "keep-alive")
            if status in (204, 304):
                length = 0
            elif "chunked" in headers.get("transfer-encoding", "").lower():
                length, self.chunks, self.chunk_at = -1, [], end + 4
            elif "content-length" in headers:
                length = int(headers["content-length"])
            else:
                length, close = -2, True
            self.head = (status, headers, end + 4, length, close)
        status, headers, start, length, close = self.head
        if length == -2:
            return  # until close: connection_lost answers
        if length == -1:
            if not self._dechunk():
                return
            body = b"".join(self.chunks)
        elif len(buffer) < start + length:
            return
        else:
            body = bytes(buffer[start:start + length])
        if close:
            self.abort()
        self._answer(status, headers, body)

    def _dechunk(self) -> bool:
        """Read the chunks that have arrived; True once the last one (and the trailers) has."""
        buffer = self.buffer
        while True:
            line_end = buffer.find(b"\r\n", self.chunk_at)
            if line_end < 0:
                return False
            size = int(bytes(buffer[self.chunk_at:line_end]).split(b";")[0].strip() or b"0", 16)
            if size == 0:  # trailers (usually none) end with an empty line
                return buffer.find(b"\r\n\r\n", line_end) >= 0
            if len(buffer) < line_end + 2 + size + 2:
                return False
            self.chunks.append(bytes(buffer[line_end + 2:line_end + 2 + size]))
            self.chunk_at = line_end + 2 + size + 2

    def _answer(self, status: int, headers: ResponseHeaders, body: bytes) -> None:
        # An idle connection keeps no copy of its last answer (a batch's answer may be large).
        self.buffer.clear()
        self.chunks = []
        waiter, self.waiter = self.waiter, None
        if self.clock is not None:
            # Here, as the last bytes are read: not when the caller resumes, turns of the loop later.
            self.clock.arrived()
            self.clock = None
        if waiter is not None and not waiter.done():
            waiter.set_result((status, headers, body))

    def _fail(self, message: str) -> None:
        waiter, self.waiter = self.waiter, None
        self.clock = None
        self.abort()
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionError(message))


class HttpPredictor:
    """A pool of keep-alive connections to one predictor base URL: at most `pool_size`
    requests at once (more wait for a free connection), idle connections reused newest first."""

    def __init__(self, base_url: str, model: str, pool_size: int = 64, ca_file: str = "",
                 translate_status: Callable[[str, int, bytes], GatewayError] = errors.from_http_status) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._translate_status = translate_status  # a predictor's own error conventions (TorchServe's)
        url = urllib.parse.urlsplit(self.base_url)
        self._tls = url.scheme == "https"
        self._host = url.hostname or "127.0.0.1"
        self._port = url.port or (443 if self._tls else 80)
        self._prefix = url.path
        host_header = self._host if ":" not in self._host else f"[{self._host}]"
        self._host_line = f"Host: {host_header}:{self._port}\r\n" if url.port else f"Host: {host_header}\r\n"
        # https:// URLs are verified against ca_file if given, else the system's CAs.
        self._ca_file = ca_file
        self._ssl: ssl.SSLContext | None = None
        self._slots = asyncio.Semaphore(pool_size)
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()

    def _ssl_context(self) -> ssl.SSLContext | None:
        if self._tls and self._ssl is None:
            self._ssl = ssl.create_default_context(cafile=self._ca_file or None)
        return self._ssl

    def _head(self, method: str, path: str, body: bytes | None, headers: Mapping[str, str] | None) -> bytes:
        # Never ask for compressed answers (no Accept-Encoding): tensors barely compress
        # and gzip costs more CPU than the bytes it saves next to the predictor.
        lines = [f"{method} {self._prefix}{path} HTTP/1.1\r\n", self._host_line]
        if headers:
            lines += [f"{name}: {value}\r\n" for name, value in headers.items()]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}\r\n")
        lines.append("\r\n")
        return "".join(lines).encode("latin-1")

    async def _connection(self) -> _Connection:
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed:
                return connection
            self._open.discard(connection)
        loop = asyncio.get_running_loop()
        try:
            _, connection = await asyncio.wait_for(loop.create_connection(
                _Connection, self._host, self._port, ssl=self._ssl_context(),
                server_hostname=self._host if self._tls else None), CONNECT_TIMEOUT_S)
        except TimeoutError:
            raise ConnectionError("connect timed out") from None
        self._open.add(connection)
        return connection

    async def request(self, method: str, path: str, body: bytes | None = None,
                      headers: Mapping[str, str] | None = None,
                      timeout_s: float | None = None,
                      clock: CallClock | None = None) -> tuple[int, Mapping[str, str], bytes]:
        """Send one request; connection failures become Unavailable. `clock`, if given, is
        stamped when the request is written and when its answer has arrived."""
        head = self._head(method, path, body, headers)
        try:
            async with asyncio.timeout(timeout_s), self._slots:  # the wait for a free connection counts too
                connection = await self._connection()
                try:
                    status, response_headers, payload = await connection.exchange(head, body, clock)
                except BaseException:  # cancelled or failed mid-answer: the connection is not reusable
                    connection.abort()
                    self._open.discard(connection)
                    raise
                if connection.closed:
                    self._open.discard(connection)
                else:
                    self._idle.append(connection)
        except TimeoutError:
            raise Unavailable(f"model '{self.model}': the predictor did not answer in time") from None
        except OSError:  # ConnectionError included: refused, reset, closed, malformed
            raise Unavailable(f"model '{self.model}': the predictor is unreachable") from None
        coding = response_headers.get("content-encoding")
        if coding:
            payload = self._inflated(coding, payload)
        return status, response_headers, payload

    def _inflated(self, coding: str, payload: bytes) -> bytes:
        """An answer compressed although nobody asked, inflated within MAX_ANSWER_BYTES."""
        known = content_encoding.request_coding(coding) if coding.strip().lower() != "identity" else None
        if known is None:
            return payload
        try:
            with errors.reading_answer(self.model):
                return content_encoding.decode(known, [payload], MAX_ANSWER_BYTES)
        except GatewayError as error:
            if isinstance(error, Unavailable):
                raise
            raise errors.unusable(self.model, error.message) from None

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[Mapping[str, str], bytes]:
        """POST and require a 200; any other status becomes the matching gateway error.
        The batch's request ids and trace context go along, and its clock is stamped (wire.tracing)."""
        batch = current_batch.get()
        status, response_headers, payload = await self.request("POST", path, body, {**headers, **predictor_headers()},
                                                               clock=batch.clock if batch is not None else None)
        if status != 200:
            raise self._translate_status(self.model, status, payload)
        return response_headers, payload

    async def probe(self, path: str) -> tuple[int, bytes]:
        """A short GET for readiness and metadata; (0, b"") if the predictor is unreachable."""
        try:
            status, _, payload = await self.request("GET", path, timeout_s=PROBE_TIMEOUT_S)
            return status, payload
        except Unavailable:
            return 0, b""

    async def probe_json(self, path: str) -> Any:
        """A probe whose 200 answer is JSON: the document, or None (unreachable, another
        status, or not JSON)."""
        status, payload = await self.probe(path)
        if status != 200:
            return None
        try:
            return orjson.loads(payload)
        except orjson.JSONDecodeError:
            return None

    async def lists_model(self, path: str, model: str) -> bool:
        """Whether an OpenAI-style `GET <path>` (`{"data": [{"id": ...}, ...]}`) lists `model`:
        the readiness of an OpenAI- or Cohere-compatible server."""
        document = await self.probe_json(path)
        if not isinstance(document, dict) or not isinstance(document.get("data"), list):
            return False
        return any(isinstance(item, dict) and item.get("id") == model for item in document["data"])

    async def close(self) -> None:
        for connection in self._open:
            connection.abort()
        self._open.clear()
        self._idle.clear()
