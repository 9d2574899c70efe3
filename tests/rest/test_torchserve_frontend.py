"""TorchServe-style HTTP endpoints on the embedded simulated model: `POST` and `PUT
/predictions/<m>` with each JSON form TorchServe users send, uploads (`curl -T`, `curl -F`)
refused by a model that has no BYTES input, `GET /ping`, errors in TorchServe's shape with
the gateway's statuses, and batching with KServe v1 clients of the same model."""
from __future__ import annotations

import concurrent.futures
import subprocess

import orjson
import pytest

from tests.harness import config_for, http, http_json, running_gateway


@pytest.fixture(scope="module")
def gw():
    config = config_for({"name": "demo", "backend": "simulated", "simulated": {"call_ms": 20}},
                        max_instances=100)
    with running_gateway(config) as running:
        yield running


def predict(gw, body, path="/predictions/demo", **kwargs):
    payload = body if isinstance(body, bytes) else orjson.dumps(body)
    status, headers, answer = http("POST", f"{gw.http_url}{path}", payload, **kwargs)
    return status, headers, orjson.loads(answer) if answer else None


def test_one_instance_as_a_json_list_gets_its_prediction_alone(gw):
    # urllib sends application/x-www-form-urlencoded, as `curl -d` does: the body is JSON all the same.
    status, headers, answer = predict(gw, [1, 2, 3, 4])
    assert status == 200
    assert answer == [2, 4, 6, 8]
    assert headers["X-Batch-Id"]


def test_data_form_is_one_instance(gw):
    status, _, answer = predict(gw, {"data": [1.5, -2, 0, 4]})
    assert (status, answer) == (200, [3, -4, 0, 8])


def test_instances_form_gets_predictions_in_order(gw):
    status, headers, answer = predict(gw, {"instances": [[1, 2], [3, 4], [5, 6]]},
                                      headers={"Content-Type": "application/json"})
    assert status == 200
    assert answer == {"predictions": [[2, 4], [6, 8], [10, 12]]}
    assert headers["Content-Type"] == "application/json"


def test_version_path(gw):
    assert predict(gw, [1, 2], path="/predictions/demo/1")[:3:2] == (200, [2, 4])
    status, _, answer = predict(gw, [1, 2], path="/predictions/demo/9")
    assert status == 404
    assert answer["code"] == 404 and answer["type"] == "ModelNotFound"
    assert "no version '9'" in answer["message"] and answer["error"] == answer["message"]


@pytest.mark.parametrize("path, body, status, message", [
    ("/predictions/nope", [1, 2], 404, "not served"),
    # Not JSON: an upload, as TorchServe takes it; this model has no BYTES input to carry it.
    ("/predictions/demo", b"not json", 400, "is an upload"),
    # JSON that is none of the forms: an upload too when undeclared (a file holding `42`), as
    # TorchServe takes it; refused with the forms named when declared JSON (below).
    ("/predictions/demo", 7, 400, "is an upload"),
    ("/predictions/demo", {"instances": []}, 400, "empty"),
    ("/predictions/demo", {"instances": "x"}, 400, "must be a list"),
    ("/predictions/demo", {"instances": [[1]] * 101}, 400, "exceed the limit"),
    ("/predictions/demo", ["a", "b"], 400, "does not match datatype FP32"),
    ("/predictions/demo", {"instances": [[1, 2], [1, 2, 3]]}, 400, "ragged"),
])
def test_bad_requests_get_torchserve_shaped_errors_with_the_right_status(gw, path, body, status, message):
    got, _, answer = predict(gw, body, path=path)
    assert got == status
    assert answer["code"] == status and message in answer["message"] and answer["error"] == answer["message"]


@pytest.mark.parametrize("body, message", [({"inputs": [1]}, '{"instances": [...]}'), (7, "must be JSON")])
def test_a_body_declared_json_that_is_none_of_the_forms_is_refused_naming_them(gw, body, message):
    got, _, answer = predict(gw, body, headers={"Content-Type": "application/json"})
    assert got == 400 and message in answer["message"]


def test_put_is_a_prediction_as_post_is(gw):
    status, headers, answer = http("PUT", f"{gw.http_url}/predictions/demo", b"[1, 2]")
    assert (status, orjson.loads(answer)) == (200, [2, 4]) and headers["Content-Type"] == "application/json"


@pytest.mark.parametrize("args", [
    ["-T", "{file}"],                                   # TorchServe's docs: a PUT of the raw bytes
    ["-X", "POST", "--data-binary", "@{file}", "-H", "Content-Type: image/png"],
    ["-F", "data=@{file}"],                             # multipart, TorchServe's other documented form
])
def test_curl_uploads_to_a_model_without_a_bytes_input_get_a_torchserve_shaped_400(gw, tmp_path, args):
    image = tmp_path / "kitten.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 64)
    command = ["curl", "-s", "-w", "\n%{http_code}", *[a.format(file=image) for a in args],
               f"{gw.http_url}/predictions/demo"]
    output = subprocess.run(command, capture_output=True, check=True, timeout=30).stdout
    body, _, status = output.rpartition(b"\n")
    answer = orjson.loads(body)
    assert int(status) == 400 and answer["code"] == 400 and answer["type"] == "InvalidInput"
    assert 'datatype = "BYTES"' in answer["message"] and "upload" in answer["message"]
    assert predict(gw, [1, 2])[:3:2] == (200, [2, 4])  # and it keeps serving


@pytest.mark.parametrize("body, content_type, message", [
    (b"--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nv\r\n", "multipart/form-data; boundary=b",
     "no final boundary"),
    (b"anything", "multipart/form-data", "boundary not found"),
    (b"", "image/png", "no body"),
])
def test_malformed_uploads_are_400(gw, body, content_type, message):
    status, _, answer = predict(gw, body, headers={"Content-Type": content_type})
    assert status == 400 and message in answer["message"]


def test_get_is_not_a_prediction(gw):
    assert http("GET", f"{gw.http_url}/predictions/demo")[0] == 405


def test_ping_is_healthy(gw):
    assert http_json("GET", f"{gw.http_url}/ping") == (200, {"status": "Healthy"})


def test_torchserve_style_and_v1_clients_share_batches_and_each_gets_its_own_rows(gw):
    def one(i):
        row = [i, i + 0.5, -i]
        if i % 3 == 0:
            status, _, answer = predict(gw, row)
            return status, answer
        if i % 3 == 1:
            status, _, answer = predict(gw, {"instances": [row]})
            return status, answer["predictions"][0]
        status, answer = http_json("POST", f"{gw.http_url}/v1/models/demo:predict", {"instances": [row]})
        return status, answer["predictions"][0]

    before = gw.stats("demo").batches
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(one, range(60)))
    for i, (status, prediction) in enumerate(answers):
        assert status == 200
        assert prediction == [2 * i, 2 * i + 1, -2 * i]
    assert gw.stats("demo").batches - before < 60
