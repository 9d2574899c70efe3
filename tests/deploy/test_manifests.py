"""The Kubernetes manifests under deploy/, validated offline: every resource against the
Kubernetes OpenAPI schema (kubernetes-validate, strict, pinned versions), the KServe
InferenceService structurally (the autoscaling recipes' KEDA ScaledObject in
test_autoscaling.py), every gateway.toml by the gateway's own config validation, and the
wiring between them (ports, labels, names, predictor addresses)."""
from __future__ import annotations

import copy
import re
import socket
import subprocess
import sys
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate import utils as kv_utils

from backends import grpc as backends_grpc
from backends import http as backends_http
from backends.settings import PredictorProtocol
from gateway import config as gateway_config
from gateway.grpc.server import INFERENCE_SERVICE
from tests.deploy.support import (
    CONFIG_KEY,
    CUSTOM_KINDS,
    DEPLOY,
    ROOT,
    all_manifest_files,
    component_dirs,
    config_maps_with_gateway_toml,
    container_port,
    dockerfile_instructions,
    gateway_container,
    kustomization_dirs,
    load_documents,
    pod_spec,
    render,
    stages,
    tool,
)

# The Kubernetes versions the manifests are validated for: the oldest we claim (gRPC probes
# are GA since 1.27, every API used here is GA by 1.30) and the newest whose schema the
# pinned kubernetes-validate ships (its version follows Kubernetes': 1.37.0 -> 1.37).
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")
HTTP_PORT, GRPC_PORT = 8080, 8081  # the image's (entrypoint, EXPOSE) and the gateway's defaults
ROOTS = {path.relative_to(ROOT).as_posix(): path for path in kustomization_dirs()}


@pytest.fixture(scope="module")
def rendered():
    return {name: render(path) for name, path in ROOTS.items()}


def test_the_deploy_tree_has_the_expected_kustomize_roots():
    assert set(ROOTS) == {"deploy", "deploy/gateway", "deploy/kserve-example", "deploy/shared-quotas",
                          "deploy/autoscaling/base", "deploy/autoscaling/keda", "deploy/autoscaling/prometheus-adapter"}
    assert [path.relative_to(ROOT).as_posix() for path in component_dirs()] == ["deploy/components/shared-quotas"]


def test_the_docs_kubectl_commands_name_these_kustomize_roots():
    readme = (ROOT / "docs" / "operations.md").read_text()
    applied = {target.rstrip("/") for target in re.findall(r"kubectl apply -k (\S+)", readme)}
    assert applied == {"deploy", "deploy/kserve-example"}
    assert applied <= set(ROOTS)


def test_every_manifest_file_is_applied_by_some_kustomization(rendered):
    read = set().union(*(r.files for r in rendered.values()))
    unused = [str(p.relative_to(ROOT)) for p in all_manifest_files() if p.resolve() not in read]
    assert not unused, f"manifests no kustomization applies: {unused}"


@pytest.mark.parametrize("root", sorted(ROOTS))
def test_render_is_what_kustomize_builds(rendered, root):
    # support.render is what the other tests read the manifests through; kubectl's kustomize
    # (the dev extras' binary) says whether it is faithful (kustomize refuses, e.g., an
    # overlay of its own parent directory, which render() would follow).
    built = subprocess.run([tool("kubectl"), "kustomize", str(ROOTS[root])], capture_output=True, text=True,
                           timeout=60)
    assert built.returncode == 0, built.stderr

    def key(resource):
        return resource["apiVersion"], resource["kind"], resource["metadata"].get("namespace", ""), resource["metadata"]["name"]

    expected = sorted((r for r in yaml.safe_load_all(built.stdout) if r), key=key)
    assert sorted(rendered[root].resources, key=key) == expected


# -- Kubernetes schema -----------------------------------------------------------------

@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to resolve or connect fails the test: validation must be offline."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args[:2]}")
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


