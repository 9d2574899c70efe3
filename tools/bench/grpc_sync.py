"""A gateway process whose OIP `ModelInfer` is also served by grpc's synchronous server,
for the `grpc-transports` scenario: what it would cost to take gRPC requests on a thread
pool and hand each into the gateway's event loop, against the grpc.aio servicer the
gateway serves today (`gateway/grpc/oip.py`), in the same process and on the same
scheduler.

The synchronous side takes the message as raw bytes, parses it on its thread, hands it to
the loop (`asyncio.run_coroutine_threadsafe`) where the gateway's own servicer code answers
it (`InferenceServicer._infer`, with its Call opened and closed as `@rpc` does), and
serializes the answer on its thread. A prototype of the transport only: no keys, no
streams, no compression, no reflection.

    python -m tools.bench.grpc_sync CONFIG.toml --threads 8
    # prints: READY http=... grpc=... sync=<port>; stops on SIGTERM/SIGINT

It must not know the harness or the scenarios: the harness starts it by its module name.
"""
from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import signal
import sys
from typing import Any

import grpc

from gateway import config as gateway_config
from gateway.grpc.oip import InferenceServicer
from gateway.grpc.rpc import OpenStreams
from gateway.process.server import Gateway
from wire.errors import GatewayError
from wire.generated.inference import grpc_service_pb2 as pb

METHOD = "/inference.GRPCInferenceService/ModelInfer"


class SyncModelInfer(grpc.GenericRpcHandler):
    """`ModelInfer` on grpc's thread pool, answered on the gateway's loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, servicer: InferenceServicer) -> None:
        self.loop = loop
        self.servicer = servicer

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        if handler_call_details.method != METHOD:
            return None
        return grpc.unary_unary_rpc_method_handler(self._infer)  # bytes in, bytes out

    def _infer(self, data: bytes, context: grpc.ServicerContext) -> bytes:
        request = pb.ModelInferRequest.FromString(data)
        try:
            answer = asyncio.run_coroutine_threadsafe(self._answer(request, context.time_remaining()), self.loop)
            return answer.result().SerializeToString()
        except GatewayError as error:
            context.abort(grpc.StatusCode[error.grpc_code], error.message)
            raise  # abort raises; this is never reached

    async def _answer(self, request: pb.ModelInferRequest, remaining: float | None) -> Any:
        service = self.servicer.service
        call = service.open("oip_grpc", request.model_name)
        status = 200
        try:
            call.tighten(remaining)
            return await self.servicer._infer(request, call)
        except GatewayError as error:
            status = error.http_status
            raise
        finally:
            call.close(status)


async def serve(config_path: str, threads: int) -> None:
    config = gateway_config.load(config_path)
    gateway = Gateway(config)
    await gateway.start()
    loop = asyncio.get_running_loop()
    assert gateway.service is not None  # started
    servicer = InferenceServicer(gateway.service, config.limits, OpenStreams())
    sync_server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=threads),
                              handlers=[SyncModelInfer(loop, servicer)],
                              options=[("grpc.so_reuseport", 0),
                                       ("grpc.max_receive_message_length", config.limits.max_body_bytes)])
    sync_port = sync_server.add_insecure_port("127.0.0.1:0")
    sync_server.start()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(f"READY http=127.0.0.1:{gateway.http_port} grpc=127.0.0.1:{gateway.grpc_port} sync=127.0.0.1:{sync_port}",
          flush=True)
    try:
        await stop.wait()
    finally:
        sync_server.stop(0.5)
        await gateway.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.grpc_sync", description=__doc__.split("\n\n")[0])
    parser.add_argument("config")
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.config, args.threads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
