"""Tenants' usage where an operator reads it (issue 38, docs/tenants.md#usage): a gateway
process with two tenants (keys by SHA-256 digest, clients sending `Authorization: Bearer`),
one of them over its quota: /metrics counts each tenant's requests by status, rows, tokens,
time queued and refusals by reason, exactly as its clients saw them; under `--workers 2`
the counts are the gateway's, one set whichever process answers; the live page's JSON
carries the same table; and neither carries a key or a digest of one."""
from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import http
from tests.processes import gateway as gateway_process

KEYS = {"search": "sk-search-usage-3e1f0a9b7c5d2468", "indexing": "sk-indexing-usage-8b6a4c2e0f1d3579"}
STRANGER = "sk-stranger-usage-0000000000000000"
ROWS = 2  # rows per request


def sha256(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def config(tmp_path: Path) -> Path:
    """search: no quota; indexing: a bucket of one request a second, so back-to-back
    requests soon find it empty."""
    path = tmp_path / "gateway.toml"
    path.write_text(
        '[[models]]\nname = "demo"\nbackend = "simulated"\n[models.simulated]\ncall_ms = 1\n'
        f'[[tenants]]\nname = "search"\nkey_sha256 = ["{sha256(KEYS["search"])}"]\npriority = 1\n'
        f'[[tenants]]\nname = "indexing"\nkey_sha256 = ["{sha256(KEYS["indexing"])}"]\nweight = 3\n'
        "requests_per_second = 1\n")
    return path


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def predict(url: str, key: str) -> int:
    # urllib opens a new connection each time: under --workers the kernel spreads them.
    body = {"instances": [[float(row)] for row in range(ROWS)]}
    return http("POST", f"{url}/v1/models/demo:predict", body, headers=bearer(key))[0]


def tenant_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples of the gateway_tenant_* families, by name and sorted labels."""
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) if family.name.startswith("gateway_tenant_")
            for sample in family.samples}


@pytest.mark.parametrize("workers", [1, 2], ids=["one process", "two workers"])
def test_metrics_and_the_live_page_count_each_tenants_requests_as_its_clients_saw_them(tmp_path, workers):
    process = gateway_process(config(tmp_path), workers=workers)
    try:
        url = "http://" + process.fields["http"]
        search = [predict(url, KEYS["search"]) for _ in range(12)]
        indexing = [predict(url, KEYS["indexing"]) for _ in range(12)]
        stranger = [predict(url, STRANGER) for _ in range(3)]  # no tenant: counted for none
        # Several scrapes, each a new connection: under --workers any process may answer.
        scrapes = [http("GET", f"{url}/metrics", headers=bearer(KEYS["search"])) for _ in range(4)]
        lives = [http("GET", f"{url}/dashboard/data", headers=bearer(KEYS["indexing"])) for _ in range(4)]
        page = http("GET", f"{url}/dashboard", headers=bearer(KEYS["search"]))[2].decode()
    finally:
        assert process.stop() == 0
    assert set(search) == {200} and set(stranger) == {401}
    answered, limited = indexing.count(200), indexing.count(429)
    assert answered >= 1 and limited >= 1 and answered + limited == len(indexing), indexing

    expected = {
        ("gateway_tenant_requests_total", (("code", "200"), ("tenant", "search"))): len(search),
        ("gateway_tenant_requests_total", (("code", "200"), ("tenant", "indexing"))): answered,
        ("gateway_tenant_requests_total", (("code", "429"), ("tenant", "indexing"))): limited,
        ("gateway_tenant_rows_total", (("tenant", "search"),)): ROWS * len(search),
        ("gateway_tenant_rows_total", (("tenant", "indexing"),)): ROWS * answered,
        ("gateway_tenant_tokens_total", (("tenant", "search"),)): ROWS * len(search),  # a tensor model: rows
        ("gateway_tenant_tokens_total", (("tenant", "indexing"),)): ROWS * answered,
        ("gateway_tenant_refusals_total", (("reason", "requests_per_second"), ("tenant", "indexing"))): limited,
        ("gateway_tenant_requests_in_flight", (("tenant", "search"),)): 0,
        ("gateway_tenant_requests_in_flight", (("tenant", "indexing"),)): 0,
        ("gateway_tenant_queue_wait_seconds_count", (("tenant", "search"),)): len(search),
        ("gateway_tenant_queue_wait_seconds_count", (("tenant", "indexing"),)): answered,
    }
    for status, _, body in scrapes:
        assert status == 200
        samples = tenant_samples(body.decode())
        for key, value in expected.items():
            assert samples.get(key) == value, (key, samples.get(key), value)
        # Nothing else counted: no other status, reason or tenant (the stranger is none).
        assert {key for key in samples if key[0] in ("gateway_tenant_requests_total",
                                                     "gateway_tenant_refusals_total")} <= set(expected)
        assert {dict(labels)["tenant"] for _, labels in samples} == {"search", "indexing"}

    for status, _, body in lives:
        assert status == 200
        table = orjson.loads(body)["tenants"]
        assert [row["name"] for row in table] == ["search", "indexing"]  # declared order
        search_row, indexing_row = table
        assert search_row["statuses"] == {"200": len(search)} and search_row["requests"] == len(search)
        assert search_row["priority"] == 1 and search_row["rows"] == ROWS * len(search)
        assert indexing_row["statuses"] == {"200": answered, "429": limited}
        assert indexing_row["refusals"] == {"requests_per_second": limited}
        assert indexing_row["weight"] == 3 and indexing_row["quotas"] == {
            "requests_per_second": 1, "tokens_per_minute": None, "max_concurrent": None}
        assert indexing_row["queue_wait"]["count"] == answered and indexing_row["in_flight"] == 0

    readable = [body.decode() for _, _, body in scrapes + lives] + [page]
    for key in (*KEYS.values(), STRANGER):
        digest = hashlib.sha256(key.encode()).digest()
        for secret in (key, digest.hex(), digest.hex().upper(), base64.b64encode(digest).decode()):
            assert not any(secret in text for text in readable), key
