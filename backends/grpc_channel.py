"""The one way the gRPC predictor clients open their channel to a predictor."""
from __future__ import annotations

from pathlib import Path

import grpc

MAX_MESSAGE_BYTES = 256 * 1024 * 1024


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
