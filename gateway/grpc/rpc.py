"""What every RPC of the gateway's gRPC front end shares: one error path and one lifecycle.

`@rpc()` wraps a servicer method: the method raises a GatewayError for anything wrong, and
the decorator ends the call with the gRPC code the error carries (`refused`, the one place
a gRPC error is rendered; an unexpected exception is logged and ends INTERNAL, with no
detail; never `context.abort`, whose exception grpc keeps in a reference cycle with the
call, and with it the refused message). `@rpc(front_end="...")` marks an inference method: each request is a
`gateway.lifecycle.Call`, opened before anything is checked (the client's deadline and
context in it) and handed to the method, and closed once with the HTTP status the outcome
pairs with (`wire.errors`), so one label vocabulary serves every front end. A stream's
messages are calls of their own (`in_band`); a call refused before it reaches its method
(the token, `gateway.grpc.auth`) is opened and closed by `refuse`.

`add_servicer` registers a servicer so that a message that is not valid protobuf reaches
`@rpc` too, and is answered INVALID_ARGUMENT like any other bad input, and so that a large
compressed message is inflated off the event loop (`Compressed`).

It knows the service's counting seam and the gRPC runtime, no codec and no predictor.
"""
from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError

from gateway.lifecycle import Call
from gateway.observe.metrics import CLIENT_CLOSED_REQUEST
from gateway.service import InferenceService
from wire.codecs import content_encoding
from wire.errors import GatewayError, InvalidInput, MessageTooLarge, PayloadTooLarge, Unauthenticated
from wire.request import PRIORITY_HEADER, priority_from_header
from wire.tracing import ClientContext

_PRIORITY_KEY = PRIORITY_HEADER.lower()  # gRPC metadata keys are lower case

log = logging.getLogger(__name__)
# The tenant an inference call came as (gateway.grpc.auth sets it before the method runs).
TENANT: contextvars.ContextVar[str] = contextvars.ContextVar("tenant", default="")

Response = TypeVar("Response")
Method = Callable[..., Awaitable[Response]]  # (self, request, context[, call])
StreamMethod = TypeVar("StreamMethod", bound=Callable[..., Any])


class OpenStreams:
    """The readers of a process's open client streams, so that a drain stops reading them
    all: each stream then answers what it has read and ends UNAVAILABLE, instead of being
    cancelled by the server's stop while its client idles (grpc logs that as an ERROR with
    a traceback, one per stream)."""

    def __init__(self) -> None:
        self._readers: set[asyncio.Task[None]] = set()
        self.ending = False

    def track(self, reader: asyncio.Task[None]) -> None:
        self._readers.add(reader)
        reader.add_done_callback(self._readers.discard)
        if self.ending:
            reader.cancel()

    def end(self) -> None:
        """Stop reading every open stream, and any opened from now on."""
        self.ending = True
        for reader in list(self._readers):
            reader.cancel()


class Servicer:
    """A gRPC servicer of the gateway: it reaches models only through the service."""

    def __init__(self, service: InferenceService) -> None:
        self.service = service


def rpc(front_end: str | None = None) -> Callable[[Method[Response]], Method[Response]]:
    """A unary method's one error path: a GatewayError ends the call with its code and
    message, anything else with INTERNAL (logged). An inference method (`front_end`) is called with
    its request's Call as a third argument, closed once with the outcome."""
    def decorate(method: Method[Response]) -> Method[Response]:
        @functools.wraps(method)
        async def wrapper(self: Servicer, request: Any, context: grpc.aio.ServicerContext) -> Response:
            if isinstance(request, Compressed):
                request = await request.message()
            call = self.service.open(front_end, getattr(request, "model_name", "")) if front_end else None
            status = 200
            try:
                if isinstance(request, Malformed):
                    raise request.error
                if call is not None:
                    read_client(call, request, context)
                return await (method(self, request, context, call) if call is not None
                              else method(self, request, context))
            except asyncio.CancelledError:
                status = CLIENT_CLOSED_REQUEST
                raise
            except Exception as error:
                status, code, message = _classify(error, method.__name__)
            finally:
                if call is not None:
                    call.close(status)
            return refused(context, code, message)
        wrapper.front_end = front_end  # type: ignore[attr-defined]  # read by refuse's callers (auth)
        return wrapper
    return decorate


