"""Cohere's Rerank API (`gateway/rest/cohere.py`) for the official `cohere` clients,
unmodified (`cohere.Client` speaks v1, `cohere.ClientV2` v2), and curl, on the simulated
reranker: each (query, document) pair one row of the model's batches, pairs of different
clients (different queries) in one batch, a long list split and returned whole, scores in
the predictor's values sorted best first, `top_n` and `return_documents`, and errors in
Cohere's shape that its clients raise as their own classes."""
from __future__ import annotations

import shutil
import subprocess
import threading

import cohere
import numpy as np
import orjson
import pytest

from backends.simulated.reranker import score
from tests.harness import config_for, held_slot, http, queued, running_gateway, wait_for

RERANKER = {"name": "reranker", "backend": "simulated", "simulated": {"task": "rerank", "call_ms": 2},
            "batching": {"max_batch_size": 32, "max_queue": 4096, "max_batch_tokens": 8192}}
ENCODER = {"name": "encoder", "backend": "simulated", "simulated": {"task": "embed", "call_ms": 1}}
DEMO = {"name": "demo", "backend": "simulated"}
DOCUMENTS = ["Carson City is the capital of Nevada.", "Washington, D.C. is the capital of the United States.",
             "Capital punishment has existed in the United States since before it was a country.",
             "The Commonwealth of the Northern Mariana Islands is a group of islands in the Pacific Ocean."]
QUERY = "What is the capital of the United States?"


@pytest.fixture(scope="module")
def gw():
    with running_gateway(config_for(RERANKER, ENCODER, DEMO)) as running:
        yield running


def v1(gw) -> cohere.Client:
    return cohere.Client(api_key="unused", base_url=gw.http_url, timeout=30)


def v2(gw) -> cohere.ClientV2:
    return cohere.ClientV2(api_key="unused", base_url=gw.http_url, timeout=30)


def expected(query: str, documents: list[str]) -> np.ndarray:
    """The simulated reranker's own scores, in the documents' order."""
    return np.array([score(query.encode(), document.encode()) for document in documents], dtype=np.float32)


def best_first(scores: np.ndarray) -> list[int]:
    return np.argsort(-scores, kind="stable").tolist()


