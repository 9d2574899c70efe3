"""Compressed HTTP bodies on every POST endpoint, both ways: the real tritonclient.http and
tritonclient.http.aio with request and response compression (gzip and deflate), plain
urllib for KServe v1 and TorchServe, the decompressed-size limit against a zip bomb, corrupt
bodies (400) and unknown codings (415)."""
from __future__ import annotations

import gzip
import http.client
import struct
import time
import zlib
from types import SimpleNamespace

import numpy as np
import orjson
import pytest
import tritonclient.http as triton_http
import tritonclient.http._infer_result as triton_result
import tritonclient.http.aio as triton_http_aio
from tritonclient.utils import InferenceServerException

from tests.harness import config_for, running_gateway
from tests.harness import http as http_request
from wire.codecs import content_encoding

LIMIT = 4 * 1024 * 1024  # the decompressed body limit: larger than any compressed body sent here
DATA = np.arange(4 * 256, dtype=np.float32).reshape(4, 256) / 8  # answers well above MIN_ENCODED_BYTES
POST_ENDPOINTS = ["/v1/models/demo:predict", "/v2/models/demo/infer", "/predictions/demo"]
CODINGS = ["gzip", "deflate"]


@pytest.fixture(scope="module")
def gw():
    with running_gateway(config_for({"name": "demo", "backend": "simulated"}, max_body_bytes=LIMIT)) as running:
        yield running


@pytest.fixture
def gateway_decoded(monkeypatch) -> list[str]:
    """The codings the gateway decoded request bodies from, in order."""
    seen: list[str] = []
    real = content_encoding.Inflater.finish

    def finish(self):  # every body ends here, inflated as it arrived or all at once
        seen.append(self.coding)
        return real(self)

    monkeypatch.setattr(content_encoding.Inflater, "finish", finish)
    return seen


@pytest.fixture
def client_decompressed(monkeypatch) -> list[str]:
    """The codings tritonclient decompressed answers from (it reads Content-Encoding itself)."""
    seen: list[str] = []

    def spy(name, real):
        def decompress(data):
            seen.append(name)
            return real(data)
        return SimpleNamespace(decompress=decompress)

    monkeypatch.setattr(triton_result, "gzip", spy("gzip", gzip.decompress))
    monkeypatch.setattr(triton_result, "zlib", spy("deflate", zlib.decompress))
    return seen


def infer_args(binary: bool):
    tensor = triton_http.InferInput("INPUT0", list(DATA.shape), "FP32")
    tensor.set_data_from_numpy(DATA, binary_data=binary)
    return [tensor], [triton_http.InferRequestedOutput("OUTPUT0", binary_data=binary)]


def gzip_bomb(size: int = 1 << 30) -> bytes:
    """A valid single-stream gzip body of `size` zero bytes, about 1/1000 of it, built in a
    fraction of a second: one fully flushed deflate block of 1 MiB of zeros, repeated."""
    block = bytes(1 << 20)
    deflater = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    piece = deflater.compress(block) + deflater.flush(zlib.Z_FULL_FLUSH)  # the same bytes every time
    crc = 0
    for _ in range(size // len(block)):
        crc = zlib.crc32(block, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return header + piece * (size // len(block)) + deflater.flush() + struct.pack("<II", crc, size & 0xFFFFFFFF)


def request_body(path: str) -> tuple[bytes, dict[str, str]]:
    """A JSON request for `path` of DATA's rows, and its expected answer's rows."""
    if path.startswith("/v2/"):
        body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": list(DATA.shape),
                            "data": DATA.ravel().tolist()}]}
    else:
        body = {"instances": DATA.tolist()}
    return orjson.dumps(body), {"Content-Type": "application/json"}


def answer_rows(path: str, document) -> np.ndarray:
    if path.startswith("/v2/"):
        output = document["outputs"][0]
        return np.asarray(output["data"], dtype=np.float32).reshape(output["shape"])
    return np.asarray(document["predictions"], dtype=np.float32)


