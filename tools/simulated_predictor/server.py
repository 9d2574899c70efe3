"""The simulated predictor as its own server process: a stand-in for a real model server.

It serves ONE `SimulatedModel` (OUTPUT0 = 2 x INPUT0, at a configurable cost per call; or,
with `--task rerank`, the simulated cross-encoder: BYTES `query` and `document`, FP32 `score`) on
one asyncio event loop hosting a Tornado HTTP server and a grpc.aio server, speaking:

- KServe v1 HTTP: `POST /v1/models/<m>:predict`, `GET /v1/models/<m>`;
- Open Inference Protocol HTTP (JSON tensors and the binary tensor extension): health,
  server and model metadata, model readiness, `POST /v2/models/<m>[/versions/<v>]/infer`;
- Open Inference Protocol gRPC (`inference.GRPCInferenceService`).

It does NOT batch: every request is exactly one model call, so the predictor's own call log
(`GET /stats`, zeroed by `POST /stats/reset`) shows how the gateway in front of it batched.
For reliability tests it has three fault knobs, set by CLI flags or at runtime with
`POST /control` (`GET /control` reads them):

- `fail_status`: answer every infer with this HTTP status (gRPC: the matching code), without
  calling the model; 0 = off;
- `extra_delay_ms`: sleep this long before each infer (outside the model's slots, so
  concurrent requests are delayed in parallel, like a slow network or a hung server);
- `wrong_rows`: answer with one row fewer than asked (a predictor answering nonsense).

Run it with `python -m tools.simulated_predictor --http-port 0 --grpc-port 0`; it prints
`READY http=<port> grpc=<port>` once both servers listen, and stops cleanly on
SIGTERM/SIGINT. It is a tool, not part of the installed gateway: it serves the model of
`backends.simulated.model` and must not be imported by gateway/ or backends/.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import socket
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

import grpc
import orjson
import tornado.httpserver
import tornado.netutil
import tornado.web

from backends.settings import Cost
from backends.simulated.model import CallLog, SimulatedModel
from backends.simulated.reranker import SimulatedReranker
from gateway.rest import tornado_internals
from wire.codecs import json_data, oip_grpc, oip_json, v1
from wire.codecs.limits import DEFAULT_LIMITS
from wire.errors import (
    DeadlineExceeded,
    GatewayError,
    InvalidInput,
    ModelNotFound,
    Overloaded,
    Unavailable,
)
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc
from wire.request import RequestedOutput
from wire.tensors import Tensor

log = logging.getLogger("tools.simulated_predictor")

SERVER_NAME = "simulated-predictor"
SERVER_VERSION = "0.1.0"
EXTENSIONS = ["binary_tensor_data"]
PLATFORM = "simulated"
VERSIONS = ["1"]
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
JSON_TYPE = "application/json"

# An injected HTTP status -> the gRPC code the gateway's own error classes pair with it.
_GRPC_CODE_FOR_STATUS = {
    cls.http_status: cls.grpc_code
    for cls in (InvalidInput, ModelNotFound, Overloaded, Unavailable, DeadlineExceeded)
}


class InjectedFault(GatewayError):
    """The failure `fail_status` asks for."""

    def __init__(self, status: int) -> None:
        super().__init__(f"injected fault: status {status}")
        self.http_status = status
        self.grpc_code = _GRPC_CODE_FOR_STATUS.get(status, "INTERNAL")


@dataclass(slots=True)
class Faults:
    fail_status: int = 0
    extra_delay_ms: float = 0.0
    wrong_rows: bool = False

    def update(self, changes: Any) -> None:
        """Apply a `/control` body; all-or-nothing, InvalidInput on anything unknown or wrong."""
        if not isinstance(changes, dict):
            raise InvalidInput("control body must be a JSON object")
        unknown = set(changes) - {"fail_status", "extra_delay_ms", "wrong_rows"}
        if unknown:
            raise InvalidInput(f"unknown control keys {sorted(unknown)}")
        status = changes.get("fail_status", self.fail_status)
        delay = changes.get("extra_delay_ms", self.extra_delay_ms)
        wrong = changes.get("wrong_rows", self.wrong_rows)
        if not isinstance(status, int) or isinstance(status, bool) or not (status == 0 or 400 <= status <= 599):
            raise InvalidInput("fail_status must be 0 (off) or an HTTP error status 400-599")
        if not isinstance(delay, (int, float)) or isinstance(delay, bool) or not 0 <= delay <= 3_600_000:
            raise InvalidInput("extra_delay_ms must be a number of milliseconds >= 0")
        if not isinstance(wrong, bool):
            raise InvalidInput("wrong_rows must be true or false")
        self.fail_status, self.extra_delay_ms, self.wrong_rows = status, float(delay), wrong


class Predictor:
    """The protocol-independent core: one model, its fault knobs, one call per request."""

    def __init__(self, model: SimulatedModel, faults: Faults | None = None) -> None:
        self.model = model
        self.faults = faults or Faults()

    def check(self, name: str, version: str = "") -> None:
        if name != self.model.name:
            raise ModelNotFound(f"unknown model '{name}'")
        if version and version not in VERSIONS:
            raise ModelNotFound(f"model '{name}' has no version '{version}'")

    async def _before_call(self) -> None:
        if self.faults.extra_delay_ms > 0:
            await asyncio.sleep(self.faults.extra_delay_ms / 1000.0)
        if self.faults.fail_status:
            raise InjectedFault(self.faults.fail_status)

    async def begin(self, name: str, version: str = "") -> None:
        """Check the model and apply the fault knobs; call before decoding an infer body."""
        self.check(name, version)
        await self._before_call()

    async def infer(self, inputs: list[Tensor], requested: list[RequestedOutput]) -> list[Tensor]:
        """One model call; only the requested outputs (all when none are named), in that order."""
        declared = [spec.name for spec in self.model.signature.outputs]
        for output in requested:
            if output.name not in declared:
                raise InvalidInput(f"model '{self.model.name}' has no output '{output.name}' (it has {declared})")
        outputs = await self.model.predict(inputs)
        if requested:
            by_name = {t.name: t for t in outputs}
            outputs = [by_name[o.name] for o in requested]
        if self.faults.wrong_rows:
            outputs = [Tensor(t.name, t.datatype, t.data[:-1]) for t in outputs]
        return outputs

    async def predict_instances(self, instances: list) -> list:
        predictions = await self.model.predict_instances(instances)
        return predictions[:-1] if self.faults.wrong_rows else predictions

    def metadata(self) -> dict[str, Any]:
        signature = self.model.signature
        return {
            "name": self.model.name,
            "versions": VERSIONS,
            "platform": PLATFORM,
            **signature.describe(),
        }

    def reset_stats(self) -> None:
        self.model.log = CallLog()


# -- HTTP -----------------------------------------------------------------------------

class _Handler(tornado.web.RequestHandler):
    predictor: Predictor

    def initialize(self, predictor: Predictor) -> None:
        self.predictor = predictor

    def send_json(self, document: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", JSON_TYPE)
        self.finish(orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY))

    async def guarded(self, work: Callable[[], Awaitable[None]]) -> None:
        """Run a handler body, answering every failure with a JSON `{"error": ...}`."""
        try:
            await work()
        except GatewayError as exc:
            self.send_json({"error": exc.message}, exc.http_status)
        except Exception:
            log.exception("internal error on %s %s", self.request.method, self.request.path)
            self.send_json({"error": "internal error"}, 500)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        # Tornado's own errors (405, malformed requests): JSON, never a traceback.
        self.set_header("Content-Type", JSON_TYPE)
        self.finish(orjson.dumps({"error": tornado_internals.status_reason(self)}))

    def body_json(self) -> Any:
        return json_data.loads(self.request.body)


class _NotFound(_Handler):
    def prepare(self) -> None:
        self.send_json({"error": f"no route for {self.request.method} {self.request.path}"}, 404)


class V1Predict(_Handler):
    async def post(self, name: str) -> None:
        async def work() -> None:
            await self.predictor.begin(name)
            instances = v1.decode_request(self.request.body)
            self.send_json({"predictions": await self.predictor.predict_instances(instances)})
        await self.guarded(work)


class V1Model(_Handler):
    async def get(self, name: str) -> None:
        async def work() -> None:
            self.predictor.check(name)
            self.send_json({"name": name, "ready": True})
        await self.guarded(work)


class Live(_Handler):
    def get(self) -> None:
        self.send_json({"live": True})


class Ready(_Handler):
    def get(self) -> None:
        self.send_json({"ready": True})


class ServerMetadata(_Handler):
    def get(self) -> None:
        self.send_json({"name": SERVER_NAME, "version": SERVER_VERSION, "extensions": EXTENSIONS})


class ModelMetadata(_Handler):
    async def get(self, name: str, version: str | None = None) -> None:
        async def work() -> None:
            self.predictor.check(name, version or "")
            self.send_json(self.predictor.metadata())
        await self.guarded(work)


class ModelReady(_Handler):
    async def get(self, name: str, version: str | None = None) -> None:
        async def work() -> None:
            self.predictor.check(name, version or "")
            self.send_json({"name": name, "ready": True})
        await self.guarded(work)


class Infer(_Handler):
    async def post(self, name: str, version: str | None = None) -> None:
        async def work() -> None:
            await self.predictor.begin(name, version or "")
            length = oip_json.json_length(self.request.headers.get(oip_json.HEADER_LENGTH))
            request = oip_json.decode_request(self.request.body, length)
            outputs = await self.predictor.infer(request.inputs, request.outputs)
            body, header_length = oip_json.encode_response(name, version or VERSIONS[0], request, outputs, {})
            for header, value in oip_json.body_headers(header_length).items():
                self.set_header(header, value)
            self.finish(body)
        await self.guarded(work)


class Stats(_Handler):
    def get(self) -> None:
        self.send_json(self.predictor.model.log.as_dict())


class StatsReset(_Handler):
    def post(self) -> None:
        self.predictor.reset_stats()
        self.send_json(self.predictor.model.log.as_dict())


class Control(_Handler):
    def get(self) -> None:
        self.send_json(asdict(self.predictor.faults))

    async def post(self) -> None:
        async def work() -> None:
            self.predictor.faults.update(self.body_json())
            log.warning("fault knobs now %s", asdict(self.predictor.faults))
            self.send_json(asdict(self.predictor.faults))
        await self.guarded(work)


def _quiet_access_log(handler: tornado.web.RequestHandler) -> None:
    logging.getLogger("tornado.access").debug(
        "%d %s %.2fms", handler.get_status(), tornado_internals.request_summary(handler),
        1000.0 * handler.request.request_time()
    )


def make_app(predictor: Predictor) -> tornado.web.Application:
    args = {"predictor": predictor}
    model = r"([^/:]+)"
    version = r"(?:/versions/([^/]+))?"
    routes = [
        (rf"/v1/models/{model}:predict", V1Predict),
        (rf"/v1/models/{model}", V1Model),
        (r"/v2/health/live", Live),
        (r"/v2/health/ready", Ready),
        (r"/v2/?", ServerMetadata),
        (rf"/v2/models/{model}{version}/ready", ModelReady),
        (rf"/v2/models/{model}{version}/infer", Infer),
        (rf"/v2/models/{model}{version}", ModelMetadata),
        (r"/stats", Stats),
        (r"/stats/reset", StatsReset),
        (r"/control", Control),
    ]
    return tornado.web.Application(
        [(pattern, handler, args) for pattern, handler in routes],
        default_handler_class=_NotFound,
        default_handler_args=args,
        log_function=_quiet_access_log,
        compress_response=False,
    )


# -- gRPC -----------------------------------------------------------------------------

class GrpcService(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self, predictor: Predictor) -> None:
        self.predictor = predictor

    async def _guarded(self, context: grpc.aio.ServicerContext, work: Callable[[], Awaitable[Any]]) -> Any:
        try:
            return await work()
        except GatewayError as exc:
            await context.abort(grpc.StatusCode[exc.grpc_code], exc.message)
        except Exception:
            log.exception("internal error in gRPC call")
            await context.abort(grpc.StatusCode.INTERNAL, "internal error")

    async def ServerLive(self, request: pb.ServerLiveRequest, context: Any) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request: pb.ServerReadyRequest, context: Any) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=True)

    async def ServerMetadata(self, request: pb.ServerMetadataRequest, context: Any) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(name=SERVER_NAME, version=SERVER_VERSION, extensions=EXTENSIONS)

    async def ModelReady(self, request: pb.ModelReadyRequest, context: Any) -> pb.ModelReadyResponse:
        async def work() -> pb.ModelReadyResponse:
            self.predictor.check(request.name, request.version)
            return pb.ModelReadyResponse(ready=True)
        return await self._guarded(context, work)

    async def ModelMetadata(self, request: pb.ModelMetadataRequest, context: Any) -> pb.ModelMetadataResponse:
        async def work() -> pb.ModelMetadataResponse:
            self.predictor.check(request.name, request.version)
            return pb.ModelMetadataResponse(**self.predictor.metadata())
        return await self._guarded(context, work)

    async def ModelInfer(self, request: pb.ModelInferRequest, context: Any) -> pb.ModelInferResponse:
        async def work() -> pb.ModelInferResponse:
            await self.predictor.begin(request.model_name, request.model_version)
            decoded = oip_grpc.decode_request(request)
            outputs = await self.predictor.infer(decoded.inputs, decoded.outputs)
            return oip_grpc.encode_response(
                request.model_name, request.model_version or VERSIONS[0], decoded.id, outputs, {}
            )
        return await self._guarded(context, work)


# -- lifecycle ------------------------------------------------------------------------

class PredictorServer:
    """Both servers on the running loop; usable in-process (tests) as well as from `main`."""

    def __init__(self, predictor: Predictor, host: str = "127.0.0.1", http_port: int = 0, grpc_port: int = 0) -> None:
        self.predictor = predictor
        self.host = host
        self._requested = (http_port, grpc_port)
        self.http_port = 0
        self.grpc_port = 0
        self._http: tornado.httpserver.HTTPServer | None = None
        self._grpc: grpc.aio.Server | None = None

    async def start(self) -> None:
        http_port, grpc_port = self._requested
        sockets = tornado.netutil.bind_sockets(http_port, self.host, family=socket.AF_UNSPEC)
        self.http_port = sockets[0].getsockname()[1]
        self._http = tornado.httpserver.HTTPServer(
            make_app(self.predictor),
            max_body_size=DEFAULT_LIMITS.max_body_bytes,
            max_buffer_size=DEFAULT_LIMITS.max_body_bytes,
        )
        self._http.add_sockets(sockets)
        self._grpc = grpc.aio.server(options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),  # a port in use is an error, never silently shared
        ])
        pb_grpc.add_GRPCInferenceServiceServicer_to_server(GrpcService(self.predictor), self._grpc)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.grpc_port = self._grpc.add_insecure_port(f"{host}:{grpc_port}")
        await self._grpc.start()

    async def stop(self, grace: float = 1.0) -> None:
        if self._http is not None:
            self._http.stop()
            await self._http.close_all_connections()
            self._http = None
        if self._grpc is not None:
            await self._grpc.stop(grace)
            self._grpc = None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tools.simulated_predictor",
        description="The simulated predictor (OUTPUT0 = 2 x INPUT0) as a KServe v1 / OIP HTTP + gRPC server. "
                    "It does not batch: each request is one model call.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--http-port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--grpc-port", type=int, default=8001, help="0 picks a free port")
    parser.add_argument("--model", default="demo", help="the one model's name")
    parser.add_argument("--task", choices=["double", "rerank"], default="double",
                        help="double: OUTPUT0 = 2 x INPUT0; rerank: (query, document) pairs to scores")
    parser.add_argument("--call-ms", type=float, default=5.0, help="cost of each call")
    parser.add_argument("--per-instance-ms", type=float, default=0.0, help="extra cost per row")
    parser.add_argument("--slots", type=int, default=1, help="calls that may compute at once")
    parser.add_argument("--fail-status", type=int, default=0, help="answer every infer with this status (0 = off)")
    parser.add_argument("--extra-delay-ms", type=float, default=0.0, help="added before each infer")
    parser.add_argument("--wrong-rows", action="store_true", help="answer with one row fewer than asked")
    parser.add_argument("--log-level", default="WARNING", help="DEBUG shows the access log")
    args = parser.parse_args(argv)
    if args.call_ms < 0 or args.per_instance_ms < 0 or args.slots < 1:
        parser.error("--call-ms and --per-instance-ms must be >= 0 and --slots >= 1")
    return args


async def serve(args: argparse.Namespace) -> None:
    faults = Faults()
    try:
        faults.update({"fail_status": args.fail_status, "extra_delay_ms": args.extra_delay_ms,
                       "wrong_rows": args.wrong_rows})
    except InvalidInput as exc:
        raise SystemExit(f"simulated-predictor: {exc.message}") from None
    kind = SimulatedReranker if args.task == "rerank" else SimulatedModel
    model = kind(args.model, Cost(args.call_ms, args.per_instance_ms, args.slots))
    server = PredictorServer(Predictor(model, faults), args.host, args.http_port, args.grpc_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await server.start()
    except (OSError, RuntimeError) as exc:  # a port in use, an address we cannot bind
        await server.stop(grace=0)
        raise SystemExit(f"simulated-predictor: cannot listen on {args.host}: {exc}") from None
    try:
        print(f"READY http={server.http_port} grpc={server.grpc_port}", flush=True)
        await stop.wait()
    finally:
        await server.stop()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(serve(args))
    return 0

