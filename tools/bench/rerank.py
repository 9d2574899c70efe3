"""The `rerank` scenario of `python -m tools.bench`: many clients, each reranking its own
query's few documents, the traffic a rerank server cannot batch across clients (it takes one
query per call).

Two parts, each its own servers, every one run as its own process:

* **Distinct queries on a predictor that computes one call at a time** (8 ms + 0.25 ms a
  pair): `tests/predictors/vllm_score_server.py --no-model` (vLLM's score and Cohere-shaped
  rerank routes, a hash for the score, the cost slept, one call at a time) and the simulated
  predictor with `--task rerank` over OIP gRPC (two BYTES inputs, the same cost). Targets:
  the server alone through its Cohere endpoint; the gateway's Cohere front end in front of
  it with `api = "score"` (pairs of every query in one call), with OIP pairs, and with
  `api = "rerank"` (one query per call, so distinct queries never merge). 32 clients, each
  request its own query and 8 documents, and 1 client.
* **The real cross-encoder** (`tests/predictors/rerank_model.py`, a 2-layer BERT with a
  one-label head, random weights built in code) at 32 clients: Infinity 0.0.78 alone (its
  own batching, batch 32, `/rerank`), the gateway in front of Triton (PyTriton, numpy
  forward, OIP pairs), of the tests' vLLM-style score server (transformers' forward, one
  call at a time) and of Infinity (`api = "rerank"`). Queries of 4 to 10 words, documents of
  20 to 60.

Each row: pairs/s, requests/s, p50 and p99 per request. Then the answers: one request's
scores through the gateway against the predictor's own, and their order.

It holds this scenario only; the harness (servers, load, checks) is `tools.bench.harness`'.
It must not import another scenario.
"""
from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

from tools.bench.harness import (
    PREDICTORS,
    Context,
    Gateway,
    PyTritonScript,
    Script,
    Server,
    check,
    closed_loop,
)
from tools.processes import free_port, simulated_predictor_command

MODEL = "reranker"          # its name at every predictor
TRITON_MODEL = "rerank"
DOCUMENTS_PER_REQUEST = 8
CALL_MS, PAIR_MS = 8.0, 0.25
SIM_BATCHING = {"max_batch_size": 128, "max_batch_tokens": 65536, "max_inflight": 1, "timeout_s": 60}
REAL_BATCHING = {"max_batch_size": 32, "max_batch_tokens": 16384, "max_inflight": "auto", "timeout_s": 60}
WORDS = ("the", "gateway", "batches", "many", "small", "rerank", "requests", "into", "one", "forward", "of",
         "model", "while", "each", "client", "waits", "only", "for", "its", "own", "search", "index", "retrieval",
         "document", "query", "answer", "ranking", "passage", "about", "cluster", "network", "capital", "state",
         "city", "island", "river", "mountain", "history", "people", "water")


def requests_of(count: int, seed: int, query_words: tuple[int, int], document_words: tuple[int, int]) -> list[dict]:
    """`count` requests, each its own query (numbered, so no two are equal) and its documents."""
    import numpy as np

    rng = np.random.default_rng(seed)

    def text(low: int, high: int) -> str:
        return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), int(rng.integers(low, high + 1))))

    return [{"query": f"{text(*query_words)} {n}", "documents": [text(*document_words)
                                                                  for _ in range(DOCUMENTS_PER_REQUEST)]}
            for n in range(count)]


def bodies(requests: list[dict], model: str) -> list[bytes]:
    return [json.dumps({"model": model, **request}).encode() for request in requests]


def run(target: str, url: str, model: str, requests: list[dict], clients: int, duration: float) -> dict[str, Any]:
    result = asyncio.run(closed_loop(url, bodies(requests, model), clients, duration))
    return {"target": target, "clients": clients, "pairs_s": result["rps"] * DOCUMENTS_PER_REQUEST,
            "requests_s": result["rps"], "p50_ms": result["p50_ms"], "p99_ms": result["p99_ms"],
            "errors": result["errors"]}


