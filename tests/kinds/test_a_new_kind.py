"""A new kind of model is one module: this test module defines one, `Lengths` (texts in, one
label per text out, over OIP BYTES), and the gateway serves it end to end over HTTP and gRPC
with nothing under gateway/ edited for it: the config reads its `[models.lengths]` table, its
clients' requests reach it, its rows batch together whatever the front end, and each client is
answered its own labels.

The kind turns each text into a feature (its length in characters, FP32 [rows, 1]) for the
embedded simulated predictor (OUTPUT0 = 2 x INPUT0), and labels each row from the answer:
"long" when the text is longer than the table's `threshold`, else "short".
"""
from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np
import pytest

from backends.settings import PredictorSettings
from gateway.config import ConfigError
from gateway.config_keys import Kind, key, read, table
from gateway.kinds import KINDS, BatchInputs, ModelKind, answers, reads
from gateway.kinds.base import table_key, texts_column, texts_of
from tests.harness import config_for, http_json, running_gateway
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc
from wire.request import OipRequest
from wire.tensors import Tensor, TensorSpec

TEXT = TensorSpec("TEXT", "BYTES", (-1, 1))
LABEL = TensorSpec("LABEL", "BYTES", (-1, 1))


@dataclass(frozen=True, slots=True)
class LengthsConfig:
    threshold: int = key(Kind.INTEGER, 8, "A text longer than this many characters is long.", minimum=0)


def define_kind() -> type[ModelKind]:
    """The whole kind, as a module of its own would hold it (defined here, when the fixture
    runs, so that it is registered only for this module's tests)."""

    class Lengths(ModelKind):
        """Texts labelled by their length."""
        name = "lengths"
        settings_type = LengthsConfig
        table_key = table_key("lengths", "Texts labelled short or long ([models.lengths]).")
        what = "a length model"
        makes = "label texts by their length"

        @classmethod
        def configure(cls, raw: dict, key: str, predictor: PredictorSettings) -> LengthsConfig | None:
            if "lengths" not in raw:
                return None
            if predictor.simulated_task != "double":
                raise ConfigError(f"{key}.lengths", "needs the simulated model that doubles its input")
            return LengthsConfig(**read(cls.table(), table(raw, "lengths", f"{key}.lengths"), f"{key}.lengths"))

        def client_inputs(self, described: tuple[TensorSpec, ...]) -> tuple[TensorSpec, ...]:
            return (TEXT,)

        def client_outputs(self, described: tuple[TensorSpec, ...]) -> tuple[TensorSpec, ...]:
            return (LABEL,)

        def features(self, texts: list[str]) -> BatchInputs:
            lengths = np.array([[len(text)] for text in texts], dtype=np.float32)
            return BatchInputs([Tensor("INPUT0", "FP32", lengths)])

        @reads(OipRequest)
        def from_oip(self, request: OipRequest) -> BatchInputs:
            (text,) = self.model.batch_inputs_from_tensors(request.inputs)  # checked against TEXT
            batch = self.features(texts_of(self.model.name, text))
            batch.requested = [output.name for output in request.outputs]
            self.model.check_requested_outputs(batch.requested)
            return batch

        @reads(list)
        def from_instances(self, instances: list[Any]) -> BatchInputs:
            return self.features([str(instance) for instance in instances])

        def labels(self, outputs: list[Tensor]) -> list[str]:
            doubled = outputs[0].data.reshape(-1)
            return ["long" if value > 2 * self.settings.threshold else "short" for value in doubled]

        @answers(OipRequest)
        def label_tensor(self, outputs: list[Tensor], batch: BatchInputs) -> list[Tensor]:
            return self.model.select_outputs([texts_column("LABEL", self.labels(outputs))], batch.requested)

        @answers(list)
        def label_predictions(self, outputs: list[Tensor], batch: BatchInputs) -> list[str]:
            return self.labels(outputs)

    return Lengths


@pytest.fixture(scope="module")
def gw() -> Iterator[Any]:
    kind = define_kind()
    try:
        config = config_for({"name": "lengths", "lengths": {"threshold": 5},
                             "batching": {"max_batch_size": 64, "max_latency_ms": 200, "policy": "window"}},
                            {"name": "demo"})
        with running_gateway(config) as running:
            yield running
    finally:
        assert KINDS.pop(kind.name) is kind


