"""Gateway errors, and the ONE place that maps them to HTTP statuses and gRPC codes.

Every failure a client can see is a `GatewayError` subclass. Front ends never choose a
status themselves: they read `http_status` / `grpc_code` off the error (or, for a client
that went away, `CLIENT_CLOSED_REQUEST`). Messages are meant for clients: they say what was
wrong and never carry stack traces or internal addresses; what they repeat is worded here
too (`echo`: a client-chosen name, bounded; `format_ms`: a duration).
"""
from __future__ import annotations

import math

from wire.ratelimits import QuotaState, openai_headers

MAX_MESSAGE = 2048  # characters of an error's message; the rest is cut
# The status a request is closed with when its client went away before its answer (nginx's
# 499, as access logs write it): counted and logged, never sent, so no error class carries it.
CLIENT_CLOSED_REQUEST = 499


class GatewayError(Exception):
    http_status: int = 500
    # The name of its gRPC status code, as grpc.StatusCode spells it: the gRPC front end and
    # the predictors' clients turn it into the code (wire/ knows no gRPC library).
    grpc_code: str = "INTERNAL"
    http_headers: dict[str, str] = {}  # headers an HTTP answer of this error must carry

    def __init__(self, message: str) -> None:
        # Bounded here, once for every error: a message may repeat what a client chose
        # (names, values), and a gRPC client's limit on trailing metadata is 8 KiB.
        if len(message) > MAX_MESSAGE:
            message = f"{message[:MAX_MESSAGE]}... ({len(message)} characters in all)"
        super().__init__(message)
        self.message = message


class InvalidInput(GatewayError):
    """The request itself is wrong: malformed body, bad shape, unknown datatype, too large."""
    http_status = 400
    grpc_code = "INVALID_ARGUMENT"


class PayloadTooLarge(InvalidInput):
    """The request is larger than a limit allows: its body, its JSON, its instances, or one
    row that costs more than a whole batch may."""
    http_status = 413


class MessageTooLarge(PayloadTooLarge):
    """A gRPC message larger than the limit once decompressed: RESOURCE_EXHAUSTED, as grpc's
    own size limit answers (HTTP's 413 otherwise)."""
    grpc_code = "RESOURCE_EXHAUSTED"


class UnsupportedEncoding(InvalidInput):
    """A body in a content coding the gateway does not speak (HTTP's Content-Encoding). gRPC
    answers a message compression it does not speak with UNIMPLEMENTED, so the pair is that."""
    http_status = 415
    grpc_code = "UNIMPLEMENTED"


class RequestHeadTooLarge(InvalidInput):
    """An HTTP request head over the gateway's bounds, refused before it is routed: the
    request target (414) or the header block (`HeaderFieldsTooLarge`, 431). gRPC's own
    limit on metadata answers RESOURCE_EXHAUSTED."""
    http_status = 414
    grpc_code = "RESOURCE_EXHAUSTED"


class HeaderFieldsTooLarge(RequestHeadTooLarge):
    """An HTTP request's header block over the gateway's bound."""
    http_status = 431


class Unauthenticated(GatewayError):
    """The gateway requires a bearer token (`[server] auth_token_env`) and the request has
    none, or another."""
    http_status = 401
    grpc_code = "UNAUTHENTICATED"
    http_headers = {"WWW-Authenticate": "Bearer"}  # RFC 6750


class PermissionDenied(GatewayError):
    """The request's key is known, but its tenant may not call this model (`models` of its
    `[[tenants]]` table)."""
    http_status = 403
    grpc_code = "PERMISSION_DENIED"


class NotFound(GatewayError):
    """No such endpoint."""
    http_status = 404
    grpc_code = "NOT_FOUND"


class ModelNotFound(NotFound):
    """No such model, or no such version of it."""

    @classmethod
    def unknown(cls, name: str) -> ModelNotFound:
        """A model the gateway does not serve, in Triton's words (its clients and examples
        look for them), then the gateway's own."""
        return cls(f"Request for unknown model: '{echo(name)}' is not found: it is not served by this gateway")


MAX_ECHO = 128  # characters of a client-chosen name an error repeats


