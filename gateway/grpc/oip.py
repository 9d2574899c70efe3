"""inference.GRPCInferenceService on the gateway: decode, call the service, encode.

Knows the service and the OIP protobuf codec, never a backend protocol. Errors and counts
go through `gateway.grpc.rpc`; the client's deadline becomes the request's deadline, and a
cancelled call is dropped from the scheduler's queue.
"""
from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf import json_format

from gateway.grpc.rpc import OpenStreams, Servicer, StreamEnd, add_servicer, in_band, refused, rpc, stream
from gateway.lifecycle import Call
from gateway.observe.metrics import CLIENT_CLOSED_REQUEST
from gateway.service import InferenceService
from wire.codecs import oip_grpc
from wire.codecs.limits import Limits
from wire.errors import Unauthenticated
from wire.generated.inference import grpc_service_pb2 as pb
from wire.generated.inference import grpc_service_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)
# Requests of one stream read and not yet answered to its client; past it the stream is not read.
STREAM_WINDOW = 32


class InferenceServicer(Servicer, pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self, service: InferenceService, limits: Limits, streams: OpenStreams) -> None:
        super().__init__(service)
        self.limits = limits
        self.streams = streams
        # Per model, the predictor configuration last found not to fit ModelConfig (logged once).
        self._unparsable: dict[str, dict[str, Any] | None] = {}

    @rpc()
    async def ServerLive(self, request: pb.ServerLiveRequest,
                         context: grpc.aio.ServicerContext) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    @rpc()
    async def ServerReady(self, request: pb.ServerReadyRequest,
                          context: grpc.aio.ServicerContext) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=await self.service.ready())

    @rpc()
    async def ModelReady(self, request: pb.ModelReadyRequest,
                         context: grpc.aio.ServicerContext) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(ready=await self.service.model(request.name, request.version).ready())

    @rpc()
    async def ServerMetadata(self, request: pb.ServerMetadataRequest,
                             context: grpc.aio.ServicerContext) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(**self.service.server_metadata())

    @rpc()
    async def ModelMetadata(self, request: pb.ModelMetadataRequest,
                            context: grpc.aio.ServicerContext) -> pb.ModelMetadataResponse:
        response = pb.ModelMetadataResponse()
        json_format.ParseDict(self.service.model(request.name, request.version).describe(), response)
        return response

    @rpc()
    async def ModelConfig(self, request: pb.ModelConfigRequest,
                          context: grpc.aio.ServicerContext) -> pb.ModelConfigResponse:
        served = self.service.model(request.name, request.version)
        response = pb.ModelConfigResponse()
        try:
            json_format.ParseDict({"config": await self.service.model_config(served)}, response,
                                  ignore_unknown_fields=True)
        except json_format.ParseError as error:
            # A field of the predictor's configuration protobuf cannot hold: reported as unknown.
            if served.predictor_config is not self._unparsable.get(served.name):
                self._unparsable[served.name] = served.predictor_config
                log.warning("model '%s': the predictor's model configuration does not fit Triton's ModelConfig (%s): "
                            "gRPC clients get the gateway's own view of the model", served.name, error)
            response = pb.ModelConfigResponse()
            json_format.ParseDict({"config": await self.service.model_config(served, own=True)}, response,
                                  ignore_unknown_fields=True)
        return response

    @rpc()
    async def ModelStatistics(self, request: pb.ModelStatisticsRequest,
                              context: grpc.aio.ServicerContext) -> pb.ModelStatisticsResponse:
        response = pb.ModelStatisticsResponse()
        json_format.ParseDict(await self.service.statistics(request.name, request.version), response)
        return response

    @rpc(front_end="oip_grpc")
    async def ModelInfer(self, request: pb.ModelInferRequest, context: grpc.aio.ServicerContext,
                         call: Call) -> pb.ModelInferResponse:
        return await self._infer(request, call)

    @stream(front_end="oip_grpc_stream")
    async def ModelStreamInfer(self, requests: AsyncIterator[pb.ModelInferRequest],
                               context: grpc.aio.ServicerContext) -> None:
        """Triton's bidirectional stream. Each request is submitted as it arrives, so it
        batches with every other client; answers go back in the order the requests came,
        each with its request's id; an error goes back in band and the stream stays open.

        At most `STREAM_WINDOW` requests of a stream are read and not yet answered to the
        client: past that the gateway stops reading the stream, and HTTP/2 flow control
        pushes back on a client that writes without reading. A request is closed (counted)
        when its answer has been handed to the stream, not when it was computed; when the
        client closes or cancels the stream, what it still has queued is dropped, never
        sent, and counted 499 with the answers it never took. When the gateway drains, it
        stops reading every stream: each answers what it has read, then ends UNAVAILABLE.

        Each message is its tenant's as the gateway knows the stream's key now (the service
        looks it up again): once a reload has removed or rotated out that key, the stream
        answers what came before, then ends UNAUTHENTICATED with that message (those read
        after it are counted 401). Past `[server] max_stream_age_s` the stream stops reading,
        answers what it has read and ends UNAVAILABLE, and its client opens another,
        presenting its key again."""
        answers = _StreamAnswers(self.service, self._infer, context)
        reader = asyncio.create_task(answers.read(requests))
        self.streams.track(reader)
        max_age_s = self.service.config.server.max_stream_age_s
        aging = asyncio.get_running_loop().call_later(max_age_s, answers.expire, reader) if max_age_s > 0 else None
        try:
            if await answers.write():
                if answers.ended is not None:
                    refused(context, answers.ended.code, answers.ended.message)
                else:
                    await self._stream_ended(reader, context, answers)
        finally:
            if aging is not None:
                aging.cancel()
            reader.cancel()
            answers.drop_undelivered()

    async def _stream_ended(self, reader: asyncio.Task[None], context: grpc.aio.ServicerContext,
                            answers: _StreamAnswers) -> None:
        """Every answer is written: the stream ends as its reading did, at the client's
        half-close, with its read error, or UNAVAILABLE when the gateway's drain or the
        stream's age stopped it."""
        try:
            await reader
        except asyncio.CancelledError:
            if _cancelling() or not (self.streams.ending or answers.expired):
                raise
            context.set_code(grpc.StatusCode.UNAVAILABLE)
            context.set_details("the gateway is shutting down; every request read from this stream was answered"
                                if self.streams.ending else
                                "the stream reached its maximum age ([server] max_stream_age_s); every request read "
                                "from it was answered: open another")

    async def _infer(self, request: pb.ModelInferRequest, call: Call) -> pb.ModelInferResponse:
        served = self.service.model(request.model_name, request.model_version)
        decoded = await self.service.decode(served, oip_grpc.read_request(request, self.limits))
        answer = await self.service.infer(served, decoded, call)
        return oip_grpc.encode_response(
            request.model_name, request.model_version, request.id, answer.for_client(), {"batch_id": answer.batch_id})


