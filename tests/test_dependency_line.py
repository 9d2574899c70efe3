"""The gRPC family and protobuf stay on one line (see pyproject.toml): grpcio, grpcio-tools,
grpcio-health-checking and grpcio-reflection at the same pinned version, protobuf on 6.x.
A drift fails here rather than at import time in a user's environment."""
from __future__ import annotations

import tomllib
from importlib.metadata import version
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
GRPC_FAMILY = ("grpcio", "grpcio-tools", "grpcio-health-checking", "grpcio-reflection")


def pinned() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [Requirement(line) for line in project["dependencies"] + project["optional-dependencies"]["dev"]]
    return {r.name: r for r in requirements}


def test_the_grpc_family_is_pinned_to_one_version_and_installed_at_it():
    requirements = pinned()
    versions = {name: str(requirements[name].specifier) for name in GRPC_FAMILY}
    assert len(set(versions.values())) == 1 and next(iter(versions.values())).startswith("=="), versions
    for name in GRPC_FAMILY:
        assert requirements[name].specifier.contains(version(name)), f"{name} {version(name)} drifted off {versions}"


def test_protobuf_is_installed_within_its_pinned_range():
    specifier = pinned()["protobuf"].specifier
    assert specifier.contains(version("protobuf")), f"protobuf {version('protobuf')} is outside {specifier}"
    assert not specifier.contains("7.0.0"), "protobuf 7 needs the 1.82+ gRPC family: move them together"
