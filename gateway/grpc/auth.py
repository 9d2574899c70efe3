"""A grpc.aio interceptor applying the front door (gateway.access.front_door) to every call except the
health probes: a call without a key the door admits is refused UNAUTHENTICATED before its
method runs; an admitted inference call runs with its tenant's name in `rpc.TENANT`, which
its Call takes (`rpc.read_client`). A key is read from `authorization` (or `x-api-key`,
`api-key`) metadata, or from its binary twin (`authorization-bin`), which carries a key
past ASCII.

The probes open without a token are the same over both protocols: server liveness and
readiness (HTTP `/v2/health/live`, `/v2/health/ready`, `/ping`; gRPC `ServerLive`,
`ServerReady`, TorchServe's `Ping`, and the standard `grpc.health.v1.Health`). Model-level
endpoints name a model, so they need the token on both."""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from gateway.access.front_door import API_KEY_HEADERS
from gateway.grpc.rpc import TENANT, refuse
from gateway.service import InferenceService
from wire.errors import Unauthenticated

EXEMPT_PREFIX = "/grpc.health.v1.Health/"
EXEMPT_METHODS = frozenset({
    "/inference.GRPCInferenceService/ServerLive",
    "/inference.GRPCInferenceService/ServerReady",
    "/org.pytorch.serve.grpc.inference.InferenceAPIsService/Ping",
})


class KeyInterceptor(grpc.aio.ServerInterceptor):
    """Refuses a call without a key the service's door admits (read at each call: a reload
    replaces it) before its method runs; an inference call is counted all the same
    (`gateway.grpc.rpc.refuse`). An admitted inference call runs as what the door admitted
    (`gateway.access.front_door.Admitted`: the tenant's name and its key's digest), which the service
    checks again at each of its messages."""

    def __init__(self, service: InferenceService) -> None:
        self.service = service

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[grpc.RpcMethodHandler]],
                                details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or details.method.startswith(EXEMPT_PREFIX) or details.method in EXEMPT_METHODS:
            return handler
        metadata = dict(details.invocation_metadata or ())
        authorization = _text(metadata, "authorization")
        api_key = None
        if authorization is None:
            api_key = next((value for value in (_text(metadata, name) for name in API_KEY_HEADERS)
                            if value is not None), None)
        try:
            tenant = self.service.door.admit(authorization, api_key)
        except Unauthenticated as error:
            return self._refusal(handler, error)
        if _front_end(handler) is None:
            return handler
        # The token's too (a nameless tenant): what the call was admitted with is checked again
        # when it is served (gateway.access.front_door), so it must reach the call.
        return _as_tenant(handler, tenant)

    def _refusal(self, handler: grpc.RpcMethodHandler, error: Unauthenticated) -> grpc.RpcMethodHandler:
        """A handler of the same streaming kind as `handler` that refuses with the error."""
        front_end = _front_end(handler)
        service = self.service

        async def refusal(request: Any, context: grpc.aio.ServicerContext) -> None:
            await refuse(service, front_end, request, context, error)
        return _same_kind(handler, refusal)


def _text(metadata: dict[str, Any], name: str) -> str | None:
    """The metadata `name` as text: its ASCII value, else its binary twin `<name>-bin` read as
    UTF-8 (gRPC's metadata values are printable ASCII: a key past it travels as bytes, e.g.
    `authorization-bin: Bearer <key>`). A value sent past ASCII all the same reaches here as
    grpc decoded it, UTF-8."""
    value = metadata.get(name)
    if value is None:
        sent = metadata.get(name + "-bin")
        if isinstance(sent, bytes):
            return sent.decode("utf-8", "surrogateescape")
    return value


def _front_end(handler: grpc.RpcMethodHandler) -> str | None:
    """The front end of an inference method (set by @rpc and @stream, gateway.grpc.rpc); None
    for any other method."""
    behaviour = handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream
    return getattr(behaviour, "front_end", None)


def _as_tenant(handler: grpc.RpcMethodHandler, tenant: str) -> grpc.RpcMethodHandler:
    """An inference method's handler that runs it with `tenant` in `TENANT`. Our inference
    methods are coroutines (a stream writes its answers with context.write), so the variable
    is set in the method's own context, and in the tasks it starts."""
    behaviour = handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream

    async def run(request: Any, context: grpc.aio.ServicerContext) -> Any:
        TENANT.set(tenant)
        return await behaviour(request, context)
    return _same_kind(handler, run)


def _same_kind(handler: grpc.RpcMethodHandler, method: Callable[[Any, grpc.aio.ServicerContext], Awaitable[None]]
               ) -> grpc.RpcMethodHandler:
    """`method` as a handler of the same streaming kind as `handler`, reading the same
    messages (so a refused call still names its model)."""
    if handler.request_streaming and handler.response_streaming:
        make = grpc.stream_stream_rpc_method_handler
    elif handler.request_streaming:
        make = grpc.stream_unary_rpc_method_handler
    elif handler.response_streaming:
        make = grpc.unary_stream_rpc_method_handler
    else:
        make = grpc.unary_unary_rpc_method_handler
    return make(method, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
