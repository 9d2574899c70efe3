"""The Deployment's probes against a real gateway process: the paths, ports and gRPC health
service the manifests name are ones the gateway serves, with the answers the probe design
counts on. The gateway runs as `python -m gateway serve` on free ports (it prints
`READY http=... grpc=...`); the manifests' 8080/8081 are mapped onto those, and it is
stopped by PID."""
from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gateway.config import ServerConfig
from tests.deploy.support import (
    CONFIG_KEY,
    ROOT,
    GatewayProcess,
    container_port,
    gateway_container,
    localise_predictor_urls,
    render,
)

BASE = render(ROOT / "deploy")
KSERVE = render(ROOT / "deploy/kserve-example")


def probes(tree=BASE) -> dict[str, dict]:
    container = gateway_container(tree)
    return {kind: container[kind] | {"_container": container}
            for kind in ("startupProbe", "livenessProbe", "readinessProbe")}


def http_probe(gateway: GatewayProcess, probe: dict) -> int:
    """What the kubelet's httpGet probe would see: the status, or 0 for no answer in time."""
    get = probe["httpGet"]
    assert container_port(probe["_container"], get["port"]) == ServerConfig().http_port
    url = gateway.http_url + get["path"]
    try:
        with urllib.request.urlopen(url, timeout=probe["timeoutSeconds"]) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


def grpc_probe(gateway: GatewayProcess, probe: dict) -> int:
    """What the kubelet's grpc probe does: grpc.health.v1.Health/Check on the probe's port."""
    check = probe["grpc"]
    assert check["port"] == ServerConfig().grpc_port
    with grpc.insecure_channel(gateway.grpc_address) as channel:
        response = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=check.get("service", "")), timeout=probe["timeoutSeconds"])
    return response.status


def passes(status: int) -> bool:
    return 200 <= status < 400  # the kubelet's rule for httpGet probes


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(config_text: str | None = None, directory: Path | None = None) -> GatewayProcess:
    args = ["serve", "--http-port", "0", "--grpc-port", "0", "--log-level", "WARNING"]
    if config_text is not None:
        path = directory / CONFIG_KEY
        path.write_text(config_text)
        args += ["--config", str(path)]
    return GatewayProcess.module(*args)


def wait_until(predicate, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def test_the_manifests_ports_are_the_gateways_default_ports():
    # The image's entrypoint passes exactly these; a gateway run without flags uses them too.
    container = gateway_container(BASE)
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == \
        {"http": ServerConfig().http_port, "grpc": ServerConfig().grpc_port}


@pytest.mark.parametrize("config", ["embedded default", "deploy/gateway/configmap.yaml"])
def test_every_probe_passes_on_a_gateway_with_ready_models(config, tmp_path):
    text = None if config == "embedded default" else BASE.one("ConfigMap")["data"][CONFIG_KEY]
    gateway = serve(text, tmp_path)
    try:
        p = probes()
        assert grpc_probe(gateway, p["startupProbe"]) == health_pb2.HealthCheckResponse.SERVING
        assert http_probe(gateway, p["livenessProbe"]) == 200
        assert wait_until(lambda: passes(http_probe(gateway, p["readinessProbe"])))
    finally:
        assert gateway.stop() == 0


def test_with_its_predictor_down_the_gateway_is_live_but_not_ready(tmp_path):
    # The KServe example's config, its predictor addresses pointed at a closed local port:
    # the gateway must start (startup passes), stay live (no restarts), and be unready.
    text = localise_predictor_urls(KSERVE.one("ConfigMap")["data"][CONFIG_KEY], closed_port())
    assert "svc.cluster.local" not in text
    gateway = serve(text, tmp_path)
    try:
        p = probes(KSERVE)
        assert grpc_probe(gateway, p["startupProbe"]) == health_pb2.HealthCheckResponse.SERVING
        started = time.monotonic()
        ready_status = http_probe(gateway, p["readinessProbe"])
        assert ready_status == 503
        assert time.monotonic() - started < p["readinessProbe"]["timeoutSeconds"], "answered within the probe's timeout"
        assert http_probe(gateway, p["livenessProbe"]) == 200
    finally:
        assert gateway.stop() == 0

