"""The registry: every combination of the config's `backend` / `protocol` / `api` keys
resolves to one PredictorProtocol and gets that protocol's client (no server needed)."""
from __future__ import annotations

import pytest

from backends.base import CAPABILITIES, Backend, BatchForm
from backends.kserve_v1 import KServeV1Backend
from backends.oip_grpc import OIP_SERVICE, TORCHSERVE_OIP_SERVICE, OipGrpcBackend
from backends.oip_http import OipHttpBackend
from backends.registry import create_backend
from backends.replicas import ReplicaSet
from backends.rerank_http import CohereRerankBackend, ScoreBackend
from backends.settings import PredictorProtocol
from backends.simulated.inprocess import InProcessBackend
from backends.torchserve_grpc import TorchServeGrpcBackend
from gateway import config

HTTP, GRPC = "http://127.0.0.1:1", "127.0.0.1:1"
SIGNATURE = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]}]}


def model(**fields) -> config.ModelConfig:
    return config.parse({"models": [{"name": "m", **fields}]}).models[0]


@pytest.mark.parametrize("fields, protocol, client", [
    ({}, PredictorProtocol.SIMULATED, InProcessBackend),
    ({"backend": "simulated", "protocol": "grpc"}, PredictorProtocol.SIMULATED, InProcessBackend),
    ({"backend": "triton", "url": HTTP}, PredictorProtocol.OIP_HTTP, OipHttpBackend),
    ({"backend": "triton", "protocol": "grpc", "url": GRPC}, PredictorProtocol.OIP_GRPC, OipGrpcBackend),
    ({"backend": "kserve", "url": HTTP}, PredictorProtocol.KSERVE_V1_HTTP, KServeV1Backend),
    ({"backend": "kserve", "url": HTTP, "api": "v2"}, PredictorProtocol.OIP_HTTP, OipHttpBackend),
    ({"backend": "kserve", "protocol": "grpc", "url": GRPC}, PredictorProtocol.OIP_GRPC, OipGrpcBackend),
    ({"backend": "torchserve", "url": HTTP}, PredictorProtocol.TORCHSERVE_KSERVE_HTTP, KServeV1Backend),
    ({"backend": "torchserve", "protocol": "grpc", "url": GRPC},
     PredictorProtocol.TORCHSERVE_PREDICTIONS_GRPC, TorchServeGrpcBackend),
    ({"backend": "torchserve", "protocol": "grpc", "api": "v2", "url": GRPC, **SIGNATURE},
     PredictorProtocol.TORCHSERVE_OIP_GRPC, OipGrpcBackend),
    ({"backend": "kserve", "api": "score", "url": HTTP}, PredictorProtocol.SCORE_HTTP, ScoreBackend),
    ({"backend": "kserve", "api": "rerank", "url": HTTP}, PredictorProtocol.RERANK_HTTP, CohereRerankBackend),
])
def test_each_combination_resolves_to_one_protocol_and_its_client(fields, protocol, client):
    settings = model(**fields).predictor
    assert settings.protocol is protocol
    assert type(create_backend(settings)) is client


def test_every_protocol_is_reachable_from_the_config():
    resolved = {model(**fields).predictor.protocol for fields in [
        {}, {"backend": "triton", "url": HTTP}, {"backend": "triton", "protocol": "grpc", "url": GRPC},
        {"backend": "kserve", "url": HTTP}, {"backend": "torchserve", "url": HTTP},
        {"backend": "torchserve", "protocol": "grpc", "url": GRPC},
        {"backend": "torchserve", "protocol": "grpc", "api": "v2", "url": GRPC},
        {"backend": "kserve", "api": "openai", "url": HTTP}, {"backend": "kserve", "api": "score", "url": HTTP},
        {"backend": "kserve", "api": "rerank", "url": HTTP}]}
    assert resolved == set(PredictorProtocol)


