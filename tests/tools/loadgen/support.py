"""What the tools.loadgen tests share: request bodies and a run with a hang guard.
Nothing here asserts on speed: only on counts and shapes."""
from __future__ import annotations

import asyncio
import json

from tools.loadgen import Config, Result
from tools.loadgen.api import run as run_load

HANG_GUARD_S = 60  # a safety net against a hung run, not a speed assertion
V1 = b'{"instances": [[1, 2, 3, 4]]}'
ENGINES = ["fast", "aiohttp"]


def oip(model: str = "demo") -> bytes:
    return json.dumps({"model_name": model, "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4],
                                                        "contents": {"fp32_contents": [1, 2, 3, 4]}}]}).encode()


async def run(**kwargs) -> Result:
    return await asyncio.wait_for(run_load(Config(**kwargs)), HANG_GUARD_S)