def kubernetes_resources():
    """(id, resource) for every resource in every file, and every rendered resource."""
    for path in all_manifest_files():
        for index, document in enumerate(load_documents(path)):
            yield f"{path.relative_to(DEPLOY)}#{index}", document
    for name, path in ROOTS.items():
        for resource in render(path).resources:
            yield f"kustomize:{name}:{resource['kind']}/{resource['metadata']['name']}", resource


RESOURCES = list(kubernetes_resources())
SCHEMA_RESOURCES = [(n, r) for n, r in RESOURCES if (r["apiVersion"], r["kind"]) not in CUSTOM_KINDS]


def test_the_validator_ships_the_pinned_schemas():
    shipped = kv_utils.all_versions()
    for version in KUBERNETES_VERSIONS:
        assert version in shipped, f"kubernetes-validate {kubernetes_validate.__version__} has no {version} schema"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("name, resource", SCHEMA_RESOURCES, ids=[name for name, _ in SCHEMA_RESOURCES])
def test_every_resource_matches_the_kubernetes_schema(no_network, name, resource, version):
    # Custom resources (CUSTOM_KINDS) are not in the schema: test_inference_service_* below.
    try:
        kubernetes_validate.validate(resource, version, strict=True)
    except kubernetes_validate.ValidationError as error:
        pytest.fail(f"{name}: {'.'.join(map(str, error.path))}: {error.message}")


