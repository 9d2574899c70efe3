"""A worker's stand-ins (gateway/process/workers/worker_role.py): what a worker's served model asks
of its predictor client, the batcher's client answers."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from backends.base import CAPABILITIES, BatchForm
from backends.registry import create_backend
from gateway import config
from gateway.process.workers.batcher import Batcher
from gateway.process.workers.worker_role import RemoteBackend


class _Asked:
    """A BatcherClient whose questions the batcher's `predictor` answers in this process."""

    def __init__(self, batcher: Batcher) -> None:
        self.batcher = batcher

    def request(self, message):
        question = message(1)
        return 1, asyncio.ensure_future(self.batcher.predictor(question.model, question.what))


@pytest.mark.parametrize("fields, form, capability", [
    ({"backend": "triton", "protocol": "grpc", "url": "127.0.0.1:1"}, BatchForm.TENSORS, "reads_model_config"),
    ({"backend": "kserve", "api": "rerank", "url": "http://127.0.0.1:1"}, BatchForm.TENSORS, "one_query_per_call"),
    ({"backend": "kserve", "api": "openai", "url": "http://127.0.0.1:1"}, BatchForm.TENSORS, "takes_dimensions"),
    ({"backend": "kserve", "url": "http://127.0.0.1:1"}, BatchForm.INSTANCES, None),
])
async def test_a_worker_s_predictor_stand_in_says_what_the_batcher_s_client_says(fields, form, capability):
    client = create_backend(config.parse({"models": [{"name": "m", **fields}]}).models[0].predictor)
    batcher = Batcher(scheduler=None, path="")  # asked about the predictor only
    batcher.views = SimpleNamespace(local=SimpleNamespace(models={"m": SimpleNamespace(backend=client)}))
    stand_in = await RemoteBackend.of("m", _Asked(batcher))
    assert stand_in.batch_form is form
    assert stand_in.capabilities() == {name: name == capability for name in CAPABILITIES}
