"""The gRPC plumbing shared by the gRPC predictor clients: one channel and the stub over it.

The gRPC counterpart of `backends.http`: a client holds one `GrpcPredictor` and calls its
predictor's methods through it, by name, as an HTTP client posts to a path. RPC failures
come back as gateway errors (`backends.errors`). It knows no message format (the clients
and `wire.codecs` do) and nothing of the gateway.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from backends import errors
from wire.errors import GatewayError
from wire.tracing import current_batch, predictor_headers

MAX_MESSAGE_BYTES = 256 * 1024 * 1024
PROBE_TIMEOUT_S = 2.0

# How a client names an RPC failure (the predictor's own conventions may need reading).
ErrorTranslator = Callable[[str, grpc.aio.AioRpcError], GatewayError]


def open_channel(address: str, tls: bool = False, ca_file: str = "") -> grpc.aio.Channel:
    """One HTTP/2 channel multiplexes every batch; it reconnects by itself after a restart
    (backoff capped at 1 s, so a predictor that comes back is used again promptly)."""
    options = [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1_000),
    ]
    if not tls:
        return grpc.aio.insecure_channel(address, options=options)
    root = Path(ca_file).read_bytes() if ca_file else None
    return grpc.aio.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=root), options=options)


class GrpcPredictor:
    """One channel to one predictor address, and the stub `make_stub` builds on it."""

    def __init__(self, address: str, model: str, make_stub: Callable[[grpc.aio.Channel], Any], *,
                 tls: bool = False, ca_file: str = "",
                 translate_error: ErrorTranslator = errors.from_grpc_error) -> None:
        self.address = address.removeprefix("grpc://")
        self.model = model
        self.tls = tls
        self.ca_file = ca_file
        self._make_stub = make_stub
        self._translate_error = translate_error
        self._channel: grpc.aio.Channel | None = None
        self._stub: Any = None

    def open(self) -> None:
        """Open the channel (it connects when first used, so the predictor need not be up)."""
        if self._channel is None:
            self._channel = open_channel(self.address, self.tls, self.ca_file)
            self._stub = self._make_stub(self._channel)

    def _method(self, name: str) -> Any:
        self.open()
        return getattr(self._stub, name)

    async def call(self, method: str, request: Any) -> Any:
        """Call `method` for a batch: its request ids and trace context go along as metadata,
        and its clock is stamped (wire.tracing); an RPC failure becomes the matching gateway error."""
        batch = current_batch.get()
        try:
            call = self._method(method)(request, metadata=tuple(predictor_headers().items()))
            if batch is not None:
                # As near the wire as grpc.aio lets us see: the call is started, and its
                # callbacks run when its answer is in, before the awaiting task resumes.
                clock = batch.clock
                clock.leaving()
                call.add_done_callback(lambda _: clock.arrived())
            return await call
        except grpc.aio.AioRpcError as error:
            raise self._translate_error(self.model, error) from None

    async def probe(self, method: str, request: Any) -> Any | None:
        """A short call for readiness and metadata; None if the predictor does not answer."""
        try:
            return await self._method(method)(request, timeout=PROBE_TIMEOUT_S)
        except grpc.aio.AioRpcError:
            return None

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = self._stub = None
