"""GET /dashboard and /dashboard/data (gateway/rest/dashboard.py): the JSON says what the
scheduler's stats say after real traffic, both are behind the bearer token, and the page,
in a real headless Chromium (tests/browser.py), loads without console errors and follows
the traffic as it comes."""
from __future__ import annotations

import hashlib
import json
import threading
import time

import pytest

from gateway import config as gateway_config
from gateway.batching.load import replica_capacity
from tests.browser import chromium
from tests.harness import config_for, http, http_json, run_clients, running_gateway, timed_predict
from wire.request import PRIORITY_HEADER

PATHS = ("/dashboard", "/dashboard/dashboard.js", "/dashboard/data")


def test_the_data_is_the_schedulers_stats_after_traffic():
    config = config_for({"name": "demo", "backend": "simulated", "simulated": {"call_ms": 2},
                         "batching": {"max_batch_size": 8}},
                        {"name": "slo", "backend": "simulated", "simulated": {"call_ms": 1},
                         "batching": {"slo_ms": 500, "priority_levels": 2, "max_inflight": "auto"}})
    with running_gateway(config) as gw:
        results = run_clients(gw, seconds=5, workers=6, limit=120, pause_s=0.001)
        assert results and all(status == 200 for status, _, _ in results)
        for priority in ("1", "2", "2"):
            status, _ = http_json("POST", f"{gw.http_url}/v1/models/slo:predict", {"instances": [[1.0]]},
                                  headers={PRIORITY_HEADER: priority})
            assert status == 200
        status, snapshot = http_json("GET", f"{gw.http_url}/dashboard/data")
        assert status == 200
        stats = gw.stats("demo")  # traffic is over: nothing changes them now
        (demo, slo) = snapshot["models"]
        assert demo["name"] == "demo" and slo["name"] == "slo"
        assert demo["counts"] == {"requests": len(results), "answered": len(results), "refused": 0,
                                  "refused_late": 0, "dropped": 0, "expired": 0,
                                  "batches": stats.batches, "instances": stats.instances}
        assert demo["batch_size"]["counts"] == stats.batch_size.counts
        assert demo["batch_size"]["recent"] == list(stats.recent_batch_sizes)[-len(demo["batch_size"]["recent"]):]
        assert demo["departures"] == {reason: stats.departures[reason] for reason in snapshot["departure_reasons"]}
        assert {point["batch_size"]: point["calls"] for point in demo["observed"]} == \
            {size: durations.count for size, durations in stats.by_batch_size.items()}
        assert demo["profile"]["intercept_ms"] == pytest.approx(stats.profile.coefficients[0] * 1000)
        assert len(demo["profile"]["predicted"]) == 8 and demo["max_batch_size"] == 8
        assert demo["queue"] == {"rows": 0, "requests": 0}
        assert demo["inflight"] == {"batches": 0, "limit": 1, "auto": False, "ceiling": None}
        load = demo["load"]  # the autoscaling signal: demand over one replica's capacity
        assert load["replicas"] == 1 and load["demand_rows_per_second"] > 0
        assert load["capacity_rows_per_second"] == pytest.approx(
            replica_capacity(stats.profile.coefficients, 8, 1, None))
        assert load["load"] == pytest.approx(load["demand_rows_per_second"] / load["capacity_rows_per_second"])
        assert demo["goodput"] is None and demo["levels"] == []
        assert slo["slo_ms"] == pytest.approx(500) and slo["policy"] == "deadline"
        assert slo["goodput"] == {"slo_ms": pytest.approx(500), "answered_within_slo": 3}
        assert slo["inflight"]["auto"] is True
        assert [level["answered"] for level in slo["levels"]] == [level.answered for _, level in
                                                                  sorted(gw.stats("slo").by_level.items())]
        assert abs(snapshot["server_time_unix_s"] - time.time()) < 60


