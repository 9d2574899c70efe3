"""A hey/ghz-style load generator for HTTP and gRPC endpoints.

    python -m tools.loadgen URL [options]                      # HTTP, like hey
    python -m tools.loadgen HOST:PORT --grpc --call pkg.Service/Method -d JSON   # gRPC, like ghz

Load models
-----------
* Closed loop (default): `-c` workers, each sending its next request as soon as the previous
  one is answered, until `-n` requests have been sent and answered or `-z` has elapsed.
* Open loop (`--rate R`): requests arrive at R per second (Poisson arrivals by default,
  `--arrivals uniform`, or `--arrivals bursty`: Poisson at 2R for half of each second and
  none for the other half, R on average), whatever the server's speed; `-c` is then the most requests in
  flight at once. An arrival that finds `-c` requests in flight is not sent and is counted
  as *dropped*; one that the generator itself sends more than `--late-ms` after its
  scheduled time is sent and counted as *late* (the generator could not keep up).

Every run is bounded: by `-n` (default 200, like hey, when neither `-n` nor `-z` is given)
and/or by `-z`. When `-z` elapses, requests still in flight are abandoned and counted as
*unfinished* (not in the latency figures). Each request also has a timeout (`-t`).

HTTP engines: `fast` (default for http://) is a lean keep-alive HTTP/1.1 client on
asyncio.Protocol (one prebuilt request, one connection per worker), about 4x cheaper per
request than aiohttp; `aiohttp` (default for https://, or `--engine aiohttp`) is the
general-purpose client. gRPC uses grpc.aio with the request serialised once from JSON by
the project's generated descriptors (`google.protobuf.json_format`), answers left
undecoded. `--processes N` runs N generator processes (the load split between them) and
merges their results, when one process is the bottleneck.

Statistics: latencies of every answered request (any HTTP status or gRPC code; transport
failures have none), percentiles by the nearest-rank method, a hey-style histogram, the
status distribution and the error distribution (HTTP >= 400 answers with a snippet of
their body, gRPC non-OK codes with their details, transport failures).

Python API (what tools/bench/harness.py uses):

    result = await tools.loadgen.run(tools.loadgen.Config(target=url, ...))
    print(result.format_report()); result.to_dict()

Modules, one concern each: `config` (Config), `stats` (percentiles, histogram), `report`
(Result and its renderings), `http_client` (the fast engine's HTTP/1.1 connection),
`engines` (the Engine interface in `engines.base`; fast HTTP, aiohttp, gRPC), `runner`
(closed and open loops, Live), `progress` (the bar), `multiprocess` (several generator
processes), `api` (run), `cli` (flags, report, JSON). This package re-exports the names
other code uses; it holds no logic of its own.
"""
from __future__ import annotations

from tools.loadgen.api import run
from tools.loadgen.cli import build_parser, config_from_args, main, parse_duration, write_json
from tools.loadgen.config import (
    DEFAULT_CONCURRENCY,
    DEFAULT_OPEN_LOOP_CONCURRENCY,
    DEFAULT_REQUESTS,
    Config,
)
from tools.loadgen.engines import Engine, grpc_method, grpc_payload, make_engine
from tools.loadgen.report import Result
from tools.loadgen.runner import Live
from tools.loadgen.stats import PERCENTILES, histogram, percentile, percentiles

__all__ = [
    "DEFAULT_CONCURRENCY", "DEFAULT_OPEN_LOOP_CONCURRENCY", "DEFAULT_REQUESTS", "PERCENTILES",
    "Config", "Engine", "Live", "Result",
    "build_parser", "config_from_args", "grpc_method", "grpc_payload", "histogram", "main", "make_engine",
    "parse_duration", "percentile", "percentiles", "run", "write_json",
]
