"""The fast and aiohttp engines send the configured method, headers and body."""
from __future__ import annotations

import pytest

from tests.tools.loadgen.support import ENGINES, V1, run


@pytest.mark.parametrize("engine", ENGINES)
async def test_method_headers_and_body_reach_the_server(local_server, engine):
    result = await run(target=f"{local_server.url}/echo", method="PUT", body=b"hello", requests=2, concurrency=1,
                       headers=(("X-Test", "yes"),), content_type="text/plain", engine=engine)
    assert result.statuses == {"200": 2}
    last = local_server.seen.last
    assert last["method"] == "PUT" and last["body"] == b"hello"
    assert last["headers"]["X-Test"] == "yes" and last["headers"]["Content-Type"] == "text/plain"
    # A body without -m means POST, like curl.
    await run(target=f"{local_server.url}/echo", body=V1, requests=1, concurrency=1, engine=engine)
    assert local_server.seen.last["method"] == "POST" and local_server.seen.last["body"] == V1
