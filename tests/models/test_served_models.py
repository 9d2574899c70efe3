"""Served models (gateway/models/, each form chosen by gateway/models/forms.py): a model that
describes nothing is served all the same, and what the predictor describes is followed when
it changes."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

from backends.base import Backend
from backends.settings import PredictorProtocol, PredictorSettings
from gateway.batching.config import BatchingConfig
from gateway.config import ModelConfig
from gateway.models import base as models
from gateway.models.forms import served_model
from wire.errors import InvalidInput
from wire.tensors import ModelSignature, Tensor, TensorSpec

DESCRIBED = ModelSignature((TensorSpec("INPUT0", "FP32", (-1, 2)),), (TensorSpec("OUTPUT0", "FP32", (-1, 2)),))
OTHER = ModelSignature((TensorSpec("ids", "INT64", (-1, -1)),), (TensorSpec("logits", "FP32", (-1, 3)),))


class FakePredictor(Backend):
    """A predictor whose metadata answer the test changes."""

    def __init__(self, described: tuple[ModelSignature, list[str]] | None) -> None:
        self.described = described

    async def infer(self, inputs: list[Tensor]) -> list[Tensor]:
        return inputs

    async def ready(self) -> bool:
        return True

    async def metadata(self) -> tuple[ModelSignature, list[str]] | None:
        return self.described


def tensor_model(backend: FakePredictor, declared: ModelSignature | None = None) -> models.ServedModel:
    settings = PredictorSettings(PredictorProtocol.OIP_HTTP, server="kserve", model="m", signature=declared)
    return served_model(ModelConfig("m", settings), backend)


async def settled(model: models.ServedModel) -> None:
    model.start()
    await asyncio.sleep(0.05)


def test_a_model_that_describes_nothing_is_ready_and_passes_oip_tensors_through(monkeypatch):
    async def scenario() -> None:
        model = tensor_model(FakePredictor((ModelSignature(), ["1"])))
        await settled(model)
        assert await model.ready()
        sent = [Tensor("anything", "INT8", np.zeros((2, 5), np.int8))]
        assert model.batch_inputs_from_tensors(sent) == sent
        # v1 instances travel as KServe's unnamed input, typed by their values.
        [unnamed] = model.batch_inputs_from_instances([[1, 2]]).tensors
        assert (unnamed.name, unnamed.datatype, unnamed.data.tolist()) == ("input-0", "INT64", [[1, 2]])
        with pytest.raises(InvalidInput, match=r"describes no inputs.*\[\[models.inputs\]\]"):
            model.batch_inputs_from_instances([[1, 2], [3]])
        await model.close()

    asyncio.run(scenario())


def test_what_the_predictor_describes_is_read_again_and_followed(monkeypatch):
    monkeypatch.setattr(models, "METADATA_REFRESH_S", 0.01)

    async def scenario() -> None:
        predictor = FakePredictor((DESCRIBED, ["1"]))
        model = tensor_model(predictor)
        await settled(model)
        assert model.signature == DESCRIBED
        predictor.described = (OTHER, ["2"])  # restarted with another model
        await asyncio.sleep(0.05)
        assert model.signature == OTHER and model.versions == ["2"]
        await model.close()

    asyncio.run(scenario())


def test_a_declared_signature_stands_whatever_the_predictor_says(monkeypatch):
    monkeypatch.setattr(models, "METADATA_REFRESH_S", 0.01)

    async def scenario() -> None:
        model = tensor_model(FakePredictor((OTHER, ["3"])), declared=DESCRIBED)
        await settled(model)
        assert model.signature == DESCRIBED and model.versions == ["3"]
        await model.close()

    asyncio.run(scenario())


def test_a_tensor_model_is_ready_once_its_predictor_has_answered_metadata_even_with_nothing():
    async def scenario() -> None:
        predictor = FakePredictor(None)  # up, but has not answered its metadata yet
        model = tensor_model(predictor)
        await settled(model)
        assert not await model.ready()
        predictor.described = (ModelSignature(), [])
        await asyncio.sleep(models.METADATA_RETRY_S + 0.1)
        assert await model.ready() and model.described_inputs == ()
        await model.close()

    asyncio.run(scenario())


class TritonLike(FakePredictor):
    """A predictor with a model configuration (Triton's extension) the test changes; one that
    says it has none (`reads_model_config` False: KServe's) would answer 404 to it."""

    def __init__(self, config: dict | None, reads_model_config: bool = True) -> None:
        super().__init__((DESCRIBED, ["1"]))
        self.config = config
        self.reads_model_config = reads_model_config
        self.asked = 0

    async def model_config(self) -> dict | None:
        self.asked += 1
        return self.config


def triton_model(backend: FakePredictor, max_batch_size: int = 32) -> models.ServedModel:
    settings = PredictorSettings(PredictorProtocol.OIP_HTTP, server="triton", model="m")
    return served_model(ModelConfig("m", settings, BatchingConfig(max_batch_size=max_batch_size)), backend)


def test_batches_are_capped_at_the_rows_the_predictor_takes_in_one_call(monkeypatch, caplog):
    monkeypatch.setattr(models, "METADATA_REFRESH_S", 0.01)

    async def scenario() -> None:
        predictor = TritonLike({"name": "m", "max_batch_size": 8})
        model = triton_model(predictor)
        changes: list[int] = []
        model.start(on_batch_limit=lambda: changes.append(model.batching.max_batch_size))
        await asyncio.sleep(0.05)
        assert model.batch_limit == 8 and model.batching.max_batch_size == 8
        assert model.batching == BatchingConfig(max_batch_size=8)  # only the cap differs from the config
        assert model.config.batching.max_batch_size == 32
        assert changes == [8]  # told once, not at every refresh
        predictor.config = None  # a configuration not read this time changes nothing
        await asyncio.sleep(0.05)
        assert model.batching.max_batch_size == 8 and changes == [8]
        predictor.config = {"max_batch_size": 64}  # the predictor restarted with a larger one
        await asyncio.sleep(0.05)
        assert model.batch_limit == 64 and model.batching.max_batch_size == 32  # the configured cap stands
        assert changes == [8, 32]
        await model.close()

    with caplog.at_level("WARNING", logger="gateway.models.base"):
        asyncio.run(scenario())
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        "model 'm': the predictor takes at most 8 rows a call (its max_batch_size), fewer than max_batch_size 32: "
        "batches are capped at 8, larger requests split to fit"]


def test_the_batch_limit_is_known_before_the_model_is_ready():
    async def scenario() -> None:
        model = triton_model(TritonLike({"max_batch_size": 4}))
        model.start()
        while not await model.ready():
            await asyncio.sleep(0.001)
        assert model.batching.max_batch_size == 4
        await model.close()

    asyncio.run(asyncio.wait_for(scenario(), 5))


def test_only_a_predictor_that_says_it_has_a_model_configuration_is_asked_for_it():
    async def scenario() -> None:
        predictor = TritonLike({"max_batch_size": 4}, reads_model_config=False)
        settings = PredictorSettings(PredictorProtocol.OIP_HTTP, server="kserve", model="m")
        model = served_model(ModelConfig("m", settings), predictor)
        await settled(model)
        assert predictor.asked == 0 and model.batch_limit is None and model.batching.max_batch_size == 32
        await model.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(("config", "limit"), [
    ({"max_batch_size": 8}, 8), ({"max_batch_size": "16"}, 16),  # gRPC's JSON may spell it as a string
    ({"max_batch_size": 0}, None),  # no batch dimension: says nothing of the gateway's rows
    ({}, None), (None, None), ({"max_batch_size": "many"}, None), ({"max_batch_size": True}, None),
    ({"max_batch_size": -1}, None),
])
def test_the_predictors_batch_limit_is_read_from_its_max_batch_size(config, limit):
    assert models.predictor_batch_limit(config) == limit