def test_strict_schema_validation_catches_a_misspelled_field(no_network, rendered):
    deployment = rendered["deploy"].one("Deployment")
    broken = copy.deepcopy(deployment)
    container = broken["spec"]["template"]["spec"]["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[0], strict=True)
    broken = copy.deepcopy(deployment)
    broken["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "8080"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[0], strict=True)


def test_only_known_custom_resources_bypass_the_schema():
    bypassed = {(r["apiVersion"], r["kind"]) for _, r in RESOURCES} - {(r["apiVersion"], r["kind"]) for _, r in SCHEMA_RESOURCES}
    assert bypassed == CUSTOM_KINDS


# -- the gateway Deployment ------------------------------------------------------------

GATEWAY_ROOTS = ("deploy", "deploy/gateway", "deploy/kserve-example", "deploy/shared-quotas")


@pytest.mark.parametrize("root", GATEWAY_ROOTS)
def test_the_pod_is_locked_down(rendered, root):
    spec = pod_spec(rendered[root])
    image_uid = int(_dockerfile_user().split(":")[0])
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == image_uid
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert spec["automountServiceAccountToken"] is False
    container = gateway_container(rendered[root])
    context = container["securityContext"]
    assert context["runAsNonRoot"] is True
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context.get("privileged", False) is False
    assert context["capabilities"] == {"drop": ["ALL"]}


@pytest.mark.parametrize("root", GATEWAY_ROOTS)
def test_the_container_has_requests_and_limits(rendered, root):
    resources = gateway_container(rendered[root])["resources"]
    for section in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(resources[section]), section


@pytest.mark.parametrize("root", GATEWAY_ROOTS)
def test_probes_use_the_gateways_health_endpoints(rendered, root):
    container = gateway_container(rendered[root])
    assert {p["containerPort"]: p["name"] for p in container["ports"]} == {HTTP_PORT: "http", GRPC_PORT: "grpc"}
    liveness, readiness, startup = (container[k] for k in ("livenessProbe", "readinessProbe", "startupProbe"))
    assert liveness["httpGet"]["path"] == "/v2/health/live"
    assert container_port(container, liveness["httpGet"]["port"]) == HTTP_PORT
    assert readiness["httpGet"]["path"] == "/v2/health/ready"
    assert container_port(container, readiness["httpGet"]["port"]) == HTTP_PORT
    assert startup["grpc"]["port"] == GRPC_PORT
    assert startup["grpc"].get("service", "") in ("", INFERENCE_SERVICE)
    # The ready handler asks every predictor, each bounded by the backends' probe timeout.
    slowest = max(backends_http.PROBE_TIMEOUT_S, backends_grpc.PROBE_TIMEOUT_S)
    assert readiness["timeoutSeconds"] > slowest


@pytest.mark.parametrize("root", GATEWAY_ROOTS)
def test_the_config_file_is_mounted_where_the_entrypoint_reads_it(rendered, root):
    tree = rendered[root]
    container, spec = gateway_container(tree), pod_spec(tree)
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    config_path = Path(env["GATEWAY_CONFIG"])
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == str(config_path.parent))
    assert mount.get("readOnly") is True and "subPath" not in mount
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    config_map = tree.one("ConfigMap", volume["configMap"]["name"])
    assert config_path.name in config_map["data"]
    assert config_path.name == CONFIG_KEY
    assert "GATEWAY_CONFIG" in (DEPLOY / "docker" / "entrypoint.sh").read_text()
    # A read-only root filesystem, with a writable /tmp.
    assert any(m["mountPath"] == "/tmp" for m in container["volumeMounts"])


@pytest.mark.parametrize("root", GATEWAY_ROOTS)
def test_shutdown_fits_in_the_grace_period(rendered, root):
    tree = rendered[root]
    spec, container = pod_spec(tree), gateway_container(tree)
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    pre_stop_s = float(command[1])
    config = _parsed(tree.one("ConfigMap", "batching-gateway-config")["data"][CONFIG_KEY])
    grpc_stop_s = 1.0  # gateway.process.server.Gateway.stop: the gRPC server's own grace
    assert pre_stop_s + config.server.grace_s + grpc_stop_s < spec["terminationGracePeriodSeconds"]


def test_the_deployment_runs_the_image_of_this_version(rendered):
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    image = gateway_container(rendered["deploy"])["image"]
    assert image == f"batching-gateway:{version}"


@pytest.mark.parametrize("root", GATEWAY_ROOTS)
def test_services_reach_the_pods_on_both_protocols(rendered, root):
    tree = rendered[root]
    deployment = tree.one("Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    container = gateway_container(tree)
    services = [s for s in tree.find("Service") if s["metadata"]["name"].startswith("batching-gateway")]
    assert {s["metadata"]["name"] for s in services} == {"batching-gateway", "batching-gateway-headless"}
    for service in services:
        assert service["spec"]["selector"].items() <= pod_labels.items()
        ports = {p["name"]: p for p in service["spec"]["ports"]}
        assert set(ports) == {"http", "grpc"}
        assert ports["http"]["port"] == HTTP_PORT and ports["grpc"]["port"] == GRPC_PORT
        assert ports["http"]["appProtocol"] == "http"
        assert ports["grpc"]["appProtocol"] in ("kubernetes.io/h2c", "grpc")
        for name, port in ports.items():
            assert container_port(container, port["targetPort"]) == {"http": HTTP_PORT, "grpc": GRPC_PORT}[name]
    assert tree.one("Service", "batching-gateway-headless")["spec"]["clusterIP"] == "None"


@pytest.mark.parametrize("root", GATEWAY_ROOTS)
def test_the_autoscaler_and_the_disruption_budget_fit_the_deployment(rendered, root):
    tree = rendered[root]
    deployment, hpa, pdb = tree.one("Deployment"), tree.one("HorizontalPodAutoscaler"), tree.one("PodDisruptionBudget")
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"], target["name"]) == ("apps/v1", "Deployment", deployment["metadata"]["name"])
    metrics = hpa["spec"]["metrics"]
    assert [(m["type"], m["resource"]["name"], m["resource"]["target"]["type"]) for m in metrics] == \
        [("Resource", "cpu", "Utilization")]
    # Utilization is a percentage of the CPU request: the container must have one.
    assert "cpu" in gateway_container(tree)["resources"]["requests"]
    assert "replicas" not in deployment["spec"], "the HPA owns the replica count"
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    # With minAvailable >= minReplicas no node could ever be drained.
    assert pdb["spec"]["minAvailable"] < hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]


# -- gateway.toml: the gateway's own validation ----------------------------------------

CONFIGS = config_maps_with_gateway_toml()
CONFIG_IDS = [str(path.relative_to(DEPLOY)) for path, _ in CONFIGS]


def _parsed(text: str) -> gateway_config.GatewayConfig:
    return gateway_config.parse(tomllib.loads(text))


def test_every_config_in_deploy_is_found():
    assert {path.relative_to(DEPLOY).as_posix() for path, _ in CONFIGS} == \
        {"gateway/configmap.yaml", "kserve-example/gateway-config.yaml", "autoscaling/base/gateway-config.yaml",
         "components/shared-quotas/gateway-config.yaml"}
    assert not list(DEPLOY.rglob("*.toml")), "a gateway.toml file under deploy/: add it to CONFIGS' search"


@pytest.mark.parametrize("path, config_map", CONFIGS, ids=CONFIG_IDS)
def test_every_gateway_toml_passes_the_gateways_config_validation(tmp_path, path, config_map):
    text = config_map["data"][CONFIG_KEY]
    parsed = _parsed(text)  # raises ConfigError naming the key
    assert parsed.models
    file = tmp_path / CONFIG_KEY
    file.write_text(text)
    result = subprocess.run([sys.executable, "-m", "gateway", "check-config", str(file)],
                            capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert ": ok (" in result.stdout


@pytest.mark.parametrize("path, config_map", CONFIGS, ids=CONFIG_IDS)
def test_configs_leave_address_and_ports_to_the_image(path, config_map):
    # The entrypoint overrides them (0.0.0.0, 8080, 8081); setting them here would mislead.
    server = tomllib.loads(config_map["data"][CONFIG_KEY]).get("server", {})
    assert not {"host", "http_port", "grpc_port"} & set(server), server


# -- the KServe example ----------------------------------------------------------------

DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
PREDICTOR_IMPLEMENTATIONS = {"model", "containers", "sklearn", "xgboost", "tensorflow", "pytorch", "triton",
                             "onnx", "pmml", "lightgbm", "paddle", "huggingface"}
BATCHABLE_COMPONENTS = ("predictor", "transformer", "explainer")


def _inference_service(rendered):
    return rendered["deploy/kserve-example"].one("InferenceService")


def test_inference_service_is_structurally_valid(rendered):
    isvc = _inference_service(rendered)
    assert isvc["apiVersion"] == "serving.kserve.io/v1beta1"
    assert isvc["kind"] == "InferenceService"
    assert set(isvc) <= {"apiVersion", "kind", "metadata", "spec"}
    name = isvc["metadata"]["name"]
    assert DNS_1035_LABEL.fullmatch(name) and len(name) <= 63, f"not a DNS-1035 label: {name}"
    assert isvc["metadata"]["namespace"] == rendered["deploy/kserve-example"].namespace
    spec = isvc["spec"]
    assert set(spec) <= {"predictor", "transformer", "explainer"}
    predictor = spec["predictor"]
    implementations = PREDICTOR_IMPLEMENTATIONS & set(predictor)
    assert implementations == {"model"}, f"one predictor implementation, `model`: {implementations}"
    model = predictor["model"]
    assert isinstance(model["modelFormat"]["name"], str) and model["modelFormat"]["name"]
    assert re.match(r"^(gs|s3|https?|pvc|hf|oci)://", model["storageUri"])
    assert model["protocolVersion"] in ("v1", "v2")
    assert isinstance(predictor["minReplicas"], int) and predictor["minReplicas"] <= predictor["maxReplicas"]
    for section in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(model["resources"][section])
    for port in model["ports"]:
        assert set(port) <= {"name", "containerPort", "protocol"} and isinstance(port["containerPort"], int)


def test_the_predictors_own_batcher_is_off(rendered):
    spec = _inference_service(rendered)["spec"]
    for component in BATCHABLE_COMPONENTS:
        assert "batcher" not in spec.get(component, {}), f"{component}.batcher: the gateway is the batcher"


def _predictor_ports(isvc) -> tuple[int, int]:
    """(HTTP, gRPC) port on the predictor's Service, by KServe's RawDeployment rules:
    the first container port is served as 80, the others under their own number."""
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "RawDeployment"
    ports = isvc["spec"]["predictor"]["model"]["ports"]
    assert ports[0]["containerPort"] == 8080, "KServe's model server serves HTTP on 8080"
    grpc = [p for p in ports[1:] if p["name"] == "grpc"]
    assert len(grpc) == 1 and grpc[0]["containerPort"] == 8081, "KServe's model server serves gRPC on 8081"
    return 80, grpc[0]["containerPort"]


def test_the_gateway_points_at_the_predictors_cluster_local_service(rendered):
    tree = rendered["deploy/kserve-example"]
    isvc = _inference_service(rendered)
    config = _parsed(tree.one("ConfigMap", "batching-gateway-config")["data"][CONFIG_KEY])
    host = f"{isvc['metadata']['name']}-predictor.{tree.namespace}.svc.cluster.local"
    http_port, grpc_port = _predictor_ports(isvc)
    protocols = set()
    for model in config.models:
        assert model.predictor.server == "kserve", model.name
        assert model.predictor.model == isvc["metadata"]["name"], "KServe names the model after the InferenceService"
        if model.predictor.protocol.transport == "http":
            url = urlsplit(model.predictor.url)
            assert (url.scheme, url.hostname, url.port or 80, url.path.strip("/")) == ("http", host, http_port, "")
            if model.predictor.protocol is PredictorProtocol.OIP_HTTP:
                assert isvc["spec"]["predictor"]["model"]["protocolVersion"] == "v2"
        else:
            assert model.predictor.url == f"{host}:{grpc_port}"
            assert isvc["spec"]["predictor"]["model"]["protocolVersion"] == "v2", "gRPC is the v2 protocol"
        protocols.add(model.predictor.protocol.transport)
    assert protocols == {"http", "grpc"}, "the example shows both ways to reach the predictor"


def test_the_example_patches_the_base_config_instead_of_adding_one(rendered):
    base = rendered["deploy/gateway"].one("ConfigMap", "batching-gateway-config")
    example = rendered["deploy/kserve-example"].one("ConfigMap", "batching-gateway-config")
    assert set(base["data"]) == set(example["data"]) == {CONFIG_KEY}
    assert base["data"][CONFIG_KEY] != example["data"][CONFIG_KEY]
    assert rendered["deploy/kserve-example"].one("Namespace")["metadata"]["name"] == rendered["deploy/kserve-example"].namespace


# -- helpers ---------------------------------------------------------------------------

def _dockerfile_user() -> str:
    final = stages(dockerfile_instructions())[-1]
    return [i for i in final if i.keyword == "USER"][-1].arguments


# -- the shared-quotas component -----------------------------------------------------------

def test_the_shared_quotas_component_is_the_base_config_with_shared_added_pointing_at_its_redis(rendered):
    """kustomize replaces a ConfigMap's key whole, so the component carries the base's
    gateway.toml: it must stay the base's, [shared] added, and name the Service it adds."""
    base = _configmap_toml(DEPLOY / "gateway" / "configmap.yaml")
    patched = _configmap_toml(DEPLOY / "components" / "shared-quotas" / "gateway-config.yaml")
    assert patched.startswith(base.rstrip("\n") + "\n")
    config = _parsed(patched)
    assert (config.shared.enabled, config.shared.on_unavailable) == (True, "local")
    assert tomllib.loads(patched)["models"] == tomllib.loads(base)["models"]
    tree = rendered["deploy/shared-quotas"]
    assert tree.one("ConfigMap", "batching-gateway-config")["data"][CONFIG_KEY] == patched
    service = tree.one("Service", "shared-quotas-redis")
    host_port = urlsplit(config.shared.url)
    assert (host_port.hostname, host_port.port) == (service["metadata"]["name"], service["spec"]["ports"][0]["port"])
    store = tree.one("StatefulSet", "shared-quotas-redis")
    assert service["spec"]["selector"].items() <= store["spec"]["template"]["metadata"]["labels"].items()
    (container,) = store["spec"]["template"]["spec"]["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"cpu", "memory"} <= set(container["resources"]["limits"])


def _configmap_toml(path: Path) -> str:
    (config_map,) = load_documents(path)
    return config_map["data"][CONFIG_KEY]
