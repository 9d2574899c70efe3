"""Command line: `batching-gateway serve` and `batching-gateway check-config FILE` (and
`worker`, which `serve --workers N` starts itself). It picks each process's role
(`gateway.process.roles`) and runs `gateway.process.server.serve` with it."""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import pickle
import signal
import sys

from gateway import config as gateway_config
from gateway.observe import logs
from gateway.telemetry.settings import resolve as resolve_tracing


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command in ("serve", "worker"):
        # Until the loop's handler takes it (a reload, once started): never the default, which kills.
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if args.command == "worker":
        return _worker(args)

    try:
        if args.command == "check-config":
            loaded = gateway_config.load(args.file)
            resolve_tracing(loaded.tracing)  # and the OTEL_* variables it would start with
            tenants = f"; {len(loaded.tenants)} tenant(s): {', '.join(t.name for t in loaded.tenants)}" \
                if loaded.tenants else ""
            print(f"{args.file}: ok ({len(loaded.models)} model(s): {', '.join(m.name for m in loaded.models)}{tenants})")
            return 0
        loaded = gateway_config.load(args.config) if args.config else gateway_config.embedded_default()
        overrides = {key: value for key, value in
                     (("host", args.host), ("http_port", args.http_port), ("grpc_port", args.grpc_port))
                     if value is not None}
        if args.workers is not None:
            overrides["workers"] = gateway_config.workers(args.workers, "--workers")
        for key in ("http_port", "grpc_port"):
            if key in overrides and not 0 <= overrides[key] <= 65535:
                raise gateway_config.ConfigError(f"--{key.replace('_', '-')}", "must be between 0 and 65535")
        loaded = dataclasses.replace(loaded, server=dataclasses.replace(loaded.server, **overrides))
        resolve_tracing(loaded.tracing)  # tracing asked for but not installed: exit 2, before anything starts
    except gateway_config.ConfigError as error:
        print(f"batching-gateway: config error: {error}", file=sys.stderr)
        return 2

    logs.configure(args.log_level, args.log_format)
    from gateway.process.server import serve as run  # imported late: check-config needs no servers
    from gateway.process.workers.batcher_role import BatcherRole
    try:
        with event_loop_runner(args.loop) as runner:
            role = None if loaded.server.workers == 1 else BatcherRole(
                loaded.server.workers, args.config, args.loop, args.log_level, args.log_format)
            runner.run(run(loaded, args.config, role))
    except (OSError, RuntimeError) as error:  # a port taken; a worker that never said READY
        print(f"batching-gateway: cannot start: {error}", file=sys.stderr)
        return 1
    return 0


def parser() -> argparse.ArgumentParser:
    """The command line: `serve`, `check-config`, and `worker` (started by `serve` itself)."""
    parser = argparse.ArgumentParser(prog="batching-gateway", description="HTTP + gRPC inference batching gateway")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the gateway (embedded demo model if no --config)")
    serve.add_argument("--config", help="TOML file listing the models to serve")
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--http-port", type=int, help="HTTP port (default 8080; 0 picks a free one)")
    serve.add_argument("--grpc-port", type=int, help="gRPC port (default 8081; 0 picks a free one)")
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                       help="DEBUG adds one line per batch")
    serve.add_argument("--log-format", default="text", choices=["text", "json"], help="json: one object per line")
    serve.add_argument("--workers", help="protocol processes batching as one: a number, or auto for the "
                                          "machine's cores (default 1, or [server] workers)")
    serve.add_argument("--loop", default="asyncio", choices=["asyncio", "uvloop", "auto"],
                       help="event loop: the standard asyncio one (default), uvloop (pip install '.[uvloop]'), "
                            "or uvloop when installed (auto)")
    check = commands.add_parser("check-config", help="validate a config file without starting")
    check.add_argument("file")
    # Started by `serve --workers N` itself (gateway.process.workers.batcher_role), not by users.
    worker = commands.add_parser("worker")
    worker.add_argument("config", help="the pickled GatewayConfig the batcher wrote")
    worker.add_argument("batcher", help="the batcher's Unix socket")
    worker.add_argument("--config-path", help="the config file, re-read on SIGHUP")
    worker.add_argument("--loop", default="asyncio")
    worker.add_argument("--log-level", default="INFO")
    worker.add_argument("--log-format", default="text")
    return parser


def _worker(args: argparse.Namespace) -> int:
    """A worker process of `serve --workers N`: the gateway with the batcher's scheduler."""
    with open(args.config, "rb") as handle:
        config: gateway_config.GatewayConfig = pickle.load(handle)  # written by our batcher, in its private directory
    from gateway.process.workers.batcher_role import TOKEN_VARIABLE  # its token travels apart from the file
    token = os.environ.pop(TOKEN_VARIABLE, "")
    config = dataclasses.replace(config, server=dataclasses.replace(config.server, auth_token=token))
    logs.configure(args.log_level, args.log_format)
    from gateway.process.server import serve
    from gateway.process.workers.worker_role import WorkerRole
    with event_loop_runner(args.loop) as runner:
        runner.run(serve(config, args.config_path, WorkerRole(args.batcher)))
    return 0


def event_loop_runner(loop: str) -> asyncio.Runner:
    """The event loop both front ends and the scheduler share: asyncio's, or uvloop's when
    `loop` asks for it ("auto": if it is installed)."""
    if loop != "asyncio":
        try:
            import uvloop
            return asyncio.Runner(loop_factory=uvloop.new_event_loop)
        except ImportError:
            if loop == "uvloop":
                raise SystemExit("batching-gateway: --loop uvloop, but uvloop is not installed") from None
    return asyncio.Runner()


if __name__ == "__main__":
    sys.exit(main())
