"""A worker process of `serve --workers N` (started by `gateway.workers.supervisor`).

It serves both front ends on the gateway's ports (shared with the other workers) as one
gateway process does, with the batcher's scheduler in place of its own (`serve` with a
batcher socket): `python -m gateway.workers.worker CONFIG_PICKLE BATCHER_SOCKET ...`.
It prints READY like the gateway, for the supervisor; it stops on SIGTERM (draining) or
when the batcher has gone, and reloads its models on SIGHUP.

It knows the command line the supervisor gives it and `gateway.server.serve`.
"""
from __future__ import annotations

import argparse
import pickle

from gateway import logs
from gateway.cli import event_loop_runner
from gateway.config import GatewayConfig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="batching-gateway worker")
    parser.add_argument("config", help="the pickled GatewayConfig the supervisor wrote")
    parser.add_argument("batcher", help="the batcher's Unix socket")
    parser.add_argument("--config-path", help="the config file, re-read on SIGHUP")
    parser.add_argument("--loop", default="asyncio")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--log-format", default="text")
    args = parser.parse_args(argv)
    with open(args.config, "rb") as handle:
        config: GatewayConfig = pickle.load(handle)  # written by our own supervisor, in its private directory
    logs.configure(args.log_level, args.log_format)
    from gateway.server import serve
    with event_loop_runner(args.loop) as runner:
        runner.run(serve(config, args.config_path, args.batcher))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
