"""The computing TorchServe test models, talked to DIRECTLY (no gateway) with the real curl
binary, the way TorchServe's and KServe's docs write the commands: ``image`` (TinyCNN)
answers the same top-5 for the same picture whether it is PUT raw (``curl -T``), posted as a
multipart file (``curl -F data=@...``) or sent base64 in a KServe-envelope instance;
TorchServe's own batching (no envelope, batchSize 8) really merges concurrent uploads into
one handler call without mixing up their answers; ``encoder`` gives a row the same embedding
alone or batched with longer rows, whether the handler pads (TorchServe's batching) or the
client did (the gateway's ``{"input_ids", "length"}`` instances)."""

from __future__ import annotations

import base64
import json
import pathlib
import subprocess
from typing import Any

import numpy as np
import pytest

from tests.predictors import images
from tests.predictors.harness import TorchServeServer
from tests.predictors.torchserve_clients import (
    ENCODER_TOLERANCE,
    IMAGE_ULPS,
    JSON,
    assert_close,
    assert_same_top5,
    assert_top5,
    curl,
    curl_at_once,
    float32_ulps,
    ok,
)
from tools.predictor_envs import ensure_env


def instances_file(folder: pathlib.Path, *pictures: bytes) -> str:
    """``instances.json``: KServe's TorchServe examples' body, one base64 picture per instance."""
    body = {"instances": [{"data": base64.b64encode(picture).decode()} for picture in pictures]}
    (folder / "instances.json").write_text(json.dumps(body))
    return "@instances.json"


# --- image ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "picture"), [
    ("kitten.png", images.png(1)),
    ("kitten.jpg", images.jpeg(2, size=(320, 240))),  # resized to 224x224 by the handler
])
def test_the_same_image_gets_the_same_top5_raw_multipart_and_in_a_kserve_instance(
        torchserve_batching_server: TorchServeServer, torchserve_models_server: TorchServeServer,
        tmp_path: pathlib.Path, name: str, picture: bytes) -> None:
    direct, enveloped = torchserve_batching_server, torchserve_models_server
    (tmp_path / name).write_bytes(picture)
    before = len(enveloped.calls("image"))

    put = ok(curl(f"{direct.http_url}/predictions/image", "-T", name, cwd=tmp_path))
    multipart = ok(curl("-F", f"data=@{name}", f"{direct.http_url}/predictions/image", cwd=tmp_path))
    at_50_ms = ok(curl(f"{direct.http_url}/predictions/image_d50", "-T", name, cwd=tmp_path))
    kserve = ok(curl("-X", "POST", f"{enveloped.http_url}/v1/models/image:predict", *JSON,
                     "-d", instances_file(tmp_path, picture), cwd=tmp_path))

    assert_top5(put)
    for other in (multipart, at_50_ms, *kserve["predictions"]):
        assert_same_top5(other, put)
    assert len(kserve["predictions"]) == 1
    assert [(c["envelope"], c["batch_size"]) for c in enveloped.calls("image")[before:]] == [("kserve", 1)]


def test_different_images_get_different_answers_and_one_call_answers_each_instance(
        torchserve_models_server: TorchServeServer, tmp_path: pathlib.Path) -> None:
    pictures = [images.png(seed) for seed in (3, 4, 3)]
    before = len(torchserve_models_server.calls("image"))
    predictions = ok(curl("-X", "POST", f"{torchserve_models_server.http_url}/v1/models/image:predict", *JSON,
                          "-d", instances_file(tmp_path, *pictures), cwd=tmp_path))["predictions"]
    assert len(predictions) == 3
    assert_same_top5(predictions[2], predictions[0])
    # Random weights answer nearly uniform probabilities (~0.1 each); two pictures still differ
    # by ~1e-4 to 1e-3 (over 10,000 float32 ulps), far above the rounding between two paths.
    differences = [float32_ulps(predictions[0].get(label, 0.0), p) for label, p in predictions[1].items()]
    assert max(differences) > 100 * IMAGE_ULPS, (predictions[0], predictions[1])
    assert [c["batch_size"] for c in torchserve_models_server.calls("image")[before:]] == [3]