def http_labels(gw: Any, texts: list[str]) -> tuple[list[str], str]:
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(texts), 1], "data": texts}]}
    status, answer = http_json("POST", f"{gw.http_url}/v2/models/lengths/infer", body)
    assert status == 200, answer
    (output,) = answer["outputs"]
    assert (output["name"], output["datatype"], output["shape"]) == ("LABEL", "BYTES", [len(texts), 1])
    return output["data"], answer["parameters"]["batch_id"]


def grpc_labels(gw: Any, texts: list[str]) -> tuple[list[str], str]:
    request = pb.ModelInferRequest(model_name="lengths")
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[len(texts), 1]).contents.bytes_contents.extend(
        text.encode() for text in texts)
    with grpc.insecure_channel(gw.grpc_address) as channel:
        response = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)
    (output,) = response.outputs
    assert (output.name, output.datatype, list(output.shape)) == ("LABEL", "BYTES", [len(texts), 1])
    raw = response.raw_output_contents[0]
    labels, offset = [], 0
    while offset < len(raw):  # BYTES in the raw layout: a 4-byte little-endian length before each element
        size = int.from_bytes(raw[offset:offset + 4], "little")
        labels.append(raw[offset + 4:offset + 4 + size].decode())
        offset += 4 + size
    return labels, response.parameters["batch_id"].string_param


def test_the_new_kinds_table_is_read_and_its_bad_values_refused_by_the_config():
    kind = define_kind()
    try:
        parsed = config_for({"name": "m", "lengths": {"threshold": 3}}).models[0]
        assert parsed.kind == LengthsConfig(threshold=3)
        with pytest.raises(ConfigError, match=r"models\[0\].lengths.threshold"):
            config_for({"name": "m", "lengths": {"threshold": -1}})
        with pytest.raises(ConfigError, match=r"models\[0\].lengths.colour: unknown key"):
            config_for({"name": "m", "lengths": {"colour": "red"}})
        with pytest.raises(ConfigError, match="needs the simulated model that doubles"):
            config_for({"name": "m", "lengths": {}, "simulated": {"task": "embed"}})
        with pytest.raises(ConfigError, match=r"models\[0\].lengths: a model is of one kind, not both an embedding "
                                              r"model and a length model: keep one of \[models.embeddings\] and "
                                              r"\[models.lengths\]"):
            config_for({"name": "m", "backend": "triton", "url": "127.0.0.1:1", "protocol": "grpc", "lengths": {},
                        "embeddings": {}})
    finally:
        KINDS.pop(kind.name)


def test_its_metadata_lists_the_tensors_its_clients_send_and_are_answered(gw):
    status, metadata = http_json("GET", f"{gw.http_url}/v2/models/lengths")
    assert status == 200
    assert metadata["inputs"] == [{"name": "TEXT", "datatype": "BYTES", "shape": [-1, 1]}]
    assert metadata["outputs"] == [{"name": "LABEL", "datatype": "BYTES", "shape": [-1, 1]}]


def test_http_and_grpc_clients_texts_share_a_batch_and_each_is_answered_its_own_labels(gw):
    http_texts = ["hi", "a long sentence", "tiny"]
    grpc_texts = ["abcdefgh", "ab"]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # both within one 200 ms window
        over_http = pool.submit(http_labels, gw, http_texts)
        over_grpc = pool.submit(grpc_labels, gw, grpc_texts)
        (http_answer, http_batch), (grpc_answer, grpc_batch) = over_http.result(30), over_grpc.result(30)
    assert http_answer == ["short", "long", "short"]
    assert grpc_answer == ["long", "short"]
    assert http_batch == grpc_batch  # one predictor call for both clients


def test_a_v1_client_is_answered_one_label_per_instance(gw):
    status, answer = http_json("POST", f"{gw.http_url}/v1/models/lengths:predict", {"instances": ["x", "xxxxxxx"]})
    assert status == 200 and answer["predictions"] == ["short", "long"]


def test_what_the_kind_cannot_serve_is_refused_with_the_right_status_and_the_gateway_keeps_serving(gw):
    wrong = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1.0]}]}
    status, answer = http_json("POST", f"{gw.http_url}/v2/models/lengths/infer", wrong)
    assert status == 400 and "takes inputs ['TEXT']" in answer["error"]
    status, answer = http_json("POST", f"{gw.http_url}/v1/embeddings", {"model": "lengths", "input": ["a"]})
    assert status == 404 and "is not an embedding model" in answer["error"]["message"]
    assert http_labels(gw, ["ok"])[0] == ["short"]
