"""The channel between the batcher and its workers: typed messages on a Unix stream.

Messages (each a class below, with the request id it belongs to):
- worker -> batcher: `Submit` (a `BatchRequest`), `Cancel` (its client has gone),
  `ViewQuestion` (a document of the whole gateway), `PredictorQuestion` (what the
  batcher's client of a model's predictor knows: a worker builds none);
- batcher -> worker: `Result` (a request's rows), `Failure` (its `GatewayError`), `Ask`
  (the worker's own part of a view: its /metrics counts);
- either way: `Reply`, to the other side's question (by the question's id).

A frame is a 4-byte big-endian length, then a 4-byte length and a JSON header (orjson)
listing the frame's messages, then the tensors' bytes those messages describe, in order.
Tensors travel in the raw layout of the OIP binary extension (`wire.codecs.raw`: a numeric
tensor's values as they lie in memory, read back as a zero-copy view of the frame; BYTES
elements length-prefixed); the opaque JSON rows of KServe v1 instances as JSON. Nothing
is pickled: a frame cannot run code, whoever writes to the socket.

`Channel.send` queues a message; once per loop turn everything queued is encoded as one
frame and written at once, so a burst of requests or of a batch's answers costs one
header, one write and one wake-up on the other side, not one per message.

Instants do not cross processes: a request travels with its age and the remaining budget
of its deadline, read against each side's own monotonic clock.

It knows asyncio, the batcher's request and result, tensors and the raw codec, and the
gateway's errors; no front end, no scheduler, no service.
"""
from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from gateway.batching.request import NO_PARAMETERS, BatchRequest, BatchResult
from wire import errors
from wire.codecs import raw
from wire.errors import GatewayError
from wire.ratelimits import Bucket, QuotaState
from wire.tensors import JSON, Tensor, rows_tensor
from wire.tracing import NO_CONTEXT, ClientContext

_LENGTH = struct.Struct(">I")
MAX_FRAME_BYTES = 1 << 31  # a frame's length field is trusted only this far


@dataclass(slots=True)
class Submit:
    id: int
    request: BatchRequest


@dataclass(slots=True)
class Cancel:
    id: int


@dataclass(slots=True)
class Result:
    id: int
    result: BatchResult


@dataclass(slots=True)
class Failure:
    id: int
    error: GatewayError


@dataclass(slots=True)
class ViewQuestion:
    id: int
    name: str  # a `gateway.observe.views.Views` method: statistics, exposition or live
    args: tuple[str, ...] = ()


@dataclass(slots=True)
class PredictorQuestion:
    id: int
    model: str
    what: str  # "form", "metadata", "ready" or "config" (see `worker_role.RemoteBackend`)


@dataclass(slots=True)
class Reply:
    id: int     # the question's
    value: Any  # a JSON document, or /metrics' text as bytes


@dataclass(slots=True)
class Ask:
    id: int
    name: str  # what the batcher wants of the worker's own: "metrics" (its metric families)


Message = Submit | Cancel | Result | Failure | ViewQuestion | PredictorQuestion | Reply | Ask


# -- encoding ---------------------------------------------------------------------------------

def _tensor_header(tensor: Tensor, blobs: list[bytes | memoryview]) -> list[Any]:
    data = tensor.data
    if tensor.datatype == JSON:
        blob: bytes | memoryview = orjson.dumps(data.tolist(), option=orjson.OPT_SERIALIZE_NUMPY)
    else:
        blob = raw.view(data, tensor.datatype)  # numeric: no copy, the frame's one write copies it
    blobs.append(blob)
    return [tensor.name, tensor.datatype, list(data.shape), len(blob)]


def _lengths_header(lengths: np.ndarray | None, blobs: list[bytes | memoryview]) -> list[Any] | None:
    if lengths is None:
        return None
    blob = np.ascontiguousarray(lengths).tobytes()
    blobs.append(blob)
    return [lengths.dtype.str, list(lengths.shape), len(blob)]


def _value(value: Any) -> Any:
    return {"text": value.decode()} if isinstance(value, bytes) else {"json": value}


def _encode(message: Message, blobs: list[bytes | memoryview], now: float) -> list[Any]:
    if isinstance(message, Submit):
        request = message.request
        client = request.client
        return ["submit", message.id, request.model, now - request.arrived_s,
                None if request.deadline_s is None else request.deadline_s - now, request.priority,
                None if client is NO_CONTEXT else [client.request_id, client.traceparent],
                dict(request.parameters) if request.parameters else None,
                [_tensor_header(t, blobs) for t in request.inputs], _lengths_header(request.lengths, blobs),
                request.form, request.tenant]
    if isinstance(message, Result):
        return ["result", message.id, message.result.batch_ids,
                [_tensor_header(t, blobs) for t in message.result.outputs], message.result.departed_unix_ns,
                _quota(message.result.quota)]
    if isinstance(message, Failure):
        error = message.error
        # Headers of its own (a quota's Retry-After) travel with it; the class's go without saying.
        own = error.http_headers if error.http_headers is not type(error).http_headers else None
        return ["failure", message.id, type(error).__name__, error.message, own]
    if isinstance(message, Cancel):
        return ["cancel", message.id]
    if isinstance(message, ViewQuestion):
        return ["view", message.id, message.name, list(message.args)]
    if isinstance(message, PredictorQuestion):
        return ["predictor", message.id, message.model, message.what]
    if isinstance(message, Reply):
        return ["reply", message.id, _value(message.value)]
    return ["ask", message.id, message.name]


