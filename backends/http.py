"""Pooled keep-alive HTTP plumbing shared by the HTTP predictor clients (aiohttp).

The HTTP counterpart of `backends.grpc`: a client holds one `HttpPredictor` and posts to
its predictor's paths through it; failures come back as gateway errors (`backends.errors`).
It knows no body format (the clients and `wire.codecs` do) and nothing of the gateway.
"""
from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson

from backends import errors
from wire.errors import Unavailable
from wire.tracing import predictor_headers

CONNECT_TIMEOUT_S = 5.0
PROBE_TIMEOUT_S = 2.0


class HttpPredictor:
    """One keep-alive connection pool to one predictor base URL."""

    def __init__(self, base_url: str, model: str, pool_size: int = 64, ca_file: str = "") -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        # https:// URLs are verified against ca_file if given, else the system's CAs.
        self._ssl: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca_file) if ca_file else True
        self._pool_size = pool_size
        self._session: aiohttp.ClientSession | None = None

    def _ensure_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._pool_size, enable_cleanup_closed=True, ssl=self._ssl),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S),
                # Never ask for compressed answers: tensors barely compress and gzip costs
                # more CPU than the bytes it saves next to the predictor.
                skip_auto_headers=("User-Agent", "Accept-Encoding"),
            )
        return self._session

    async def request(self, method: str, path: str, body: bytes | None = None,
                      headers: dict[str, str] | None = None,
                      timeout_s: float | None = None) -> tuple[int, Mapping[str, str], bytes]:
        """Send one request; connection failures become Unavailable."""
        session = self._ensure_session()
        timeout = aiohttp.ClientTimeout(total=timeout_s) if timeout_s else None
        try:
            async with session.request(method, self.base_url + path, data=body, headers=headers,
                                       timeout=timeout) as response:
                payload = await response.read()
                return response.status, response.headers, payload
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, OSError):
            raise Unavailable(f"model '{self.model}': the predictor is unreachable") from None
        except TimeoutError:
            raise Unavailable(f"model '{self.model}': the predictor did not answer in time") from None

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[Mapping[str, str], bytes]:
        """POST and require a 200; any other status becomes the matching gateway error.
        The batch's request ids and trace context go along (wire.tracing)."""
        status, response_headers, payload = await self.request("POST", path, body, {**headers, **predictor_headers()})
        if status != 200:
            raise errors.from_http_status(self.model, status, payload)
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

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
