"""The command line: `python -m tools.loadgen URL [options]`, like hey (HTTP) or ghz (gRPC).

Flags to a validated Config, the run, then the text report on stdout and/or the JSON
document (`--json`). It must not know how a run is carried out beyond `api.run`.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys

from tools.loadgen.api import run
from tools.loadgen.config import (
    ARRIVALS,
    DEFAULT_CONCURRENCY,
    DEFAULT_OPEN_LOOP_CONCURRENCY,
    DEFAULT_REQUESTS,
    ENGINES,
    Config,
)
from tools.loadgen.engines.grpc_engine import grpc_payload
from tools.loadgen.report import Result


def parse_duration(text: str) -> float:
    """`10s`, `500ms`, `2m`, `1h`, or plain seconds."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h)?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 10s, 500ms, 2m)")
    value = float(match.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[match.group(2)]
    if value <= 0:
        raise argparse.ArgumentTypeError("a duration must be > 0")
    return value


def parse_header(text: str) -> tuple[str, str]:
    """`Name: value` -> (name, value)."""
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"a header looks like 'Name: value', got {text!r}")
    return name.strip(), value.strip()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tools.loadgen",
        description="hey/ghz-style load generator: closed loop (-c workers) or open loop (--rate), "
                    "HTTP or gRPC, always bounded by -n and/or -z.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  python -m tools.loadgen -z 10s -c 5 -m POST -d '{\"instances\": [[1,2,3,4]]}' \\\n"
               "      http://127.0.0.1:8080/v1/models/demo:predict\n"
               "  python -m tools.loadgen --grpc --call inference.GRPCInferenceService/ModelInfer -c 16 -n 5000 \\\n"
               "      -d '{\"model_name\":\"demo\",\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\","
               "\"shape\":[1,4],\"contents\":{\"fp32_contents\":[1,2,3,4]}}]}' 127.0.0.1:8081\n"
               "  python -m tools.loadgen --rate 500 -z 30s -D body.json http://127.0.0.1:8080/v1/models/demo:predict",
    )
    p.add_argument("target", help="URL (HTTP) or host:port (gRPC)")
    p.add_argument("-n", dest="requests", type=int, help=f"requests to send (default {DEFAULT_REQUESTS} without -z)")
    p.add_argument("-z", dest="duration", type=parse_duration, help="duration to send for, e.g. 10s, 500ms, 2m")
    p.add_argument("-c", dest="concurrency", type=int,
                   help=f"closed loop: concurrent workers (default {DEFAULT_CONCURRENCY}); "
                        f"open loop: most requests in flight (default {DEFAULT_OPEN_LOOP_CONCURRENCY})")
    p.add_argument("--rate", type=float, help="open loop: target arrivals per second")
    p.add_argument("--arrivals", choices=ARRIVALS, default="poisson", help="open loop arrival process")
    p.add_argument("--late-ms", type=float, default=10.0, help="open loop: a send this late is counted as late")
    p.add_argument("-t", dest="timeout", type=float, default=20.0, help="timeout of each request, seconds (default 20)")
    p.add_argument("-m", dest="method", default="", help="HTTP method (default GET, or POST with a body)")
    body = p.add_mutually_exclusive_group()
    body.add_argument("-d", dest="data", help="request body (gRPC: the request message as JSON)")
    body.add_argument("-D", dest="data_file", help="read the request body (gRPC: JSON) from this file")
    p.add_argument("-H", dest="headers", action="append", type=parse_header, default=[],
                   help="header 'Name: value' (gRPC: metadata); repeatable")
    p.add_argument("-T", dest="content_type", default="",
                   help="HTTP Content-Type (default application/json with a body)")
    p.add_argument("--disable-keepalive", action="store_true", help="HTTP: a new connection per request")
    p.add_argument("--engine", choices=ENGINES, default="auto",
                   help="HTTP client: fast (own HTTP/1.1 client; default for http://) or aiohttp (default for https://)")
    p.add_argument("--grpc", action="store_true", help="the target is a gRPC server (host:port, plaintext)")
    p.add_argument("--call", default="", help="gRPC method, e.g. inference.GRPCInferenceService/ModelInfer")
    p.add_argument("--connections", type=int, default=1, help="gRPC: channels (TCP connections) to spread calls over")
    p.add_argument("--processes", type=int, default=1, help="generator processes (the load is split between them)")
    p.add_argument("--seed", type=int, help="random seed of the open loop's arrivals")
    progress = p.add_mutually_exclusive_group()
    progress.add_argument("--progress", action="store_true", default=None,
                          help="progress bar on stderr (default: if a TTY)")
    progress.add_argument("--no-progress", dest="progress", action="store_false")
    p.add_argument("--json", dest="json_file", help="write the full result as JSON to this file ('-' for stdout)")
    p.add_argument("-q", "--quiet", action="store_true", help="do not print the summary")
    return p


def config_from_args(args: argparse.Namespace) -> Config:
    if args.data_file:
        with open(args.data_file, "rb") as handle:
            body = handle.read()
    else:
        body = (args.data or "").encode()
    requests = args.requests
    if requests is None and args.duration is None:
        requests = DEFAULT_REQUESTS
    progress = args.progress if args.progress is not None else sys.stderr.isatty()
    return Config(
        target=args.target, grpc=args.grpc, call=args.call, method=args.method, body=body,
        headers=tuple(args.headers), content_type=args.content_type, requests=requests,
        duration=args.duration, concurrency=args.concurrency, rate=args.rate, arrivals=args.arrivals,
        late_ms=args.late_ms, timeout=args.timeout, processes=args.processes, connections=args.connections,
        engine=args.engine, keepalive=not args.disable_keepalive, progress=progress, seed=args.seed,
    ).validate()


def write_json(result: Result, destination: str) -> None:
    """The full result as JSON, to a file or ('-') to stdout."""
    text = json.dumps(result.to_dict(), indent=2)
    if destination == "-":
        sys.stdout.write(text + "\n")
    else:
        with open(destination, "w") as handle:
            handle.write(text + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
        if config.grpc:
            grpc_payload(config.call, config.body)  # fail on a bad method or JSON before starting
    except (ValueError, OSError) as exc:
        parser.error(str(exc))
    try:
        result = asyncio.run(run(config))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    if not args.quiet and args.json_file != "-":
        print(result.format_report())
    if args.json_file:
        write_json(result, args.json_file)
    return 0
