"""The `embeddings` scenario of `python -m tools.bench`: many small text requests to an
embedding model, the traffic KServe's own runtime does not batch.

The model is the tests' encoder (`tests/predictors/embedding_model.py`: a 2-layer BERT with
random weights and a WordPiece vocabulary built in code, mean pooling, normalised; 128
values), served on the CPU by four real servers, each run by path with its own venv:

* **KServe alone**: KServe 0.21.0's `OpenAIEncoderModel` (`kserve_openai_server.py`), one
  forward per HTTP request, as its Hugging Face runtime does;
* **gateway -> KServe**: the gateway's OpenAI front end in front of the same server
  (`api = "openai"`), batching across clients;
* **gateway -> Triton**: the gateway in front of Triton's `embed` model (PyTriton, OIP gRPC
  BYTES texts; its forward is numpy's, on the same weights);
* **Infinity alone**: Infinity 0.0.78 with its own batching (batch size 32), the peer to
  beat;
* KServe alone and the gateway in front of it again with one torch thread
  (`OMP_NUM_THREADS=1`), at 1 and 32 clients: with torch's default of one thread a core,
  its second thread spins after each forward on the core the gateway needs.

Loads: closed-loop clients at 1, 8 and 32, each sending one text of log-normal length (8 to
256 tokens, median 40, counted by the model's tokenizer), and a mix at 32 clients where a
quarter send lists of 16. Then the gateway's repeated-text handling: 32 clients whose texts
come one in two from a pool of 32, with `deduplicate` on and off. Each row reports texts/s,
tokens/s, p50 and p99 per request, and the CPU each process on the path spent per text.

It holds this scenario only; the harness (servers, load, checks) is `tools.bench.harness`'.
It must not import another scenario.
"""
from __future__ import annotations

import asyncio
import json
import resource
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
from tools.processes import free_port

MODEL = "embedding"  # its name at Infinity and KServe
TRITON_MODEL = "embed"
CLIENTS = (1, 8, 32)
LIST_SIZE = 16
BUCKETS = [16, 32, 64, 128, 256]
BATCHING = {"max_batch_size": 32, "max_batch_tokens": 16384, "buckets": BUCKETS, "max_inflight": "auto",
            "timeout_s": 60}
# Words the model's vocabulary holds whole and pieces it cuts: texts read like prose.
WORDS = (
    "the", "gateway", "batches", "many", "small", "embedding", "requests", "into", "one", "forward", "of",
    "the", "model", "while", "each", "client", "waits", "only", "for", "its", "own", "vector", "search",
    "index", "retrieval", "document", "query", "answer", "ranking", "passage", "about", "cluster", "network",
    "data", "input", "output", "server", "predictor", "latency", "throughput", "tokens",
)


def corpus(python: Path, count: int = 2000, seed: int = 29) -> tuple[list[str], list[int], str]:
    """`count` texts of log-normal token lengths (8..256), their tokens by the model's own
    tokenizer, and that tokenizer.json's path (the model folder is built by `python`)."""
    import numpy as np

    folder = subprocess.run([str(python), str(PREDICTORS / "embedding_model.py"), "build"], capture_output=True,
                            text=True, check=True, timeout=300).stdout.strip().splitlines()[-1]
    tokenizer_file = str(Path(folder) / "tokenizer.json")
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(tokenizer_file)
    tokenizer.no_truncation()
    rng = np.random.default_rng(seed)
    targets = np.clip(np.round(rng.lognormal(np.log(40), 0.7, count)), 8, 256).astype(int)
    texts = []
    for target in targets:
        words = [WORDS[i] for i in rng.integers(0, len(WORDS), int(target))]
        while len(words) > 1 and len(tokenizer.encode(" ".join(words)).ids) > target:
            words.pop()
        texts.append(" ".join(words))
    tokens = [len(encoding.ids) for encoding in tokenizer.encode_batch(texts)]
    return texts, tokens, tokenizer_file


def bodies(texts: list[str], model: str, per_request: int = 1) -> list[bytes]:
    groups = [texts[i:i + per_request] for i in range(0, len(texts) - per_request + 1, per_request)]
    return [json.dumps({"model": model, "input": group if per_request > 1 else group[0]}).encode()
            for group in groups]