def stream(front_end: str) -> Callable[[StreamMethod], StreamMethod]:
    """Marks a streaming inference method's front end (its messages are counted by
    `in_band`; a stream refused before it starts is counted by `refuse` under this name)."""
    def mark(method: StreamMethod) -> StreamMethod:
        method.front_end = front_end  # type: ignore[attr-defined]
        return method
    return mark


def read_client(call: Call, request: Any, context: grpc.aio.ServicerContext) -> None:
    """What a gRPC client says of its request, into its Call: its deadline, its priority
    metadata (an OIP request's `priority` parameter, if any, wins), its context (the
    message's own id, else `x-request-id` metadata) and the tenant its key made it (by
    `gateway.grpc.auth`). Raises InvalidInput for bad metadata."""
    call.tenant = TENANT.get()
    call.tighten(context.time_remaining())
    # Read once: grpc builds a new tuple of the metadata at every call of invocation_metadata.
    metadata = dict(context.invocation_metadata() or ())
    call.priority = priority(metadata)
    call.client = client_context(metadata, getattr(request, "id", ""))


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """What a stream's message is answered with when the stream must end instead: the key
    the stream was opened with is no longer valid (a reload removed or rotated it out)."""
    code: grpc.StatusCode
    message: str


async def in_band(request: Any, context: grpc.aio.ServicerContext, call: Call,
                  answer: Callable[[Any, Call], Awaitable[Response]],
                  error_answer: Callable[[Any, str], Response]) -> Response | StreamEnd:
    """One message of a stream, the streaming twin of `rpc`, as its own Call: `answer(request,
    call)`, or, for any error, `error_answer(request, message)` sent in band so the stream
    stays open (the call closed with the error's status); but for a key no longer valid,
    a `StreamEnd` (returned, not raised: an exception kept by the answer's task would hold
    the message in a cycle), and the stream ends with it. A successful answer's call is
    closed by the stream once the client has it; a cancelled one's, 499."""
    try:
        if isinstance(request, Compressed):
            request = await request.message()
        if isinstance(request, Malformed):
            raise request.error
        read_client(call, request, context)
        return await answer(request, call)
    except asyncio.CancelledError:
        call.close(CLIENT_CLOSED_REQUEST)
        raise
    except Exception as error:
        status, code, message = _classify(error, answer.__name__)
        call.close(status)
        if isinstance(error, Unauthenticated):
            return StreamEnd(code, message)
        return error_answer(request, message)


async def refuse(service: InferenceService, front_end: str | None, request: Any, context: grpc.aio.ServicerContext,
                 error: GatewayError) -> None:
    """Answer a call refused before its method runs (the token): closed as any other call
    of its front end, then refused as `rpc` refuses."""
    if front_end is not None:
        call = service.open(front_end, getattr(request, "model_name", ""))
        call.close(error.http_status)
    refused(context, grpc.StatusCode[error.grpc_code], error.message)


def refused(context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str) -> Any:
    """End the call with `code` and `message` once its method returns (what it returns is
    not sent: grpc.aio sends no answer with a status other than OK). Never
    `context.abort`: grpc keeps abort's exception on the call's state, whose traceback's
    frames hold the context, which holds that state, a reference cycle that kept each
    refused message (its request, its decoded arrays) until Python's cyclic collector ran,
    which an idle gateway may never do (issue 45: six refused messages held 3 GB)."""
    context.set_code(code)
    context.set_details(message)
    return None


def _classify(error: Exception, where: str) -> tuple[int, grpc.StatusCode, str]:
    """(HTTP status counted, gRPC code, message) of an error; an unexpected one is logged
    and never described to the client. Call it from the `except` block."""
    if isinstance(error, GatewayError):
        return error.http_status, grpc.StatusCode[error.grpc_code], error.message
    log.exception("unexpected error in %s", where)
    return 500, grpc.StatusCode.INTERNAL, "internal error"


