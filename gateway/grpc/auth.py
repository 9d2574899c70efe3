"""A grpc.aio interceptor applying gateway.auth to every call except health checks."""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from gateway.auth import check_bearer
from wire.errors import Unauthenticated

EXEMPT_PREFIX = "/grpc.health.v1.Health/"


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, token: str) -> None:
        self.token = token

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[grpc.RpcMethodHandler]],
                                details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or details.method.startswith(EXEMPT_PREFIX):
            return handler
        metadata = dict(details.invocation_metadata or ())
        try:
            check_bearer(self.token, metadata.get("authorization"))
        except Unauthenticated as error:
            return _refusal(handler, error)
        return handler


def _refusal(handler: grpc.RpcMethodHandler, error: Unauthenticated) -> grpc.RpcMethodHandler:
    """A handler of the same streaming kind as `handler` that aborts with the error."""
    async def abort(request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(error.grpc_code, error.message)

    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(abort)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(abort)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(abort)
    return grpc.unary_unary_rpc_method_handler(abort)