def test_the_v2_client_gets_every_document_scored_best_first(gw):
    answer = v2(gw).rerank(model="reranker", query=QUERY, documents=DOCUMENTS)
    scores = expected(QUERY, DOCUMENTS)
    assert [result.index for result in answer.results] == best_first(scores)
    np.testing.assert_allclose([result.relevance_score for result in answer.results], scores[best_first(scores)],
                               rtol=1e-6)
    assert answer.meta.api_version.version == "2"
    assert answer.meta.tokens.input_tokens == sum(-(-len(QUERY) // 4) + 2 + -(-len(d) // 4) + 2 for d in DOCUMENTS)


def test_the_v1_client_with_top_n_and_return_documents_strings_and_objects(gw):
    documents: list = [DOCUMENTS[0], {"text": DOCUMENTS[1]}, DOCUMENTS[2], {"text": DOCUMENTS[3], "id": "islands"}]
    answer = v1(gw).rerank(model="reranker", query=QUERY, documents=documents, top_n=2, return_documents=True)
    scores = expected(QUERY, DOCUMENTS)
    assert [result.index for result in answer.results] == best_first(scores)[:2]
    for result in answer.results:
        assert result.document.text == DOCUMENTS[result.index]
    plain = v1(gw).rerank(model="reranker", query=QUERY, documents=DOCUMENTS, top_n=10)
    assert len(plain.results) == 4 and all(result.document is None for result in plain.results)
    assert plain.meta.api_version.version == "1"


def test_rank_fields_rank_an_objects_fields_and_echo_it_whole(gw):
    documents = [{"title": "Nevada", "text": DOCUMENTS[0]}, {"title": "D.C.", "text": DOCUMENTS[1]}]
    answer = v1(gw).rerank(model="reranker", query=QUERY, documents=documents, rank_fields=["title", "text"],
                           return_documents=True)
    texts = [f"title: {d['title']}\ntext: {d['text']}" for d in documents]
    scores = expected(QUERY, texts)
    assert [result.index for result in answer.results] == best_first(scores)
    assert answer.results[0].document.title == documents[answer.results[0].index]["title"]


def test_curl_gets_the_same_answer(gw):
    curl = shutil.which("curl")
    assert curl is not None, "curl is one of the clients the tests run (Debian's curl)"
    body = orjson.dumps({"model": "reranker", "query": QUERY, "documents": DOCUMENTS, "top_n": 3})
    done = subprocess.run([curl, "-sS", f"{gw.http_url}/v2/rerank", "-H", "Content-Type: application/json",
                           "-d", body.decode()], capture_output=True, timeout=30, check=True)
    results = orjson.loads(done.stdout)["results"]
    scores = expected(QUERY, DOCUMENTS)
    assert [item["index"] for item in results] == best_first(scores)[:3]
    np.testing.assert_allclose([item["relevance_score"] for item in results], scores[best_first(scores)[:3]],
                               rtol=1e-6)


def test_a_list_of_300_documents_is_split_across_batches_and_returned_whole(gw):
    documents = [f"document number {i} about {'capitals' if i % 7 else 'islands'}" for i in range(300)]
    status, headers, body = http("POST", f"{gw.http_url}/v2/rerank",
                                 {"model": "reranker", "query": QUERY, "documents": documents})
    assert status == 200, body
    results = orjson.loads(body)["results"]
    scores = expected(QUERY, documents)
    assert sorted(item["index"] for item in results) == list(range(300))
    assert [item["index"] for item in results] == best_first(scores)
    np.testing.assert_allclose([item["relevance_score"] for item in results], scores[best_first(scores)], rtol=1e-6)
    assert len(set(headers["X-Batch-Id"].split(","))) >= 300 // 32  # max_batch_size 32: ten batches at least


def test_pairs_of_different_clients_and_queries_share_one_predictor_call(gw):
    queries = [f"question {i}?" for i in range(3)]
    answers: dict[int, object] = {}
    with held_slot(gw, "reranker") as (release, batches):
        blocker = threading.Thread(target=lambda: v2(gw).rerank(model="reranker", query="first", documents=["a"]))
        blocker.start()
        wait_for(lambda: len(batches) == 1, "the blocker's batch to reach the gate")

        def ask(i: int) -> None:
            answers[i] = v2(gw).rerank(model="reranker", query=queries[i], documents=DOCUMENTS)

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
        for thread in threads:
            thread.start()
        wait_for(lambda: queued(gw, "reranker") == 12, "three clients' 4 pairs each to queue behind the blocker")
        release.set()
        for thread in [blocker, *threads]:
            thread.join(timeout=20)
    assert batches == [1, 12]  # three queries' pairs in one call
    for i, query in enumerate(queries):
        scores = expected(query, DOCUMENTS)
        assert [result.index for result in answers[i].results] == best_first(scores)
        np.testing.assert_allclose([r.relevance_score for r in answers[i].results], scores[best_first(scores)],
                                   rtol=1e-6)


def test_rerank_models_are_listed_beside_embedding_models(gw):
    status, body = http("GET", f"{gw.http_url}/v1/models")[0::2]
    assert status == 200
    assert [item["id"] for item in orjson.loads(body)["data"]] == ["reranker", "encoder"]


def test_an_unknown_model_is_cohere_s_not_found_error(gw):
    with pytest.raises(cohere.NotFoundError) as raised:
        v2(gw).rerank(model="no-such-model", query=QUERY, documents=DOCUMENTS)
    assert "no-such-model" in raised.value.body["message"]
    with pytest.raises(cohere.NotFoundError, match="not a rerank model"):
        v1(gw).rerank(model="encoder", query=QUERY, documents=DOCUMENTS)


def test_an_empty_document_list_is_a_400_in_cohere_s_shape(gw):
    with pytest.raises(cohere.BadRequestError) as raised:
        v2(gw).rerank(model="reranker", query=QUERY, documents=[])
    assert raised.value.status_code == 400
    assert raised.value.body == {"message": "'documents' is empty: send at least one document to rank"}


@pytest.mark.parametrize(("route", "body", "message"), [
    ("v2", {"model": "reranker", "documents": ["a"]}, "'query' is required"),
    ("v2", {"model": "reranker", "query": "q", "documents": ["a", ""]}, "'documents[1]' is empty"),
    ("v1", {"model": "reranker", "query": "q", "documents": [1]}, "'documents[0]' must be a string or an object"),
    ("v2", {"model": "reranker", "query": "q", "documents": ["a"], "top_n": 0}, "'top_n' must be a positive integer"),
    ("v1", {"model": "reranker", "query": "q", "documents": ["a"], "max_chunks_per_doc": 2}, "not chunked"),
    ("v2", {"model": "reranker", "query": "q", "documents": ["a"], "max_chunks_per_doc": 2}, "unknown field(s)"),
])
def test_bad_bodies_are_400s_and_the_gateway_keeps_serving(gw, route, body, message):
    status, _, answer = http("POST", f"{gw.http_url}/{route}/rerank", body)
    assert status == 400
    assert message in orjson.loads(answer)["message"]
    assert v2(gw).rerank(model="reranker", query=QUERY, documents=["still serving"]).results[0].index == 0


def test_max_tokens_per_doc_cuts_each_document_before_it_is_scored(gw):
    long_document = "word " * 200  # 1,000 bytes: 250 tokens by the estimate
    answer = v2(gw).rerank(model="reranker", query=QUERY, documents=[long_document], max_tokens_per_doc=10)
    assert answer.results[0].relevance_score == pytest.approx(float(expected(QUERY, [long_document[:40]])[0]),
                                                              rel=1e-6)


def test_with_a_token_the_cohere_clients_api_key_is_it(monkeypatch):
    # Cohere's clients send their api_key as "Authorization: Bearer <key>": the gateway's token.
    monkeypatch.setenv("GATEWAY_TOKEN", "s3cret-token")
    with running_gateway(config_for(RERANKER, server={"auth_token_env": "GATEWAY_TOKEN"})) as gw:
        client = cohere.ClientV2(api_key="s3cret-token", base_url=gw.http_url, timeout=30)
        answer = client.rerank(model="reranker", query=QUERY, documents=DOCUMENTS)
        assert [result.index for result in answer.results] == best_first(expected(QUERY, DOCUMENTS))
        with pytest.raises(cohere.UnauthorizedError) as refused:
            v2(gw).rerank(model="reranker", query=QUERY, documents=DOCUMENTS)  # api_key "unused"
        assert refused.value.status_code == 401 and "message" in refused.value.body


def test_a_tenant_may_rerank_only_with_its_models_and_its_deadline_holds(monkeypatch):
    from gateway import config as gateway_config

    monkeypatch.setenv("TEAM_A_KEY", "key-a")
    monkeypatch.setenv("TEAM_B_KEY", "key-b")
    document = {"models": [RERANKER, ENCODER], "server": {"http_port": 0, "grpc_port": 0},
                "tenants": [{"name": "a", "key_env": "TEAM_A_KEY", "models": ["reranker"]},
                            {"name": "b", "key_env": "TEAM_B_KEY", "models": ["encoder"]}]}
    with running_gateway(gateway_config.parse(document)) as gw:
        a = cohere.ClientV2(api_key="key-a", base_url=gw.http_url, timeout=30)
        assert len(a.rerank(model="reranker", query=QUERY, documents=DOCUMENTS).results) == 4
        with pytest.raises(cohere.ForbiddenError):
            cohere.ClientV2(api_key="key-b", base_url=gw.http_url, timeout=30).rerank(
                model="reranker", query=QUERY, documents=DOCUMENTS)
        with held_slot(gw, "reranker") as (release, batches):
            blocker = threading.Thread(target=lambda: a.rerank(model="reranker", query="first", documents=["a"]))
            blocker.start()
            wait_for(lambda: len(batches) == 1, "the blocker's batch to reach the gate")
            with pytest.raises(cohere.GatewayTimeoutError):  # queued behind the held batch past its deadline
                a.rerank(model="reranker", query=QUERY, documents=DOCUMENTS,
                         request_options={"additional_headers": {"X-Request-Timeout-Ms": "50"}})
            release.set()
            blocker.join(timeout=20)
