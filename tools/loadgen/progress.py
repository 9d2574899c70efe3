"""The progress bar on stderr: done requests against `-n`, elapsed time against `-z`.

`draw` paints one frame from counts; `show` repaints from a `Live` until cancelled. It
must not know how requests are sent or measured.
"""
from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, TextIO

from tools.loadgen.config import Config

if TYPE_CHECKING:
    from tools.loadgen.runner import Live

WIDTH = 30
REFRESH_S = 0.2


async def show(config: Config, live: Live, started: float, stream: TextIO) -> None:
    """Redraw every REFRESH_S until cancelled; then a last frame and a newline."""
    try:
        while True:
            await asyncio.sleep(REFRESH_S)
            draw(config, live.finished, live.errors, started, stream)
    except asyncio.CancelledError:
        draw(config, live.finished, live.errors, started, stream)
        stream.write("\n")
        stream.flush()
        raise


def draw(config: Config, finished: int, errors: int, started: float, stream: TextIO, width: int = WIDTH) -> None:
    elapsed = time.perf_counter() - started
    fractions = []
    if config.requests:
        fractions.append(finished / config.requests)
    if config.duration:
        fractions.append(elapsed / config.duration)
    fraction = min(1.0, max(fractions)) if fractions else 0.0
    filled = int(width * fraction)
    bar = "=" * filled + (">" if filled < width else "") + " " * (width - filled - 1)
    total = f"/{config.requests}" if config.requests else ""
    rate = finished / elapsed if elapsed > 0 else 0.0
    stream.write(f"\r[{bar}] {fraction * 100:3.0f}%  {finished}{total} done  {rate:,.0f} req/s  "
                 f"{errors} errors  {elapsed:.1f}s ")
    stream.flush()
