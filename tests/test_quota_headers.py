"""Refusals every client obeys (issue 47, docs/tenants.md "Quotas"): OpenAI's six
`x-ratelimit-*` headers on the embeddings route for a tenant with quotas, `Retry-After` and
`retry-after-ms` on every 429, and the official `openai` and `cohere` clients, unmodified and
at their default retries, never retrying before the advertised time and sending exactly one
request for a refusal that can never pass (413). Each on one gateway and on one whose quotas
are `[shared]` in Debian's real `redis-server` (started here on a free port, stopped by PID).
Every wait asserted is a lower bound the client itself chose: nothing here times the gateway."""
from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterator
from typing import Any

import cohere
import httpx
import openai
import pytest

from gateway import config as gateway_config
from tests.harness import http, running_gateway
from tests.processes import gateway as gateway_process
from tools.processes import RedisProcess

KEYS = {"paced": "sk-paced-31a7c0de55aa", "metered": "sk-metered-9e8d7c6b5a41", "free": "sk-free-0f1e2d3c4b5a"}
DURATION = re.compile(r"^(\d+ms|(\d+h)?(\d+m)?\d+(\.\d+)?s)$")  # OpenAI's (Go's) spelling: 20ms, 1s, 6m0s


@pytest.fixture(scope="module", params=["one gateway", "shared"])
def gw(request, tmp_path_factory) -> Iterator[Any]:
    with pytest.MonkeyPatch.context() as patch:
        for name, key in KEYS.items():
            patch.setenv(f"{name.upper()}_KEY", key)
        document: dict[str, Any] = {
            "server": {"http_port": 0, "grpc_port": 0},
            "models": [{"name": "encoder", "backend": "simulated", "simulated": {"task": "embed", "call_ms": 1}},
                       {"name": "reranker", "backend": "simulated", "simulated": {"task": "rerank", "call_ms": 1}}],
            "tenants": [{"name": "paced", "key_env": "PACED_KEY", "requests_per_second": 1},
                        {"name": "metered", "key_env": "METERED_KEY", "tokens_per_minute": 600,
                         "requests_per_second": 50},
                        {"name": "free", "key_env": "FREE_KEY"}]}
        if request.param == "shared":
            with RedisProcess().start() as redis:
                document["shared"] = {"url": redis.url, "key_prefix": f"headers-{id(request)}"}
                with running_gateway(gateway_config.parse(document)) as running:
                    yield running
        else:
            with running_gateway(gateway_config.parse(document)) as running:
                yield running


class Wire:
    """What a client sent and got, in order: (sent at, status, answer's headers, answered at)."""

    def __init__(self) -> None:
        self.exchanges: list[tuple[float, int, httpx.Headers, float]] = []
        self._sent: list[float] = []

    def client(self) -> httpx.Client:
        return httpx.Client(timeout=30, event_hooks={"request": [self._request], "response": [self._response]})

    def _request(self, request: httpx.Request) -> None:
        self._sent.append(time.monotonic())

    def _response(self, response: httpx.Response) -> None:
        self.exchanges.append((self._sent[len(self.exchanges)], response.status_code, response.headers,
                               time.monotonic()))

    def check_retries_waited(self) -> int:
        """Every request after a 429 was sent no sooner than its `retry-after-ms`; how many 429s."""
        refusals = 0
        for before, after in zip(self.exchanges, self.exchanges[1:], strict=False):
            if before[1] == 429:
                refusals += 1
                assert after[0] >= before[3] + int(before[2]["retry-after-ms"]) / 1000, (before, after)
        return refusals


def test_every_embeddings_answer_to_a_tenant_with_quotas_carries_openais_six_headers(gw):
    status, headers, _ = http("POST", f"{gw.http_url}/v1/embeddings", {"model": "encoder", "input": ["a b c"]},
                              {"Authorization": f"Bearer {KEYS['metered']}"})
    headers = {key.lower(): value for key, value in headers.items()}
    assert status == 200
    assert headers["x-ratelimit-limit-requests"] == "50" and headers["x-ratelimit-limit-tokens"] == "600"
    assert 0 <= int(headers["x-ratelimit-remaining-requests"]) < 50
    assert 0 <= int(headers["x-ratelimit-remaining-tokens"]) < 600
    assert DURATION.match(headers["x-ratelimit-reset-requests"]) and DURATION.match(headers["x-ratelimit-reset-tokens"])
    status, headers, _ = http("POST", f"{gw.http_url}/v1/embeddings", {"model": "encoder", "input": ["a b c"]},
                              {"Authorization": f"Bearer {KEYS['free']}"})
    assert status == 200 and not any(key.lower().startswith("x-ratelimit") for key in headers)  # no quota, none


