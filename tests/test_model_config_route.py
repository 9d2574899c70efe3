"""The configuration route serves what the gateway knows (issue 45, item 5).

`GET /v2/models/<m>/config` and gRPC `ModelConfig` answer from the predictor's model
configuration as the model read it (at readiness, and again at each metadata refresh),
never by asking the predictor per client request: before, each asked it live through the
model's own connection pool, so a predictor whose `/config` hung held that pool while 80
clients polled (the model's inference fell from 333/s to 0-5 for 6 s). A malformed
configuration is logged and reported as unknown: the gateway's own view, never a 500 or
INTERNAL."""
from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest

from gateway.models import base as models
from tests.harness import config_for, http_json, running_gateway
from tests.http_stub import JsonHandler, serving
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc

METADATA = {"name": "m", "versions": ["1"], "platform": "stub",
            "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 2]}],
            "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, 2]}]}
CONFIG = {"name": "m", "max_batch_size": 8, "instance_group": [{"count": 2, "kind": "KIND_CPU"}],
          "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [2]}],
          "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [2]}]}


class Predictor:
    """A Triton-like predictor over HTTP whose `/config` the test sets: a document, or held
    (until released) to stand for one that hangs; counting the times it is asked."""

    def __init__(self) -> None:
        self.config: Any = CONFIG
        self.asked = 0
        self.hold = threading.Event()  # set: /config hangs until `release`
        self.released = threading.Event()

    @contextlib.contextmanager
    def serving(self) -> Iterator[str]:
        predictor = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:  # noqa: N802
                if self.path.endswith("/config"):
                    predictor.asked += 1
                    if predictor.hold.is_set():
                        predictor.released.wait(30)  # a bound only: the test releases it
                    self.answer_json(predictor.config)
                elif self.path.endswith("/ready"):
                    self.answer_json({})
                else:
                    self.answer_json(METADATA)

        try:
            with serving(Handler) as url:
                yield url
        finally:
            self.released.set()


@pytest.fixture
def predictor(monkeypatch):
    monkeypatch.setattr(models, "METADATA_REFRESH_S", 3600.0)  # read at readiness only, in these tests
    return Predictor()


@contextlib.contextmanager
def gateway_before(predictor: Predictor) -> Iterator[Any]:
    with predictor.serving() as url, \
            running_gateway(config_for({"name": "m", "backend": "triton", "url": url})) as gw:
        yield gw


def grpc_config(gw) -> pb.ModelConfigResponse:
    with grpc.insecure_channel(gw.grpc_address) as channel:
        return pb_grpc.GRPCInferenceServiceStub(channel).ModelConfig(pb.ModelConfigRequest(name="m"), timeout=10)


def test_clients_polling_the_configuration_never_reach_the_predictor(predictor):
    """40 polls over HTTP and 40 over gRPC, 8 at a time, while the predictor's /config hangs:
    each answered from what the model read at readiness (the predictor's instance_group and
    the gateway's batching), none reaching the predictor.
    Before: every poll was a call to the predictor (40 + 40 more), each held there."""
    with gateway_before(predictor) as gw:
        asked = predictor.asked
        assert asked >= 1  # read at readiness
        predictor.hold.set()
        url = f"{gw.http_url}/v2/models/m/config"
        with ThreadPoolExecutor(8) as pool:
            https = list(pool.map(lambda _: http_json("GET", url, timeout=10), range(40)))
            grpcs = list(pool.map(lambda _: grpc_config(gw), range(40)))
        assert {status for status, _ in https} == {200}
        document = https[0][1]
        assert document["instance_group"] == CONFIG["instance_group"] and document["max_batch_size"] == 8
        assert document["input"][0]["dims"] == [2]  # the same at every poll: the kept one is never altered
        assert all(body == document for _, body in https)
        assert all(response.config.max_batch_size == 8 and response.config.input[0].dims == [2] for response in grpcs)
        assert predictor.asked == asked


@pytest.mark.parametrize("malformed", [
    {"name": "m", "input": 5},
    {"name": "m", "input": [{"name": "INPUT0", "dims": "2"}]},
    {"name": "m", "input": [{"name": "INPUT0", "dims": [2]}], "output": [7]},
    {"name": "m", "input": [{"name": "INPUT0", "dims": [2]}], "output": {"name": "OUTPUT0"}},
    {"name": "m", "input": [{"name": "INPUT0", "dims": [2]}], "output": None},
], ids=["input-not-a-list", "dims-not-a-list", "output-not-objects", "output-an-object", "output-null"])
def test_a_malformed_configuration_is_logged_and_reported_as_unknown(predictor, caplog, malformed):
    """Before: 500 over HTTP and INTERNAL over gRPC at every poll (`output` null: 500 still
    after d5ff5ac, which took a null for an absent list)."""
    predictor.config = malformed
    with caplog.at_level(logging.WARNING, logger="gateway.models.base"), gateway_before(predictor) as gw:
        status, document = http_json("GET", f"{gw.http_url}/v2/models/m/config", timeout=10)
        assert status == 200, document
        assert document["name"] == "m" and document["max_batch_size"] == 32  # the gateway's own view
        assert document["input"] == [{"name": "INPUT0", "data_type": "TYPE_FP32", "format": "FORMAT_NONE",
                                      "dims": [2], "optional": False}]  # from the predictor's metadata
        assert grpc_config(gw).config.name == "m"
    warnings = [r.getMessage() for r in caplog.records if "model configuration is malformed" in r.getMessage()]
    assert len(warnings) == 1, warnings


def test_a_field_protobuf_cannot_hold_is_reported_as_unknown_over_grpc(predictor, caplog):
    """Valid JSON for the gateway, not for Triton's ModelConfig message (a parameters map
    of numbers): gRPC answers the gateway's own view, once logged. Before: INTERNAL."""
    predictor.config = {**CONFIG, "parameters": {"threads": 4}}
    with caplog.at_level(logging.WARNING, logger="gateway.grpc.oip"), gateway_before(predictor) as gw:
        assert http_json("GET", f"{gw.http_url}/v2/models/m/config", timeout=10)[1]["parameters"] == {"threads": 4}
        for _ in range(3):
            response = grpc_config(gw)
            assert response.config.name == "m" and response.config.max_batch_size == 8  # capped, as learned
            assert not response.config.parameters  # the predictor's left out
    assert sum("does not fit Triton's ModelConfig" in r.getMessage() for r in caplog.records) == 1
