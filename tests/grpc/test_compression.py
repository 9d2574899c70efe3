"""Compressed gRPC messages (grpc's own per-message compression, decoded by grpc core before
the gateway sees the bytes): the real tritonclient.grpc and tritonclient.grpc.aio with
`compression_algorithm="gzip"|"deflate"`, TorchServe's API on a compressing channel, and
`limits.max_body_bytes` applied to the decompressed message."""
from __future__ import annotations

import re

import grpc
import numpy as np
import orjson
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.grpc.aio as triton_grpc_aio
from tritonclient.utils import InferenceServerException

from tests.harness import config_for, running_gateway
from wire.generated.torchserve import inference_pb2 as ts_pb
from wire.generated.torchserve import inference_pb2_grpc as ts_grpc

LIMIT = 4 * 1024 * 1024
DATA = np.arange(4 * 256, dtype=np.float32).reshape(4, 256) / 8
CODINGS = ["gzip", "deflate"]


@pytest.fixture(scope="module")
def gw():
    with running_gateway(config_for({"name": "demo", "backend": "simulated"}, max_body_bytes=LIMIT)) as running:
        yield running


def tensor(data: np.ndarray):
    infer_input = triton_grpc.InferInput("INPUT0", list(data.shape), "FP32")
    infer_input.set_data_from_numpy(data)
    return infer_input


@pytest.mark.parametrize("coding", CODINGS)
def test_tritonclient_grpc_compressed_requests(gw, coding):
    client = triton_grpc.InferenceServerClient(gw.grpc_address)
    result = client.infer("demo", [tensor(DATA)], request_id="c1", compression_algorithm=coding)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), DATA * 2)
    assert result.get_response().id == "c1"
    client.close()


@pytest.mark.parametrize("coding", CODINGS)
async def test_tritonclient_grpc_aio_compressed_requests(gw, coding):
    async with triton_grpc_aio.InferenceServerClient(gw.grpc_address) as client:
        result = await client.infer("demo", [tensor(DATA)], compression_algorithm=coding)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), DATA * 2)


@pytest.mark.parametrize("compression", [grpc.Compression.Gzip, grpc.Compression.Deflate], ids=CODINGS)
def test_torchserve_predictions_on_a_compressing_channel(gw, compression):
    with grpc.insecure_channel(gw.grpc_address, compression=compression) as channel:
        stub = ts_grpc.InferenceAPIsServiceStub(channel)
        body = orjson.dumps({"instances": DATA.tolist()})
        response = stub.Predictions(ts_pb.PredictionsRequest(model_name="demo", input={"data": body}), timeout=30)
    assert orjson.loads(response.prediction) == {"predictions": (DATA * 2).tolist()}


@pytest.mark.parametrize("coding", CODINGS)
def test_the_limit_applies_to_the_decompressed_message(gw, coding):
    # 8 MiB of zeros compresses to a few KiB: small on the wire, over the limit once decompressed.
    zeros = np.zeros((8, 1 << 18), dtype=np.float32)
    client = triton_grpc.InferenceServerClient(gw.grpc_address)
    with pytest.raises(InferenceServerException) as raised:
        client.infer("demo", [tensor(zeros)], compression_algorithm=coding)
    assert raised.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
    received = re.search(r"larger than max \((\d+) vs\. (\d+)\)", raised.value.message())
    assert received is not None and int(received[2]) == LIMIT
    assert int(received[1]) > zeros.nbytes  # the size grpc checked is the decompressed one
    # ...and the gateway goes on serving compressed requests.
    result = client.infer("demo", [tensor(DATA)], compression_algorithm=coding)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), DATA * 2)
    client.close()
