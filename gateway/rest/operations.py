"""What an operator reads over HTTP: `GET /metrics` (Prometheus text, `gateway.observe.metrics`)."""
from __future__ import annotations

from gateway.observe import metrics
from gateway.rest.base import BaseHandler


class MetricsHandler(BaseHandler):
    async def get(self) -> None:
        self.set_header("Content-Type", metrics.CONTENT_TYPE)
        self.finish(await self.service.exposition())
