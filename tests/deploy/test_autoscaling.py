"""The autoscaling recipes (deploy/autoscaling/), validated offline: the KEDA ScaledObject and
prometheus-adapter's config against JSON schemas written here from their documented formats
(neither has a schema in kubernetes-validate; their HPA behavior blocks are Kubernetes' own
type and go through kubernetes-validate), every query they run is valid PromQL naming a
series deploy/prometheus/recording-rules.yaml records, and the wiring: both scale the
Deployment KServe makes for the example's InferenceService, which leaves it to them; the
gateway sees each predictor pod through a headless Service; the two recipes agree.

The HPA itself, the headless Service and everything else the trees render are checked
against the Kubernetes schema by test_manifests.py, and the gateway.toml by the gateway."""
from __future__ import annotations

import copy
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema  # kubernetes-validate's own dependency: its validator
import kubernetes_validate
import pytest
import yaml

from gateway import config as gateway_config
from tests.deploy.support import (
    CONFIG_KEY,
    DEPLOY,
    PROMETHEUS_ADAPTER_VALUES,
    ROOT,
    Rendered,
    load_documents,
    render,
)

AUTOSCALING = DEPLOY / "autoscaling"
BASE = AUTOSCALING / "base"
RECIPES = {"keda": AUTOSCALING / "keda", "prometheus-adapter": AUTOSCALING / "prometheus-adapter"}
RECORDING_RULES = DEPLOY / "prometheus" / "recording-rules.yaml"
LOAD_SERIES = "model:gateway_predictor_load:ratio"
KUBERNETES_VERSION = "1.30.0"  # the oldest test_manifests.py validates for
AUTOSCALER_CLASS = "serving.kserve.io/autoscalerClass"
# The labels KServe puts on every pod of an InferenceService's predictor.
PREDICTOR_POD_LABELS = ("serving.kserve.io/inferenceservice", "component")


# -- schemas, from the projects' documentation -----------------------------------------

STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
COUNT = {"type": "integer", "minimum": 0}
OBJECT_META = {
    "type": "object", "required": ["name"], "additionalProperties": False,
    "properties": {"name": {"type": "string"}, "namespace": {"type": "string"},
                   "labels": STRING_MAP, "annotations": STRING_MAP}}

# KEDA's ScaledObject (keda.sh/v1alpha1), as its "ScaledObject specification" page documents
# it; `behavior` is Kubernetes' HorizontalPodAutoscalerBehavior, checked by kubernetes-validate.
# Trigger metadata is a map of strings: the CRD refuses numbers and booleans there.
SCALED_OBJECT_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"], "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": OBJECT_META,
        "spec": {
            "type": "object", "required": ["scaleTargetRef", "triggers"], "additionalProperties": False,
            "properties": {
                "scaleTargetRef": {
                    "type": "object", "required": ["name"], "additionalProperties": False,
                    "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                   "name": {"type": "string"}, "envSourceContainerName": {"type": "string"}}},
                "pollingInterval": COUNT, "cooldownPeriod": COUNT, "initialCooldownPeriod": COUNT,
                "idleReplicaCount": COUNT, "minReplicaCount": COUNT, "maxReplicaCount": COUNT,
                "fallback": {
                    "type": "object", "required": ["failureThreshold", "replicas"], "additionalProperties": False,
                    "properties": {"failureThreshold": COUNT, "replicas": COUNT, "behavior": {"type": "string"}}},
                "advanced": {
                    "type": "object", "additionalProperties": False,
                    "properties": {
                        "restoreToOriginalReplicaCount": {"type": "boolean"},
                        "horizontalPodAutoscalerConfig": {
                            "type": "object", "additionalProperties": False,
                            "properties": {"name": {"type": "string"}, "behavior": {"type": "object"}}},
                        "scalingModifiers": {
                            "type": "object", "additionalProperties": False,
                            "properties": {"formula": {"type": "string"}, "target": {"type": "string"},
                                           "activationTarget": {"type": "string"},
                                           "metricType": {"enum": ["AverageValue", "Value"]}}}}},
                "triggers": {
                    "type": "array", "minItems": 1,
                    "items": {
                        "type": "object", "required": ["type", "metadata"], "additionalProperties": False,
                        "properties": {
                            "type": {"type": "string"}, "name": {"type": "string"},
                            "metadata": STRING_MAP,
                            "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                            "useCachedMetrics": {"type": "boolean"},
                            "authenticationRef": {
                                "type": "object", "required": ["name"], "additionalProperties": False,
                                "properties": {"name": {"type": "string"},
                                               "kind": {"enum": ["TriggerAuthentication",
                                                                 "ClusterTriggerAuthentication"]}}}}}}}}}}

