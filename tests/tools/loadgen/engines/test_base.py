"""make_engine picks the engine a Config asks for, and every engine implements base.Engine."""
from __future__ import annotations

import pytest

from tests.tools.loadgen.support import oip
from tools.loadgen.config import Config
from tools.loadgen.engines import AiohttpEngine, Engine, FastHttpEngine, GrpcEngine, make_engine


@pytest.mark.parametrize("config, kind", [
    (Config(target="http://127.0.0.1:1/", requests=1), FastHttpEngine),
    (Config(target="https://127.0.0.1:1/", requests=1), AiohttpEngine),
    (Config(target="http://127.0.0.1:1/", requests=1, engine="aiohttp"), AiohttpEngine),
    (Config(target="127.0.0.1:1", requests=1, grpc=True, call="inference.GRPCInferenceService/ModelInfer",
            body=oip()), GrpcEngine),
])
def test_make_engine_picks_by_config_and_every_engine_is_an_engine(config, kind):
    engine = make_engine(config.validate())
    assert type(engine) is kind and isinstance(engine, Engine)
