"""PredictorSettings: what the config's keys become for a predictor client."""
from __future__ import annotations

import dataclasses

import pytest

from backends.settings import Cost, PredictorProtocol, PredictorSettings
from gateway import config


def settings(**fields) -> PredictorSettings:
    return config.parse({"models": [{"name": "m", **fields}]}).models[0].predictor


def test_the_embedded_default_is_the_simulated_model_named_demo():
    (model,) = config.embedded_default().models
    assert model.predictor == PredictorSettings(PredictorProtocol.SIMULATED, server="simulated", model="demo")
    assert model.predictor.simulated_cost == Cost()


def test_keys_become_settings():
    parsed = settings(backend="kserve", protocol="grpc", url=["a:1", "b:2"], backend_model="there", tls=True,
                      inputs=[{"name": "X", "datatype": "INT64", "shape": [-1, 3]}])
    assert (parsed.protocol, parsed.server, parsed.model) == (PredictorProtocol.OIP_GRPC, "kserve", "there")
    assert (parsed.addresses, parsed.url, parsed.tls, parsed.binary_data) == (("a:1", "b:2"), "a:1", True, False)
    assert parsed.signature is not None and parsed.signature.inputs[0].name == "X"


def test_defaults_follow_the_server_and_the_address():
    assert settings(backend="triton", url="http://x:1").binary_data is True
    assert settings(backend="kserve", api="v2", url="http://x:1").binary_data is False
    assert settings(backend="kserve", url="https://x:1").tls is True
    assert settings(backend="kserve", url="http://x:1").tls is False
    assert settings(backend="kserve", url="http://x:1").model == "m"
    simulated = settings(simulated={"call_ms": 1, "per_instance_ms": 0.5, "slots": 2})
    assert (simulated.addresses, simulated.url) == ((), "")
    assert simulated.simulated_cost == Cost(call_ms=1, per_instance_ms=0.5, slots=2)


@pytest.mark.parametrize("protocol, transport", [
    (PredictorProtocol.OIP_HTTP, "http"), (PredictorProtocol.KSERVE_V1_HTTP, "http"),
    (PredictorProtocol.TORCHSERVE_KSERVE_HTTP, "http"), (PredictorProtocol.OIP_GRPC, "grpc"),
    (PredictorProtocol.TORCHSERVE_PREDICTIONS_GRPC, "grpc"), (PredictorProtocol.TORCHSERVE_OIP_GRPC, "grpc"),
    (PredictorProtocol.SIMULATED, "in-process"),
])
def test_each_protocol_names_its_transport(protocol, transport):
    assert protocol.transport == transport


def test_settings_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings().model = "other"  # type: ignore[misc]