def test_the_page_and_its_script_come_from_the_gateway_alone():
    with running_gateway(config_for({"name": "demo", "backend": "simulated"})) as gw:
        status, headers, page = http("GET", f"{gw.http_url}/dashboard")
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        assert b'<script src="dashboard/dashboard.js">' in page
        assert "default-src 'none'" in headers["Content-Security-Policy"]
        status, headers, script = http("GET", f"{gw.http_url}/dashboard/dashboard.js")
        assert status == 200 and headers["Content-Type"].startswith("text/javascript")
        for body in (page, script):
            assert b"https://" not in body and b"cdn" not in body.lower()
        assert http("GET", f"{gw.http_url}/dashboard/data")[1]["Cache-Control"] == "no-store"


def test_the_dashboard_is_behind_the_bearer_token(monkeypatch):
    monkeypatch.setenv("GATEWAY_TOKEN", "s3cret")
    config = config_for({"name": "demo", "backend": "simulated"}, server={"auth_token_env": "GATEWAY_TOKEN"})
    with running_gateway(config) as gw:
        for path in PATHS:
            status, _, body = http("GET", f"{gw.http_url}{path}")
            assert status == 401 and b"Bearer" in body, path
            assert http("GET", f"{gw.http_url}{path}?token=s3cret")[0] == 401, path  # the header, nothing else
            assert http("GET", f"{gw.http_url}{path}", headers={"Authorization": "Bearer s3cret"})[0] == 200, path


# -- the page in a real browser ------------------------------------------------------------------

FIELDS = ("answered", "batches", "requests", "answered_rate", "queue_rows", "fleet_load")
READ_FIELDS = f"const fields = {json.dumps(FIELDS)};" + """
const card = document.querySelector('[data-model="demo"]');
if (!card) return null;
const out = {};
for (const field of fields) out[field] = card.querySelector('[data-field="' + field + '"]').textContent;
return out;
"""


def number(text: str) -> float:
    return float(text.replace(",", "")) if text not in ("", "–") else 0.0


def test_the_page_in_chromium_has_no_console_errors_and_follows_the_traffic(tmp_path):
    requests = 300
    config = config_for({"name": "demo", "backend": "simulated", "simulated": {"call_ms": 3}})
    with running_gateway(config) as gw, chromium(tmp_path) as browser:
        browser.get(f"{gw.http_url}/dashboard")
        browser.wait_for("return Number(document.body.dataset.polls || 0)", lambda polls: polls >= 2, timeout=15,
                         what="two polls of /dashboard/data")
        before = browser.execute(READ_FIELDS)
        assert before is not None and number(before["answered"]) == 0 and number(before["batches"]) == 0

        def load() -> None:  # a fixed number of requests, one after another
            for _ in range(requests):
                timed_predict(gw, "demo", [1.0, 1.0], timeout=10)

        client = threading.Thread(target=load, name="dashboard-load")
        client.start()
        try:
            browser.wait_for(READ_FIELDS, lambda fields: number(fields["answered_rate"]) > 0, timeout=20,
                             what="a positive answered rate on the page")
        finally:
            client.join(timeout=60)
        assert not client.is_alive(), "the load's client hung"
        after = browser.wait_for(READ_FIELDS, lambda fields: number(fields["answered"]) == requests, timeout=15,
                                 what=f"{requests} answered on the page")
        assert number(after["requests"]) == requests
        assert after["fleet_load"].endswith(" · 1 replica") and after["fleet_load"][0].isdigit()
        assert number(after["batches"]) == gw.stats("demo").batches > 0
        charts = browser.execute("""
            const card = document.querySelector('[data-model="demo"]');
            const count = (chart, selector) => card.querySelectorAll('[data-chart="' + chart + '"] ' + selector).length;
            return {bars: count("histogram", "rect.bar"), line: count("profile", "polyline.profile"),
                    points: count("profile", "circle.observed"), rates: count("rates", "polyline.answered")};
        """)
        assert charts["bars"] > 0 and charts["line"] == 1 and charts["points"] >= 1 and charts["rates"] == 1
        assert browser.execute('return document.getElementById("tenants").hidden') is True  # no tenants declared
        severe = [entry for entry in browser.console() if entry["level"] == "SEVERE"]
        assert severe == [], severe


