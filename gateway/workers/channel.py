"""The frames between the batcher and its workers: pickled messages on a Unix stream.

A frame is a 4-byte big-endian length and a pickle (protocol 5: numpy arrays travel as
their buffers). Both sides trust each other (same user, same machine, a socket in a
private directory), which is what makes pickle acceptable here and nowhere else.

Messages are tuples whose first item says what they are (see `batcher` and `remote`).
`Channel.send` queues a message; once per loop turn everything queued is pickled as one
list into one frame and written at once, so a burst of requests or of a batch's answers
costs one pickle and one write, not one per message.

Tensors travel packed (`pack`, `unpack`): a numeric array as its bytes, dtype and shape,
which pickle copies at memory speed, where an ndarray costs a reduce call and its metadata
each (a third of the batcher's pickling time, profiled, for one-row requests).

It knows asyncio, pickle and the Tensor it carries.
"""
from __future__ import annotations

import asyncio
import pickle
import struct
from typing import Any

import numpy as np

from wire.tensors import Tensor

_LENGTH = struct.Struct(">I")


Packed = tuple[str, str, Any, tuple[int, ...], str]  # name, datatype, bytes (or an object array), shape, dtype


def pack(tensor: Tensor) -> Packed:
    data = tensor.data
    if data.dtype == object:  # BYTES: an array of bytes objects, pickled as it is
        return tensor.name, tensor.datatype, data, data.shape, ""
    return tensor.name, tensor.datatype, data.tobytes(), data.shape, data.dtype.str


def unpack(packed: Packed) -> Tensor:
    name, datatype, data, shape, dtype = packed
    array = data if not dtype else np.frombuffer(data, dtype).reshape(shape)
    return Tensor(name, datatype, array)


class ChannelClosed(ConnectionError):
    """The other side has gone."""


class Channel:
    """One side of a batcher-worker connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._queued: list[tuple[Any, ...]] = []
        self._loop = asyncio.get_running_loop()
        self.closed = False

    def send(self, message: tuple[Any, ...]) -> None:
        if self.closed:
            raise ChannelClosed("the batcher connection is closed")
        if not self._queued:
            self._loop.call_soon(self._flush)
        self._queued.append(message)

    def _flush(self) -> None:
        queued, self._queued = self._queued, []
        if queued and not self.closed:
            body = pickle.dumps(queued, protocol=5)
            self._writer.writelines((_LENGTH.pack(len(body)), body))

    async def receive(self) -> list[tuple[Any, ...]]:
        """The next frame's messages; ChannelClosed when the other side has gone."""
        try:
            head = await self._reader.readexactly(_LENGTH.size)
            (length,) = _LENGTH.unpack(head)
            body = await self._reader.readexactly(length)
        except (asyncio.IncompleteReadError, ConnectionError) as error:
            self.closed = True
            raise ChannelClosed("the other side closed the connection") from error
        messages: list[tuple[Any, ...]] = pickle.loads(body)
        return messages

    def close(self) -> None:
        self.closed = True
        self._writer.close()
