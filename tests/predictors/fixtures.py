"""Session-scoped pytest fixtures for the REAL predictor servers: ``triton_server``,
``kserve_server``, ``torchserve_server`` (envelope ``kserve``), ``torchserve_oip_server``
(envelope ``kservev2``, OIP gRPC), ``torchserve_models_server`` (envelope ``kserve``, the
computing models ``image`` and ``encoder``, batchSize 1) and ``torchserve_batching_server``
(no envelope: TorchServe's own API and batching of ``image``, ``image_d50`` and ``encoder``);
the OpenAI-compatible embedding servers ``infinity_server`` (Infinity, its own batching) and
``kserve_openai_server`` (KServe's ``OpenAIEncoderModel``, one forward per request), and
``embedding_reference`` (texts -> the reference vectors of ``embedding_model.embed``). Triton's
``triton_server`` serves the same encoder as ``embed``, and the test cross-encoder as
``rerank``; ``infinity_rerank_server`` (Infinity's own ``/rerank``) and ``vllm_score_server``
(vLLM's score and rerank APIs, the tests' server: vLLM needs CUDA) serve it too.

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

from collections.abc import Callable, Iterator, Sequence

import pytest

from tests.predictors.harness import (
    InfinityServer,
    KServeOpenAIServer,
    KServeServer,
    TorchServeServer,
    TritonServer,
    VllmScoreServer,
    reference_embeddings,
)
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


@pytest.fixture(scope="session")
def torchserve_models_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TorchServeServer]:
    """A real TorchServe with ``service_envelope=kserve`` serving the computing models ``image``
    (TinyCNN: ``{"instances": [{"data": "<base64 PNG/JPEG>"}]}`` -> one top-5
    ``{"class_<k>": p}`` per instance) and ``encoder`` (token ids, e.g. the gateway's padded
    ``{"input_ids": [...], "length": [n]}`` -> 64 floats per instance), ``batchSize`` 1: one
    request is one handler call, what the gateway sits in front of."""
    server = TorchServeServer.start(ensure_env("torchserve"), tmp_path_factory.mktemp("torchserve-models"),
                                    envelope="kserve", models=("image", "encoder"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def torchserve_batching_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TorchServeServer]:
    """A real TorchServe WITHOUT an envelope (its own ``/predictions/<m>`` API) batching on its
    own: ``image`` and ``encoder`` with ``batchSize`` 8 and ``maxBatchDelay`` 10 ms, and
    ``image_d50``, the same image model with ``maxBatchDelay`` 50 ms."""
    server = TorchServeServer.start(ensure_env("torchserve"), tmp_path_factory.mktemp("torchserve-batching"),
                                    envelope="none", models=("image", "image:d50", "encoder"),
                                    batch_size=8, max_batch_delay=10)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def infinity_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InfinityServer]:
    """A real Infinity 0.0.78 serving ``embedding`` with its own batching (batch size 32),
    routes without a prefix: ``POST /embeddings``, ``GET /models``."""
    server = InfinityServer.start(ensure_env("infinity"), tmp_path_factory.mktemp("infinity"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def infinity_rerank_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InfinityServer]:
    """A real Infinity 0.0.78 serving the test cross-encoder ``reranker`` with its own
    batching (batch size 32): ``POST /rerank`` in Cohere's shape, ``GET /models``."""
    server = InfinityServer.start(ensure_env("infinity"), tmp_path_factory.mktemp("infinity-rerank"), rerank=True)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def vllm_score_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmScoreServer]:
    """The tests' server of vLLM's score and rerank APIs on the test cross-encoder (the
    infinity venv's torch)."""
    server = VllmScoreServer.start(ensure_env("infinity"), tmp_path_factory.mktemp("vllm-score"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def kserve_openai_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KServeOpenAIServer]:
    """A real KServe 0.21.0 model server whose ``OpenAIEncoderModel`` ``embedding`` answers
    ``POST /openai/v1/embeddings``, one forward per request (``calls()`` counts them)."""
    server = KServeOpenAIServer.start(ensure_env("kserve-openai"), tmp_path_factory.mktemp("kserve-openai"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def embedding_reference() -> Callable[[Sequence[str]], list[list[float]]]:
    """texts -> ``embedding_model.embed(texts)`` (transformers' BertModel, run with the
    infinity venv's python): what every embedding server must answer, to float tolerance."""
    python = ensure_env("infinity")

    def reference(texts: Sequence[str]) -> list[list[float]]:
        return reference_embeddings(python, texts)

    return reference
