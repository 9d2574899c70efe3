"""Rerank in front of the real predictors: the test cross-encoder (``rerank_model.py``, a
one-label BertForSequenceClassification built in code) served by Infinity's own ``/rerank``
(real, its own batching), by Triton (PyTriton, two BYTES inputs ``query`` and
``document``, FP32 ``score``) and by the tests' server of vLLM's score API (vLLM needs
CUDA: ``vllm_score_server.py`` speaks its shapes). First each server alone against the
reference (transformers' forward), then the official ``cohere`` clients, unmodified, v1
and v2, through the gateway to each predictor protocol: the answers are the predictor's
scores, best first; pairs of different queries share one score call; requests asking the
same query share one Cohere-shaped call, others do not; a 300-document list comes back
whole."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import cohere
import numpy as np
import orjson
import pytest
import tritonclient.grpc as triton_grpc

from tests.harness import RunningGateway, config_for, held_slot, http, queued, running_gateway, wait_for
from tests.predictors.harness import (
    RERANK_MODEL,
    TRITON_RERANK_MODEL,
    InfinityServer,
    TritonServer,
    VllmScoreServer,
    http_post_json,
    reference_rerank_scores,
    rerank_model_folder,
)
from tools.predictor_envs import ensure_env

QUERY = "what is the capital of the united states"
DOCUMENTS = ["Carson City is the capital city of the American state of Nevada.",
             "Washington, D.C. is the capital of the United States.",
             "Capital punishment has existed in the United States since before it was a country.",
             "bananas are yellow", "word " * 600]  # the last cut at 512 tokens, longest first
TOLERANCE = 1e-5        # a server's forward against the reference's (float32 sums in another order)
SAME = 1e-6             # the gateway's answer against the predictor's own


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    return np.asarray(reference_rerank_scores(ensure_env("infinity"), [(QUERY, d) for d in DOCUMENTS]), np.float32)


def best_first(scores: np.ndarray) -> list[int]:
    return np.argsort(-np.asarray(scores), kind="stable").tolist()


# --- each server alone -----------------------------------------------------------------------


def test_infinity_reranks_as_the_reference(infinity_rerank_server: InfinityServer, reference: np.ndarray) -> None:
    status, answer = infinity_rerank_server.rerank(QUERY, DOCUMENTS)
    assert status == 200, answer
    scores = {item["index"]: item["relevance_score"] for item in answer["results"]}
    np.testing.assert_allclose([scores[i] for i in range(len(DOCUMENTS))], reference, atol=TOLERANCE, rtol=0)
    assert [item["index"] for item in answer["results"]] == best_first(reference)


def test_triton_scores_pairs_as_the_reference(triton_server: TritonServer, reference: np.ndarray) -> None:
    metadata = triton_server.metadata(TRITON_RERANK_MODEL)
    assert [i["name"] for i in metadata["inputs"]] == ["query", "document"]
    body = {"inputs": [{"name": name, "datatype": "BYTES", "shape": [len(DOCUMENTS), 1], "data": values}
                       for name, values in (("query", [QUERY] * len(DOCUMENTS)), ("document", DOCUMENTS))]}
    status, answer = http_post_json(f"{triton_server.http_url}/v2/models/{TRITON_RERANK_MODEL}/infer", body)
    assert status == 200, answer
    np.testing.assert_allclose(answer["outputs"][0]["data"], reference, atol=TOLERANCE, rtol=0)


def test_the_vllm_score_api_scores_pairs_one_by_one(vllm_score_server: VllmScoreServer,
                                                    reference: np.ndarray) -> None:
    status, answer = http_post_json(f"{vllm_score_server.http_url}/v1/score",
                                    {"model": RERANK_MODEL, "text_1": [QUERY] * len(DOCUMENTS), "text_2": DOCUMENTS})
    assert status == 200, answer
    assert [item["index"] for item in answer["data"]] == list(range(len(DOCUMENTS)))
    np.testing.assert_allclose([item["score"] for item in answer["data"]], reference, atol=TOLERANCE, rtol=0)
    status, answer = http_post_json(f"{vllm_score_server.http_url}/v1/score",
                                    {"model": RERANK_MODEL, "text_1": ["a", "b"], "text_2": ["c", "d", "e"]})
    assert status == 400 and answer["object"] == "error"


# --- through the gateway ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway(infinity_rerank_server: InfinityServer, triton_server: TritonServer,
            vllm_score_server: VllmScoreServer) -> Iterator[RunningGateway]:
    tokenizer = str(rerank_model_folder(ensure_env("infinity")) / "tokenizer.json")
    batching = {"max_batch_size": 32, "max_batch_tokens": 16384}
    models = [
        {"name": "infinity", "backend": "kserve", "api": "rerank", "url": infinity_rerank_server.http_url,
         "base_path": "", "backend_model": RERANK_MODEL, "rerank": {"tokenizer": tokenizer}, "batching": batching},
        {"name": "vllm", "backend": "kserve", "api": "score", "url": vllm_score_server.http_url, "base_path": "/v1",
         "backend_model": RERANK_MODEL, "batching": batching},
        {"name": "triton", "backend": "triton", "protocol": "grpc", "url": triton_server.grpc_address,
         "backend_model": TRITON_RERANK_MODEL, "rerank": {"tokenizer": tokenizer}, "batching": batching},
    ]
    with running_gateway(config_for(*models), ready_timeout=60) as running:
        yield running


def direct_scores(model: str, infinity: InfinityServer, triton: TritonServer, vllm: VllmScoreServer,
                  query: str, documents: list[str]) -> np.ndarray:
    """What the predictor behind `model` answers itself, in the documents' order."""
    if model == "infinity":
        status, answer = infinity.rerank(query, documents)
        assert status == 200, answer
        by_index = {item["index"]: item["relevance_score"] for item in answer["results"]}
        return np.array([by_index[i] for i in range(len(documents))], np.float32)
    if model == "vllm":
        status, answer = http_post_json(f"{vllm.http_url}/v1/score",
                                        {"model": RERANK_MODEL, "text_1": query, "text_2": documents})
        assert status == 200, answer
        return np.array([item["score"] for item in answer["data"]], np.float32)
    client = triton_grpc.InferenceServerClient(triton.grpc_address)
    scores = []
    try:
        for start in range(0, len(documents), 64):  # the model's max_batch_size
            chunk = documents[start:start + 64]
            tensors = []
            for name, values in (("query", [query] * len(chunk)), ("document", chunk)):
                tensor = triton_grpc.InferInput(name, [len(chunk), 1], "BYTES")
                tensor.set_data_from_numpy(np.array([[v.encode()] for v in values], dtype=np.object_))
                tensors.append(tensor)
            scores.append(client.infer(TRITON_RERANK_MODEL, tensors).as_numpy("score").reshape(-1))
    finally:
        client.close()
    return np.concatenate(scores)


