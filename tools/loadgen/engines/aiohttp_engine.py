"""The `aiohttp` HTTP engine: the general-purpose client, for https:// or `--engine aiohttp`.

It must not know about the runner, statistics or reports.
"""
from __future__ import annotations

import asyncio
from typing import Any

from tools.loadgen.config import Config
from tools.loadgen.engines.base import USER_AGENT, Answer, Engine, Slot, body_snippet, transport_error


class AiohttpEngine(Engine):
    def __init__(self, config: Config) -> None:
        self.config = config
        self.session: Any = None
        self.headers: dict[str, str] = {}
        self._errors: tuple[type[BaseException], ...] = ()

    async def start(self) -> None:
        # Imported here: a run on the fast engine (the default) never pays for aiohttp.
        import aiohttp
        import yarl
        config = self.config
        self.url = yarl.URL(config.target)
        self.headers = {"User-Agent": USER_AGENT}
        if config.body or config.http_method in ("POST", "PUT", "PATCH"):
            self.headers["Content-Type"] = config.content_type or "application/json"
        for name, value in config.headers:
            self.headers[name] = value
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=config.workers, limit_per_host=config.workers,
                                           force_close=not config.keepalive),
            timeout=aiohttp.ClientTimeout(total=config.timeout),
            skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
            auto_decompress=False,
        )
        self._errors = (aiohttp.ClientError, OSError, asyncio.TimeoutError)

    async def call(self, slot: Slot) -> Answer:
        try:
            async with self.session.request(self.config.http_method, self.url, data=self.config.body or None,
                                            headers=self.headers, allow_redirects=False) as response:
                body = await response.read()
                status = response.status
        except self._errors as exc:
            return None, 0, transport_error(exc, self.config.timeout)
        if status >= 400:
            return str(status), len(body), f"HTTP {status}: {body_snippet(body)}"
        return str(status), len(body), None

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
