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
from gateway.grpc.rpc import refuse
from gateway.service import InferenceService
from wire.errors import Unauthenticated

EXEMPT_PREFIX = "/grpc.health.v1.Health/"
EXEMPT_METHODS = frozenset({
    "/inference.GRPCInferenceService/ServerLive",
    "/inference.GRPCInferenceService/ServerReady",
    "/org.pytorch.serve.grpc.inference.InferenceAPIsService/Ping",
})


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    """Refuses a call without the token before its method runs; an inference call is
    counted all the same (`gateway.grpc.rpc.refuse`)."""

    def __init__(self, token: str, service: InferenceService) -> None:
        self.token = token
        self.service = service

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[grpc.RpcMethodHandler]],
                                details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or details.method.startswith(EXEMPT_PREFIX) or details.method in EXEMPT_METHODS:
            return handler
        metadata = dict(details.invocation_metadata or ())
        try:
            check_bearer(self.token, metadata.get("authorization"))
        except Unauthenticated as error:
            return self._refusal(handler, error)
        return handler

    def _refusal(self, handler: grpc.RpcMethodHandler, error: Unauthenticated) -> grpc.RpcMethodHandler:
        """A handler of the same streaming kind as `handler` that refuses with the error."""
        behaviour = (handler.unary_unary or handler.unary_stream or handler.stream_unary
                     or handler.stream_stream)
        front_end = getattr(behaviour, "front_end", None)  # set by @rpc and @stream (gateway.grpc.rpc)
        service = self.service

        async def abort(request: Any, context: grpc.aio.ServicerContext) -> None:
            await refuse(service, front_end, request, context, error)
        return _same_kind(handler, abort)


def _same_kind(handler: grpc.RpcMethodHandler, abort: Callable[[Any, grpc.aio.ServicerContext], Awaitable[None]]
               ) -> grpc.RpcMethodHandler:
    """`abort` as a handler of the same streaming kind as `handler`, reading the same
    messages (so a refused call still names its model)."""
    if handler.request_streaming and handler.response_streaming:
        make = grpc.stream_stream_rpc_method_handler
    elif handler.request_streaming:
        make = grpc.stream_unary_rpc_method_handler
    elif handler.response_streaming:
        make = grpc.unary_stream_rpc_method_handler
    else:
        make = grpc.unary_unary_rpc_method_handler
    return make(abort, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