def test_the_openai_client_at_its_default_retries_waits_as_told_and_gets_its_answer(gw):
    wire = Wire()
    client = openai.OpenAI(base_url=f"{gw.http_url}/v1", api_key=KEYS["paced"], http_client=wire.client())
    for _ in range(10):  # one a second: within a few calls one is refused and retried by the client itself
        client.embeddings.create(model="encoder", input="hello")  # answered in the end: the retry is let in
        if any(status == 429 for _, status, _, _ in wire.exchanges):
            break
    refused = [headers for _, status, headers, _ in wire.exchanges if status == 429]
    assert refused, "ten calls at once within a quota of one a second"
    assert int(refused[0]["retry-after"]) >= 1 and 1 <= int(refused[0]["retry-after-ms"]) <= 1000
    assert refused[0]["x-ratelimit-limit-requests"] == "1" and refused[0]["x-ratelimit-remaining-requests"] == "0"
    assert 1 <= wire.check_retries_waited() <= 2 * len(wire.exchanges)


def test_the_cohere_client_at_its_default_retries_waits_as_told_and_gets_its_answer(gw):
    wire = Wire()
    client = cohere.ClientV2(api_key=KEYS["paced"], base_url=gw.http_url, httpx_client=wire.client())
    for _ in range(10):
        answer = client.rerank(model="reranker", query="q", documents=["a", "b"])
        assert len(answer.results) == 2
        if any(status == 429 for _, status, _, _ in wire.exchanges):
            break
    assert wire.check_retries_waited() >= 1


@pytest.mark.parametrize("make", ["openai", "cohere"])
def test_a_request_that_can_never_pass_is_one_413_naming_the_key_and_never_retried(gw, make):
    wire = Wire()
    huge = " ".join(["word"] * 2000)  # far more tokens than the tenant's whole minute (600)
    if make == "openai":
        client = openai.OpenAI(base_url=f"{gw.http_url}/v1", api_key=KEYS["metered"], http_client=wire.client())
        with pytest.raises(openai.APIStatusError) as refused:
            client.embeddings.create(model="encoder", input=huge)
        assert refused.value.status_code == 413 and "tokens_per_minute" in str(refused.value.body)
    else:
        rerank = cohere.ClientV2(api_key=KEYS["metered"], base_url=gw.http_url, httpx_client=wire.client())
        with pytest.raises(cohere.core.api_error.ApiError) as failed:
            rerank.rerank(model="reranker", query="q", documents=[huge])
        assert failed.value.status_code == 413 and "tokens_per_minute" in str(failed.value.body)
    assert [status for _, status, _, _ in wire.exchanges] == [413]


def test_metrics_say_whether_quotas_are_shared_now(gw):
    status, _, body = http("GET", f"{gw.http_url}/metrics", headers={"Authorization": f"Bearer {KEYS['free']}"})
    assert status == 200
    samples = [line for line in body.decode().splitlines() if line.startswith("gateway_shared_quotas_available")]
    shared = gw.gateway.config.shared.enabled
    assert samples == (["gateway_shared_quotas_available 1.0"] if shared else [])


def test_under_workers_every_answer_tells_the_batchers_shared_buckets(tmp_path):
    """`serve --workers 2` with [shared]: the batcher holds the store; a worker's answers and
    refusals carry the same headers, crossed over the channel."""
    digest = hashlib.sha256(KEYS["paced"].encode()).hexdigest()
    with RedisProcess().start() as redis:
        path = tmp_path / "gateway.toml"
        path.write_text(f'[[models]]\nname = "encoder"\nbackend = "simulated"\n[models.simulated]\ntask = "embed"\n'
                        f'call_ms = 1\n[[tenants]]\nname = "paced"\nkey_sha256 = ["{digest}"]\n'
                        f'requests_per_second = 2\n[shared]\nurl = "{redis.url}"\n')
        with gateway_process(path, workers=2) as gw:
            seen = []
            for _ in range(30):  # two a second: within a few, one is refused
                status, headers, _ = http("POST", f"{gw.http_url}/v1/embeddings", {"model": "encoder", "input": "x"},
                                          {"Authorization": f"Bearer {KEYS['paced']}"})
                seen.append((status, {key.lower(): value for key, value in headers.items()}))
                if status == 429:
                    break
    assert seen[-1][0] == 429 and 1 <= int(seen[-1][1]["retry-after-ms"]) <= 1000
    assert all(status in (200, 429) and headers["x-ratelimit-limit-requests"] == "2" for status, headers in seen)
