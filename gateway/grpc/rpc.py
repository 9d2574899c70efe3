"""What every RPC of the gateway's gRPC front end shares: one error path and one count.

`@rpc()` wraps a servicer method: the method raises a GatewayError for anything wrong, and
the decorator aborts the call with the gRPC code the error carries (an unexpected
exception is logged and aborts INTERNAL, with no detail). `@rpc(front_end="...")` marks an
inference method: its outcome is counted once, through the service, with the HTTP status
the outcome pairs with (`wire.errors`), so one label vocabulary serves every front end.

It knows the service's counting seam and the gRPC runtime, no codec and no predictor.
"""
from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from gateway.service import InferenceService
from wire.errors import GatewayError
from wire.tracing import ClientContext

log = logging.getLogger(__name__)
CLIENT_CLOSED_REQUEST = 499  # counted for a call the client cancelled before its answer

Response = TypeVar("Response")
Method = Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[Response]]


class Servicer:
    """A gRPC servicer of the gateway: it reaches models only through the service."""

    def __init__(self, service: InferenceService) -> None:
        self.service = service


def rpc(front_end: str | None = None) -> Callable[[Method[Response]], Method[Response]]:
    def decorate(method: Method[Response]) -> Method[Response]:
        @functools.wraps(method)
        async def call(self: Servicer, request: Any, context: grpc.aio.ServicerContext) -> Response:
            status = 200
            try:
                return await method(self, request, context)
            except GatewayError as error:
                status = error.http_status
                await context.abort(error.grpc_code, error.message)
            except asyncio.CancelledError:
                status = CLIENT_CLOSED_REQUEST
                raise
            except Exception:
                status = 500
                log.exception("unexpected error in %s", method.__name__)
                await context.abort(grpc.StatusCode.INTERNAL, "internal error")
            finally:
                if front_end is not None:
                    self.service.count_request(request.model_name, front_end, status)
            raise AssertionError("unreachable: context.abort raises")
        return call
    return decorate


def client_context(context: grpc.aio.ServicerContext, request_id: str = "") -> ClientContext:
    """The client's request id (the message's, else `x-request-id` metadata) and trace."""
    metadata = dict(context.invocation_metadata() or ())
    return ClientContext(request_id or metadata.get("x-request-id", ""), metadata.get("traceparent", ""))
