"""Compressed gRPC messages (grpc's own per-message compression, decoded by grpc core before
the gateway sees the bytes): the real tritonclient.grpc and tritonclient.grpc.aio with
`compression_algorithm="gzip"|"deflate"`, TorchServe's API on a compressing channel, and
`limits.max_body_bytes` applied to the decompressed message."""
from __future__ import annotations

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
    # The gateway inflates it (grpc's own decompression is off) and stops at the limit.
    assert f"exceeds the limit of {LIMIT} bytes once decompressed" in raised.value.message()
    # ...and the gateway goes on serving compressed requests.
    result = client.infer("demo", [tensor(DATA)], compression_algorithm=coding)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), DATA * 2)
    client.close()


def test_a_grpc_zip_bomb_never_inflates_past_the_limit(tmp_path):
    """256 MiB of zeros, gzipped to about 250 KB, against a real gateway process with a 4 MiB
    limit: refused with RESOURCE_EXHAUSTED while its memory stays about where it was (grpc's
    own decompression took it from 72 to 351 MB)."""
    import numpy as np

    from tests.processes import gateway
    from wire.generated.inference import grpc_service_pb2 as pb
    from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc

    config = tmp_path / "gateway.toml"
    config.write_text('[limits]\nmax_body_bytes = 4194304\n\n[[models]]\nname = "demo"\nbackend = "simulated"\n')
    bomb = pb.ModelInferRequest(model_name="demo")
    bomb.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 2**26])
    bomb.raw_input_contents.append(np.zeros(2**26, np.float32).tobytes())
    with gateway(config) as process:
        rss_before = process.rss_kb()
        with grpc.insecure_channel(process.grpc_address, compression=grpc.Compression.Gzip) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            with pytest.raises(grpc.RpcError) as raised:
                stub.ModelInfer(bomb, timeout=60)
            assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            grown_mib = (process.rss_kb() - rss_before) / 1024
            print(f"a 256 MiB gRPC zip bomb: RSS {rss_before / 1024:.0f} MiB, +{grown_mib:.0f} MiB")
            assert grown_mib < 64, f"the gateway grew {grown_mib:.0f} MiB"
            live = stub.ServerLive(pb.ServerLiveRequest(), timeout=10)
            assert live.live
