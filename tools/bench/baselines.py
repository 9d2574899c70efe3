"""Baseline servers for the benchmarks, each its own process on 127.0.0.1.

- `minimal`: the least a server can do for the gateway's front-end work, with no batching
  and no predictor: a MINIMAL Tornado app that parses a KServe v1 request
  (`POST /v1/models/<m>:predict`, `{"instances": [...]}`) and answers
  `{"predictions": 2 x instances, "batchId": "0"}` itself, and a minimal grpc.aio servicer of
  `inference.GRPCInferenceService/ModelInfer` that decodes INPUT0 (typed or raw contents)
  and answers OUTPUT0 = 2 x INPUT0 as raw contents. The `overhead` scenario compares the
  gateway's requests/s with these. A request for model `hold` is parsed the same way and then
  held, unanswered, until the server stops: the `memory` scenario's floor, what Tornado and
  grpc.aio themselves keep for a request that waits.
- `minimal-lean`: the same, its HTTP side on Tornado's delegate layer
  (`HTTPServerConnectionDelegate` and `HTTPMessageDelegate`, no Application, no
  RequestHandler): what a Tornado server pays at the least per request (the `cost` scenario).
- `trivial`: the cheapest possible answers, to measure the load generator's own ceiling:
  an asyncio.Protocol HTTP/1.1 server that answers every request with a fixed 200 `{}`
  (keep-alive, Content-Length bodies), and a grpc.aio server whose generic handler answers
  any unary method with an empty message without decoding anything.

    python -m tools.bench.baselines minimal --http-port 0 --grpc-port 0
    # prints: READY http=<port> grpc=<port>; stops on SIGTERM/SIGINT

It must not know the harness, the scenarios or the gateway: the harness starts it by its
module name (`Baseline`) and reads its READY line.
"""
from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import sys
from typing import cast

import grpc
import numpy as np
import orjson
import tornado.httpserver
import tornado.httputil
import tornado.netutil
import tornado.web

from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc

# -- minimal: the same front-end work as the gateway, answered directly ---------------------


def _predict(body: bytes) -> tuple[int, bytes]:
    """The minimal servers' one computation: a v1 body's instances doubled, or a 400."""
    try:
        document = orjson.loads(body)
        instances = document["instances"]
        if not isinstance(instances, list) or not instances:
            raise ValueError("instances must be a non-empty list")
        predictions = (np.asarray(instances, dtype=np.float32) * 2).tolist()
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        return 400, orjson.dumps({"error": str(exc)})
    return 200, orjson.dumps({"predictions": predictions, "batchId": "0"})


class _V1Predict(tornado.web.RequestHandler):
    def post(self, model: str) -> None:
        status, body = _predict(self.request.body)
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(body)


class _LeanRequest(tornado.httputil.HTTPMessageDelegate):
    """`minimal-lean`: the same v1 answer on Tornado's delegate layer (no Application, no
    RequestHandler), the floor of what a Tornado server pays per request."""

    def __init__(self, connection: tornado.httputil.HTTPConnection) -> None:
        self.connection = connection
        self.chunks: list[bytes] = []
        self.path = ""

    def headers_received(self, start_line: tornado.httputil.RequestStartLine | tornado.httputil.ResponseStartLine,
                         headers: tornado.httputil.HTTPHeaders) -> None:
        assert isinstance(start_line, tornado.httputil.RequestStartLine)
        self.path = start_line.path

    def data_received(self, chunk: bytes) -> None:
        self.chunks.append(chunk)

    def finish(self) -> None:
        if self.path.startswith("/v1/models/") and self.path.endswith(":predict"):
            status, body = _predict(b"".join(self.chunks))
        elif self.path == "/v2/health/ready":
            status, body = 200, b'{"ready": true}'
        else:
            status, body = 404, b'{"error": "not found"}'
        headers = tornado.httputil.HTTPHeaders({"Content-Type": "application/json", "Content-Length": str(len(body))})
        self.connection.write_headers(
            tornado.httputil.ResponseStartLine("HTTP/1.1", status, tornado.httputil.responses[status]), headers, body)
        self.connection.finish()


class _LeanApp(tornado.httputil.HTTPServerConnectionDelegate):
    def start_request(self, server_conn: object,
                      request_conn: tornado.httputil.HTTPConnection) -> tornado.httputil.HTTPMessageDelegate:
        return _LeanRequest(request_conn)


HOLD_MODEL = "hold"


