"""The `shared-quotas` scenario of `python -m tools.bench`: tenants' quotas held together by
three gateway replicas in one Redis (`[shared]`, issue 47, docs/tenants.md "Many replicas,
one set of quotas"). Debian's `redis-server` on a free port of 127.0.0.1, three gateway
processes naming it, each with its own ports, the load spread over them as a Service
would.

* **Rate**: a tenant at `requests_per_second = 30` offered 90/s (30/s at each replica, open
  loop) for the duration: what is answered, against 30/s plus one burst (the bucket, 30, and
  the slices the replicas may hold, 3 x 3).
* **Concurrency**: `max_concurrent = 3`, 9 requests at once (3 a replica) to a model that
  answers in 500 ms: how many are answered, and how soon the rest are refused.
* **Redis away**: a tenant without quotas and the rate tenant under load while Redis is
  stopped a third of the way in and started again at two thirds: the quota-less tenant's
  5xx, the rate tenant's answered rate while away (held locally: up to 3 x 30/s), and how
  long after Redis is back until every replica says it is shared again
  (`gateway_shared_quotas_available`, polled every 50 ms).
* **Tokens**: 64 concurrent requests from one key against `tokens_per_minute`, embeddings
  and rerank, spread over the replicas: the tokens let in (`gateway_tenant_tokens_total`,
  summed) against the bucket's bound (capacity + rate x the seconds it took): overshoot.
* **Cost**: one gateway with `[shared]` against the same gateway without it, a tenant
  with a quota it never reaches, 32 closed-loop clients on a free predictor (the
  gateway-bound load), interleaved rounds: CPU per request and p50 (the median of each
  round's difference, at 32 clients and at one); and the quota path's own CPU, timed here.

It holds this scenario only; the harness (servers, load, checks) is `tools.bench.harness`'.
It must not import another scenario.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import hashlib
import json
import statistics
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from gateway.batching.config import TenantPolicy
from gateway.batching.tenant_quotas import Tenants
from gateway.config.shared import SharedConfig
from gateway.shared.store import RedisQuotas
from tools import loadgen
from tools.bench.harness import V1_BODY, Context, Gateway, check
from tools.processes import RedisProcess

FREE = {"name": "free", "backend": "simulated", "simulated": {"call_ms": 0}, "batching": {"max_batch_size": 32}}
SLOW = {"name": "slow", "backend": "simulated", "simulated": {"call_ms": 500}, "batching": {"max_batch_size": 32}}
EMBED = {"name": "embed", "backend": "simulated", "simulated": {"task": "embed", "call_ms": 2}}
RERANK = {"name": "rerank", "backend": "simulated", "simulated": {"task": "rerank", "call_ms": 2}}
RATE = 30
TOKENS_PER_MINUTE = 3000
TEXT = "the gateway batches many small embedding requests into one forward of the model"


def key(name: str) -> str:
    return f"bench-shared-key-{name}"


def tenant(name: str, **quotas: Any) -> dict[str, Any]:
    return {"name": name, "key_sha256": [hashlib.sha256(key(name).encode()).hexdigest()], **quotas}


TENANTS = [tenant("paced", requests_per_second=RATE), tenant("conc", max_concurrent=3),
           tenant("tok-embed", tokens_per_minute=TOKENS_PER_MINUTE),
           tenant("tok-rerank", tokens_per_minute=TOKENS_PER_MINUTE),
           tenant("unreached", requests_per_second=100_000), tenant("free")]


def start_gateway(ctx: Context, name: str, redis: RedisProcess | None, prefix: str) -> Gateway:
    gateway = Gateway(ctx.log_dir, name, [FREE, SLOW, EMBED, RERANK], tenants=TENANTS)
    if redis is not None:  # the harness writes no [shared]: appended to its config
        gateway.config_path.write_text(gateway.config_path.read_text() +
                                       f'\n[shared]\nurl = "{redis.url}"\nkey_prefix = "{prefix}"\n')
    return gateway.start()


def post(url: str, body: bytes, who: str, timeout: float = 30) -> int:
    request = urllib.request.Request(url, body, {"Content-Type": "application/json",
                                                 "Authorization": f"Bearer {key(who)}"})
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=timeout) as answer:
            answer.read()
            return int(answer.status)
    except urllib.error.HTTPError as error:
        error.read()
        return int(error.code)


def sample(gateway: Gateway, line_start: str) -> float | None:
    """The value of the /metrics sample whose line starts with `line_start`."""
    request = urllib.request.Request(f"{gateway.http_url}/metrics", headers={"Authorization": f"Bearer {key('free')}"})
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=10) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith(line_start):
                return float(line.rsplit(" ", 1)[1])
    return None


def v1_load(gateway: Gateway, who: str, *, duration: float, rate: float | None = None,
            clients: int = 1, model: str = "free") -> loadgen.Config:
    return loadgen.Config(target=f"{gateway.http_url}/v1/models/{model}:predict", body=V1_BODY, method="POST",
                          headers=(("Authorization", f"Bearer {key(who)}"),),
                          concurrency=clients if rate is None else 64, rate=rate, duration=duration, timeout=30,
                          engine="aiohttp")


def run_loads(*configs: loadgen.Config) -> list[loadgen.Result]:
    async def together() -> list[loadgen.Result]:
        return list(await asyncio.gather(*(loadgen.run(config.validate()) for config in configs)))
    return asyncio.run(together())


def shared_quotas(ctx: Context) -> dict[str, Any]:
    """Rate, concurrency, Redis away, tokens and cost (see the module)."""
    runs: list[dict[str, Any]] = []
    duration = max(ctx.duration, 10.0)
    redis = RedisProcess(log_path=ctx.log_dir / "redis.log").start()
    prefix = f"bench-{int(time.time())}"
    replicas: list[Gateway] = []
    try:
        replicas = [start_gateway(ctx, f"gateway-shared-{n}", redis, prefix) for n in range(3)]
        rate = _rate(ctx, replicas, duration, runs)
        concurrency = _concurrency(ctx, replicas, runs)
        tokens = _tokens(ctx, replicas, runs)
        away = _redis_away(ctx, replicas, redis, duration, runs)
        redis = away.pop("redis")
    finally:
        for gateway in replicas:
            gateway.stop()
        redis.stop()
    cost = _cost(ctx, duration, runs)
    bound = RATE * duration + RATE + 9
    checks = [
        check("3 replicas, 30/s offered 90/s: answered", f"<= 30/s + one burst ({bound:.0f} in {duration:g} s)",
              f"{rate['answered']} ({rate['answered'] / duration:.1f}/s)", rate["answered"] <= bound),
        check("... and at least 90% of 30/s", f">= {0.9 * RATE * duration:.0f}", f"{rate['answered']}",
              rate["answered"] >= 0.9 * RATE * duration),
        check("max_concurrent = 3 over 3 replicas, 9 at once", "<= 3 answered, the rest refused at once",
              f"{concurrency['answered']} answered, {concurrency['refused']} refused in at most "
              f"{concurrency['slowest_refusal_ms']:.0f} ms", concurrency["answered"] <= 3
              and concurrency["refused"] == 9 - concurrency["answered"] and concurrency["slowest_refusal_ms"] < 250),
        check("Redis stopped: 5xx for a tenant without quotas", "0", f"{away['free_5xx']}", away["free_5xx"] == 0),
        check("Redis started again: every replica shared again", "within 5 s", f"{away['back_s']:.2f} s",
              away["back_s"] <= 5),
        check("64 concurrent, embeddings: token overshoot", "0", f"{tokens['embeddings']['overshoot']:.0f}",
              tokens["embeddings"]["overshoot"] <= 0),
        check("64 concurrent, rerank: token overshoot", "0", f"{tokens['rerank']['overshoot']:.0f}",
              tokens["rerank"]["overshoot"] <= 0),
        check("cost: CPU per request with [shared]", "<= +20 us",
              f"{cost['cpu_delta_us']:+.1f} us on the quota path (the gateway's whole CPU: "
              f"{cost['whole_cpu_delta_us']:+.0f} us, within its run-to-run spread here)", cost["cpu_delta_us"] <= 20),
        check("cost: p50 with [shared], gateway-bound (32 clients)", "<= +0.1 ms",
              f"{cost['p50_delta_ms']:+.3f} ms (rounds spread {cost['p50 spread between rounds (32 clients)']:.1f} ms)",
              cost["p50_delta_ms"] <= 0.1),
        check("cost: p50 added at one client", "<= +0.1 ms", f"{cost['p50_one_client_delta_ms']:+.3f} ms",
              cost["p50_one_client_delta_ms"] <= 0.1),
    ]
    return {
        "title": "Shared quotas: three replicas, one Redis",
        "setup": (f"Debian's redis-server and three gateway processes naming it ([shared]), on this machine. Rate: "
                  f"requests_per_second = {RATE}, offered 30/s at each replica (Poisson) for {duration:g} s. "
                  f"Concurrency: max_concurrent = 3, 9 requests at once to a 500 ms model. Tokens: "
                  f"tokens_per_minute = {TOKENS_PER_MINUTE}, 64 requests at once. Redis away: stopped at a third "
                  f"of {duration:g} s, started at two thirds. Cost: one gateway with and without [shared], a "
                  f"quota never reached, 32 clients on a free predictor, {max(3, ctx.repeat)} interleaved rounds."),
        "tables": [
            {"title": "Rate across replicas", "columns": [["name", "figure", ""], ["value", "value", ".1f"]],
             "rows": [{"name": name, "value": value} for name, value in rate.items()]},
            {"title": "max_concurrent across replicas", "columns": [["name", "figure", ""],
                                                                    ["value", "value", ".1f"]],
             "rows": [{"name": name, "value": value} for name, value in concurrency.items()]},
            {"title": "Redis away and back", "columns": [["name", "figure", ""], ["value", "value", ".2f"]],
             "rows": [{"name": name, "value": value} for name, value in away.items()]},
            {"title": "Tokens under 64 concurrent requests", "columns": [
                ["name", "route", ""], ["admitted", "tokens let in", ".0f"], ["bound", "bucket's bound", ".0f"],
                ["overshoot", "overshoot", ".0f"], ["answered", "answered", ".0f"], ["refused", "429", ".0f"]],
             "rows": [{"name": name, **figures} for name, figures in tokens.items()]},
            {"title": "Cost at the gateway-bound load", "columns": [["name", "figure", ""],
                                                                   ["value", "value", ".3f"]],
             "rows": [{"name": name, "value": value} for name, value in cost.items()]},
        ],
        "checks": checks, "runs": runs, "plots": {},
    }


def _rate(ctx: Context, replicas: list[Gateway], duration: float, runs: list[dict[str, Any]]) -> dict[str, float]:
    ctx.say(f"  shared-quotas: {RATE}/s offered 90/s over three replicas")
    results = run_loads(*(v1_load(gateway, "paced", duration=duration, rate=RATE) for gateway in replicas))
    answered = sum(result.statuses.get("200", 0) for result in results)
    refused = sum(result.statuses.get("429", 0) for result in results)
    out = {"offered": float(sum(result.sent for result in results)), "answered": float(answered),
           "refused 429": float(refused), "answered per s": answered / duration,
           "answered at each replica (min)": float(min(result.statuses.get("200", 0) for result in results))}
    runs.append({"name": "rate", **out})
    return out


def _concurrency(ctx: Context, replicas: list[Gateway], runs: list[dict[str, Any]]) -> dict[str, float]:
    ctx.say("  shared-quotas: max_concurrent = 3, 9 at once over three replicas")
    barrier = threading.Barrier(9)

    def one(n: int) -> tuple[int, float]:
        barrier.wait()
        started = time.monotonic()
        status = post(f"{replicas[n % 3].http_url}/v1/models/slow:predict", V1_BODY, "conc")
        return status, time.monotonic() - started

    with concurrent.futures.ThreadPoolExecutor(9) as pool:
        outcomes = list(pool.map(one, range(9)))
    refusals = [seconds for status, seconds in outcomes if status == 429]
    out = {"answered": float(sum(status == 200 for status, _ in outcomes)), "refused": float(len(refusals)),
           "slowest_refusal_ms": 1000 * max(refusals, default=0.0),
           "other statuses": float(sum(status not in (200, 429) for status, _ in outcomes))}
    runs.append({"name": "concurrency", **out})
    return out


def _tokens(ctx: Context, replicas: list[Gateway], runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    routes = {"embeddings": ("tok-embed", "/v1/embeddings", {"model": "embed", "input": [TEXT] * 4}),
              "rerank": ("tok-rerank", "/v2/rerank", {"model": "rerank", "query": "which batches",
                                                       "documents": [TEXT] * 4})}
    for route, (who, path, document) in routes.items():
        ctx.say(f"  shared-quotas: 64 concurrent {route} requests against tokens_per_minute")
        body = json.dumps(document).encode()
        barrier = threading.Barrier(64)

        def one(n: int, path: str = path, who: str = who, body: bytes = body,
                barrier: threading.Barrier = barrier) -> int:
            barrier.wait()  # all 64 at once
            return post(f"{replicas[n % 3].http_url}{path}", body, who)

        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(64) as pool:
            statuses = list(pool.map(one, range(64)))
        elapsed = time.monotonic() - started
        admitted = sum(sample(gateway, f'gateway_tenant_tokens_total{{tenant="{who}"}}') or 0.0
                       for gateway in replicas)
        bound = TOKENS_PER_MINUTE + TOKENS_PER_MINUTE / 60 * elapsed
        out[route] = {"admitted": admitted, "bound": bound, "overshoot": max(0.0, admitted - bound),
                      "answered": float(statuses.count(200)), "refused": float(statuses.count(429)),
                      "seconds": elapsed}
        runs.append({"name": f"tokens {route}", **out[route]})
    return out


def _redis_away(ctx: Context, replicas: list[Gateway], redis: RedisProcess, duration: float,
                runs: list[dict[str, Any]]) -> dict[str, Any]:
    ctx.say("  shared-quotas: Redis stopped and started again under load")
    results: list[loadgen.Result] = []
    loads = [*(v1_load(gateway, "free", duration=duration, clients=4) for gateway in replicas),
             *(v1_load(gateway, "paced", duration=duration, rate=RATE) for gateway in replicas)]
    worker = threading.Thread(target=lambda: results.extend(run_loads(*loads)))
    started = time.monotonic()
    worker.start()
    time.sleep(duration / 3)
    redis.stop()
    stopped_at = time.monotonic()
    away_seen = len(_wait_all(replicas, 0.0, duration / 3)) == len(replicas)
    time.sleep(max(0.0, started + 2 * duration / 3 - time.monotonic()))
    back = RedisProcess(redis.redis_port, log_path=ctx.log_dir / "redis-again.log").start()
    back_at = time.monotonic()
    shared_again = _wait_all(replicas, 1.0, 30.0)
    back_s = time.monotonic() - back_at if len(shared_again) == len(replicas) else float("inf")
    worker.join()
    free, paced = results[:3], results[3:]
    out = {"free requests": float(sum(result.sent for result in free)),
           "free_5xx": float(sum(count for result in free for status, count in result.statuses.items()
                                 if status.startswith("5")) + sum(result.transport_errors for result in free)),
           "paced answered per s over the run": sum(result.statuses.get("200", 0) for result in paced) / duration,
           "every replica said away": float(away_seen), "away for s": back_at - stopped_at, "back_s": back_s,
           "redis": back}
    runs.append({"name": "redis away", **{k: v for k, v in out.items() if k != "redis"}})
    return out


def _available(gateway: Gateway) -> float | None:
    return sample(gateway, "gateway_shared_quotas_available ")


def _wait_all(replicas: list[Gateway], value: float, limit_s: float) -> list[Gateway]:
    """Poll every 50 ms until every replica's gauge says `value` (at most `limit_s`); those that do."""
    deadline = time.monotonic() + limit_s
    while True:
        there = [gateway for gateway in replicas if _available(gateway) == value]
        if len(there) == len(replicas) or time.monotonic() > deadline:
            return there
        time.sleep(0.05)