def compress(coding: str, body: bytes) -> bytes:
    return gzip.compress(body) if coding == "gzip" else zlib.compress(body)


def decompress(coding: str, body: bytes) -> bytes:
    return gzip.decompress(body) if coding == "gzip" else zlib.decompress(body)


# --- tritonclient, both ways -------------------------------------------------------------

@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
@pytest.mark.parametrize("response_coding", [None, *CODINGS])
@pytest.mark.parametrize("request_coding", [None, *CODINGS])
def test_tritonclient_http_round_trip(gw, gateway_decoded, client_decompressed, request_coding, response_coding, binary):
    client = triton_http.InferenceServerClient(gw.http_url.removeprefix("http://"))
    inputs, outputs = infer_args(binary)
    result = client.infer("demo", inputs, outputs=outputs, request_compression_algorithm=request_coding,
                          response_compression_algorithm=response_coding)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), DATA * 2)
    # The binary request's Inference-Header-Content-Length counts the DECOMPRESSED body, as
    # tritonclient computes it before compressing; the answer's, likewise.
    assert gateway_decoded == ([request_coding] if request_coding else [])
    assert client_decompressed == ([response_coding] if response_coding else [])
    client.close()


@pytest.mark.parametrize("response_coding", CODINGS)
@pytest.mark.parametrize("request_coding", CODINGS)
async def test_tritonclient_http_aio_round_trip(gw, gateway_decoded, client_decompressed, request_coding, response_coding):
    async with triton_http_aio.InferenceServerClient(gw.http_url.removeprefix("http://")) as client:
        for binary in (True, False):
            inputs, outputs = infer_args(binary)
            result = await client.infer("demo", inputs, outputs=outputs, request_compression_algorithm=request_coding,
                                        response_compression_algorithm=response_coding)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), DATA * 2)
    assert gateway_decoded == [request_coding] * 2
    assert client_decompressed == [response_coding] * 2


def test_tritonclient_reads_errors_with_compression_requested(gw):
    # Error answers are never compressed: tritonclient reads their bodies as they come.
    client = triton_http.InferenceServerClient(gw.http_url.removeprefix("http://"))
    inputs, _ = infer_args(True)
    with pytest.raises(InferenceServerException) as raised:
        client.infer("nope", inputs, request_compression_algorithm="gzip", response_compression_algorithm="gzip")
    assert raised.value.status() == "404" and "nope" in raised.value.message()
    client.close()


# --- plain HTTP: every POST endpoint -----------------------------------------------------

@pytest.mark.parametrize("coding", CODINGS)
@pytest.mark.parametrize("path", POST_ENDPOINTS)
def test_compressed_json_bodies_on_every_endpoint(gw, path, coding):
    body, headers = request_body(path)
    status, answer_headers, answer = http_request("POST", gw.http_url + path, compress(coding, body),
                                          headers={**headers, "Content-Encoding": coding, "Accept-Encoding": coding})
    assert status == 200, answer
    assert answer_headers["Content-Encoding"] == coding
    assert answer_headers["Vary"] == "Accept-Encoding"
    assert int(answer_headers["Content-Length"]) == len(answer)
    np.testing.assert_array_equal(answer_rows(path, orjson.loads(decompress(coding, answer))), DATA * 2)


def test_torchserve_single_instance_gzip(gw):
    status, headers, answer = http_request("POST", f"{gw.http_url}/predictions/demo", gzip.compress(b"[1, 2, 3]"),
                                   headers={"Content-Encoding": "gzip"})
    assert (status, orjson.loads(answer)) == (200, [2, 4, 6])
    assert headers["X-Batch-Id"] and "Content-Encoding" not in headers