def echo(text: str) -> str:
    """A client-chosen name as an error repeats it: bounded, so that an error's size is
    the gateway's choice (a 1 MB name once overflowed the client's metadata limit)."""
    return text if len(text) <= MAX_ECHO else f"{text[:MAX_ECHO]}... ({len(text)} characters)"


def format_ms(seconds: float) -> str:
    """A duration as an error tells it, in milliseconds: "0.4 ms", not "0 ms", below one.
    The one way a message words a duration, so that every deadline refusal reads alike."""
    milliseconds = seconds * 1000
    return f"{milliseconds:.0f} ms" if milliseconds >= 9.5 or milliseconds == 0 else f"{milliseconds:.2g} ms"


class Overloaded(GatewayError):
    """The model's queue is full: refused at once rather than queued without bound. Like
    every 429, it says when to try again (a queue drains within a second or so)."""
    http_status = 429
    grpc_code = "RESOURCE_EXHAUSTED"
    http_headers = {"Retry-After": "1", "retry-after-ms": "1000"}


# The longest Retry-After a refusal says. A quota's own wait is shorter (the config's minimum
# requests_per_second, 0.001, waits 1,000 s at most); this only keeps a header a number a client reads.
MAX_RETRY_AFTER_S = 3600.0


class RateLimited(GatewayError):
    """The request's tenant is over a quota (requests per second, tokens per minute, or
    requests at once): refused before it is queued, with when to try again: `Retry-After`
    (whole seconds, at least 1 and at most 3,600, `MAX_RETRY_AFTER_S`: what every HTTP client
    reads) and `retry-after-ms` (the same in milliseconds, at least 1: what the `openai`
    client reads first, so that it retries when the bucket holds the request and not a
    whole second later); and the
    tenant's buckets when it was refused (`quota`), as OpenAI's `x-ratelimit-*` headers
    (`wire.ratelimits`), which its clients read on any answer."""
    http_status = 429
    grpc_code = "RESOURCE_EXHAUSTED"

    def __init__(self, message: str, retry_after_s: float = 1.0, quota: QuotaState | None = None) -> None:
        super().__init__(message)
        if not retry_after_s <= MAX_RETRY_AFTER_S:  # NaN too: never a header of hundreds of digits
            retry_after_s = MAX_RETRY_AFTER_S
        self.http_headers = {"Retry-After": str(max(1, math.ceil(retry_after_s))),
                             "retry-after-ms": str(max(1, math.ceil(retry_after_s * 1000))),
                             **openai_headers(quota)}

    @property
    def retry_after_s(self) -> int:
        return int(self.http_headers["Retry-After"])


class Unavailable(GatewayError):
    """The predictor cannot be reached, or the model is not ready, or the gateway is stopping."""
    http_status = 503
    grpc_code = "UNAVAILABLE"


class OverCapacity(Unavailable):
    """The gateway holds its maximum of client connections: a new one is answered and closed."""
    http_headers = {"Retry-After": "1"}


class DeadlineExceeded(GatewayError):
    """The request's deadline (its client's, or the model's `timeout_s` or `slo_ms`, from its
    arrival) passed before its answer: before it was queued, in the queue, or at the predictor."""
    http_status = 504
    grpc_code = "DEADLINE_EXCEEDED"


class BadPredictorAnswer(GatewayError):
    """The predictor answered, but with something we cannot use (wrong count, shape, format)."""
    http_status = 502
    grpc_code = "INTERNAL"


class PredictorRejected(GatewayError):
    """The predictor refused the batch as bad input (a 4xx / INVALID_ARGUMENT of its own)."""
    http_status = 400
    grpc_code = "INVALID_ARGUMENT"


class PredictorFailed(GatewayError):
    """The predictor reported an internal error (5xx / INTERNAL) for the batch."""
    http_status = 502
    grpc_code = "INTERNAL"


class HandlerFailed(PredictorFailed):
    """The predictor's model code raised on the batch, which one row may have caused
    (TorchServe answers any exception in a handler so, an undecodable upload among them):
    the batch is bisected as a rejected one is, and a request alone gets a predictor failure."""