def _quota(state: QuotaState | None) -> list[list[float] | None] | None:
    """A tenant's rate buckets as the worker tells its client (`wire.ratelimits`), as JSON."""
    if state is None:
        return None
    return [None if bucket is None else [bucket.limit, bucket.remaining, bucket.reset_s]
            for bucket in (state.requests, state.tokens)]


def _quota_state(fields: list[list[float] | None] | None) -> QuotaState | None:
    if fields is None:
        return None
    requests, tokens = (None if bucket is None else Bucket(*bucket) for bucket in fields)
    return QuotaState(requests, tokens)


def encode(messages: list[Message]) -> list[bytes | memoryview]:
    """One frame of `messages`, as the pieces to write."""
    blobs: list[bytes | memoryview] = []
    now = time.monotonic()
    header = orjson.dumps([_encode(message, blobs, now) for message in messages])
    size = _LENGTH.size + len(header) + sum(len(blob) for blob in blobs)
    return [_LENGTH.pack(size), _LENGTH.pack(len(header)), header, *blobs]


# -- decoding ---------------------------------------------------------------------------------

class _Blobs:
    """The frame's tensor bytes, handed out in order as views (no copy)."""

    def __init__(self, body: memoryview) -> None:
        self._body = body
        self._at = 0

    def take(self, size: int) -> memoryview:
        if self._at + size > len(self._body):
            raise ValueError("a frame's tensors run past its end")
        view = self._body[self._at:self._at + size]
        self._at += size
        return view


def _tensor(header: list[Any], blobs: _Blobs) -> Tensor:
    name, datatype, shape, size = header
    blob = blobs.take(size)
    if datatype == JSON:
        return Tensor(name, datatype, rows_tensor(orjson.loads(blob)).data)
    return Tensor(name, datatype, raw.to_array(name, datatype, shape, int(np.prod(shape)), blob))


def _lengths(header: list[Any] | None, blobs: _Blobs) -> np.ndarray | None:
    if header is None:
        return None
    dtype, shape, size = header
    return np.frombuffer(blobs.take(size), np.dtype(dtype)).reshape(shape)


def _error(name: str, message: str, headers: dict[str, str] | None) -> GatewayError:
    """The error the other side raised, as its own class (a GatewayError of wire.errors),
    with the HTTP headers of its own it carried."""
    kind = getattr(errors, name, None)
    if not (isinstance(kind, type) and issubclass(kind, GatewayError)):
        kind = GatewayError
    error = kind(message)
    if headers:
        error.http_headers = headers
    return error


def _unvalue(value: dict[str, Any]) -> Any:
    return value["text"].encode() if "text" in value else value["json"]


def _decode(fields: list[Any], blobs: _Blobs, now: float) -> Message:
    kind, message_id = fields[0], fields[1]
    if kind == "submit":
        model, age_s, remaining_s, priority, client, parameters, tensors, lengths, form, tenant = fields[2:]
        inputs = [_tensor(header, blobs) for header in tensors]
        return Submit(message_id, BatchRequest(
            model, inputs, now - age_s, None if remaining_s is None else now + remaining_s, priority,
            ClientContext(*client) if client is not None else NO_CONTEXT, parameters or NO_PARAMETERS,
            _lengths(lengths, blobs), form, tenant))
    if kind == "result":
        return Result(message_id, BatchResult([_tensor(header, blobs) for header in fields[3]], fields[2], fields[4],
                                              _quota_state(fields[5])))
    if kind == "failure":
        return Failure(message_id, _error(fields[2], fields[3], fields[4]))
    if kind == "cancel":
        return Cancel(message_id)
    if kind == "view":
        return ViewQuestion(message_id, fields[2], tuple(fields[3]))
    if kind == "predictor":
        return PredictorQuestion(message_id, fields[2], fields[3])
    if kind == "reply":
        return Reply(message_id, _unvalue(fields[2]))
    if kind == "ask":
        return Ask(message_id, fields[2])
    raise ValueError(f"unknown message kind {kind!r}")


def decode(body: bytes) -> Iterator[Message]:
    """The messages of one frame's body (what follows its length)."""
    view = memoryview(body)
    (header_size,) = _LENGTH.unpack_from(view)
    start = _LENGTH.size + header_size
    header = orjson.loads(view[_LENGTH.size:start])
    blobs = _Blobs(view[start:])
    now = time.monotonic()
    for fields in header:
        yield _decode(fields, blobs, now)


# -- the connection ---------------------------------------------------------------------------

class ChannelClosed(ConnectionError):
    """The other side has gone."""


class Channel:
    """One side of a batcher-worker connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._queued: list[Message] = []
        self._loop = asyncio.get_running_loop()
        self.closed = False

    def send(self, message: Message) -> None:
        if self.closed:
            raise ChannelClosed("the batcher connection is closed")
        if not self._queued:
            self._loop.call_soon(self._flush)
        self._queued.append(message)

    def _flush(self) -> None:
        queued, self._queued = self._queued, []
        if queued and not self.closed:
            self._writer.writelines(encode(queued))

    async def receive(self) -> list[Message]:
        """The next frame's messages; ChannelClosed when the other side has gone."""
        try:
            head = await self._reader.readexactly(_LENGTH.size)
            (length,) = _LENGTH.unpack(head)
            if length > MAX_FRAME_BYTES:
                raise ConnectionError(f"a frame of {length} bytes")
            body = await self._reader.readexactly(length)
        except (asyncio.IncompleteReadError, ConnectionError) as error:
            self.closed = True
            raise ChannelClosed("the other side closed the connection") from error
        return list(decode(body))

    def close(self) -> None:
        self.closed = True
        self._writer.close()