def _cost(ctx: Context, duration: float, runs: list[dict[str, Any]]) -> dict[str, float]:
    redis = RedisProcess(log_path=ctx.log_dir / "redis-cost.log").start()
    gateways: dict[str, Gateway] = {}
    measured: dict[str, dict[str, list[float]]] = {}
    try:
        gateways = {"without": start_gateway(ctx, "gateway-cost-alone", None, ""),
                    "with": start_gateway(ctx, "gateway-cost-shared", redis, f"bench-cost-{int(time.time())}")}
        loads = {name: v1_load(gateway, "unreached", duration=min(duration, 10.0), clients=32)
                 for name, gateway in gateways.items()}
        for config in loads.values():
            run_loads(dataclasses.replace(config, duration=1.0))  # warm up, not counted
        measured = {name: {"cpu_us": [], "p50_ms": [], "p50_one_client_ms": []} for name in gateways}
        for round_ in range(max(3, ctx.repeat)):
            # Interleaved, and in turn first: what drifts on a shared machine weighs on both alike.
            for name in (("without", "with") if round_ % 2 == 0 else ("with", "without")):
                gateway = gateways[name]
                ctx.say(f"  shared-quotas: cost, {name} [shared], round {round_ + 1}")
                before = gateway.cpu_seconds()
                (result,) = run_loads(loads[name])
                ok = max(result.statuses.get("200", 0), 1)
                measured[name]["cpu_us"].append((gateway.cpu_seconds() - before) / ok * 1e6)
                measured[name]["p50_ms"].append(1000 * statistics.median(result.latencies))
                # One client: the latency [shared] adds, unblurred by the queueing of 32 clients.
                (alone,) = run_loads(dataclasses.replace(loads[name], concurrency=1, duration=3.0))
                measured[name]["p50_one_client_ms"].append(1000 * statistics.median(alone.latencies))
    finally:
        for gateway in gateways.values():
            gateway.stop()
        redis.stop()
    runs.append({"name": "cost", **measured})
    cpu = {name: statistics.median(values["cpu_us"]) for name, values in measured.items()}
    p50 = {name: statistics.median(values["p50_ms"]) for name, values in measured.items()}
    one_client = {name: statistics.median(values["p50_one_client_ms"]) for name, values in measured.items()}
    spread = max(max(values["p50_ms"]) - min(values["p50_ms"]) for values in measured.values())

    def paired(figure: str) -> float:
        """The median of each round's difference: the two ran side by side in it."""
        return statistics.median(a - b for a, b in zip(measured["with"][figure], measured["without"][figure],
                                                        strict=True))

    path = asyncio.run(_quota_path_us())
    return {"CPU us/req without [shared]": cpu["without"], "CPU us/req with [shared]": cpu["with"],
            "whole_cpu_delta_us": cpu["with"] - cpu["without"], "p50 ms without (32 clients)": p50["without"],
            "p50 ms with (32 clients)": p50["with"], "p50_delta_ms": paired("p50_ms"),
            "p50 spread between rounds (32 clients)": spread,
            "p50 ms without (1 client)": one_client["without"], "p50 ms with (1 client)": one_client["with"],
            "p50_one_client_delta_ms": paired("p50_one_client_ms"),
            "quota path us/req, local": path["local"], "quota path us/req, shared": path["shared"],
            "cpu_delta_us": path["shared"] - path["local"]}