def test_behind_a_token_the_page_works_when_every_request_carries_the_header(tmp_path, monkeypatch):
    """As behind a proxy that adds the header: the page, its script and its polls all carry it."""
    monkeypatch.setenv("GATEWAY_TOKEN", "s3cret")
    config = config_for({"name": "demo", "backend": "simulated", "simulated": {"call_ms": 1}},
                        server={"auth_token_env": "GATEWAY_TOKEN"})
    with running_gateway(config) as gw, chromium(tmp_path) as browser:
        browser.cdp("Network.enable")
        browser.cdp("Network.setExtraHTTPHeaders", {"headers": {"Authorization": "Bearer s3cret"}})
        browser.get(f"{gw.http_url}/dashboard")
        browser.wait_for("return Number(document.body.dataset.polls || 0)", lambda polls: polls >= 1, timeout=15,
                         what="a poll of /dashboard/data")
        assert browser.execute('return document.getElementById("status").dataset.state') == "live"
        assert [entry for entry in browser.console() if entry["level"] == "SEVERE"] == []


LAYOUT = """
const card = document.querySelector('[data-model="demo"]');
const rows = (grid) => {
  const tops = new Map();
  for (const item of grid.children) {
    if (item.hidden) continue;
    const top = Math.round(item.getBoundingClientRect().top);
    tops.set(top, (tops.get(top) || 0) + 1);
  }
  return Array.from(tops.entries()).sort((a, b) => a[0] - b[0]).map((entry) => entry[1]);
};
const values = [];
for (const value of card.querySelectorAll('.tile .value')) {
  if (value.closest('[hidden]')) continue;
  const range = document.createRange();
  range.selectNodeContents(value);
  values.push({field: value.dataset.field, text: value.textContent, lines: range.getClientRects().length,
               overflows: value.scrollWidth > value.clientWidth});
}
return {width: window.innerWidth, polls: Number(document.body.dataset.polls || 0),
        tiles: rows(card.querySelector('.tiles')), charts: rows(card.querySelector('.charts')), values};
"""


def test_no_tile_or_chart_sits_alone_on_a_row_and_no_value_wraps(tmp_path):
    """At 1280 px (and wider and narrower), the tiles and charts of a card fill their rows
    evenly: 9 tiles where 8 fit are 5 + 4, not 8 + 1; and a value such as "0.08 · 1 replica"
    or "408 / 5,089 × 1" stays on one line, within its tile."""
    config = config_for({"name": "demo", "backend": "simulated", "simulated": {"call_ms": 3}})
    with running_gateway(config) as gw, chromium(tmp_path) as browser:
        browser.get(f"{gw.http_url}/dashboard")
        for _ in range(100):  # demand and capacity need traffic to be numbers
            timed_predict(gw, "demo", [1.0, 1.0], timeout=10)
        browser.wait_for(READ_FIELDS, lambda fields: fields is not None and fields["fleet_load"][0].isdigit(),
                         timeout=15, what="the predictor load as a number")
        for width in (1280, 1440, 1024):
            browser.set_window_size(width, 900)
            polls = browser.execute(LAYOUT)["polls"]
            layout = browser.wait_for(LAYOUT, lambda seen, polls=polls: seen["polls"] >= polls + 1, timeout=15,
                                      what="a poll after the resize")
            values = {value["field"]: value for value in layout["values"]}
            assert " replica" in values["fleet_load"]["text"] and " × " in values["demand"]["text"], values
            for value in layout["values"]:
                assert value["lines"] == 1 and not value["overflows"], (width, value)
            for grid in ("tiles", "charts"):
                rows = layout[grid]
                assert len(rows) == 1 or min(rows) > 1, (width, grid, rows)