# The Prometheus scaler's metadata keys, as KEDA's "Prometheus" scaler page lists them.
PROMETHEUS_TRIGGER_KEYS = {"serverAddress", "query", "queryParameters", "threshold", "activationThreshold",
                           "namespace", "customHeaders", "ignoreNullValues", "unsafeSsl", "authModes"}
PROMETHEUS_TRIGGER_REQUIRED = {"serverAddress", "query", "threshold"}

# prometheus-adapter's discovery rule (its config.md and externalmetrics.md; the Go type
# DiscoveryRule), as an `externalRules` entry or the Helm chart's `rules.external` item.
ADAPTER_RULE_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["seriesQuery", "metricsQuery"], "additionalProperties": False,
    "properties": {
        "seriesQuery": {"type": "string", "minLength": 1},
        "seriesFilters": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "minProperties": 1, "maxProperties": 1,
            "properties": {"is": {"type": "string"}, "isNot": {"type": "string"}}}},
        "resources": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "template": {"type": "string"},
                "namespaced": {"type": "boolean"},
                "overrides": {"type": "object", "additionalProperties": {
                    "type": "object", "required": ["resource"], "additionalProperties": False,
                    "properties": {"group": {"type": "string"}, "resource": {"type": "string"}}}}}},
        "name": {"type": "object", "additionalProperties": False,
                 "properties": {"matches": {"type": "string"}, "as": {"type": "string"}}},
        "metricsQuery": {"type": "string", "minLength": 1},
        "labelValueReplacements": {"type": "array", "items": {
            "type": "object", "additionalProperties": False,
            "properties": {"find": {"type": "string"}, "replace": {"type": "string"}}}}}}

# The prometheus-community/prometheus-adapter chart's values this file sets.
ADAPTER_VALUES_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["rules"], "additionalProperties": False,
    "properties": {
        "prometheus": {"type": "object", "additionalProperties": False,
                       "properties": {"url": {"type": "string"}, "port": {"type": "integer"},
                                      "path": {"type": "string"}}},
        "rules": {"type": "object", "required": ["external"], "additionalProperties": False,
                  "properties": {"default": {"type": "boolean"}, "custom": {"type": "array"},
                                 "existing": {"type": ["string", "null"]},
                                 "external": {"type": "array", "minItems": 1, "items": ADAPTER_RULE_SCHEMA},
                                 "resource": {"type": "object"}}}}}


# -- reading the trees -------------------------------------------------------------------

@pytest.fixture(scope="module")
def trees() -> dict[str, Rendered]:
    return {"base": render(BASE), **{name: render(path) for name, path in RECIPES.items()}}


def scaled_object(trees: dict[str, Rendered]) -> dict[str, Any]:
    return trees["keda"].one("ScaledObject")


def predictor_hpa(trees: dict[str, Rendered]) -> dict[str, Any]:
    (hpa,) = [h for h in trees["prometheus-adapter"].find("HorizontalPodAutoscaler")
              if h["spec"]["scaleTargetRef"]["name"] != "batching-gateway"]
    return hpa


def prometheus_trigger(trees: dict[str, Rendered]) -> dict[str, Any]:
    (trigger,) = scaled_object(trees)["spec"]["triggers"]
    return trigger


def adapter_values() -> dict[str, Any]:
    return yaml.safe_load(PROMETHEUS_ADAPTER_VALUES.read_text())


def adapter_rule() -> dict[str, Any]:
    (rule,) = adapter_values()["rules"]["external"]
    return rule


def recorded_names() -> set[str]:
    groups = yaml.safe_load(RECORDING_RULES.read_text())["groups"]
    return {rule["record"] for group in groups for rule in group["rules"] if "record" in rule}


def inference_service(tree: Rendered) -> dict[str, Any]:
    return tree.one("InferenceService")


def predictor_deployment_name(tree: Rendered) -> str:
    # KServe's RawDeployment mode names the predictor's Deployment `<isvc>-predictor`.
    return inference_service(tree)["metadata"]["name"] + "-predictor"


