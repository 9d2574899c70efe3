"""Reading what tests/deploy checks: the Dockerfile, the kustomize trees under deploy/, the
gateway.toml files they carry, and a gateway process started and stopped by PID. (The
Grafana dashboard and Prometheus rules under deploy/ are read by test_observability.py.)"""
from __future__ import annotations

import copy
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tools.processes import ServerProcess, python_module_command

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DEPLOY = ROOT / "deploy"
DOCKERFILE = ROOT / "Dockerfile"
CONFIG_KEY = "gateway.toml"

# Resources that are not in the Kubernetes schema (custom resources): checked structurally.
CUSTOM_KINDS = {("serving.kserve.io/v1beta1", "InferenceService"), ("keda.sh/v1alpha1", "ScaledObject")}
CLUSTER_SCOPED_KINDS = {"Namespace"}


# -- Dockerfile ------------------------------------------------------------------------

@dataclass
class Instruction:
    keyword: str  # upper case: FROM, RUN, COPY, ...
    arguments: str
    line: int


def tool(name: str) -> str:
    """A binary installed by the dev extras (pyproject.toml), next to this Python."""
    path = BIN / name
    assert path.exists(), f"{name} is missing: install the dev extras (pip install -e '.[dev]')"
    return str(path)


def dockerfile_instructions(path: Path = DOCKERFILE) -> list[Instruction]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    instructions: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        text = " ".join(part for part in pending if part)
        pending = []
        keyword, _, arguments = text.partition(" ")
        instructions.append(Instruction(keyword.upper(), arguments.strip(), start))
    assert not pending, "the Dockerfile ends inside a continued instruction"
    return instructions


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    """Instructions grouped by build stage (each group starts with its FROM)."""
    groups: list[list[Instruction]] = []
    for instruction in instructions:
        if instruction.keyword == "FROM":
            groups.append([])
        if groups:
            groups[-1].append(instruction)
    return groups


def shell_words(arguments: str) -> list[str]:
    return shlex.split(arguments)


# -- kustomize trees -------------------------------------------------------------------

def load_documents(path: Path) -> list[dict[str, Any]]:
    with open(path) as handle:
        return [document for document in yaml.safe_load_all(handle) if document is not None]


def kustomization_dirs() -> list[Path]:
    """Every kustomize root under deploy/ (components, which only a root applies, left out)."""
    return sorted(path.parent for path in DEPLOY.rglob("kustomization.yaml") if path.parent not in component_dirs())


def component_dirs() -> list[Path]:
    """Every kustomize component under deploy/ (`kind: Component`): applied by the roots that name it."""
    return sorted(path.parent for path in DEPLOY.rglob("kustomization.yaml")
                  if load_documents(path)[0].get("kind") == "Component")


@dataclass
class Rendered:
    """What `kubectl apply -k DIR` would apply, for the kustomize features used here."""
    root: Path
    resources: list[dict[str, Any]] = field(default_factory=list)
    files: set[Path] = field(default_factory=set)  # every file the tree read
    namespace: str | None = None

    def find(self, kind: str, name: str | None = None) -> list[dict[str, Any]]:
        return [r for r in self.resources
                if r["kind"] == kind and (name is None or r["metadata"]["name"] == name)]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = self.find(kind, name)
        assert len(found) == 1, f"{self.root}: expected one {kind} {name or ''}, found {len(found)}"
        return found[0]


# Kustomization keys render() implements. Anything else fails the tests (so a new feature
# in a kustomization.yaml comes with its support here, instead of being silently ignored).
SUPPORTED_KUSTOMIZATION_KEYS = {"apiVersion", "kind", "resources", "namespace", "patches", "components"}


def render(directory: Path) -> Rendered:
    """A small kustomize: resources (files and directories), namespace, and strategic-merge
    patches of ConfigMap data. The same result as `kubectl kustomize DIR` for this tree."""
    kustomization_path = directory / "kustomization.yaml"
    kustomization = load_documents(kustomization_path)[0]
    unknown = set(kustomization) - SUPPORTED_KUSTOMIZATION_KEYS
    assert not unknown, f"{kustomization_path}: keys not understood by tests/deploy/support.render: {unknown}"
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kustomization["kind"] == "Kustomization"
    rendered = Rendered(directory, files={kustomization_path})
    _render_into(rendered, directory, kustomization, kustomization_path)
    namespace = kustomization.get("namespace")
    if namespace:
        rendered.namespace = namespace
        for resource in rendered.resources:
            if resource["kind"] not in CLUSTER_SCOPED_KINDS:
                resource.setdefault("metadata", {})["namespace"] = namespace
    return rendered


def _render_into(rendered: Rendered, directory: Path, kustomization: dict[str, Any], kustomization_path: Path) -> None:
    """Resources, then components (each its resources, then its patches, over all so far, as
    kustomize applies them), then patches."""
    for entry in kustomization.get("resources", []):
        target = (directory / entry).resolve()
        if target.is_dir():
            inner = render(target)
            rendered.resources.extend(inner.resources)
            rendered.files |= inner.files
        else:
            assert target.is_file(), f"{kustomization_path}: resource {entry} does not exist"
            rendered.resources.extend(copy.deepcopy(load_documents(target)))
            rendered.files.add(target)
    for entry in kustomization.get("components", []):
        component = (directory / entry).resolve()
        component_path = component / "kustomization.yaml"
        declared = load_documents(component_path)[0]
        unknown = set(declared) - {"apiVersion", "kind", "resources", "patches"}
        assert not unknown, f"{component_path}: keys not understood by tests/deploy/support.render: {unknown}"
        assert (declared["apiVersion"], declared["kind"]) == ("kustomize.config.k8s.io/v1alpha1", "Component")
        rendered.files.add(component_path)
        _render_into(rendered, component, declared, component_path)
    for patch in kustomization.get("patches", []):
        assert set(patch) == {"path"}, f"{kustomization_path}: only `path:` patches are supported"
        patch_path = (directory / patch["path"]).resolve()
        rendered.files.add(patch_path)
        for document in load_documents(patch_path):
            _apply_patch(rendered, document, patch_path)