def test_deflate_answers_are_zlib_wrapped(gw):
    # RFC 9110's "deflate", and what tritonclient decodes (zlib.decompress): a zlib header, not raw deflate.
    body, headers = request_body("/v1/models/demo:predict")
    _, answer_headers, answer = http_request("POST", f"{gw.http_url}/v1/models/demo:predict", body,
                                     headers={**headers, "Accept-Encoding": "deflate"})
    assert answer_headers["Content-Encoding"] == "deflate"
    assert answer[0] == 0x78 and (answer[0] << 8 | answer[1]) % 31 == 0
    assert orjson.loads(zlib.decompress(answer))["predictions"] == (DATA * 2).tolist()


def test_raw_deflate_request_bodies_are_accepted(gw):
    # Some clients send headerless deflate under the same name; the zlib header tells them apart.
    deflater = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    raw = deflater.compress(b'{"instances": [[1, 2]]}') + deflater.flush()
    status, _, answer = http_request("POST", f"{gw.http_url}/v1/models/demo:predict", raw, headers={"Content-Encoding": "deflate"})
    assert status == 200 and orjson.loads(answer)["predictions"] == [[2, 4]]


@pytest.mark.parametrize("accept, coding", [
    ("gzip, deflate", "gzip"),
    ("deflate;q=1.0, gzip;q=0.5", "deflate"),
    ("x-gzip", "gzip"),
    ("*", "gzip"),
    ("gzip;q=0, *", "deflate"),
    ("br", None),
    ("identity", None),
    ("gzip;q=0", None),
])
def test_accept_encoding_negotiation(gw, accept, coding):
    body, headers = request_body("/v1/models/demo:predict")
    status, answer_headers, answer = http_request("POST", f"{gw.http_url}/v1/models/demo:predict", body,
                                          headers={**headers, "Accept-Encoding": accept})
    assert status == 200
    assert answer_headers.get("Content-Encoding") == coding
    assert answer_headers["Vary"] == "Accept-Encoding"
    plain = decompress(coding, answer) if coding else answer
    assert orjson.loads(plain)["predictions"] == (DATA * 2).tolist()


def test_answers_without_accept_encoding_are_unchanged(gw):
    body, headers = request_body("/v1/models/demo:predict")
    # http.client adds "Accept-Encoding: identity" unless told not to: send no such header at all.
    connection = http.client.HTTPConnection("127.0.0.1", gw.gateway.http_port, timeout=30)
    connection.putrequest("POST", "/v1/models/demo:predict", skip_accept_encoding=True)
    for name, value in {**headers, "Content-Length": str(len(body))}.items():
        connection.putheader(name, value)
    connection.endheaders(body)
    answer = connection.getresponse()
    assert answer.status == 200
    assert answer.getheader("Content-Encoding") is None and answer.getheader("Vary") is None
    assert orjson.loads(answer.read())["predictions"] == (DATA * 2).tolist()
    connection.close()


def test_small_answers_and_errors_are_sent_as_they_are(gw):
    status, headers, answer = http_request("POST", f"{gw.http_url}/v1/models/demo:predict", b'{"instances": [[1]]}',
                                   headers={"Accept-Encoding": "gzip"})
    assert status == 200 and len(answer) < content_encoding.MIN_ENCODED_BYTES
    assert "Content-Encoding" not in headers and orjson.loads(answer)["predictions"] == [[2]]
    status, headers, answer = http_request("POST", f"{gw.http_url}/v1/models/nope:predict", b"x" * 4096,
                                   headers={"Accept-Encoding": "gzip"})
    assert status == 404 and "Content-Encoding" not in headers and "not served" in orjson.loads(answer)["error"]


def test_large_get_answers_are_compressed_too(gw):
    status, headers, answer = http_request("GET", f"{gw.http_url}/metrics", headers={"Accept-Encoding": "gzip"})
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    assert b"gateway_requests_total" in gzip.decompress(answer)


# --- the limit, and what is refused ------------------------------------------------------

@pytest.fixture(scope="module")
def bomb() -> bytes:
    body = gzip_bomb()
    assert len(body) < LIMIT  # on the wire it fits: only its decompressed size is too large
    return body


