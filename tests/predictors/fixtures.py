"""Session-scoped pytest fixtures for the REAL predictor servers: ``triton_server``,
``kserve_server``, ``torchserve_server`` (envelope ``kserve``) and ``torchserve_oip_server``
(envelope ``kservev2``, OIP gRPC).

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

from tests.predictors.harness import KServeServer, TorchServeServer, TritonServer
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


@pytest.fixture(scope="session")
def torchserve_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TorchServeServer]:
    """A real TorchServe with ``service_envelope=kserve``: KServe v1 HTTP and its own gRPC
    ``Predictions``, model ``double`` with ``batchSize`` 1."""
    server = TorchServeServer.start(ensure_env("torchserve"), tmp_path_factory.mktemp("torchserve"), envelope="kserve")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def torchserve_oip_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TorchServeServer]:
    """A real TorchServe with ``service_envelope=kservev2`` and ``ts_open_inference_protocol``:
    the Open Inference Protocol over gRPC (outputs flattened, FP64)."""
    server = TorchServeServer.start(ensure_env("torchserve"), tmp_path_factory.mktemp("torchserve-oip"),
                                    envelope="kservev2")
    try:
        yield server
    finally:
        server.stop()