async def _quota_path_us(requests: int = 100_000) -> dict[str, float]:
    """CPU per request of the quota path alone (admitted, its state read for the answer's
    headers, answered), timed in this process, with the tenant's buckets local and leased
    from a real Redis: the gateway's whole CPU per request moves between runs on this shared
    machine by more than the microseconds it costs."""
    loop = asyncio.get_running_loop()
    out: dict[str, list[float]] = {"local": [], "shared": []}
    with RedisProcess().start() as redis:
        for _ in range(3):
            for mode in out:
                tenants = Tenants()
                tenants.update([TenantPolicy("t", requests_per_second=100_000)], loop.time())
                store = None
                if mode == "shared":
                    store = RedisQuotas(SharedConfig(url=redis.url, key_prefix=f"path-{time.time_ns()}"), loop)
                    await store.start()
                    tenants.share(store)
                started = time.process_time()
                for n in range(requests):
                    admitted = tenants.take_quota("t", 1, loop.time())
                    if not isinstance(admitted, bool):
                        await admitted  # a lease: once a slice
                    tenants.state("t", loop.time())
                    tenants.answered("t", 200)
                    if n % 1000 == 0:
                        await asyncio.sleep(0)  # the background leases run
                out[mode].append((time.process_time() - started) / requests * 1e6)
                if store is not None:
                    await store.close()
    return {mode: statistics.median(values) for mode, values in out.items()}