def run(url: str, model: str, texts: list[str], mean_tokens: float, clients: int, duration: float,
        servers: list[Server], lists: bool = False) -> dict[str, Any]:
    """One closed-loop run: `clients` sending one text each (with `lists`, a quarter of them
    sending lists of 16 instead); texts/s, tokens/s, latency and CPU per text per process."""
    singles = bodies(texts, model)
    list_clients = clients // 4 if lists else 0
    settle(STARTED)
    cpu_before = [server.group_cpu_seconds() for server in servers]
    load_before = resource.getrusage(resource.RUSAGE_SELF)

    async def both() -> list[dict[str, Any]]:
        loads = [closed_loop(url, singles, clients - list_clients, duration)]
        if list_clients:
            loads.append(closed_loop(url, bodies(texts, model, LIST_SIZE), list_clients, duration))
        return list(await asyncio.gather(*loads))

    results = asyncio.run(both())
    load_after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = [server.group_cpu_seconds() - before for server, before in zip(servers, cpu_before, strict=True)]
    single = results[0]
    texts_done = single["ok"] + (results[1]["ok"] * LIST_SIZE if list_clients else 0)
    elapsed = single["ok"] / single["rps"] if single["rps"] else duration
    row: dict[str, Any] = {
        "clients": str(clients) if not lists else f"{clients} (1/4 lists of {LIST_SIZE})",
        "texts_s": texts_done / elapsed, "tokens_s": texts_done * mean_tokens / elapsed,
        "p50_ms": single["p50_ms"], "p99_ms": single["p99_ms"],
        "list_p99_ms": results[1]["p99_ms"] if list_clients else None,
        "errors": sum(result["errors"] for result in results),
        "load_cpu_ms": 1000 * (load_after.ru_utime + load_after.ru_stime - load_before.ru_utime
                               - load_before.ru_stime) / max(texts_done, 1),
    }
    for server, seconds in zip(servers, cpu, strict=True):
        row[f"cpu_ms:{server.name}"] = 1000 * seconds / max(texts_done, 1)
    row["path_cpu_ms"] = sum(row[f"cpu_ms:{server.name}"] for server in servers)
    return row


STARTED: list[Server] = []  # every server of this scenario, while it runs: all must be idle before a run


