"""The protocol clients the runner drives, behind one interface (`base.Engine`), and
`make_engine`, which picks one for a Config. Nothing here knows about the runner,
statistics or reports."""
from __future__ import annotations

from tools.loadgen.config import Config
from tools.loadgen.engines.aiohttp_engine import AiohttpEngine
from tools.loadgen.engines.base import USER_AGENT, Answer, Engine, Slot
from tools.loadgen.engines.fast_http import FastHttpEngine
from tools.loadgen.engines.grpc_engine import GrpcEngine, grpc_method, grpc_payload

__all__ = ["USER_AGENT", "AiohttpEngine", "Answer", "Engine", "FastHttpEngine", "GrpcEngine", "Slot",
           "grpc_method", "grpc_payload", "make_engine"]


def make_engine(config: Config) -> Engine:
    if config.grpc:
        return GrpcEngine(config)
    return FastHttpEngine(config) if config.http_engine == "fast" else AiohttpEngine(config)