class _StreamAnswers:
    """One ModelStreamInfer stream's requests, each answered in its own task as it is read,
    and their answers in the order the requests came: at most `STREAM_WINDOW` read and not
    yet taken by the client."""

    def __init__(self, service: InferenceService,
                 infer: Callable[[pb.ModelInferRequest, Call], Awaitable[pb.ModelInferResponse]],
                 context: grpc.aio.ServicerContext) -> None:
        self.service = service
        self.infer = infer
        self.context = context
        self.queue: asyncio.Queue[tuple[asyncio.Task[pb.ModelStreamInferResponse | StreamEnd], Call] | None] = \
            asyncio.Queue()
        self.window = asyncio.Semaphore(STREAM_WINDOW)
        self.pending: tuple[asyncio.Task[pb.ModelStreamInferResponse | StreamEnd], Call] | None = None  # being written
        self.ended: StreamEnd | None = None  # a message's key was no longer valid: the stream ends with it
        self.expired = False  # it reached [server] max_stream_age_s: its reading was stopped

    async def read(self, requests: AsyncIterator[pb.ModelInferRequest]) -> None:
        """Read the stream while the window has room, each request opened as its own Call and
        answered in band; then (the client's half-close, an error, a cancel) say the end."""
        try:
            while True:
                await self.window.acquire()  # a slot before reading: a full window stops the reading
                request = await anext(requests, None)
                if request is None:
                    return
                call = self.service.open("oip_grpc_stream", getattr(request, "model_name", ""))
                self.queue.put_nowait((asyncio.create_task(in_band(request, self.context, call, self.answer,
                                                                   _stream_error)), call))
        finally:
            self.queue.put_nowait(None)

    async def answer(self, request: pb.ModelInferRequest, call: Call) -> pb.ModelStreamInferResponse:
        return pb.ModelStreamInferResponse(infer_response=await self.infer(request, call))

    def expire(self, reader: asyncio.Task[None]) -> None:
        """The stream is as old as it may be: stop reading it (what was read is answered)."""
        self.expired = True
        reader.cancel()

    async def write(self) -> bool:
        """Hand each answer to the client in order, as it is ready, until the reading ends, or
        a message ends the stream (`ended`); False if the client went away."""
        while (pending := await self.queue.get()) is not None:
            self.pending = pending
            task, call = pending
            response = await task
            if isinstance(response, StreamEnd):
                self.ended = response
                return True
            # Written here, not yielded: a client gone mid-write fails this await, in our
            # hands (one INFO line), instead of inside grpc (an ERROR with a traceback).
            try:
                await self.context.write(response)
            except Exception:  # noqa: BLE001 (whatever the transport raises, the client is gone)
                log.info("a ModelStreamInfer client went away with %d answers untaken", self.queue.qsize() + 1)
                return False
            call.close(200)  # taken by the stream (an in-band error is already closed with its status)
            self.window.release()
        self.pending = None
        return True

    def drop_undelivered(self) -> None:
        """What the client never took (the answer being written, then the rest, queued or
        computing): cancelled, each request closed 499, or 401 once a message ended the
        stream for its key."""
        undelivered = [self.pending] if self.pending is not None else []
        while not self.queue.empty():
            if (item := self.queue.get_nowait()) is not None:
                undelivered.append(item)
        status = CLIENT_CLOSED_REQUEST if self.ended is None else Unauthenticated.http_status
        for task, call in undelivered:
            task.cancel()
            call.close(status)


def _stream_error(request: pb.ModelInferRequest, message: str) -> pb.ModelStreamInferResponse:
    # The failed request's id and model ride along, so a client can tell which one failed.
    return pb.ModelStreamInferResponse(error_message=message, infer_response=pb.ModelInferResponse(
        model_name=getattr(request, "model_name", ""), id=getattr(request, "id", "")))


def _cancelling() -> bool:
    """Whether the running task itself is being cancelled (not a task it awaits)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def add_to_server(service: InferenceService, limits: Limits, server: grpc.aio.Server, streams: OpenStreams) -> None:
    """Register the OIP servicer (malformed messages answered INVALID_ARGUMENT, see rpc; an
    inference message's typed part measured before it is parsed, see oip_grpc)."""
    add_servicer(server, InferenceServicer(service, limits, streams), pb.DESCRIPTOR.services_by_name["GRPCInferenceService"],
                 limits.max_body_bytes,
                 {pb.ModelInferRequest.DESCRIPTOR.full_name: functools.partial(oip_grpc.check_typed_size, limits=limits)})