class Malformed:
    """What a method receives instead of its request when the bytes are not its message.

    grpc.aio answers a deserializer's exception with a bare status and a message naming a
    Python class; handing the method this stand-in lets `@rpc` answer INVALID_ARGUMENT (or
    RESOURCE_EXHAUSTED for a message that inflates past the limit) and count it like any
    other bad input."""

    model_name = ""  # counted as "unknown"

    def __init__(self, error: GatewayError) -> None:
        self.error = error


class Compressed:
    """What a method receives instead of a compressed message too large to inflate on the
    event loop: `rpc` and `in_band` inflate and parse it in a thread (zlib lets go of the
    GIL), into the message or a `Malformed`, before anything else is done with it."""

    model_name = ""  # not read yet

    def __init__(self, parse: Callable[[bytes], Any], data: bytes) -> None:
        self._parse = parse
        self._data = data

    async def message(self) -> Any:
        return await asyncio.to_thread(self._parse, self._data)


def _tolerant(message_class: Any, max_bytes: int, check: Callable[[bytes], None] | None) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        if len(data) >= content_encoding.SMALL_COMPRESSED_BYTES and content_encoding.sniff(data) is not None:
            return Compressed(parse, data)
        return parse(data)

    def parse(data: bytes) -> Any:
        try:
            coding = content_encoding.sniff(data)
            if coding is not None:
                # Compressed by the client: inflated here, never past the limit (grpc itself
                # would inflate it whole before checking its size: a zip bomb).
                data = content_encoding.decode(coding, [data], max_bytes)
            if check is not None:
                check(data)  # before protobuf parses it, holding the GIL, whatever the thread
            return message_class.FromString(data)
        except DecodeError as error:
            return Malformed(InvalidInput(f"the request is not a valid {message_class.DESCRIPTOR.name} message: "
                                          f"{error}"))
        except MessageTooLarge as error:
            return Malformed(error)
        except PayloadTooLarge as error:
            return Malformed(MessageTooLarge(f"the message is larger than max_body_bytes: {error.message}"))
        except GatewayError as error:
            return Malformed(error)
    return deserialize


_HANDLER_KINDS = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def add_servicer(server: grpc.aio.Server, servicer: Any, service: ServiceDescriptor, max_bytes: int,
                 checks: Mapping[str, Callable[[bytes], None]] | None = None) -> None:
    """Register `servicer`'s methods for `service`, as the generated `add_*_to_server` does,
    but with deserializers that decompress within `max_bytes` and hand a malformed message
    to the method (see Malformed). `checks` maps a request message's full name to what
    judges its bytes before they are parsed (raising a GatewayError: the method gets it)."""
    handlers = {}
    for method in service.methods:
        request_class = message_factory.GetMessageClass(method.input_type)
        response_class = message_factory.GetMessageClass(method.output_type)
        make = _HANDLER_KINDS[(method.client_streaming, method.server_streaming)]
        deserialize = _tolerant(request_class, max_bytes, (checks or {}).get(method.input_type.full_name))
        handlers[method.name] = make(getattr(servicer, method.name), request_deserializer=deserialize,
                                     response_serializer=response_class.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))
    server.add_registered_method_handlers(service.full_name, handlers)


def client_context(metadata: Mapping[str, Any], request_id: str = "") -> ClientContext:
    """The client's request id (the message's, else `x-request-id` metadata) and trace."""
    return ClientContext(request_id or metadata.get("x-request-id", ""), metadata.get("traceparent", ""))


def priority(metadata: Mapping[str, Any]) -> int:
    """The priority a client asks for in its `x-request-priority` metadata, on every
    protocol (an OIP client may use the `priority` parameter instead); 0 if none."""
    return priority_from_header(metadata.get(_PRIORITY_KEY))