@pytest.mark.parametrize("model", ["infinity", "vllm", "triton"])
def test_both_cohere_clients_get_the_predictors_scores_best_first(gateway: RunningGateway, model: str,
                                                                  infinity_rerank_server: InfinityServer,
                                                                  triton_server: TritonServer,
                                                                  vllm_score_server: VllmScoreServer) -> None:
    own = direct_scores(model, infinity_rerank_server, triton_server, vllm_score_server, QUERY, DOCUMENTS)
    answer = cohere.ClientV2(api_key="unused", base_url=gateway.http_url, timeout=60).rerank(
        model=model, query=QUERY, documents=DOCUMENTS)
    assert [result.index for result in answer.results] == best_first(own)
    np.testing.assert_allclose([r.relevance_score for r in answer.results], own[best_first(own)], atol=SAME, rtol=0)
    answer = cohere.Client(api_key="unused", base_url=gateway.http_url, timeout=60).rerank(
        model=model, query=QUERY, documents=DOCUMENTS, top_n=2, return_documents=True)
    assert [result.index for result in answer.results] == best_first(own)[:2]
    assert [result.document.text for result in answer.results] == [DOCUMENTS[i] for i in best_first(own)[:2]]


@pytest.mark.parametrize("model", ["infinity", "vllm", "triton"])
def test_a_300_document_list_is_split_and_returned_whole(gateway: RunningGateway, model: str,
                                                         infinity_rerank_server: InfinityServer,
                                                         triton_server: TritonServer,
                                                         vllm_score_server: VllmScoreServer) -> None:
    documents = [f"document {i}: {' '.join(['capital', 'state', 'city', 'island'][: 1 + i % 4])}" for i in range(300)]
    own = direct_scores(model, infinity_rerank_server, triton_server, vllm_score_server, QUERY, documents)
    status, headers, body = http("POST", f"{gateway.http_url}/v2/rerank",
                                 {"model": model, "query": QUERY, "documents": documents})
    assert status == 200, body
    results = orjson.loads(body)["results"]
    assert sorted(item["index"] for item in results) == list(range(300))
    np.testing.assert_allclose([item["relevance_score"] for item in results], own[[item["index"] for item in results]],
                               atol=SAME, rtol=0)
    scores = np.array([item["relevance_score"] for item in results])
    assert np.all(scores[:-1] >= scores[1:])  # best first
    assert len(headers["X-Batch-Id"].split(",")) >= 300 // 32  # max_batch_size 32


