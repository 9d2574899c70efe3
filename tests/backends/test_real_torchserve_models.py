"""The gateway in front of the REAL TorchServe serving models that compute, as a user of
TorchServe moves to it: every client command of TorchServe's and KServe's docs, unchanged
but for the address, gets the answer TorchServe itself gives (to within float tolerance).

* ``image`` (a CNN, Pillow decoding): ``curl -T kitten.png``, ``curl -F data=@kitten.jpg``,
  the KServe docs' base64 instances, and TorchServe's gRPC ``Predictions`` with the raw
  bytes, through the gateway to TorchServe's ``kserve`` envelope (``batchSize`` 1) over HTTP
  and over gRPC, against TorchServe's own answer (its own API, no envelope). Concurrent
  uploads become fewer TorchServe calls, each client getting its own picture's answer.
* ``encoder`` (a TransformerEncoder): token ids of different lengths padded by the gateway
  (to buckets, with each row's length generated) answer as TorchServe's own batching, which
  pads in the handler; over TorchServe's JSON body, KServe v1 and the Open Inference Protocol.
"""
from __future__ import annotations

import base64
import concurrent.futures
import json
import os
import pathlib
import subprocess
import sys

import grpc
import orjson
import pytest

from tests.harness import config_for, http_json, running_gateway
from tests.predictors import images
from tests.predictors.torchserve_clients import (
    CURL_ENV,
    JSON,
    assert_close,
    assert_same_top5,
    assert_top5,
    curl,
    curl_at_once,
    ok,
)
from tests.readme import commands_after
from wire.generated.torchserve import inference_pb2 as ts_pb
from wire.generated.torchserve import inference_pb2_grpc as ts_grpc

BATCHING = {"max_batch_size": 8}
ENCODER = {
    "inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [-1, -1], "pad": {"dim": 1, "value": 0}},
               {"name": "length", "datatype": "INT64", "shape": [-1, 1], "generate": "length"}],
    "outputs": [{"name": "embedding", "datatype": "FP32", "shape": [-1, 64]}],
}
ROWS = [[(11 * i + j) % 997 + 1 for j in range(length)] for i, length in enumerate((3, 9, 40, 17, 64, 25, 33, 12))]


@pytest.fixture(scope="module")
def gw(torchserve_models_server):
    server = torchserve_models_server
    models = [
        {"name": "image", "backend": "torchserve", "protocol": "http", "url": server.http_url, "batching": BATCHING},
        {"name": "image-grpc", "backend": "torchserve", "protocol": "grpc", "url": server.grpc_address,
         "backend_model": "image", "batching": BATCHING},
        {"name": "encoder", "backend": "torchserve", "protocol": "http", "url": server.http_url, **ENCODER,
         "batching": {**BATCHING, "buckets": [16, 32, 64, 128]}},
    ]
    with running_gateway(config_for(*models)) as running:
        yield running


@pytest.fixture(scope="module")
def pictures(tmp_path_factory) -> pathlib.Path:
    folder = tmp_path_factory.mktemp("pictures")
    (folder / "kitten.png").write_bytes(images.png(1))
    (folder / "kitten.jpg").write_bytes(images.jpeg(2, size=(320, 240)))
    for seed in range(8):
        (folder / f"picture-{seed}.png").write_bytes(images.png(200 + seed))
    return folder


@pytest.mark.parametrize("model", ["image", "image-grpc"])
@pytest.mark.parametrize("name", ["kitten.png", "kitten.jpg"])
def test_curl_t_and_curl_f_get_torchserves_own_answer(gw, torchserve_batching_server, pictures, model, name):
    expected = ok(curl(f"{torchserve_batching_server.http_url}/predictions/image", "-T", name, cwd=pictures))
    assert_top5(expected)
    put = ok(curl(f"{gw.http_url}/predictions/{model}", "-T", name, cwd=pictures))
    multipart = ok(curl("-F", f"data=@{name}", f"{gw.http_url}/predictions/{model}", cwd=pictures))
    posted = ok(curl("--data-binary", f"@{name}", "-H", "Content-Type: image/png",
                     f"{gw.http_url}/predictions/{model}", cwd=pictures))
    for got in (put, multipart, posted):
        assert_same_top5(got, expected)


def test_the_kserve_docs_base64_instances_get_torchserves_own_answers(gw, torchserve_batching_server, pictures):
    names = ["kitten.png", "picture-0.png", "kitten.jpg"]
    body = {"instances": [{"data": base64.b64encode((pictures / n).read_bytes()).decode()} for n in names]}
    (pictures / "instances.json").write_text(json.dumps(body))
    predictions = ok(curl("-X", "POST", f"{gw.http_url}/v1/models/image:predict", *JSON, "-d", "@instances.json",
                          cwd=pictures))["predictions"]
    for name, got in zip(names, predictions, strict=True):
        expected = ok(curl(f"{torchserve_batching_server.http_url}/predictions/image", "-T", name, cwd=pictures))
        assert_same_top5(got, expected)


def test_torchserves_grpc_client_with_raw_bytes_gets_the_same_answer(gw, torchserve_batching_server, pictures):
    expected = ok(curl(f"{torchserve_batching_server.http_url}/predictions/image", "-T", "kitten.png", cwd=pictures))
    with grpc.insecure_channel(gw.grpc_address) as channel:
        stub = ts_grpc.InferenceAPIsServiceStub(channel)
        for model in ("image", "image-grpc"):
            request = ts_pb.PredictionsRequest(model_name=model, input={"data": (pictures / "kitten.png").read_bytes()})
            assert_same_top5(orjson.loads(stub.Predictions(request, timeout=60).prediction), expected)


