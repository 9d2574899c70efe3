"""What a long rerank query costs the model (issue 45, item 3): the query is cut to the model's
`[models.rerank] max_tokens_per_doc`, as the documents are, and a predictor that takes one
query per call (a Cohere-shaped rerank server) is sent that query once a call, its batches
sized by its documents' tokens plus the query's once. Against a counting Cohere-shaped server
on loopback, and the simulated reranker for the scores."""
from __future__ import annotations

import math
import threading

import cohere
import orjson
import pytest

from backends.simulated.reranker import score
from tests.harness import config_for, http, running_gateway
from tests.http_stub import JsonHandler, serving

LONG_QUERY = ("w" * 9 + " ") * 6500  # 65,000 bytes: 16,252 tokens by the estimate, under a batch's 16,384
DOCUMENTS = [f"document {i:05d} " + "x" * 50 for i in range(4000)]  # 66 bytes: 19 tokens each


class CountingRerankServer(JsonHandler):
    """A Cohere-shaped rerank server (one query a call) that keeps what each call carried."""
    calls: list[tuple[int, int]] = []  # (the query's bytes, the documents) of each call
    lock = threading.Lock()

    def do_POST(self) -> None:  # noqa: N802
        body = self.read_json()
        with self.lock:
            type(self).calls.append((len(body["query"].encode()), len(body["documents"])))
        self.answer_json({"results": [{"index": i, "relevance_score": 1.0 / (i + 1)}
                                      for i in range(len(body["documents"]))]})

    def do_GET(self) -> None:  # noqa: N802
        self.answer_json({"object": "list", "data": [{"id": "reranker", "object": "model"}]})


@pytest.fixture
def rerank_server():
    handler = type("Server", (CountingRerankServer,), {"calls": [], "lock": threading.Lock()})
    with serving(handler) as url:
        yield handler, url


def test_a_long_query_with_4000_documents_is_a_few_dozen_calls_of_a_one_query_predictor(rerank_server):
    handler, url = rerank_server
    model = {"name": "reranker", "backend": "kserve", "api": "rerank", "url": url, "base_path": "",
             "batching": {"max_batch_size": 128, "max_queue": 8192, "max_batch_tokens": 16384}}
    with running_gateway(config_for(model)) as gw:
        status, headers, body = http("POST", f"{gw.http_url}/v2/rerank",
                                     {"model": "reranker", "query": LONG_QUERY, "documents": DOCUMENTS}, timeout=60)
    assert status == 200, body[:300]
    assert len(orjson.loads(body)["results"]) == len(DOCUMENTS)
    # The query cut to the model's 4,096 tokens (16,384 bytes by the estimate) is sent once a call
    # with up to 128 documents: 4,098 + 128 x 19 tokens fit the batch, so the row cap is all that
    # cuts it. Uncut and counted in every pair (16,271 tokens each), each pair was a call of its own.
    assert {query for query, _ in handler.calls} == {4096 * 4}
    assert len(handler.calls) == math.ceil(len(DOCUMENTS) / 128) == 32
    assert sum(documents for _, documents in handler.calls) == len(DOCUMENTS)
    assert len(headers["X-Batch-Id"].split(",")) == 32


def test_a_query_longer_than_the_models_max_tokens_per_doc_is_cut_before_it_is_scored():
    model = {"name": "reranker", "backend": "simulated", "simulated": {"task": "rerank", "call_ms": 1},
             "rerank": {"max_tokens_per_doc": 10}}  # 40 bytes by the estimate
    query = "what is the capital of the united states " * 10  # 420 bytes
    documents = ["Washington, D.C. is the capital.", "word " * 200]
    with running_gateway(config_for(model)) as gw:
        client = cohere.ClientV2(api_key="unused", base_url=gw.http_url, timeout=30)
        # A request may ask its documents cut shorter than the model's most, never longer.
        answer = client.rerank(model="reranker", query=query, documents=documents, max_tokens_per_doc=1000)
    scores = {result.index: result.relevance_score for result in answer.results}
    cut = [document.encode()[:40] for document in documents]
    assert scores == pytest.approx({i: score(query.encode()[:40], cut[i]) for i in range(2)}, rel=1e-6)
    assert answer.meta.tokens.input_tokens == 2 * (10 + 2) + (8 + 2) + (10 + 2)  # every pair's tokens, as cut