@pytest.mark.parametrize("path", POST_ENDPOINTS)
def test_zip_bomb_is_refused_413_quickly_and_the_gateway_keeps_serving(gw, bomb, path):
    started = time.monotonic()
    status, _, answer = http_request("POST", gw.http_url + path, bomb,
                             headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
    elapsed = time.monotonic() - started
    assert status == 413
    assert f"exceeds the limit of {LIMIT} bytes once decompressed" in orjson.loads(answer)["error"]
    assert elapsed < 2.0  # inflating the whole GiB takes seconds; stopping at 4 MiB takes milliseconds
    body, headers = request_body(path)
    status, _, answer = http_request("POST", gw.http_url + path, gzip.compress(body), headers={**headers, "Content-Encoding": "gzip"})
    assert status == 200
    np.testing.assert_array_equal(answer_rows(path, orjson.loads(answer)), DATA * 2)


def test_a_body_exactly_at_the_limit_once_decompressed_is_accepted(gw):
    padding = LIMIT - len(b'{"instances": [[1]]}')
    body = b'{"instances": [[1]]}' + b" " * padding  # JSON allows trailing whitespace
    assert len(body) == LIMIT
    status, _, answer = http_request("POST", f"{gw.http_url}/v1/models/demo:predict", gzip.compress(body),
                             headers={"Content-Encoding": "gzip"})
    assert status == 200, answer
    status, _, _ = http_request("POST", f"{gw.http_url}/v1/models/demo:predict", gzip.compress(body + b" "),
                        headers={"Content-Encoding": "gzip"})
    assert status == 413


@pytest.mark.parametrize("coding, body, message", [
    ("gzip", b"this is not gzip", "not valid gzip data"),
    ("gzip", gzip.compress(b'{"instances": [[1, 2]]}')[:-6], "gzip request body is truncated"),
    ("gzip", gzip.compress(b'{"instances": [[1, 2]]}')[:10] + b"\xff" * 20, "not valid gzip data"),
    ("deflate", b"this is not deflate", "not valid deflate data"),
    ("deflate", zlib.compress(b'{"instances": [[1, 2]]}') + b"junk", "data after the end of its stream"),
    ("gzip", b"", "gzip request body is truncated"),
], ids=["gzip-garbage", "gzip-truncated", "gzip-corrupt-data", "deflate-garbage", "deflate-trailing", "gzip-empty"])
@pytest.mark.parametrize("path", POST_ENDPOINTS)
def test_corrupt_compressed_bodies_are_400_naming_the_problem(gw, path, coding, body, message):
    status, _, answer = http_request("POST", gw.http_url + path, body, headers={"Content-Encoding": coding})
    assert status == 400
    assert message in orjson.loads(answer)["error"]


@pytest.mark.parametrize("encoding", ["br", "zstd", "compress", "gzip, gzip"])
@pytest.mark.parametrize("path", POST_ENDPOINTS)
def test_unknown_content_encoding_is_415(gw, path, encoding):
    status, _, answer = http_request("POST", gw.http_url + path, b'{"instances": [[1]]}', headers={"Content-Encoding": encoding})
    assert status == 415
    document = orjson.loads(answer)
    assert document["error"] == (f"Content-Encoding '{encoding}' is not supported: "
                                 "send the body as gzip, deflate or identity")
    if path.startswith("/predictions/"):
        assert document["code"] == 415 and document["type"] == "UnsupportedEncoding"


def test_identity_content_encoding_is_the_body_as_it_is(gw):
    status, _, answer = http_request("POST", f"{gw.http_url}/v1/models/demo:predict", b'{"instances": [[1]]}',
                             headers={"Content-Encoding": "identity"})
    assert (status, orjson.loads(answer)["predictions"]) == (200, [[2]])


def test_compression_outcomes_are_counted(gw):
    http_request("POST", f"{gw.http_url}/v1/models/demo:predict", b"{}", headers={"Content-Encoding": "br"})
    _, _, exposition = http_request("GET", f"{gw.http_url}/metrics")
    assert b'gateway_requests_total{code="415",model="demo",protocol="v1"} ' in exposition