def _apply_patch(rendered: Rendered, patch: dict[str, Any], source: Path) -> None:
    """A strategic-merge patch of a ConfigMap's data (each key replaced whole), or of any
    resource's labels and annotations (merged key by key): what the trees here patch."""
    allowed = {"apiVersion", "kind", "metadata", "data"} if patch["kind"] == "ConfigMap" else {"apiVersion", "kind", "metadata"}
    assert set(patch) <= allowed, f"{source}: render() patches a ConfigMap's data and any resource's metadata only"
    assert set(patch["metadata"]) <= {"name", "labels", "annotations"}, f"{source}: patch labels and annotations only"
    (target,) = [r for r in rendered.find(patch["kind"], patch["metadata"]["name"]) if r["apiVersion"] == patch["apiVersion"]]
    if "data" in patch:
        target.setdefault("data", {}).update(patch["data"])
    for key in ("labels", "annotations"):
        if patch["metadata"].get(key):
            target["metadata"].setdefault(key, {}).update(patch["metadata"][key])


# Trees and files under deploy/ for other tools than Kubernetes, not manifests: Prometheus
# rule files (promtool's format, checked by tests/deploy/test_observability.py) and
# prometheus-adapter's Helm values (checked by tests/deploy/test_autoscaling.py).
PROMETHEUS_ADAPTER_VALUES = DEPLOY / "autoscaling" / "prometheus-adapter" / "prometheus-adapter-values.yaml"
NOT_KUBERNETES = (DEPLOY / "prometheus", PROMETHEUS_ADAPTER_VALUES)


def all_manifest_files() -> list[Path]:
    """Every Kubernetes manifest file under deploy/ (kustomization files excluded)."""
    return sorted(path for path in DEPLOY.rglob("*.yaml")
                  if path.name != "kustomization.yaml" and not any(path.is_relative_to(tree) for tree in NOT_KUBERNETES))


def config_maps_with_gateway_toml() -> list[tuple[Path, dict[str, Any]]]:
    """(file, ConfigMap) for every ConfigMap under deploy/ that carries a gateway.toml."""
    found = []
    for path in all_manifest_files():
        for document in load_documents(path):
            if document.get("kind") == "ConfigMap" and CONFIG_KEY in document.get("data", {}):
                found.append((path, document))
    return found


def pod_spec(rendered: Rendered) -> dict[str, Any]:
    return rendered.one("Deployment")["spec"]["template"]["spec"]


def gateway_container(rendered: Rendered) -> dict[str, Any]:
    containers = pod_spec(rendered)["containers"]
    assert len(containers) == 1, "the gateway pod has one container"
    return containers[0]


def container_port(container: dict[str, Any], port: int | str) -> int:
    """A probe's or Service's port (number or name) as the container's port number."""
    if isinstance(port, int):
        return port
    for declared in container.get("ports", []):
        if declared.get("name") == port:
            return declared["containerPort"]
    raise AssertionError(f"container {container['name']} declares no port named {port!r}")


# -- a gateway process ----------------------------------------------------------------

class GatewayProcess(ServerProcess):
    """`python -m gateway ARGS` (or any command, e.g. the image's entrypoint), started and
    READY on construction. Its addresses are the READY line's, host included."""

    def __init__(self, command: list[str], env: dict[str, str] | None = None, ready_timeout: float = 30) -> None:
        super().__init__(command, env=env, ready_timeout=ready_timeout)
        self.start()

    @classmethod
    def module(cls, *args: str, **kwargs: Any) -> GatewayProcess:
        return cls(python_module_command("gateway", *args), **kwargs)

    @property
    def http_url(self) -> str:
        return "http://" + self.fields["http"]

    @property
    def grpc_address(self) -> str:
        return self.fields["grpc"]

    def stderr_text(self) -> str:
        return self.log_text()


def gateway_command_shim(directory: Path) -> Path:
    """A `batching-gateway` on PATH that runs this checkout's gateway with this Python
    (the test venv has the dependencies, not necessarily the installed console script)."""
    shim = directory / "batching-gateway"
    shim.write_text(f'#!/bin/sh\nPYTHONPATH={shlex.quote(str(ROOT))} '
                    f'exec {shlex.quote(sys.executable)} -m gateway "$@"\n')
    shim.chmod(0o755)
    return shim


def localise_predictor_urls(toml_text: str, port: int) -> str:
    """The same config with every predictor address on 127.0.0.1:PORT (scheme kept)."""
    def replace(match: re.Match) -> str:
        url = match.group(2)
        local = f"http://127.0.0.1:{port}" if url.startswith(("http://", "https://")) else f"127.0.0.1:{port}"
        return f'{match.group(1)}"{local}"'
    return re.sub(r'^(\s*url\s*=\s*)"([^"]*)"', replace, toml_text, flags=re.MULTILINE)