def test_a_json_body_without_its_content_type_is_read_as_a_form(
        torchserve_models_server: TorchServeServer, tmp_path: pathlib.Path) -> None:
    # curl -d's default Content-Type is application/x-www-form-urlencoded, and TorchServe's
    # frontend then hands the handler the form's fields, neither "data" nor "body": the KServe
    # envelope finds no body and the call fails. JSON bodies need their Content-Type.
    status, body = curl("-X", "POST", f"{torchserve_models_server.http_url}/v1/models/image:predict",
                        "-d", instances_file(tmp_path, images.png(1)), cwd=tmp_path)
    assert status == 503, body


def test_a_row_that_is_not_an_image_fails_and_the_worker_serves_on(
        torchserve_batching_server: TorchServeServer, tmp_path: pathlib.Path) -> None:
    (tmp_path / "notes.txt").write_text("not a picture\n")
    (tmp_path / "kitten.png").write_bytes(images.png(5))
    url = f"{torchserve_batching_server.http_url}/predictions/image"
    status, body = curl(url, "-T", "notes.txt", cwd=tmp_path)
    assert status in (500, 503), body  # TorchServe's answer to a handler exception
    assert_top5(ok(curl(url, "-T", "kitten.png", cwd=tmp_path)))


@pytest.mark.parametrize(("model", "delay_ms"), [("image", 10), ("image_d50", 50)])
def test_its_own_batching_merges_concurrent_uploads_and_keeps_their_answers_apart(
        torchserve_batching_server: TorchServeServer, tmp_path: pathlib.Path, model: str, delay_ms: int) -> None:
    server = torchserve_batching_server
    (described,) = server.describe(model)
    assert (described["batchSize"], described["maxBatchDelay"]) == (8, delay_ms)
    url = f"{server.http_url}/predictions/{model}"
    names = []
    for seed in range(8):
        names.append(f"picture-{seed}.png")
        (tmp_path / names[-1]).write_bytes(images.png(100 + seed))
    alone = [ok(curl(url, "-T", name, cwd=tmp_path)) for name in names]

    before = len(server.calls(model))
    together = [ok(reply) for reply in curl_at_once([(url, "-T", name) for name in names], tmp_path)]
    calls = server.calls(model)[before:]

    for got, expected in zip(together, alone, strict=True):
        assert_same_top5(got, expected)
    assert {c["envelope"] for c in calls} == {"none"}
    assert sum(c["batch_size"] for c in calls) == 8
    assert max(c["batch_size"] for c in calls) > 1, calls  # TorchServe handed the handler a batch


# --- encoder -------------------------------------------------------------------------------

SHORT = [5, 17, 3]
LONGER = [[(7 * i + j) % 1000 for j in range(length)] for i, length in enumerate((9, 40, 17, 64, 25, 33, 12), 1)]


def test_the_encoder_answers_a_row_alone_as_in_a_batch_its_handler_padded(
        torchserve_batching_server: TorchServeServer) -> None:
    server = torchserve_batching_server
    url = f"{server.http_url}/predictions/encoder"
    alone = ok(curl(url, *JSON, "-d", json.dumps(SHORT)))
    assert len(alone) == 64 and all(isinstance(x, float) for x in alone)
    # Eight concurrent clients, the short row among longer ones; TorchServe may still run the
    # short one alone: try again until a call held it with a longer row.
    for _ in range(5):
        before = len(server.calls("encoder"))
        rows = [SHORT, *LONGER]
        replies = [ok(reply) for reply in curl_at_once([(url, *JSON, "-d", json.dumps(row)) for row in rows],
                                                       pathlib.Path.cwd())]
        calls = server.calls("encoder")[before:]
        assert sorted(length for c in calls for length in c["lengths"]) == sorted(map(len, rows))
        if any(len(SHORT) in c["lengths"] and max(c["lengths"]) > len(SHORT) for c in calls):
            break
    else:
        pytest.fail(f"the short row never shared a handler call with a longer one: {calls}")
    assert_close(replies[0], alone)
    assert all(len(reply) == 64 for reply in replies)
    assert np.max(np.abs(np.asarray(replies[1]) - np.asarray(alone))) > 100 * ENCODER_TOLERANCE


