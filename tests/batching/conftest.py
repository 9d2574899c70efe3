"""The scheduler's async tests run on both event loops the gateway may serve on (`serve
--loop`): asyncio's and uvloop's. They differ where the scheduler depends on them: uvloop
answers `call_at` with a time already past with a plain Handle, which has no `when()`, and
its clock moves in whole milliseconds, once per pass of the loop, so two requests can
arrive at the same time."""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import pytest
import uvloop


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