@pytest.mark.parametrize("model", ["image", "image-grpc"])
def test_concurrent_uploads_share_torchserve_calls_and_each_gets_its_own_answer(gw, torchserve_models_server,
                                                                              pictures, model):
    url = f"{gw.http_url}/predictions/{model}"
    names = [f"picture-{seed}.png" for seed in range(8)]
    alone = [ok(curl(url, "-T", name, cwd=pictures)) for name in names]
    for _ in range(5):  # eight curls started at once; retried until the gateway held two together
        before = len(torchserve_models_server.calls("image"))
        together = [ok(reply) for reply in curl_at_once([(url, "-T", name) for name in names], pictures)]
        calls = torchserve_models_server.calls("image")[before:]
        assert sum(call["batch_size"] for call in calls) == len(names)
        for got, expected in zip(together, alone, strict=True):
            assert_same_top5(got, expected)
        if len(calls) < len(names):
            break
    else:
        pytest.fail(f"eight concurrent uploads were never merged: {calls}")


@pytest.mark.parametrize("model", ["image", "image-grpc"])
def test_an_upload_that_is_not_an_image_fails_alone_not_its_batch(gw, torchserve_models_server, pictures, model):
    """TorchServe fails the whole call when its handler raises on one row: the gateway
    bisects the batch so that only the bad upload gets the error (502)."""
    (pictures / "notes.txt").write_text("not a picture\n")
    url = f"{gw.http_url}/predictions/{model}"
    status, body = curl(url, "-T", "notes.txt", cwd=pictures)
    assert status == 502 and body["type"] == "HandlerFailed" and "handler failed" in body["message"], body
    names = [f"picture-{seed}.png" for seed in range(7)]
    alone = [ok(curl(url, "-T", name, cwd=pictures)) for name in names]
    for _ in range(5):  # until the bad upload shared a batch with good ones
        before = gw.stats(model).isolations
        # Not first: the first upload leaves alone while the slot is free, the rest queue behind it.
        replies = curl_at_once([(url, "-T", name) for name in [*names[:3], "notes.txt", *names[3:]]], pictures)
        assert replies.pop(3)[0] == 502
        for (status, got), expected in zip(replies, alone, strict=True):
            assert status == 200, got
            assert_same_top5(got, expected)
        if gw.stats(model).isolations > before:
            break
    else:
        pytest.fail("the bad upload never shared a batch with good ones")


def test_the_encoder_padded_by_the_gateway_answers_as_torchserves_own_batching(gw, torchserve_batching_server,
                                                                              torchserve_models_server):
    own = [ok(curl(f"{torchserve_batching_server.http_url}/predictions/encoder", *JSON, "-d", json.dumps(row)))
           for row in ROWS]
    before = len(torchserve_models_server.calls("encoder"))

    def torchserve_client(index: int) -> list[float]:
        return ok(curl(f"{gw.http_url}/predictions/encoder", *JSON, "-d", json.dumps(ROWS[index])))

    with concurrent.futures.ThreadPoolExecutor(len(ROWS)) as pool:
        through_gateway = list(pool.map(torchserve_client, range(len(ROWS))))
    for got, expected in zip(through_gateway, own, strict=True):
        assert_close(got, expected)
    calls = torchserve_models_server.calls("encoder")[before:]
    assert sorted(length for call in calls for length in call["lengths"]) == sorted(map(len, ROWS))

    # A KServe v1 client (ragged instances) and an OIP client of the same model.
    status, body = http_json("POST", f"{gw.http_url}/v1/models/encoder:predict", {"instances": ROWS[:3]})
    assert status == 200
    for got, expected in zip(body["predictions"], own[:3], strict=True):
        assert_close(got, expected)
    status, body = http_json("POST", f"{gw.http_url}/v2/models/encoder/infer", {"inputs": [
        {"name": "input_ids", "datatype": "INT64", "shape": [1, len(ROWS[2])], "data": ROWS[2]}]})
    assert status == 200 and body["outputs"][0]["shape"] == [1, 64]
    assert_close(body["outputs"][0]["data"], own[2])


def test_the_readme_commands_for_torchserve_users_work_as_written(gw, torchserve_batching_server, pictures):
    commands = commands_after("# Coming from TorchServe", "docs/torchserve.md")
    assert {c.split()[0] for c in commands} == {"curl", "grpcurl"} and len(commands) >= 6
    (pictures / "kitten.jpg").write_bytes(images.jpeg(2, size=(320, 240)))
    expected = ok(curl(f"{torchserve_batching_server.http_url}/predictions/image", "-T", "kitten.jpg", cwd=pictures))
    env = {**CURL_ENV, "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for command in commands:
        runnable = command.replace("localhost:8080", gw.http_url.removeprefix("http://")).replace(
            "localhost:8081", gw.grpc_address)
        result = subprocess.run(["bash", "-c", runnable], capture_output=True, cwd=pictures, env=env, timeout=60)
        assert result.returncode == 0, (command, result.stderr)
        answer = orjson.loads(result.stdout)
        if "encoder" in command:
            assert len(answer) == 64, (command, answer)
            continue
        if command.startswith("grpcurl"):
            answer = orjson.loads(base64.b64decode(answer["prediction"]))
        prediction = answer["predictions"][0] if "predictions" in answer else answer
        assert_same_top5(prediction, expected)