def test_the_clients_are_told_their_protocol_s_quirks():
    openai = create_backend(model(backend="kserve", api="openai", url=HTTP, base_path="/v1").predictor)
    assert (openai._embeddings_path, openai.takes_dimensions) == ("/v1/embeddings", True)
    oip_http = create_backend(model(backend="kserve", api="v2", url=HTTP, binary_data=True).predictor)
    assert oip_http.binary and oip_http._infer_path == "/v2/models/m/infer"
    v1 = create_backend(model(backend="kserve", url=HTTP, backend_model="other").predictor)
    assert (v1._ready_path, v1.batch_form) == ("/v1/models/other", BatchForm.INSTANCES)
    torchserve_http = create_backend(model(backend="torchserve", url=HTTP).predictor)
    assert torchserve_http._ready_path == "/ping"
    oip = create_backend(model(backend="triton", protocol="grpc", url=f"grpc://{GRPC}").predictor)
    assert (oip.service, oip.typed_contents, oip.restore_outputs) == (OIP_SERVICE, False, False)
    assert oip.grpc.address == GRPC
    torchserve_oip = create_backend(model(backend="torchserve", protocol="grpc", api="v2", url=GRPC, tls=True,
                                          **SIGNATURE).predictor)
    assert (torchserve_oip.service, torchserve_oip.typed_contents, torchserve_oip.restore_outputs) == (
        TORCHSERVE_OIP_SERVICE, True, True)
    assert torchserve_oip._signature is not None and torchserve_oip._signature.inputs[0].name == "INPUT0"
    assert torchserve_oip.grpc.tls
    simulated = create_backend(model(backend_model="demo2", simulated={"call_ms": 0, "slots": 3}).predictor)
    assert (simulated.model.name, simulated.model.cost.call_ms, simulated.model.cost.slots) == ("demo2", 0, 3)


def test_several_addresses_become_a_replica_set_of_the_protocol_s_clients():
    settings = model(backend="triton", protocol="grpc", url=["127.0.0.1:1", "127.0.0.1:2"]).predictor
    replicas = create_backend(settings)
    assert isinstance(replicas, ReplicaSet) and replicas.addresses() == ["127.0.0.1:1", "127.0.0.1:2"]
    assert [type(r.backend) for r in replicas.replicas] == [OipGrpcBackend, OipGrpcBackend]
    assert [r.backend.grpc.address for r in replicas.replicas] == ["127.0.0.1:1", "127.0.0.1:2"]
    rows = create_backend(model(backend="kserve", url=["http://a:1", "http://b:2"]).predictor)
    assert isinstance(rows, ReplicaSet) and rows.batch_form is BatchForm.INSTANCES
    assert [r.backend.http.base_url for r in rows.replicas] == ["http://a:1", "http://b:2"]


@pytest.mark.parametrize("fields, capabilities", [
    ({}, ()),
    ({"simulated": {"task": "embed"}}, ()),
    ({"simulated": {"task": "rerank"}}, ()),
    ({"backend": "triton", "url": HTTP}, ("reads_model_config",)),
    ({"backend": "triton", "protocol": "grpc", "url": GRPC}, ("reads_model_config",)),
    ({"backend": "kserve", "url": HTTP}, ()),
    ({"backend": "kserve", "url": HTTP, "api": "v2"}, ()),
    ({"backend": "kserve", "protocol": "grpc", "url": GRPC}, ()),
    ({"backend": "torchserve", "url": HTTP}, ()),
    ({"backend": "torchserve", "protocol": "grpc", "url": GRPC}, ()),
    ({"backend": "torchserve", "protocol": "grpc", "api": "v2", "url": GRPC, **SIGNATURE}, ()),
    ({"backend": "kserve", "api": "openai", "url": HTTP}, ("takes_dimensions",)),
    ({"backend": "kserve", "api": "score", "url": HTTP}, ()),
    ({"backend": "kserve", "api": "rerank", "url": HTTP}, ("one_query_per_call",)),
])
def test_each_client_says_what_it_can_do(fields, capabilities):
    """A Triton client reads its model configuration and a KServe v2 one (same protocol) does
    not; only an OpenAI-compatible client shortens vectors; only a Cohere-shaped rerank
    client takes one query per call."""
    client = create_backend(model(**fields).predictor)
    assert client.capabilities() == {name: name in capabilities for name in CAPABILITIES}