class _V1Hold(tornado.web.RequestHandler):
    """Parse like _V1Predict, then wait for the server to stop: a request kept waiting."""

    async def post(self) -> None:
        instances = orjson.loads(self.request.body)["instances"]
        await self.settings["released"].wait()
        self.finish(orjson.dumps({"predictions": instances}))


class _Ready(tornado.web.RequestHandler):
    def get(self) -> None:
        self.finish(b'{"ready": true}')


def make_minimal_app(released: asyncio.Event) -> tornado.web.Application:
    """The minimal Tornado app; requests to the `hold` model wait for `released`."""
    return tornado.web.Application(
        [(rf"/v1/models/{HOLD_MODEL}:predict", _V1Hold), (r"/v1/models/([^/:]+):predict", _V1Predict),
         (r"/v2/health/ready", _Ready)],
        compress_response=False, released=released,
    )


class MinimalInference(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self, released: asyncio.Event) -> None:
        self.released = released  # requests to the `hold` model wait for it

    async def ModelInfer(self, request: pb.ModelInferRequest,
                         context: grpc.aio.ServicerContext) -> pb.ModelInferResponse:
        if len(request.inputs) != 1:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "exactly one input expected")
        tensor = request.inputs[0]
        if request.raw_input_contents:
            data = np.frombuffer(request.raw_input_contents[0], dtype="<f4")
        else:
            data = np.asarray(tensor.contents.fp32_contents, dtype=np.float32)
        if request.model_name == HOLD_MODEL:
            await self.released.wait()
        response = pb.ModelInferResponse(model_name=request.model_name, id=request.id)
        response.outputs.add(name="OUTPUT0", datatype="FP32", shape=tensor.shape)
        response.raw_output_contents.append((data * 2).astype("<f4").tobytes())
        response.parameters["batch_id"].string_param = "0"
        return response


# -- trivial: fixed answers, to find the load generator's own ceiling -----------------------

_TRIVIAL_RESPONSE = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 2\r\n\r\n{}")


class TrivialHttp(asyncio.Protocol):
    """HTTP/1.1 with keep-alive: every request (headers + Content-Length body) -> 200 `{}`."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream server's transport
        self.buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        answers = 0
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                break
            head = bytes(buffer[:end]).lower()
            length = 0
            at = head.find(b"\r\ncontent-length:")
            if at >= 0:
                stop = head.find(b"\r\n", at + 2)
                length = int(head[at + 17:stop if stop >= 0 else len(head)])
            if len(buffer) < end + 4 + length:
                break
            del buffer[:end + 4 + length]
            answers += 1
        if answers:
            self.transport.write(_TRIVIAL_RESPONSE * answers)


class _EmptyAnswers(grpc.GenericRpcHandler):
    """Any unary method: the request is not decoded, the answer is an empty message."""

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        async def answer(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            return b""
        return grpc.unary_unary_rpc_method_handler(answer)


# -- lifecycle -------------------------------------------------------------------------------


async def serve(kind: str, host: str, http_port: int, grpc_port: int) -> None:
    loop = asyncio.get_running_loop()
    released = asyncio.Event()  # set when the server stops: held requests are answered
    if kind in ("minimal", "minimal-lean"):
        sockets = tornado.netutil.bind_sockets(http_port, host, family=socket.AF_INET)
        http_server = tornado.httpserver.HTTPServer(make_minimal_app(released) if kind == "minimal" else _LeanApp())
        http_server.add_sockets(sockets)
        bound_http = sockets[0].getsockname()[1]
        closer = http_server.stop
    else:
        server = await loop.create_server(TrivialHttp, host, http_port)
        bound_http = server.sockets[0].getsockname()[1]
        closer = server.close
    grpc_server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    if kind in ("minimal", "minimal-lean"):
        pb_grpc.add_GRPCInferenceServiceServicer_to_server(MinimalInference(released), grpc_server)
    else:
        grpc_server.add_generic_rpc_handlers((_EmptyAnswers(),))
    bound_grpc = grpc_server.add_insecure_port(f"{host}:{grpc_port}")
    await grpc_server.start()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(f"READY http={bound_http} grpc={bound_grpc}", flush=True)
    try:
        await stop.wait()
    finally:
        released.set()
        closer()
        await grpc_server.stop(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.baselines", description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=["minimal", "minimal-lean", "trivial"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--http-port", type=int, default=0)
    parser.add_argument("--grpc-port", type=int, default=0)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.kind, args.host, args.http_port, args.grpc_port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
