"""A grpc.aio interceptor applying gateway.auth to every call except the health probes.

The probes open without a token are the same over both protocols: server liveness and
readiness (HTTP `/v2/health/live`, `/v2/health/ready`, `/ping`; gRPC `ServerLive`,
`ServerReady`, TorchServe's `Ping`, and the standard `grpc.health.v1.Health`). Model-level
endpoints name a model, so they need the token on both."""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from gateway.auth import check_bearer
from wire.errors import Unauthenticated

EXEMPT_PREFIX = "/grpc.health.v1.Health/"
EXEMPT_METHODS = frozenset({
    "/inference.GRPCInferenceService/ServerLive",
    "/inference.GRPCInferenceService/ServerReady",
    "/org.pytorch.serve.grpc.inference.InferenceAPIsService/Ping",
})


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, token: str) -> None:
        self.token = token

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[grpc.RpcMethodHandler]],
                                details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or details.method.startswith(EXEMPT_PREFIX) or details.method in EXEMPT_METHODS:
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