def test_the_encoder_answers_the_gateways_padded_instances_as_unpadded_rows(
        torchserve_models_server: TorchServeServer, torchserve_batching_server: TorchServeServer) -> None:
    url = f"{torchserve_models_server.http_url}/v1/models/encoder:predict"
    longest = max(map(len, LONGER))
    padded = [{"input_ids": row + [0] * (longest - len(row)), "length": [len(row)]} for row in [SHORT, *LONGER]]

    before = len(torchserve_models_server.calls("encoder"))
    (alone,) = ok(curl("-X", "POST", url, *JSON, "-d", json.dumps({"instances": [SHORT]})))["predictions"]
    batched = ok(curl("-X", "POST", url, *JSON, "-d", json.dumps({"instances": padded})))["predictions"]
    other_forms = ok(curl("-X", "POST", url, *JSON, "-d", json.dumps({"instances": [
        {"data": SHORT}, {"input_ids": SHORT + [0, 0], "mask": [1, 1, 1, 0, 0]}, {"input_ids": SHORT, "length": 3},
    ]})))["predictions"]
    direct = ok(curl(f"{torchserve_batching_server.http_url}/predictions/encoder", *JSON, "-d", json.dumps(SHORT)))

    assert len(batched) == len(padded)
    for got in (batched[0], *other_forms, direct):
        assert_close(got, alone)
    calls = torchserve_models_server.calls("encoder")[before:]
    assert [(c["envelope"], c["batch_size"]) for c in calls] == [("kserve", 1), ("kserve", 8), ("kserve", 3)]
    assert calls[1]["lengths"] == [len(row) for row in [SHORT, *LONGER]]  # cut back to the real ids


@pytest.mark.parametrize("instance", [[1000], [], [1.5, 2], {"input_ids": [1, 2], "length": [3]}, "abc"])
def test_the_encoder_refuses_what_it_cannot_encode(torchserve_models_server: TorchServeServer, instance: Any) -> None:
    status, body = curl("-X", "POST", f"{torchserve_models_server.http_url}/v1/models/encoder:predict", *JSON,
                        "-d", json.dumps({"instances": [instance]}))
    assert status in (500, 503), body


# --- the server script ---------------------------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (["--model", "image", "--batch-size", "8"], "reads only the first request"),
    (["--model", "encoder:b4"], "reads only the first request"),
    (["--envelope", "none"], "double's handler reads envelope rows"),
    (["--envelope", "kservev2", "--model", "encoder"], "not the OIP tensors"),
    (["--model", "resnet"], "unknown model"),
    (["--model", "image:x5"], "neither bN"),
    (["--model", "image", "--model", "image"], "named twice"),
])
def test_the_server_script_refuses_what_torchserve_would_serve_wrongly(
        tmp_path: pathlib.Path, args: list[str], message: str) -> None:
    script = pathlib.Path(__file__).resolve().parent / "torchserve_server.py"
    ports = [arg for name in ("inference", "management", "metrics", "grpc-inference", "grpc-management")
             for arg in (f"--{name}-port", "1")]
    result = subprocess.run([ensure_env("torchserve"), script, "--workdir", tmp_path, *ports, *args],
                            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert not (tmp_path / "store").exists()  # refused before building anything


def test_its_own_batching_fails_every_upload_of_a_batch_that_holds_one_bad_one(
        torchserve_batching_server: TorchServeServer, tmp_path: pathlib.Path) -> None:
    """What the gateway's bisection spares a TorchServe user (docs/torchserve.md):
    TorchServe answers a handler's exception for the whole call, good uploads included."""
    (tmp_path / "notes.txt").write_text("not a picture\n")
    (tmp_path / "kitten.png").write_bytes(images.png(5))
    url = f"{torchserve_batching_server.http_url}/predictions/image_d50"  # 50 ms: eight curls share a call
    names = ["kitten.png"] * 3 + ["notes.txt"] + ["kitten.png"] * 4
    for _ in range(3):
        statuses = [status for status, _ in curl_at_once([(url, "-T", name) for name in names], tmp_path)]
        assert statuses[3] != 200
        if statuses.count(200) < len(names) - 1:
            break
    else:
        pytest.fail(f"the bad upload never shared a call with good ones: {statuses}")
    assert set(statuses) <= {200, 500, 503}
