"""The import contracts of pyproject.toml ([tool.importlinter], run by lint-imports from the
test command) cover every module, today's and tomorrow's: a new backend client is forbidden
to the gateway, a new module of gateway/ (or of gateway/batching/) takes a floor, a new
bench scenario sits beside the others (none importing another). Without this, a list kept
by hand would quietly miss what was added after it."""
from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def contract(starting: str) -> dict:
    (found,) = [c for c in CONTRACTS if c["name"].startswith(starting)]
    return found


def modules(folder: str) -> set[str]:
    """The modules and packages directly in `folder` (by name, without .py)."""
    path = ROOT / folder
    return ({p.stem for p in path.glob("*.py") if p.stem != "__init__"}
            | {p.name for p in path.iterdir() if p.is_dir() and (p / "__init__.py").exists()})


def layered(layers: list[str]) -> set[str]:
    return {name.strip() for layer in layers for name in layer.split("|")}


def test_every_backend_client_but_registry_settings_and_base_is_forbidden_to_the_gateway():
    forbidden = set(contract("the gateway reaches predictors only through")["forbidden_modules"])
    assert forbidden == {f"backends.{m}" for m in modules("backends") - {"registry", "settings", "base"}}


def test_every_module_of_the_gateway_takes_a_floor():
    assert layered(contract("the gateway's floors")["layers"]) == modules("gateway")


def test_every_bench_scenario_is_under_the_bench_contract():
    listed = layered(contract("the benchmarks import one way")["layers"])
    assert modules("tools/bench") <= listed, sorted(modules("tools/bench") - listed)


def test_every_module_of_the_telemetry_takes_a_layer():
    assert layered(contract("tracing one way")["layers"]) == modules("gateway/telemetry")


def test_every_module_of_the_batching_room_takes_a_floor():
    assert layered(contract("the batching room's floors")["layers"]) == modules("gateway/batching")


def test_every_module_of_the_served_models_takes_a_layer():
    assert layered(contract("the served models one way")["layers"]) == modules("gateway/models")


def test_every_module_of_the_http_front_end_takes_a_floor():
    assert layered(contract("the HTTP front end's floors")["layers"]) == modules("gateway/rest")
