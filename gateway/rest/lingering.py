"""A connection closed with its client's body unread, closed so that the client still reads
its answer: the lingering close of nginx (`lingering_close`).

The HTTP front end answers some requests before their body is read (a refusal from the head
alone), and closes the connection when the body still to come is large. A close with unread
data would send a reset, which discards the answer at a client that writes its whole body
before it reads. So such a socket lingers: its sending side is closed first (the answer,
then its end, reach the client), then what the client still sends is read and dropped, for
at most `LINGER_S` and `LINGER_BYTES`, before the close. Each lingering socket counts
against `max_connections` (`ConnectionStats.lingering`) until it closes, and the oldest can
be closed at once to make room. A chunked body Tornado gives up on (it closes, unanswered)
is answered 400 by the stream's close, before it lingers.

It must not know requests, handlers or the server's guards (`gateway.rest.connections`
decides when a body is unread and when to make room): only sockets, Tornado's stream, and
how an error is written to a socket (`gateway.rest.errors`).
"""
from __future__ import annotations

import contextlib
import socket
from typing import Any

import tornado.ioloop
import tornado.iostream

from gateway.observe.metrics import ConnectionStats
from gateway.rest import errors
from wire.errors import InvalidInput

LINGER_S = 5.0                        # a closed connection's unread body is drained this long at most
LINGER_BYTES = 256 * 1024 * 1024      # and this much at most (the largest bodies clients send, refused)


class LingeringStream(tornado.iostream.IOStream):
    """A plain TCP stream whose close, when the client has sent what was not read, lingers
    (see the module): its answer is already in the kernel's send buffer, and a close with
    unread data would reset the connection before the client reads it."""

    body_unread = False  # a request's head is in and its body is not (set by the connection layer's request delegate)

    def __init__(self, sock: socket.socket, lingering: LingeringSockets, **kwargs: Any) -> None:
        super().__init__(sock, **kwargs)
        self.lingering = lingering
        # Nagle's algorithm off for the connection's life (nginx's `tcp_nodelay on`): every
        # answer is written whole, head and body in one write, so holding it back gains nothing.
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def set_nodelay(self, value: bool) -> None:
        """Nothing: the flag is set once, at the accept. Tornado turns it on at the end of each
        answer and off again after it, two system calls a request (1-2% of one's CPU)."""

    def close_fd(self) -> None:
        sock = self.socket
        if self.body_unread and isinstance(self.error, tornado.iostream.UnsatisfiableReadError):
            # Tornado gives up on a body line over its bound (a chunk-size line of 64 bytes or
            # more) by closing, with no answer: the client gets one before the close.
            with contextlib.suppress(OSError):
                sock.send(errors.raw_answer(InvalidInput(f"the chunked body is malformed: {self.error}")), socket.MSG_DONTWAIT)
        try:
            unread = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
        except BlockingIOError:  # nothing waiting now; more may be on its way if a body was cut short
            unread = self.body_unread
        except OSError:  # the connection is already broken
            unread = False
        if not unread:
            super().close_fd()
            return
        self.socket = None  # type: ignore[assignment]  # Tornado's own close_fd leaves it so
        self.lingering.add(sock)


def set_body_unread(stream: tornado.iostream.IOStream, unread: bool) -> None:
    if isinstance(stream, LingeringStream):  # a TLS stream closes at once
        stream.body_unread = unread


class LingeringSockets:
    """A server's sockets lingering at their close, oldest first: each counts against
    max_connections (`ConnectionStats.lingering`) until it closes."""

    def __init__(self, stats: ConnectionStats) -> None:
        self.stats = stats
        self._sockets: dict[_Lingering, None] = {}  # in the order they began

    def add(self, sock: socket.socket) -> None:
        """Half-close `sock` (the answer, then the end of it, reach the client) and let it linger."""
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            sock.close()
            return
        self._sockets[_Lingering(sock, self)] = None
        self.stats.lingering = len(self._sockets)

    def discard(self, lingering: _Lingering) -> None:
        self._sockets.pop(lingering, None)
        self.stats.lingering = len(self._sockets)

    def close_oldest(self) -> bool:
        """Close the socket that has lingered longest, at once; False if none lingers."""
        oldest = next(iter(self._sockets), None)
        if oldest is None:
            return False
        oldest.close()
        return True


class _Lingering:
    """A half-closed socket: what its client still sends is read and dropped, bounded in
    time and bytes, then it is closed."""

    def __init__(self, sock: socket.socket, sockets: LingeringSockets) -> None:
        self.sock = sock
        self.sockets = sockets
        self.left = LINGER_BYTES
        self.loop = tornado.ioloop.IOLoop.current()
        self.loop.add_handler(sock, self._drain, tornado.ioloop.IOLoop.READ)
        self.timer = self.loop.call_later(LINGER_S, self.close)

    def _drain(self, sock: socket.socket, events: int) -> None:
        try:
            # Until the client closes its side too, or has sent as much as it may.
            while self.left > 0 and (data := sock.recv(min(65536, self.left))):
                self.left -= len(data)
        except BlockingIOError:
            return  # all read for now: wait for more, or for the timer
        except OSError:
            pass
        self.close()

    def close(self) -> None:
        if self.sock.fileno() != -1:
            self.loop.remove_timeout(self.timer)
            self.loop.remove_handler(self.sock)
            self.sock.close()
            self.sockets.discard(self)