def test_every_capability_is_a_flag_every_client_has_by_default():
    assert set(CAPABILITIES) == {"takes_dimensions", "reads_model_config", "one_query_per_call"}
    assert all(getattr(Backend, name) is False for name in CAPABILITIES)


@pytest.mark.parametrize("fields, capability", [
    ({"backend": "triton", "protocol": "grpc", "url": ["127.0.0.1:1", "127.0.0.1:2"]}, "reads_model_config"),
    ({"backend": "kserve", "api": "rerank", "url": ["http://a:1", "http://b:2"]}, "one_query_per_call"),
    ({"backend": "kserve", "api": "openai", "url": ["http://a:1", "http://b:2"]}, "takes_dimensions"),
    # No replica is known before the name is looked up: the unstarted client of the url says it.
    ({"backend": "kserve", "api": "rerank", "url": "http://rerank.svc:80", "dns_replicas": True}, "one_query_per_call"),
    ({"backend": "triton", "url": "http://triton.svc:8000", "dns_replicas": True}, "reads_model_config"),
])
def test_a_replica_set_says_what_its_replicas_say(fields, capability):
    replicas = create_backend(model(**fields).predictor)
    assert isinstance(replicas, ReplicaSet)
    assert replicas.capabilities() == {name: name == capability for name in CAPABILITIES}
    assert all(replica.backend.capabilities() == replicas.capabilities() for replica in replicas.replicas)


def test_dns_replicas_become_a_replica_set_that_finds_its_replicas_by_the_url_s_name():
    settings = model(backend="kserve", url="http://predictor.models.svc:8080", dns_replicas=True,
                     dns_refresh_ms=2000).predictor
    assert settings.dns_refresh_s == 2.0
    replicas = create_backend(settings)
    assert isinstance(replicas, ReplicaSet) and replicas.addresses() == []  # found when it starts
    assert replicas.batch_form is BatchForm.INSTANCES


@pytest.mark.parametrize("fields, message", [
    ({"backend": "kserve", "protocol": "grpc", "api": "v1", "url": GRPC}, "HTTP only"),
    ({"backend": "simulated", "protocol": "grpc", "api": "v1"}, "HTTP only"),
    ({"backend": "triton", "api": "v1", "url": HTTP}, "only the Open Inference Protocol"),
    ({"backend": "torchserve", "api": "v2", "url": HTTP}, "KServe envelope"),
])
def test_combinations_no_protocol_speaks_are_refused(fields, message):
    with pytest.raises(config.ConfigError, match=message) as caught:
        model(**fields)
    assert caught.value.key == "models[0].api"


def torchserve(**fields) -> config.ModelConfig:
    return config.parse({"models": [{"name": "m", "backend": "torchserve", **fields}]}).models[0]


def test_each_torchserve_protocol_and_api_gets_its_client():
    http = create_backend(torchserve(url="http://127.0.0.1:1").predictor)
    assert isinstance(http, KServeV1Backend) and http._ready_path == "/ping"
    predictions = create_backend(torchserve(protocol="grpc", url="127.0.0.1:1").predictor)
    assert isinstance(predictions, TorchServeGrpcBackend)
    oip = create_backend(torchserve(protocol="grpc", api="v2", url="127.0.0.1:1",
                                    inputs=[{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]}]).predictor)
    assert isinstance(oip, OipGrpcBackend)
    assert (oip.service, oip.typed_contents, oip.restore_outputs) == (TORCHSERVE_OIP_SERVICE, True, True)
    assert (torchserve(protocol="grpc", url="127.0.0.1:1").predictor.protocol
            is PredictorProtocol.TORCHSERVE_PREDICTIONS_GRPC)


@pytest.mark.parametrize("fields, message", [
    ({"url": ["http://a:1", "http://b:1"]}, "one host name"),
    ({"url": "http://predictor.models.svc"}, "a host name and a port"),
    ({"url": "https://predictor.models.svc:8443"}, "TLS"),
    ({"url": "http://predictor.models.svc:8080", "dns_replicas": False, "dns_refresh_ms": 100}, "only with"),
])
def test_dns_replicas_are_refused_where_they_cannot_work(fields, message):
    with pytest.raises(config.ConfigError, match=message):
        model(backend="kserve", **{"dns_replicas": True, **fields})
