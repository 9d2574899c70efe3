"""Servers for the tools tests: an in-process Tornado app (on the test's own event loop)
and the simulated predictor as its own process on free 127.0.0.1 ports, stopped by PID
(one for the whole tests/tools package: it keeps no state the tests look at)."""
from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import tornado.httpserver
import tornado.netutil
import tornado.web

from tests.processes import SimulatedPredictorProcess, simulated_predictor


@dataclass
class Seen:
    """What the in-process server received."""
    count: int = 0
    paths: dict[str, int] = field(default_factory=dict)
    last: dict = field(default_factory=dict)
    times: list[float] = field(default_factory=list)  # when each request arrived, on the event loop's clock


def make_app(seen: Seen) -> tornado.web.Application:
    class Base(tornado.web.RequestHandler):
        def prepare(self) -> None:
            seen.count += 1
            seen.times.append(asyncio.get_running_loop().time())
            seen.paths[self.request.path] = seen.paths.get(self.request.path, 0) + 1

    class Ok(Base):
        def get(self) -> None:
            self.finish(b'{"ok": true}')

        post = get

    class Slow(Base):
        async def get(self) -> None:
            await asyncio.sleep(0.05)
            self.finish(b"slow")

    class Flaky(Base):
        def get(self) -> None:
            if seen.paths[self.request.path] % 3 == 0:
                self.set_status(500)
                self.finish(b'{"error": "every third request fails"}')
            else:
                self.finish(b"fine")

    class Busy(Base):
        def get(self) -> None:
            self.set_status(503)
            self.finish(b'{"error": "overloaded"}')

    class Echo(Base):
        def put(self) -> None:
            seen.last = {"method": self.request.method, "body": self.request.body,
                         "headers": dict(self.request.headers)}
            self.finish(b"echo")

        post = put

    class Chunked(Base):
        async def get(self) -> None:
            self.write(b"a" * 10)
            await self.flush()
            self.write(b"b" * 5)
            self.finish()

    class Close(Base):
        def get(self) -> None:
            self.set_header("Connection", "close")
            self.finish(b"bye")

    return tornado.web.Application([
        (r"/ok", Ok), (r"/slow", Slow), (r"/flaky", Flaky), (r"/busy", Busy), (r"/echo", Echo),
        (r"/chunked", Chunked), (r"/close", Close),
    ])


@dataclass
class LocalServer:
    url: str
    seen: Seen


@pytest.fixture
async def local_server() -> LocalServer:
    seen = Seen()
    sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
    server = tornado.httpserver.HTTPServer(make_app(seen))
    server.add_sockets(sockets)
    try:
        yield LocalServer(f"http://127.0.0.1:{sockets[0].getsockname()[1]}", seen)
    finally:
        server.stop()
        await server.close_all_connections()


@pytest.fixture(scope="package")
def predictor() -> Iterator[SimulatedPredictorProcess]:
    """The simulated predictor (no cost per call) as its own process."""
    process = simulated_predictor("--call-ms", "0")
    try:
        yield process
    finally:
        process.stop()
