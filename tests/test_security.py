"""TLS on both front ends and to predictors (certificates made by the test), the optional
bearer token, and error bodies that leak no internals."""
from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import orjson
import pytest
import trustme
from google.protobuf.empty_pb2 import Empty
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.harness import config_for, http_json, running_gateway
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc

TOKEN = "s3cret-token"
DEMO = {"name": "demo", "backend": "simulated", "simulated": {"call_ms": 1}}


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls")
    authority = trustme.CA()
    server = authority.issue_cert("127.0.0.1", "localhost")
    ca_file, cert_file, key_file = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    authority.cert_pem.write_to_path(str(ca_file))
    server.cert_chain_pems[0].write_to_path(str(cert_file))
    server.private_key_pem.write_to_path(str(key_file))
    return {"ca": str(ca_file), "cert": str(cert_file), "key": str(key_file)}


def tls_server(certificates) -> dict:
    return {"tls": {"cert_file": certificates["cert"], "key_file": certificates["key"]}}


def https_json(url: str, body: dict, ca_file: str, headers: dict | None = None) -> tuple[int, dict]:
    context = ssl.create_default_context(cafile=ca_file)
    request = urllib.request.Request(url, data=orjson.dumps(body), method="POST", headers=headers or {})
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, orjson.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, orjson.loads(error.read())


def grpc_infer(channel: grpc.Channel, metadata=None) -> np.ndarray:
    request = pb.ModelInferRequest(model_name="demo")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 2]).contents.fp32_contents.extend([1, 2])
    response = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=10, metadata=metadata)
    return np.frombuffer(response.raw_output_contents[0], np.float32)


def test_both_front_ends_serve_tls(certificates):
    with running_gateway(config_for(DEMO, server=tls_server(certificates))) as gw:
        port = gw.gateway.http_port
        status, body = https_json(f"https://127.0.0.1:{port}/v1/models/demo:predict", {"instances": [[1]]}, certificates["ca"])
        assert status == 200 and body["predictions"] == [[2]]
        with pytest.raises(Exception):  # noqa: B017 - plain HTTP to a TLS port: whichever way the connection fails
            http_json("POST", f"http://127.0.0.1:{port}/v1/models/demo:predict", {"instances": [[1]]}, timeout=5)
        credentials = grpc.ssl_channel_credentials(root_certificates=Path(certificates["ca"]).read_bytes())
        with grpc.secure_channel(gw.grpc_address, credentials) as channel:
            np.testing.assert_array_equal(grpc_infer(channel), [2, 4])


def test_the_gateway_talks_tls_to_predictors(certificates):
    # The predictor here is another gateway: a real server of v1, OIP REST and OIP gRPC over TLS.
    with running_gateway(config_for(DEMO, server=tls_server(certificates))) as upstream:
        models = [
            {"name": "via_v1", "backend_model": "demo", "backend": "kserve", "api": "v1",
             "url": f"https://127.0.0.1:{upstream.gateway.http_port}", "ca_file": certificates["ca"],
             "inputs": [{"name": "INPUT0", "datatype": "FP32"}], "outputs": [{"name": "OUTPUT0", "datatype": "FP32"}]},
            {"name": "via_oip_http", "backend_model": "demo", "backend": "kserve", "api": "v2",
             "url": f"https://127.0.0.1:{upstream.gateway.http_port}", "ca_file": certificates["ca"]},
            {"name": "via_grpc", "backend_model": "demo", "backend": "triton", "protocol": "grpc", "tls": True,
             "url": upstream.grpc_address, "ca_file": certificates["ca"]},
        ]
        with running_gateway(config_for(*models)) as gw:
            for name in ("via_v1", "via_oip_http", "via_grpc"):
                status, body = http_json("POST", f"{gw.http_url}/v1/models/{name}:predict", {"instances": [[3, 4]]})
                assert (status, body["predictions"]) == (200, [[6, 8]]), name


def test_a_predictor_with_an_untrusted_certificate_is_unavailable(certificates):
    with running_gateway(config_for(DEMO, server=tls_server(certificates))) as upstream:
        model = {"name": "demo", "backend": "kserve", "api": "v1",  # no ca_file: system CAs do not trust it
                 "url": f"https://127.0.0.1:{upstream.gateway.http_port}"}
        with running_gateway(config_for(model), wait_ready=False) as gw:
            status, body = http_json("POST", f"{gw.http_url}/v1/models/demo:predict", {"instances": [[1]]})
            assert status == 503 and "127.0.0.1" not in body["error"]


