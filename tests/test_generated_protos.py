"""The committed gRPC stubs match protos/, and the dependency line is the one we chose."""
from __future__ import annotations

from importlib.metadata import version

from packaging.version import Version

from tools import gen_protos


def test_generated_stubs_are_not_stale():
    assert gen_protos.check(), "run `python -m tools.gen_protos` and commit the result"


def test_the_protobuf_6_line_holds():
    # tritonclient 2.73 and kserve 0.21 need protobuf < 7; health/reflection >= 1.82 need 7.
    assert Version("6.33.5") <= Version(version("protobuf")) < Version("7")
    for package in ("grpcio", "grpcio-health-checking", "grpcio-reflection", "grpcio-tools"):
        assert Version(version(package)).release[:2] == (1, 81), package