# -- tenants ------------------------------------------------------------------------------------

TENANT_KEYS = {"search": "sk-dashboard-search-4d2c1b0a99887766", "limited": "sk-dashboard-limited-1a2b3c4d5e6f7081"}
READ_TENANTS = """
const card = document.getElementById('tenants');
if (!card || card.hidden) return null;
const rows = [];
for (const row of card.querySelectorAll('tr[data-tenant]')) {
  const cells = {};
  for (const cell of row.querySelectorAll('td[data-field]')) cells[cell.dataset.field] = cell.textContent;
  rows.push(cells);
}
return {rows, text: document.body.innerText,
        overflows: document.documentElement.scrollWidth > document.documentElement.clientWidth};
"""


def test_with_tenants_the_page_shows_their_table_and_no_key(tmp_path):
    """Two tenants by digest, one held to a request a second: the page's Tenants table lists
    them once they have sent something (none before), in the config's order with what their
    clients saw (answered, refused by the quota), never a key or a digest, and does not widen
    the page (at 1280 and 1024 px)."""
    digests = {name: hashlib.sha256(key.encode()).hexdigest() for name, key in TENANT_KEYS.items()}
    config = gateway_config.parse({
        "models": [{"name": "demo", "backend": "simulated", "simulated": {"call_ms": 1}}],
        "tenants": [{"name": "search", "key_sha256": [digests["search"]], "priority": 1},
                    {"name": "limited", "key_sha256": [digests["limited"]], "requests_per_second": 1, "weight": 2,
                     "tokens_per_minute": 600000, "max_concurrent": 64}],
        "server": {"http_port": 0, "grpc_port": 0}})
    with running_gateway(config) as gw, chromium(tmp_path) as browser:
        browser.cdp("Network.enable")
        browser.cdp("Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Bearer {TENANT_KEYS['search']}"}})
        browser.set_window_size(1280, 900)
        browser.get(f"{gw.http_url}/dashboard")
        predict = f"{gw.http_url}/v1/models/demo:predict"

        def send(name: str) -> int:
            return http_json("POST", predict, {"instances": [[1.0]]},
                             headers={"Authorization": f"Bearer {TENANT_KEYS[name]}"})[0]

        searched = [send("search") for _ in range(20)]
        alone = browser.wait_for(READ_TENANTS, lambda seen: seen is not None, timeout=15, what="the Tenants table")
        assert [row["name"] for row in alone["rows"]] == ["search"]  # limited has sent nothing: no row
        limited = [send("limited") for _ in range(10)]
        assert set(searched) == {200} and 200 in limited and 429 in limited, limited
        seen = browser.wait_for(READ_TENANTS, lambda seen: [row["requests"] for row in seen["rows"]] == ["20", "10"],
                                timeout=15, what="the requests on the page")
        search, held = seen["rows"]
        assert (search["name"], held["name"]) == ("search", "limited")
        assert search["level"] == "1 · 1" and held["level"] == "default · 2"
        assert search["quotas"] == "none" and held["quotas"] == "1 req/s · 600k tokens/min · 64 at once"
        assert search["refusals"] == "0" and held["refusals"] == f"requests_per_second {limited.count(429)}"
        assert search["in_flight"] == held["in_flight"] == "0"
        for width in (1280, 1024):  # a table wider than the window scrolls in its card, not the page
            browser.set_window_size(width, 900)
            assert not browser.wait_for(READ_TENANTS, lambda seen: not seen["overflows"], timeout=15,
                                        what=f"no sideways scroll at {width} px")["overflows"]
        for key in TENANT_KEYS.values():
            assert key not in seen["text"] and hashlib.sha256(key.encode()).hexdigest() not in seen["text"]
        assert [entry for entry in browser.console() if entry["level"] == "SEVERE"] == []