def queue_behind_a_blocker(gateway: RunningGateway, model: str, requests: list[tuple[str, list[str]]]) -> list[int]:
    """Each request sent while the model's only slot is held, so they queue together; the
    rows of each batch sent, in order."""
    client = cohere.ClientV2(api_key="unused", base_url=gateway.http_url, timeout=60)
    with held_slot(gateway, model) as (release, batches):
        blocker = threading.Thread(target=lambda: client.rerank(model=model, query="first", documents=["a"]))
        blocker.start()
        wait_for(lambda: len(batches) == 1, "the blocker's batch to reach the gate")
        threads = [threading.Thread(target=client.rerank, kwargs={"model": model, "query": q, "documents": d})
                   for q, d in requests]
        for thread in threads:
            thread.start()
            rows = sum(len(d) for _, d in requests[: threads.index(thread) + 1])
            wait_for(lambda rows=rows: queued(gateway, model) == rows, "each request to queue in turn")
        release.set()
        for thread in [blocker, *threads]:
            thread.join(timeout=60)
    return batches


def test_the_score_api_takes_pairs_of_different_queries_in_one_call(gateway: RunningGateway,
                                                                    vllm_score_server: VllmScoreServer) -> None:
    calls = len(vllm_score_server.calls())
    batches = queue_behind_a_blocker(gateway, "vllm", [(f"question {i}", DOCUMENTS[:4]) for i in range(3)])
    assert batches == [1, 12]
    assert vllm_score_server.calls()[calls:] == [{"pairs": 1, "queries": 1}, {"pairs": 12, "queries": 3}]


def test_a_cohere_shaped_predictor_gets_one_query_per_call_and_same_queries_merge(gateway: RunningGateway) -> None:
    batches = queue_behind_a_blocker(gateway, "infinity", [("q one", DOCUMENTS[:3]), ("q two", DOCUMENTS[:2]),
                                                           ("q one", DOCUMENTS[3:5])])
    assert batches == [1, 5, 2]  # "q one"'s two requests in one call, "q two" in its own


def test_an_oip_client_of_the_rerank_model_shares_the_cohere_clients_batches(gateway: RunningGateway,
                                                                             triton_server: TritonServer) -> None:
    client = cohere.ClientV2(api_key="unused", base_url=gateway.http_url, timeout=60)
    answers: dict[str, object] = {}
    with held_slot(gateway, "triton") as (release, batches):
        blocker = threading.Thread(target=lambda: client.rerank(model="triton", query="first", documents=["a"]))
        blocker.start()
        wait_for(lambda: len(batches) == 1, "the blocker's batch to reach the gate")

        def oip() -> None:
            grpc_client = triton_grpc.InferenceServerClient(gateway.grpc_address)
            try:
                tensors = []
                for name, values in (("query", ["another question", QUERY]), ("document", DOCUMENTS[:2])):
                    tensor = triton_grpc.InferInput(name, [2, 1], "BYTES")
                    tensor.set_data_from_numpy(np.array([[v.encode()] for v in values], dtype=np.object_))
                    tensors.append(tensor)
                answers["oip"] = grpc_client.infer("triton", tensors).as_numpy("score").reshape(-1)
            finally:
                grpc_client.close()

        def cohere_client() -> None:
            answers["cohere"] = client.rerank(model="triton", query=QUERY, documents=DOCUMENTS[:3])

        threads = [threading.Thread(target=oip), threading.Thread(target=cohere_client)]
        for thread in threads:
            thread.start()
        wait_for(lambda: queued(gateway, "triton") == 5, "both clients' pairs to queue")
        release.set()
        for thread in [blocker, *threads]:
            thread.join(timeout=60)
    assert batches == [1, 5]
    own = direct_scores("triton", None, triton_server, None, QUERY, DOCUMENTS[:2])  # type: ignore[arg-type]
    np.testing.assert_allclose(answers["oip"][1], own[1], atol=SAME, rtol=0)  # type: ignore[index]