def test_bearer_token_on_both_front_ends(monkeypatch):
    monkeypatch.setenv("GATEWAY_TOKEN", TOKEN)
    with running_gateway(config_for(DEMO, server={"auth_token_env": "GATEWAY_TOKEN"})) as gw:
        url = f"{gw.http_url}/v1/models/demo:predict"
        assert http_json("POST", url, {"instances": [[1]]})[0] == 401
        status, body = http_json("POST", url, {"instances": [[1]]}, headers={"Authorization": "Bearer wrong"})
        assert status == 401 and "not valid" in body["error"]
        assert http_json("POST", url, {"instances": [[1]]}, headers={"Authorization": f"Bearer {TOKEN}"})[0] == 200
        # The scheme is case-insensitive (RFC 7235), on both protocols.
        assert http_json("POST", url, {"instances": [[1]]}, headers={"Authorization": f"bearer {TOKEN}"})[0] == 200
        assert http_json("GET", f"{gw.http_url}/v2/models/demo")[0] == 401
        assert http_json("GET", f"{gw.http_url}/v2/health/live")[0] == 200  # probes need no secret
        assert http_json("GET", f"{gw.http_url}/v2/health/ready")[0] == 200
        with grpc.insecure_channel(gw.grpc_address) as channel:
            with pytest.raises(grpc.RpcError) as caught:
                grpc_infer(channel)
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
            np.testing.assert_array_equal(grpc_infer(channel, metadata=[("authorization", f"Bearer {TOKEN}")]), [2, 4])
            np.testing.assert_array_equal(grpc_infer(channel, metadata=[("authorization", f"BEARER {TOKEN}")]), [2, 4])
            health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""))
            assert health.status == health_pb2.HealthCheckResponse.SERVING


def test_a_missing_token_variable_is_a_config_error(monkeypatch):
    from gateway import config
    monkeypatch.delenv("ABSENT_TOKEN", raising=False)
    with pytest.raises(config.ConfigError, match=r"server\.auth_token_env: the environment variable it names is unset"):
        config.parse({"models": [DEMO], "server": {"auth_token_env": "ABSENT_TOKEN"}})


def test_in_token_mode_server_liveness_and_readiness_need_no_token_on_either_protocol(monkeypatch):
    # The same probes are open over HTTP and gRPC (server-level health); model-level
    # endpoints need the token over both.
    from wire.generated.inference import grpc_service_pb2 as pb
    from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc
    from wire.generated.torchserve import inference_pb2_grpc as ts_grpc

    monkeypatch.setenv("GATEWAY_TOKEN", TOKEN)
    with running_gateway(config_for(DEMO, server={"auth_token_env": "GATEWAY_TOKEN"})) as gw:
        for path in ("/v2/health/live", "/v2/health/ready", "/ping"):
            assert http_json("GET", f"{gw.http_url}{path}")[0] == 200, path
        assert http_json("GET", f"{gw.http_url}/v2/models/demo/ready")[0] == 401
        with grpc.insecure_channel(gw.grpc_address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            assert stub.ServerLive(pb.ServerLiveRequest(), timeout=10).live
            assert stub.ServerReady(pb.ServerReadyRequest(), timeout=10).ready
            assert "Healthy" in ts_grpc.InferenceAPIsServiceStub(channel).Ping(Empty(), timeout=10).health
            with pytest.raises(grpc.RpcError) as caught:
                stub.ModelReady(pb.ModelReadyRequest(name="demo"), timeout=10)
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_tls_holds_through_workers(certificates, tmp_path):
    """`--workers 2`: every process serves TLS on both ports (each connection, whichever
    process the kernel gives it to)."""
    from tests.processes import gateway

    config = tmp_path / "gateway.toml"
    config.write_text(f'[server.tls]\ncert_file = "{certificates["cert"]}"\nkey_file = "{certificates["key"]}"\n'
                      '[[models]]\nname = "demo"\nbackend = "simulated"\nsimulated = { call_ms = 1 }\n')
    process = gateway(config, workers=2)
    try:
        for value in range(8):  # a new connection each, which the kernel spreads over the processes
            status, body = https_json(f"https://{process.http_address}/v1/models/demo:predict",
                                      {"instances": [[value]]}, certificates["ca"])
            assert status == 200 and body["predictions"] == [[2 * value]]
        credentials = grpc.ssl_channel_credentials(root_certificates=Path(certificates["ca"]).read_bytes())
        for _ in range(4):
            with grpc.secure_channel(process.grpc_address, credentials) as channel:
                np.testing.assert_array_equal(grpc_infer(channel), [2, 4])
    finally:
        assert process.stop() == 0