def gateway_models(tree: Rendered) -> list[gateway_config.ModelConfig]:
    text = tree.one("ConfigMap", "batching-gateway-config")["data"][CONFIG_KEY]
    return list(gateway_config.parse(tomllib.loads(text)).models)


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    executable = shutil.which("promtool")
    assert executable, "promtool is not on PATH: install Debian's prometheus package (tools/run_tests.sh does)"
    return subprocess.run([executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def assert_valid_promql(tmp_path: Path, queries: dict[str, str]) -> None:
    """promtool parses each query as a recording rule's expression."""
    rules = {"groups": [{"name": "queries", "rules": [{"record": f"query:{name}", "expr": expr}
                                                      for name, expr in queries.items()]}]}
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump(rules))
    checked = promtool("check", "rules", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def series_names(query: str) -> set[str]:
    """The metric names a (simple) PromQL query selects: names before `{`, or standing alone."""
    without_strings = re.sub(r'"[^"]*"', '""', query)
    names = set(re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{", without_strings))
    functions = {"sum", "max", "min", "avg", "count", "rate", "irate", "increase", "by", "without", "on"}
    return names - functions


def model_regex_values(matcher: str) -> set[str]:
    return set(matcher.split("|"))


# -- the trees ---------------------------------------------------------------------------

def test_the_recipes_are_overlays_of_one_base_of_the_kserve_example():
    base = load_documents(BASE / "kustomization.yaml")[0]
    assert "../../kserve-example" in base["resources"]
    for name, path in RECIPES.items():
        kustomization = load_documents(path / "kustomization.yaml")[0]
        assert kustomization["resources"][0] == "../base", f"{name}: an overlay of deploy/autoscaling/base/"
        assert kustomization["namespace"] == base["namespace"], name


def test_the_base_hands_the_predictor_to_an_external_autoscaler_and_has_none(trees):
    base = trees["base"]
    assert inference_service(base)["metadata"]["annotations"][AUTOSCALER_CLASS] == "external"
    assert not base.find("ScaledObject")
    assert [h["metadata"]["name"] for h in base.find("HorizontalPodAutoscaler")] == ["batching-gateway"]
    # The example itself keeps KServe's own autoscaler: the patch is the recipes' alone.
    example = render(DEPLOY / "kserve-example")
    assert AUTOSCALER_CLASS not in inference_service(example)["metadata"].get("annotations", {})


def test_each_recipe_is_one_autoscaler_of_the_predictor_deployment(trees):
    for name in RECIPES:
        tree = trees[name]
        target = predictor_deployment_name(tree)
        autoscalers = [r for r in tree.find("ScaledObject") + tree.find("HorizontalPodAutoscaler")
                       if r["spec"]["scaleTargetRef"]["name"] == target]
        assert len(autoscalers) == 1, f"{name}: {len(autoscalers)} autoscalers of {target}"
        (autoscaler,) = autoscalers
        reference = autoscaler["spec"]["scaleTargetRef"]
        assert (reference["apiVersion"], reference["kind"]) == ("apps/v1", "Deployment")
        # In the InferenceService's namespace (a ScaledObject's or HPA's target must be), and not
        # named like the autoscaler KServe deletes under autoscalerClass external.
        assert autoscaler["metadata"]["namespace"] == inference_service(tree)["metadata"]["namespace"]
        assert autoscaler["metadata"]["name"] != target
        assert inference_service(tree)["metadata"]["annotations"][AUTOSCALER_CLASS] == "external"


# -- the KEDA ScaledObject -------------------------------------------------------------

def test_the_scaled_object_matches_kedas_documented_schema(trees):
    jsonschema.validate(scaled_object(trees), SCALED_OBJECT_SCHEMA)


@pytest.mark.parametrize("breakage", ["misspelled field", "number in trigger metadata", "unknown metric type"])
def test_the_scaled_object_schema_catches_mistakes(trees, breakage):
    broken = copy.deepcopy(scaled_object(trees))
    if breakage == "misspelled field":
        broken["spec"]["maxReplicas"] = broken["spec"].pop("maxReplicaCount")  # the HPA's spelling
    elif breakage == "number in trigger metadata":
        broken["spec"]["triggers"][0]["metadata"]["threshold"] = 0.7
    else:
        broken["spec"]["triggers"][0]["metricType"] = "Average"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, SCALED_OBJECT_SCHEMA)


def test_the_scaled_objects_hpa_behavior_is_a_valid_kubernetes_behavior(trees):
    # KEDA copies it into the HPA it makes: the Kubernetes schema says what it may hold.
    spec = scaled_object(trees)["spec"]
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    hpa: dict[str, Any] = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "keda-hpa"},
                           "spec": {"scaleTargetRef": spec["scaleTargetRef"], "minReplicas": spec["minReplicaCount"],
                                    "maxReplicas": spec["maxReplicaCount"], "behavior": behavior}}
    kubernetes_validate.validate(hpa, KUBERNETES_VERSION, strict=True)
    broken = copy.deepcopy(hpa)
    broken["spec"]["behavior"]["scaleDown"]["stabilisationWindowSeconds"] = 300
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_the_scaled_object_scales_between_one_and_a_cap_and_never_to_zero(trees):
    spec = scaled_object(trees)["spec"]
    assert 1 <= spec["minReplicaCount"] < spec["maxReplicaCount"]
    assert "idleReplicaCount" not in spec, "a RawDeployment predictor does not scale to zero"
    assert 0 < spec["pollingInterval"] <= 30
    scale_down = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
    assert scale_down["stabilizationWindowSeconds"] >= 60, "a pause in traffic should not cost a cold start"


def test_the_prometheus_trigger_targets_the_fleet_load_as_a_value(trees, tmp_path):
    trigger = prometheus_trigger(trees)
    assert trigger["type"] == "prometheus"
    # The load is per fleet already: AverageValue (KEDA's default) would divide it again.
    assert trigger["metricType"] == "Value"
    metadata = trigger["metadata"]
    assert set(metadata) <= PROMETHEUS_TRIGGER_KEYS, set(metadata) - PROMETHEUS_TRIGGER_KEYS
    assert set(metadata) >= PROMETHEUS_TRIGGER_REQUIRED
    assert 0 < float(metadata["threshold"]) < 1, "a target load below the fleet's capacity"
    assert metadata["ignoreNullValues"] == "false", "no answer must hold the replicas, not read as load 0"
    address = urlsplit(metadata["serverAddress"])
    assert address.scheme in ("http", "https") and address.hostname and not address.path.strip("/")
    assert_valid_promql(tmp_path, {"keda": metadata["query"]})
    assert series_names(metadata["query"]) == {LOAD_SERIES}
    assert LOAD_SERIES in recorded_names()


def test_the_query_adds_the_loads_of_every_gateway_model_of_this_predictor(trees):
    # Models of one predictor share its replicas: leaving one out would under-read the load.
    query = prometheus_trigger(trees)["metadata"]["query"]
    assert query.startswith("sum("), "one number for KEDA, the sum of the models' loads"
    (matcher,) = re.findall(r'model=~"([^"]+)"', query)
    isvc = inference_service(trees["keda"])["metadata"]["name"]
    served = {model.name for model in gateway_models(trees["keda"]) if model.predictor.model == isvc}
    assert model_regex_values(matcher) == served


# -- the HPA and prometheus-adapter ----------------------------------------------------

def test_the_adapter_values_match_the_charts_and_the_adapters_config_format():
    jsonschema.validate(adapter_values(), ADAPTER_VALUES_SCHEMA)
    broken = copy.deepcopy(adapter_rule())
    broken["metricQuery"] = broken.pop("metricsQuery")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, ADAPTER_RULE_SCHEMA)