def settle(servers: list[Server], quiet_cpu_s: float = 0.02, window_s: float = 0.25, limit_s: float = 60.0) -> None:
    """Wait until no server computes: a predictor still working off the previous run's
    abandoned requests must not compete with the next run."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        before = sum(server.group_cpu_seconds() for server in servers)
        time.sleep(window_s)
        if sum(server.group_cpu_seconds() for server in servers) - before < quiet_cpu_s:
            return


def post_json(url: str, document: dict) -> tuple[int, bytes]:
    """POST `document` as JSON with its Content-Type (FastAPI's servers refuse a body without it)."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=json.dumps(document).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, b""


def scores_of(answer: bytes) -> tuple[list[int], list[float]]:
    results = json.loads(answer)["results"]
    return [item["index"] for item in results], [item["relevance_score"] for item in results]


def rerank_scenario(ctx: Context) -> dict[str, Any]:
    started: list[Server] = []
    runs: list[dict[str, Any]] = []
    answers: list[dict[str, Any]] = []
    try:
        # -- distinct queries, one call at a time -----------------------------------------------
        score_server = Script(ctx.log_dir, "score-server", "infinity", "vllm_score_server.py", "--port",
                              str(free_port()), "--no-model", "--cost-ms", f"{CALL_MS:g}", "--pair-ms", f"{PAIR_MS:g}")
        oip_server = Server("oip-pairs", simulated_predictor_command(
            "--task", "rerank", "--model", MODEL, "--call-ms", f"{CALL_MS:g}", "--per-instance-ms", f"{PAIR_MS:g}"),
            ctx.log_dir)
        for server in (score_server, oip_server):
            ctx.say(f"  rerank: starting {server.name}")
            server.start()
            started.append(server)
        score_url = f"http://127.0.0.1:{score_server.port('http')}"
        gateway = Gateway(ctx.log_dir, "gateway-rerank-sim", [
            {"name": "score", "backend": "kserve", "api": "score", "url": score_url, "base_path": "/v1",
             "backend_model": MODEL, "batching": SIM_BATCHING},
            {"name": "oip", "backend": "kserve", "protocol": "grpc", "api": "v2", "url": oip_server.grpc_address,
             "backend_model": MODEL, "rerank": {}, "batching": SIM_BATCHING},
            {"name": "cohere", "backend": "kserve", "api": "rerank", "url": score_url, "base_path": "/v1",
             "backend_model": MODEL, "batching": SIM_BATCHING},
        ]).start()
        started.append(gateway)
        requests = requests_of(4000, 39, (4, 10), (20, 60))
        targets = [("server alone (its Cohere /rerank)", f"{score_url}/v1/rerank", MODEL, (1, 32)),
                   ("gateway -> api = \"score\"", f"{gateway.http_url}/v2/rerank", "score", (1, 32)),
                   ("gateway -> OIP pairs", f"{gateway.http_url}/v2/rerank", "oip", (1, 32)),
                   ("gateway -> api = \"rerank\" (one query a call)", f"{gateway.http_url}/v2/rerank", "cohere", (32,))]
        for target, url, model, client_counts in targets:
            asyncio.run(closed_loop(url, bodies(requests[:64], model), 8, 1.0))  # warm up, not measured
            for clients in client_counts:
                settle(started)
                ctx.say(f"  rerank: {target}, {clients} clients")
                runs.append({"part": "one call at a time", **run(target, url, model, requests, clients, ctx.duration)})
        for server in reversed(started):
            server.stop()
        started.clear()
        # -- the real cross-encoder ---------------------------------------------------------------
        infinity = Script(ctx.log_dir, "infinity-rerank", "infinity", "infinity_server.py", "--port", str(free_port()),
                          "--model", "rerank", "--batch-size", "32")
        vllm = Script(ctx.log_dir, "score-server-real", "infinity", "vllm_score_server.py", "--port", str(free_port()))
        triton = PyTritonScript(ctx.log_dir, "triton-rerank", TRITON_MODEL)
        for server in (infinity, vllm, triton):
            ctx.say(f"  rerank: starting {server.name}")
            server.start()
            started.append(server)
        folder = subprocess.run([str(infinity.python), str(PREDICTORS / "rerank_model.py"), "build"],
                                capture_output=True, text=True, check=True, timeout=300).stdout.strip().splitlines()[-1]
        tables = {"tokenizer": str(Path(folder) / "tokenizer.json")}
        infinity_url = f"http://127.0.0.1:{infinity.port('http')}"
        vllm_url = f"http://127.0.0.1:{vllm.port('http')}"
        real = Gateway(ctx.log_dir, "gateway-rerank-real", [
            {"name": "triton", "backend": "triton", "protocol": "grpc", "url": f"127.0.0.1:{triton.grpc_port}",
             "backend_model": TRITON_MODEL, "rerank": tables, "batching": REAL_BATCHING},
            {"name": "score", "backend": "kserve", "api": "score", "url": vllm_url, "base_path": "/v1",
             "backend_model": MODEL, "rerank": tables, "batching": REAL_BATCHING},
            {"name": "infinity", "backend": "kserve", "api": "rerank", "url": infinity_url, "base_path": "",
             "backend_model": MODEL, "rerank": tables, "batching": REAL_BATCHING},
        ]).start()
        started.append(real)
        real_requests = requests_of(2000, 40, (4, 10), (20, 60))
        real_targets = [("Infinity alone (its own batching, /rerank)", f"{infinity_url}/rerank", MODEL),
                        ("gateway -> Triton (OIP pairs)", f"{real.http_url}/v2/rerank", "triton"),
                        ("gateway -> score server (api = \"score\")", f"{real.http_url}/v2/rerank", "score"),
                        ("gateway -> Infinity (api = \"rerank\")", f"{real.http_url}/v2/rerank", "infinity")]
        for target, url, model in real_targets:
            asyncio.run(closed_loop(url, bodies(real_requests[:64], model), 8, 1.0))
            settle(started)
            ctx.say(f"  rerank: {target}, 32 clients")
            runs.append({"part": "the real cross-encoder", **run(target, url, model, real_requests, 32, ctx.duration)})
        # The answers: the gateway's against the predictor's own, one request each.
        probe = real_requests[-1]
        own_infinity = post_json(f"{infinity_url}/rerank", {"model": MODEL, **probe})
        through = post_json(f"{real.http_url}/v2/rerank", {"model": "infinity", **probe})
        own_score = post_json(f"{vllm_url}/v1/score",
                              {"model": MODEL, "text_1": probe["query"], "text_2": probe["documents"]})
        through_score = post_json(f"{real.http_url}/v2/rerank", {"model": "score", **probe})
        statuses = [own_infinity[0], through[0], own_score[0], through_score[0]]
        if set(statuses) != {200}:
            answers.append({"predictor": f"the predictors (statuses {statuses})", "same_order": False,
                            "max_difference": float("inf")})
        else:
            order, scores = scores_of(through[1])
            own_order, own = scores_of(own_infinity[1])
            answers.append({"predictor": "Infinity", "same_order": order == own_order,
                            "max_difference": max(abs(a - b) for a, b in zip(scores, own, strict=True))})
            order, scores = scores_of(through_score[1])
            data = json.loads(own_score[1])["data"]
            own_by_index = {item["index"]: item["score"] for item in data}
            own_order = sorted(own_by_index, key=lambda i: -own_by_index[i])
            answers.append({"predictor": "score server", "same_order": order == own_order,
                            "max_difference": max(abs(scores[k] - own_by_index[i]) for k, i in enumerate(order))})
    finally:
        for server in reversed(started):
            server.stop()
    return report(runs, answers, ctx)


def report(runs: list[dict[str, Any]], answers: list[dict[str, Any]], ctx: Context) -> dict[str, Any]:
    def row(target: str, clients: int) -> dict[str, Any]:
        return next(r for r in runs if r["target"] == target and r["clients"] == clients)

    alone = row("server alone (its Cohere /rerank)", 32)
    score, oip = row("gateway -> api = \"score\"", 32), row("gateway -> OIP pairs", 32)
    infinity = row("Infinity alone (its own batching, /rerank)", 32)
    best_real = max((r for r in runs if r["part"] == "the real cross-encoder" and r["target"].startswith("gateway")),
                    key=lambda r: r["pairs_s"])
    one_added = row("gateway -> api = \"score\"", 1)["p50_ms"] - row("server alone (its Cohere /rerank)", 1)["p50_ms"]

    def ratio(a: dict[str, Any], b: dict[str, Any]) -> float:
        return a["pairs_s"] / max(b["pairs_s"], 1e-9)

    checks = [
        check("32 distinct queries: gateway api = \"score\" vs the server's Cohere endpoint, pairs/s", ">= 3x",
              f"{ratio(score, alone):.2f}x", ratio(score, alone) >= 3),
        check("the same, p99", "no worse", f"{score['p99_ms']:.0f} vs {alone['p99_ms']:.0f} ms",
              score["p99_ms"] <= alone["p99_ms"]),
        check("32 distinct queries: gateway OIP pairs vs the server's Cohere endpoint, pairs/s", ">= 3x",
              f"{ratio(oip, alone):.2f}x", ratio(oip, alone) >= 3),
        check("the same, p99", "no worse", f"{oip['p99_ms']:.0f} vs {alone['p99_ms']:.0f} ms",
              oip["p99_ms"] <= alone["p99_ms"]),
        check(f"real cross-encoder, 32 clients: {best_real['target']} vs Infinity alone, pairs/s", ">= 1.0x",
              f"{ratio(best_real, infinity):.2f}x", ratio(best_real, infinity) >= 1.0),
        check("the same, p99", "no worse", f"{best_real['p99_ms']:.0f} vs {infinity['p99_ms']:.0f} ms",
              best_real["p99_ms"] <= infinity["p99_ms"]),
        check("1 client: p50 added by the gateway (api = \"score\")", "<= +1 ms", f"{one_added:+.2f} ms",
              one_added <= 1.0),
        *[check(f"answers through the gateway vs {a['predictor']}'s own", "equal (1e-6), same order",
                f"{a['max_difference']:.1e}, {'same' if a['same_order'] else 'another'} order",
                a["max_difference"] <= 1e-6 and a["same_order"]) for a in answers],
    ]
    return {
        "title": "Rerank: distinct queries batched across clients, against one query per call",
        "setup": f"Closed-loop aiohttp clients for {ctx.duration:g} s after 1 s of warm-up, each request its own "
                 f"query (4 to 10 words) and {DOCUMENTS_PER_REQUEST} documents (20 to 60 words), Cohere's v2 "
                 f"body. One call at a time: {CALL_MS:g} ms + {PAIR_MS:g} ms a pair, slept (the vLLM-style test "
                 f"server with --no-model for the Cohere and score routes; the simulated predictor over OIP gRPC); "
                 f"gateway max_batch_size {SIM_BATCHING['max_batch_size']}, max_inflight 1. The real "
                 f"cross-encoder: the tests' 2-layer BERT with a one-label head on the CPU; Infinity with its own "
                 f"batching (32); gateway max_batch_size 32, max_batch_tokens 16384, max_inflight auto, the "
                 f"model's tokenizer.json. One 2-core machine shared by the load, the gateway and the predictor.",
        "tables": [{"title": "", "rows": runs, "columns": [
            ["part", "part", "s"], ["target", "target", "s"], ["clients", "clients", "d"],
            ["pairs_s", "pairs/s", ".0f"], ["requests_s", "requests/s", ".0f"], ["p50_ms", "p50 ms", ".1f"],
            ["p99_ms", "p99 ms", ".1f"], ["errors", "errors", "d"]]}],
        "checks": checks, "runs": runs, "plots": {},
    }