def settle(servers: list[Server], quiet_cpu_s: float = 0.02, window_s: float = 0.25, limit_s: float = 60.0) -> None:
    """Wait until no server computes (less than `quiet_cpu_s` of CPU in `window_s`): a
    predictor still working off the previous run's abandoned requests (Infinity keeps its
    queue) must not compete with the next run."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        before = sum(server.group_cpu_seconds() for server in servers)
        time.sleep(window_s)
        if sum(server.group_cpu_seconds() for server in servers) - before < quiet_cpu_s:
            return


def embeddings(ctx: Context) -> dict[str, Any]:
    """KServe alone vs the gateway in front of it vs the gateway in front of Triton vs
    Infinity's own batching, on single texts at 1, 8 and 32 clients and a mix with lists."""
    kserve = Script(ctx.log_dir, "kserve-openai", "kserve-openai", "kserve_openai_server.py",
                    "--http-port", str(free_port()), "--grpc-port", str(free_port()))
    infinity = Script(ctx.log_dir, "infinity", "infinity", "infinity_server.py", "--port", str(free_port()),
                      "--url-prefix", "/v1", "--batch-size", "32")
    triton = PyTritonScript(ctx.log_dir, "triton-embed", TRITON_MODEL)
    runs: list[dict[str, Any]] = []
    started = STARTED
    started.clear()
    try:
        for server in (kserve, infinity, triton):
            ctx.say(f"  embeddings: starting {server.name}")
            server.start()
            started.append(server)
        texts, tokens, tokenizer = corpus(infinity.python)
        mean_tokens = sum(tokens) / len(tokens)
        kserve_url = f"http://127.0.0.1:{kserve.port('http')}"
        embeddings_table = {"tokenizer": tokenizer}
        to_kserve = Gateway(ctx.log_dir, "gateway-kserve", [{
            "name": "bge", "backend": "kserve", "api": "openai", "url": kserve_url, "backend_model": MODEL,
            "embeddings": embeddings_table, "batching": BATCHING}]).start()
        started.append(to_kserve)
        to_triton = Gateway(ctx.log_dir, "gateway-triton", [{
            "name": "bge", "backend": "triton", "protocol": "grpc", "url": f"127.0.0.1:{triton.grpc_port}",
            "backend_model": TRITON_MODEL, "embeddings": embeddings_table, "batching": BATCHING}]).start()
        started.append(to_triton)
        targets: list[tuple[str, str, str, list[Server]]] = [
            ("KServe alone", f"{kserve_url}/openai/v1/embeddings", MODEL, [kserve]),
            ("gateway -> KServe", f"{to_kserve.http_url}/v1/embeddings", "bge", [to_kserve, kserve]),
            ("gateway -> Triton", f"{to_triton.http_url}/v1/embeddings", "bge", [to_triton, triton]),
            ("Infinity alone", f"http://127.0.0.1:{infinity.port('http')}/v1/embeddings", MODEL, [infinity]),
        ]
        for name, url, model, servers in targets:
            asyncio.run(closed_loop(url, bodies(texts[:64], model), 8, 1.0))  # warm up, not measured
            for clients in CLIENTS:
                ctx.say(f"  embeddings: {name}, {clients} clients")
                runs.append({"target": name, **run(url, model, texts, mean_tokens, clients, ctx.duration, servers)})
            ctx.say(f"  embeddings: {name}, 32 clients with lists")
            runs.append({"target": name, **run(url, model, texts, mean_tokens, 32, ctx.duration, servers, lists=True)})
        # The same at one torch thread (OMP_NUM_THREADS=1, as a pod with one CPU would run):
        # torch's second thread spins after each forward on the cores the gateway needs.
        kserve_one = Script(ctx.log_dir, "kserve-openai-1-thread", "kserve-openai", "kserve_openai_server.py",
                            "--http-port", str(free_port()), "--grpc-port", str(free_port()),
                            env={"OMP_NUM_THREADS": "1"}).start()
        started.append(kserve_one)
        one_url = f"http://127.0.0.1:{kserve_one.port('http')}"
        to_one = Gateway(ctx.log_dir, "gateway-kserve-1-thread", [{
            "name": "bge", "backend": "kserve", "api": "openai", "url": one_url, "backend_model": MODEL,
            "embeddings": embeddings_table, "batching": BATCHING}]).start()
        started.append(to_one)
        one_thread: list[tuple[str, str, str, list[Server]]] = [
            ("KServe alone, 1 torch thread", f"{one_url}/openai/v1/embeddings", MODEL, [kserve_one]),
            ("gateway -> KServe, 1 torch thread", f"{to_one.http_url}/v1/embeddings", "bge", [to_one, kserve_one])]
        for name, url, model, servers in one_thread:
            asyncio.run(closed_loop(url, bodies(texts[:64], model), 8, 1.0))
            for clients in (1, 32):
                ctx.say(f"  embeddings: {name}, {clients} clients")
                runs.append({"target": name, **run(url, model, texts, mean_tokens, clients, ctx.duration, servers)})
        repeats = repeated(texts)
        repeats_tokens = sum(repeated(tokens)) / len(repeats)
        for deduplicate in (True, False):
            name = f"gateway -> KServe, repeats, deduplicate {'on' if deduplicate else 'off'}"
            with Gateway(ctx.log_dir, f"gateway-kserve-dedupe-{deduplicate}".lower(), [{
                    "name": "bge", "backend": "kserve", "api": "openai", "url": kserve_url, "backend_model": MODEL,
                    "embeddings": {**embeddings_table, "deduplicate": deduplicate}, "batching": BATCHING}]).start() as gw:
                ctx.say(f"  embeddings: {name}")
                started.append(gw)
                url = f"{gw.http_url}/v1/embeddings"
                asyncio.run(closed_loop(url, bodies(repeats[:64], "bge"), 8, 1.0))
                runs.append({"target": name, **run(url, "bge", repeats, repeats_tokens, 32, ctx.duration,
                                                    [gw, kserve])})
                started.remove(gw)
    finally:
        for running in reversed(started):
            running.stop()
        started.clear()
    return report(runs, ctx, mean_tokens)


def repeated(items: list[Any], pool: int = 32) -> list[Any]:
    """Every other text (or its tokens) from a pool of `pool`: what a search front end asks
    again and again."""
    return [items[i % pool] if i % 2 else items[pool + i] for i in range(len(items) - pool)]