def test_the_adapter_serves_the_recorded_load_under_the_hpas_metric_name(trees, tmp_path):
    rule = adapter_rule()
    assert series_names(rule["seriesQuery"]) == {LOAD_SERIES} and LOAD_SERIES in recorded_names()
    assert re.fullmatch(rule["name"]["matches"], LOAD_SERIES)
    # The recorded series has no namespace of the HPA's: the adapter must not filter by one.
    assert rule["resources"]["namespaced"] is False
    external = predictor_hpa(trees)["spec"]["metrics"][0]["external"]
    assert external["metric"]["name"] == rule["name"]["as"]
    # The query the adapter would send for the HPA's selector (its templates filled in the way
    # the adapter fills them: `In` becomes a regular-expression matcher).
    (requirement,) = external["metric"]["selector"]["matchExpressions"]
    assert requirement["operator"] == "In"
    matchers = f'{requirement["key"]}=~"{"|".join(requirement["values"])}"'
    query = rule["metricsQuery"].replace("<<.Series>>", LOAD_SERIES).replace("<<.LabelMatchers>>", matchers)
    assert "<<" not in query, "a template the test does not fill in"
    assert query.startswith("sum("), "one number: the External metric's Value target reads one"
    assert_valid_promql(tmp_path, {"adapter": query})


