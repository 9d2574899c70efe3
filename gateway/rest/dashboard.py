"""The live page of the gateway's batching: `GET /dashboard` (the page), its script, and
`GET /dashboard/data` (the JSON snapshot the page polls, built by `gateway.observe.live`).

The page and its script are files beside this module (`static/`), read once at import and
served as they are: no build step, nothing fetched from elsewhere (the Content-Security-Policy
says so to the browser). Read-only, and behind the front door like every other endpoint
(`BaseHandler.prepare`, `gateway.access.front_door`): with `[server] auth_token_env` set, or tenants
declared, the browser must send the `Authorization` header with the token or any tenant's
key (a proxy in front of it, or a browser extension, adds it).

Handlers here only serialize what `gateway.observe.live` builds, read through the service (the
batcher's, in a worker of `gateway.process.workers`): they know no stats of their own.
"""
from __future__ import annotations

from pathlib import Path

from gateway.rest.base import BaseHandler
from wire.errors import NotFound

STATIC = Path(__file__).resolve().parent / "static"
# Only this origin: the page's own script and data, inline styles, the inline icon.
SECURITY_POLICY = ("default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; "
                   "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def _read(name: str) -> bytes | None:
    # An install without the package's data files (see the report on packaging) still serves
    # everything else: only the page answers 404, saying why.
    try:
        return (STATIC / name).read_bytes()
    except OSError:
        return None


PAGE = _read("dashboard.html")
SCRIPT = _read("dashboard.js")


class _StaticHandler(BaseHandler):
    body: bytes | None = None
    content_type = ""

    def get(self) -> None:
        if self.body is None:
            raise NotFound(f"the dashboard's files are not installed with this gateway ({STATIC})")
        self.set_header("Content-Type", self.content_type)
        self.set_header("Cache-Control", "no-cache")
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Content-Security-Policy", SECURITY_POLICY)
        self.finish(self.body)


class DashboardPageHandler(_StaticHandler):
    body = PAGE
    content_type = "text/html; charset=UTF-8"


class DashboardScriptHandler(_StaticHandler):
    body = SCRIPT
    content_type = "text/javascript; charset=UTF-8"


class DashboardDataHandler(BaseHandler):
    async def get(self) -> None:
        self.set_header("Cache-Control", "no-store")
        self.write_json(await self.service.live())
