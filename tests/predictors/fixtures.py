"""Session-scoped pytest fixtures for the REAL predictor servers: ``triton_server`` and
``kserve_server``.

Registered from ``tests/conftest.py`` (``pytest_plugins = ["tests.predictors.fixtures"]``).
Each fixture builds (or reuses) the predictor's cached venv (``tools.predictor_envs``),
starts the server on free 127.0.0.1 ports in a workdir under the session's tmp dir,
yields its handle (``tests.predictors.harness.TritonServer`` / ``KServeServer``), and
stops it by PID at the end of the session. A server that cannot be installed or started
makes the test ERROR, never skip: these tests are the proof that the gateway works with
the real servers.

Counters are per session (one server for all tests): read them before and after the
part of a test that should change them, e.g. ``triton_server.execution_count()``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.predictors.harness import KServeServer, TritonServer
from tools.predictor_envs import ensure_env


@pytest.fixture(scope="session")
def triton_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    """A real Triton Inference Server serving ``double`` (its own dynamic batching off)."""
    server = TritonServer.start(ensure_env("triton"), tmp_path_factory.mktemp("triton"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def kserve_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KServeServer]:
    """A real KServe model server serving ``double`` over v1 and v2, REST and gRPC."""
    server = KServeServer.start(ensure_env("kserve"), tmp_path_factory.mktemp("kserve"))
    try:
        yield server
    finally:
        server.stop()