def test_the_hpa_targets_the_fleet_load_as_a_value_for_every_model_of_the_predictor(trees):
    hpa = predictor_hpa(trees)
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "External"
    target = metric["external"]["target"]
    assert target["type"] == "Value", "the load is per fleet already: AverageValue would divide it again"
    (requirement,) = metric["external"]["metric"]["selector"]["matchExpressions"]
    isvc = inference_service(trees["prometheus-adapter"])["metadata"]["name"]
    served = {model.name for model in gateway_models(trees["prometheus-adapter"]) if model.predictor.model == isvc}
    assert (requirement["key"], set(requirement["values"])) == ("model", served)


def test_the_two_recipes_scale_alike(trees):
    keda, hpa = scaled_object(trees)["spec"], predictor_hpa(trees)["spec"]
    assert (keda["minReplicaCount"], keda["maxReplicaCount"]) == (hpa["minReplicas"], hpa["maxReplicas"])
    assert keda["advanced"]["horizontalPodAutoscalerConfig"]["behavior"] == hpa["behavior"]
    threshold = float(prometheus_trigger(trees)["metadata"]["threshold"])
    value = hpa["metrics"][0]["external"]["target"]["value"]
    assert value.endswith("m") and int(value[:-1]) / 1000 == threshold
    keda_models = model_regex_values(re.findall(r'model=~"([^"]+)"', prometheus_trigger(trees)["metadata"]["query"])[0])
    assert keda_models == set(hpa["metrics"][0]["external"]["metric"]["selector"]["matchExpressions"][0]["values"])


# -- the gateway sees each predictor pod ---------------------------------------------------

def test_the_headless_service_selects_the_predictors_ready_pods(trees):
    tree = trees["base"]
    isvc = inference_service(tree)
    service = tree.one("Service", predictor_deployment_name(tree) + "-headless")
    spec = service["spec"]
    assert spec["clusterIP"] == "None"
    assert not spec.get("publishNotReadyAddresses", False), "an unready pod must not become a replica"
    assert spec["selector"] == {PREDICTOR_POD_LABELS[0]: isvc["metadata"]["name"], PREDICTOR_POD_LABELS[1]: "predictor"}
    container_ports = {p["name"]: p["containerPort"] for p in isvc["spec"]["predictor"]["model"]["ports"]}
    assert {p["name"]: p["targetPort"] for p in spec["ports"]} == container_ports


@pytest.mark.parametrize("root", ["base", *RECIPES])
def test_the_gateway_finds_the_predictor_pods_through_the_headless_service(trees, root):
    tree = trees[root]
    isvc = inference_service(tree)
    service = tree.one("Service", predictor_deployment_name(tree) + "-headless")
    host = f"{service['metadata']['name']}.{tree.namespace}.svc.cluster.local"
    ports = {p["name"]: p["targetPort"] for p in service["spec"]["ports"]}
    models = gateway_models(tree)
    assert {model.predictor.protocol.transport for model in models} == {"http", "grpc"}
    raw = tomllib.loads(tree.one("ConfigMap", "batching-gateway-config")["data"][CONFIG_KEY])["models"]
    for model, settings in zip(models, raw, strict=True):
        assert model.predictor.model == isvc["metadata"]["name"], model.name
        assert settings.get("dns_replicas") is True, f"{model.name}: each predictor pod a replica of its own"
        url = model.predictor.url if "://" in model.predictor.url else f"//{model.predictor.url}"
        parts = urlsplit(url)
        # A headless Service maps no port: the url names the pod's own.
        assert (parts.hostname, parts.port) == (host, ports[model.predictor.protocol.transport]), model.name


def test_the_docs_apply_the_two_recipes():
    page = (ROOT / "docs" / "autoscaling.md").read_text()
    applied = {target.rstrip("/") for target in re.findall(r"kubectl apply -k (\S+)", page)}
    assert applied == {f"deploy/autoscaling/{name}" for name in RECIPES}
    assert PROMETHEUS_ADAPTER_VALUES.relative_to(ROOT).as_posix() in page