def report(runs: list[dict[str, Any]], ctx: Context, mean_tokens: float) -> dict[str, Any]:
    def row(target: str, clients: Any) -> dict[str, Any]:
        return next(r for r in runs if r["target"] == target and r["clients"] == clients)

    alone, gateway, infinity = (row(t, "32") for t in ("KServe alone", "gateway -> KServe", "Infinity alone"))
    one_alone, one_gateway = row("KServe alone", "1"), row("gateway -> KServe", "1")
    versus_kserve = gateway["texts_s"] / max(alone["texts_s"], 1e-9)
    versus_infinity = gateway["tokens_s"] / max(infinity["tokens_s"], 1e-9)
    added_ms = one_gateway["p50_ms"] - one_alone["p50_ms"]
    dedupe_on, dedupe_off = (next(r for r in runs if r["target"].endswith(f"deduplicate {state}"))
                             for state in ("on", "off"))
    one_thread_alone, one_thread_gateway = (row(t, clients) for t, clients in (
        ("KServe alone, 1 torch thread", "1"), ("gateway -> KServe, 1 torch thread", "1")))
    one_thread_32 = (row("gateway -> KServe, 1 torch thread", "32")["texts_s"]
                     / max(row("KServe alone, 1 torch thread", "32")["texts_s"], 1e-9))
    checks = [
        check("32 clients: gateway -> KServe vs KServe alone, texts/s", ">= 4x", f"{versus_kserve:.2f}x",
              versus_kserve >= 4),
        check("the same at 1 torch thread", "", f"{one_thread_32:.2f}x", None),
        check("32 clients: p99, gateway -> KServe vs KServe alone", "no worse",
              f"{gateway['p99_ms']:.0f} vs {alone['p99_ms']:.0f} ms", gateway["p99_ms"] <= alone["p99_ms"]),
        check("32 clients: gateway -> KServe vs Infinity alone, tokens/s", ">= 1.0x", f"{versus_infinity:.2f}x",
              versus_infinity >= 1.0),
        check("32 clients: p99, gateway -> KServe vs Infinity alone", "no worse",
              f"{gateway['p99_ms']:.0f} vs {infinity['p99_ms']:.0f} ms", gateway["p99_ms"] <= infinity["p99_ms"]),
        check("1 client: p50 added by the gateway", "<= +1 ms", f"{added_ms:+.2f} ms", added_ms <= 1.0),
        check("the same at 1 torch thread", "",
              f"{one_thread_gateway['p50_ms'] - one_thread_alone['p50_ms']:+.2f} ms", None),
        check("repeated texts: deduplicate on vs off, texts/s", "", f"{dedupe_on['texts_s'] / max(dedupe_off['texts_s'], 1e-9):.2f}x",
              None),
    ]
    cpu_columns = sorted({key for r in runs for key in r if key.startswith("cpu_ms:")})
    return {
        "title": "Embeddings: KServe alone, the gateway in front of KServe and of Triton, Infinity alone",
        "setup": f"The tests' encoder (2-layer BERT, hidden 128, random weights built in code, mean pooling, "
                 f"normalised) on the CPU of this 2-core machine, shared by the load, the gateway and the "
                 f"predictor. Texts of log-normal length 8..256 tokens (mean {mean_tokens:.0f} by the model's "
                 f"tokenizer), one per request; the mix has a quarter of the 32 clients sending lists of "
                 f"{LIST_SIZE}. Closed-loop aiohttp clients for {ctx.duration:g} s after 1 s of warm-up. Gateway: "
                 f"max_batch_size 32, max_batch_tokens 16384, buckets {BUCKETS}, max_inflight auto, the "
                 f"model's tokenizer.json. "
                 f"Infinity: its own batching, batch size 32. CPU per text: each process group's user+system "
                 f"time over the run divided by the texts answered (the load generator's too).",
        "tables": [{"title": "", "rows": runs, "columns": [
            ["target", "target", "s"], ["clients", "clients", "s"], ["texts_s", "texts/s", ".0f"],
            ["tokens_s", "tokens/s", ".0f"], ["p50_ms", "p50 ms", ".1f"], ["p99_ms", "p99 ms", ".1f"],
            ["list_p99_ms", "lists p99 ms", ".0f"], ["path_cpu_ms", "path CPU ms/text", ".2f"],
            *[[key, f"{key.split(':', 1)[1]} ms/text", ".2f"] for key in cpu_columns],
            ["load_cpu_ms", "load ms/text", ".2f"], ["errors", "errors", "d"]]}],
        "checks": checks, "runs": runs, "plots": {},
    }
