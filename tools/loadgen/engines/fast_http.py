"""The `fast` HTTP engine: one prebuilt request, one keep-alive `HttpConnection` per worker.

The default for http:// targets. It must not know about the runner, statistics or reports.
"""
from __future__ import annotations

import asyncio
import urllib.parse

from tools.loadgen.config import Config
from tools.loadgen.engines.base import USER_AGENT, Answer, Engine, Slot, body_snippet, transport_error
from tools.loadgen.http_client import HttpConnection


def build_request(config: Config, path: str, netloc: str) -> bytes:
    """The whole HTTP/1.1 request, built once for the run."""
    method = config.http_method
    names = {name.lower() for name, _ in config.headers}
    lines = [f"{method} {path} HTTP/1.1"]
    if "host" not in names:
        lines.append(f"Host: {netloc}")
    if "user-agent" not in names:
        lines.append(f"User-Agent: {USER_AGENT}")
    if config.body or method in ("POST", "PUT", "PATCH"):
        if "content-type" not in names:
            lines.append(f"Content-Type: {config.content_type or 'application/json'}")
        lines.append(f"Content-Length: {len(config.body)}")
    if not config.keepalive:
        lines.append("Connection: close")
    lines += [f"{name}: {value}" for name, value in config.headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + config.body


class FastHttpEngine(Engine):
    def __init__(self, config: Config) -> None:
        parts = urllib.parse.urlsplit(config.target)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.timeout = config.timeout
        self.keepalive = config.keepalive
        self.head_only = config.http_method == "HEAD"
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.request = build_request(config, path, parts.netloc)

    async def start(self) -> None:
        pass  # connections open per slot, on first use

    async def _connect(self) -> HttpConnection:
        loop = asyncio.get_running_loop()
        _, connection = await asyncio.wait_for(loop.create_connection(
            lambda: HttpConnection(self.head_only), self.host, self.port), self.timeout)
        return connection

    async def call(self, slot: Slot) -> Answer:
        connection: HttpConnection | None = slot.connection
        reused = connection is not None and not connection.closed
        for attempt in (0, 1):
            try:
                if connection is None or connection.closed:
                    connection = await self._connect()
                    slot.connection = connection
                waiter = connection.send(self.request, self.timeout)
                try:
                    status, body = await waiter
                except asyncio.CancelledError:
                    connection.abort()
                    raise
            except (OSError, TimeoutError) as exc:
                slot.connection = None
                if connection is not None:
                    connection.abort()
                # A keep-alive connection the server closed while idle: retry once, fresh.
                if (attempt == 0 and reused and isinstance(exc, ConnectionResetError)
                        and connection is not None and not connection.got_data):
                    connection = None
                    continue
                return None, 0, transport_error(exc, self.timeout)
            if not self.keepalive:
                connection.abort()
                slot.connection = None
            if status >= 400:
                return str(status), len(body), f"HTTP {status}: {body_snippet(body)}"
            return str(status), len(body), None
        raise AssertionError("unreachable")

    def release(self, slot: Slot) -> None:
        if slot.connection is not None:
            slot.connection.abort()
            slot.connection = None

    async def close(self) -> None:
        pass  # every connection belongs to a slot, released by its worker
