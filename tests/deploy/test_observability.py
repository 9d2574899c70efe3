"""The Grafana dashboard (deploy/grafana) and the Prometheus alerting and recording rules
(deploy/prometheus) against the gateway they watch: every metric name their PromQL names is
in a running gateway's /metrics (and every recorded name they read is recorded), the rules
pass `promtool check rules` and their unit tests (`promtool test rules`), and the dashboard
is importable (its datasource an input, every panel titled and queried, every query valid
PromQL).

It knows the files' formats (Grafana's dashboard JSON, Prometheus' rule files), not what
each panel or alert means: those are read from the files themselves.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gateway import config as gateway_config
from tests.deploy.support import DEPLOY, ROOT
from tests.harness import config_for, http, http_json, running_gateway

DASHBOARD = DEPLOY / "grafana" / "batching-gateway.json"
RULES = DEPLOY / "prometheus" / "alerts.yaml"
RULE_TESTS = DEPLOY / "prometheus" / "alerts.test.yaml"
RECORDING_RULES = DEPLOY / "prometheus" / "recording-rules.yaml"
RECORDING_RULE_TESTS = DEPLOY / "prometheus" / "recording-rules.test.yaml"
RULE_FILES = (RULES, RECORDING_RULES)
# What reads the recorded series besides the alerts: the autoscaling recipes.
SCALED_OBJECT = DEPLOY / "autoscaling" / "keda" / "scaledobject.yaml"
ADAPTER_VALUES = DEPLOY / "autoscaling" / "prometheus-adapter" / "prometheus-adapter-values.yaml"
DATASOURCE_INPUT = "DS_PROMETHEUS"
DATASOURCE = {"type": "prometheus", "uid": "${" + DATASOURCE_INPUT + "}"}
# Metric names in PromQL: the gateway's all start so. Label values and legends are not read.
# Not inside a recorded name (level:metric:operations), which RECORDED_NAME finds instead.
METRIC_NAME = re.compile(r"(?<![\w:])gateway_[a-zA-Z0-9_]*(?![\w:])")
RECORDED_NAME = re.compile(r"(?<![\w:])[a-zA-Z_]\w*:[a-zA-Z_]\w*:\w+")
# Grafana's variables, as a Prometheus would see them once Grafana has substituted them.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h", "$model": ".*"}

# A model with priority levels and one with a padded input: their families appear only
# once such a model has served a request.
PRIORITY_MODEL = {"name": "demo", "backend": "simulated", "simulated": {"call_ms": 1, "per_instance_ms": 1},
                  "batching": {"priority_levels": 2, "max_batch_size": 8}}
PADDED_MODEL = {"name": "padded", "backend": "simulated", "simulated": {"call_ms": 1},
                "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, -1], "pad": {"dim": 1, "value": 0}}],
                "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, -1], "follows_pad": 1}]}


# -- reading the files ----------------------------------------------------------------

def load_dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def dashboard_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows included, and the panels a collapsed row holds."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def dashboard_exprs(dashboard: dict[str, Any]) -> list[str]:
    exprs = [target["expr"] for panel in dashboard_panels(dashboard) for target in panel.get("targets", [])]
    exprs += [variable["definition"] for variable in dashboard["templating"]["list"] if variable["type"] == "query"]
    return exprs


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def recording_rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RECORDING_RULES.read_text())["groups"] for rule in group["rules"]]


def recipe_queries() -> list[str]:
    """The PromQL the autoscaling recipes send: KEDA's trigger query, the adapter's queries."""
    triggers = yaml.safe_load(SCALED_OBJECT.read_text())["spec"]["triggers"]
    rules = yaml.safe_load(ADAPTER_VALUES.read_text())["rules"]["external"]
    return [trigger["metadata"]["query"] for trigger in triggers] + \
        [rule[key] for rule in rules for key in ("seriesQuery", "metricsQuery")]


def rule_test_series() -> list[str]:
    """The input series of both rule test files, as PromQL selectors."""
    tests = [test for path in (RULE_TESTS, RECORDING_RULE_TESTS) for test in yaml.safe_load(path.read_text())["tests"]]
    return [series["series"] for test in tests for series in test["input_series"]]


def referenced_names(texts: list[str]) -> set[str]:
    return {name for text in texts for name in METRIC_NAME.findall(text)}


def as_prometheus_sees_it(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    executable = shutil.which("promtool")
    # Required, never skipped: tools/run_tests.sh installs it (Debian's prometheus package).
    assert executable, "promtool is not on PATH: install Debian's prometheus package (tools/run_tests.sh does)"
    return subprocess.run([executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


# -- the names against a running gateway ----------------------------------------------

@pytest.fixture(scope="module")
def exported_names() -> set[str]:
    """Every sample name a gateway exports once it has served a little of everything:
    answers, a refused and a bad request, priority levels, a padded batch."""
    with running_gateway(config_for(PRIORITY_MODEL, PADDED_MODEL, max_body_bytes=1 << 20)) as gw:
        predict = f"{gw.http_url}/v1/models/demo:predict"
        for rows in (1, 3, 8, 2):  # batches of several sizes: the latency profile is fitted
            status, _ = http_json("POST", predict, {"instances": [[float(i)] for i in range(rows)]},
                                  headers={"X-Request-Priority": "1"})
            assert status == 200
        assert http_json("POST", predict, {"instances": [[1.0]]})[0] == 200  # the default level, 2
        assert http_json("POST", predict, {"instances": []})[0] == 400
        assert http_json("POST", predict, {"instances": [[1.0]]}, headers={"X-Request-Priority": "9"})[0] == 400
        assert http_json("POST", f"{gw.http_url}/v1/models/absent:predict", {"instances": [[1.0]]})[0] == 404
        assert http_json("POST", f"{gw.http_url}/v1/models/padded:predict",
                         {"instances": [[1.0, 2.0, 3.0], [4.0]]})[0] == 200
        status, _, body = http("GET", f"{gw.http_url}/metrics")
    assert status == 200
    return sample_names(body) | tenant_sample_names()


def tenant_sample_names() -> set[str]:
    """The tenants' families have samples only where tenants are declared: a gateway with
    one, by digest, that was answered and refused over its quota."""
    key = "sk-observability-0123456789abcdef"
    tenant = {"name": "team", "key_sha256": [hashlib.sha256(key.encode()).hexdigest()], "requests_per_second": 1}
    config = gateway_config.parse({"models": [{"name": "demo", "backend": "simulated"}], "tenants": [tenant],
                                   "server": {"http_port": 0, "grpc_port": 0}})
    headers = {"Authorization": f"Bearer {key}"}
    with running_gateway(config) as gw:
        predict = f"{gw.http_url}/v1/models/demo:predict"
        codes = [http_json("POST", predict, {"instances": [[1.0]]}, headers=headers)[0]]
        while 429 not in codes and len(codes) < 20:  # a bucket of one request: back to back, soon empty
            codes.append(http_json("POST", predict, {"instances": [[1.0]]}, headers=headers)[0])
        assert codes[0] == 200 and 429 in codes, codes
        status, _, body = http("GET", f"{gw.http_url}/metrics", headers=headers)
    assert status == 200
    return sample_names(body)


def sample_names(exposition: bytes) -> set[str]:
    return {sample.name for family in text_string_to_metric_families(exposition.decode()) for sample in family.samples}


def test_every_metric_the_dashboard_queries_is_exported(exported_names: set[str]) -> None:
    referenced = referenced_names(dashboard_exprs(load_dashboard()))
    assert referenced, "no gateway_ metric found in the dashboard's queries"
    assert referenced <= exported_names, f"the dashboard queries metrics the gateway does not export: " \
                                         f"{sorted(referenced - exported_names)}"


def test_every_metric_the_alerts_name_is_exported(exported_names: set[str]) -> None:
    rules = alert_rules()
    in_exprs = referenced_names([rule["expr"] for rule in rules])
    assert in_exprs, "no gateway_ metric found in the alert rules"
    # What an operator is told to look at, and what the unit tests feed the rules, too.
    in_annotations = referenced_names([text for rule in rules for text in rule["annotations"].values()])
    in_tests = referenced_names(rule_test_series())
    for where, referenced in (("expressions", in_exprs), ("annotations", in_annotations), ("unit tests", in_tests)):
        missing = referenced - exported_names
        assert not missing, f"the alert rules' {where} name metrics the gateway does not export: {sorted(missing)}"


def test_every_metric_the_recording_rules_read_is_exported(exported_names: set[str]) -> None:
    referenced = referenced_names([rule["expr"] for rule in recording_rules()])
    assert referenced, "no gateway_ metric found in the recording rules"
    missing = referenced - exported_names
    assert not missing, f"the recording rules read metrics the gateway does not export: {sorted(missing)}"


def test_every_recorded_name_read_is_recorded() -> None:
    # What the alerts, the recording rules themselves and the autoscaling recipes read.
    recorded = {rule["record"] for rule in recording_rules()}
    texts = [rule["expr"] for rule in alert_rules() + recording_rules()] + recipe_queries()
    read = {name for text in texts for name in RECORDED_NAME.findall(text)}
    assert "model:gateway_predictor_load:ratio" in read
    assert read <= recorded, f"recorded names read but recorded by no rule: {sorted(read - recorded)}"


# -- the rules ---------------------------------------------------------------------------

@pytest.mark.parametrize("path", RULE_FILES, ids=[path.name for path in RULE_FILES])
def test_the_rules_pass_promtool_check(path: Path) -> None:
    checked = promtool("check", "rules", str(path.relative_to(ROOT)))
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("path", (RULE_TESTS, RECORDING_RULE_TESTS), ids=["alerts", "recording-rules"])
def test_the_rules_unit_tests_pass(path: Path) -> None:
    tested = promtool("test", "rules", str(path.relative_to(ROOT)))
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_recording_rules_follow_prometheus_naming(exported_names: set[str]) -> None:
    # level:metric:operations, the metric one the gateway exports, its name unchanged.
    rules = recording_rules()
    assert rules
    for rule in rules:
        assert "record" in rule and "alert" not in rule, "only recording rules belong in recording-rules.yaml"
        level, metric, operations = rule["record"].split(":")
        assert level and operations, rule["record"]
        assert METRIC_NAME.fullmatch(metric) and metric in exported_names, rule["record"]
        if operations != "ratio":  # a ratio is named for the gateway's own metric of it, built from others
            assert metric in rule["expr"], f"{rule['record']}: names a metric its expression does not read"


def test_every_alert_runbook_is_a_heading_of_the_docs() -> None:
    for rule in alert_rules():
        runbook = rule["annotations"].get("runbook_url")
        if runbook is None:
            continue
        page, _, anchor = runbook.partition("#")
        headings = re.findall(r"^#+ (.+)$", (ROOT / page).read_text(), flags=re.MULTILINE)
        # mkdocs' toc anchors: lower case, punctuation dropped, spaces as hyphens.
        anchors = {re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", heading).strip().lower()) for heading in headings}
        assert anchor in anchors, f"{rule['alert']}: {runbook} names no heading of {page}"


def test_every_alert_waits_has_a_severity_and_says_what_to_do() -> None:
    rules = alert_rules()
    assert rules
    for rule in rules:
        assert "alert" in rule, f"{rule.get('record')}: only alerting rules belong in alerts.yaml"
        assert rule.get("for"), f"{rule['alert']}: no `for:` (one scrape's blip would page)"
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]


def test_every_alert_is_unit_tested_firing() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {case["alertname"] for test in tests for case in test.get("alert_rule_test", []) if case.get("exp_alerts")}
    assert {rule["alert"] for rule in alert_rules()} <= fired


# -- the dashboard ----------------------------------------------------------------------

def test_the_dashboard_is_importable_with_its_datasource_an_input() -> None:
    dashboard = load_dashboard()
    inputs = {entry["name"]: entry for entry in dashboard["__inputs"]}
    assert inputs[DATASOURCE_INPUT]["type"] == "datasource"
    assert inputs[DATASOURCE_INPUT]["pluginId"] == "prometheus"
    assert dashboard["uid"] and dashboard["title"]
    assert dashboard.get("id") is None  # an import gets its own id
    (model,) = [variable for variable in dashboard["templating"]["list"] if variable["name"] == "model"]
    assert model["query"]["query"] == "label_values(gateway_queue_depth, model)"
    assert model["datasource"] == DATASOURCE


def test_every_datasource_reference_is_the_input() -> None:
    def references(node: Any) -> Iterator[Any]:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "datasource":
                    yield value
                else:
                    yield from references(value)
        elif isinstance(node, list):
            for item in node:
                yield from references(item)

    found = list(references({key: value for key, value in load_dashboard().items() if key != "__inputs"}))
    assert found
    assert all(reference == DATASOURCE for reference in found), {json.dumps(r) for r in found if r != DATASOURCE}


def test_every_panel_has_a_title_a_query_and_a_unit() -> None:
    panels = list(dashboard_panels(load_dashboard()))
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), "two panels share an id"
    for panel in panels:
        assert panel.get("title"), f"panel {panel['id']} has no title"
        assert "gridPos" in panel, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel.get("targets"), f"{panel['title']}: no query"
        for target in panel["targets"]:
            assert target.get("expr") and target.get("refId"), panel["title"]
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{panel['title']}: no unit"


def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    # promtool parses a rule's expression: each query, its Grafana variables substituted,
    # becomes a recording rule of a throwaway file.
    exprs = dashboard_exprs(load_dashboard())
    queries = [expr for expr in exprs if not expr.startswith("label_values(")]  # Grafana's own function
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{index}", "expr": as_prometheus_sees_it(expr)} for index, expr in enumerate(queries)]}]}
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump(rules))
    checked = promtool("check", "rules", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
