"""One inference request of an HTTP route from its head to its whole body: `Intake`.

Whichever path serves the route (the lean delegate, `gateway.rest.lean`, or its
`RequestHandler` twin, `gateway.rest.base.EndpointHandler`), the request is judged the same
way, in the same order, from its head alone and before any of its body is read:
1. the key (`gateway.access.front_door`): 401 without a key the door knows;
2. the model and version in the path: 404 for an unknown one;
3. the deadline and priority headers: 400 for a malformed deadline;
4. the declared size: 413 over `max_body_bytes`, or over `max_json_bytes` for a route whose
   whole body is one JSON document (`Route.json_only`: the endpoint's);
5. the Content-Encoding: 415 for one `wire.codecs.content_encoding` does not decode.
Then the body is taken in as it arrives, inflated as it comes when it is compressed (a
large chunk in a thread, off the loop), within `max_body_bytes` whatever its coding.

It knows the service, the call and the codecs' limits, never Tornado's handlers or
connections: a path hands it the head's headers and the body's chunks.
"""
from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable
from typing import Protocol

import tornado.httputil

from gateway.access.front_door import API_KEY_HEADERS, FrontDoor
from gateway.lifecycle import Call
from gateway.models.base import ServedModel
from gateway.service import InferenceService
from wire.codecs import content_encoding
from wire.codecs.json_data import json_too_large
from wire.codecs.limits import Limits
from wire.errors import GatewayError, InvalidInput, PayloadTooLarge
from wire.request import PRIORITY_HEADER, priority_from_header
from wire.tracing import ClientContext

TIMEOUT_HEADER = "X-Request-Timeout-Ms"
_DECIMAL = re.compile(r"[0-9]{1,15}(\.[0-9]{1,9})?")


def header(headers: tornado.httputil.HTTPHeaders, name: str) -> str | None:
    """The header `name` (repeats joined by commas, as Tornado's `get` joins them), or None.
    Read through get_list: HTTPHeaders.get raises and catches a KeyError for each header a
    request does not carry, and most of these are absent (~3% of an HTTP request's CPU)."""
    values = headers.get_list(name)
    return ",".join(values) if values else None


def admit(door: FrontDoor, headers: tornado.httputil.HTTPHeaders) -> str:
    """The tenant whose key the request presents (`FrontDoor.admit`): Authorization, else an
    API-key header (`gateway.access.front_door`), as the text the client sent (`as_sent`)."""
    authorization = as_sent(header(headers, "Authorization"))
    api_key = None
    if authorization is None:
        api_key = next((value for value in (header(headers, name) for name in API_KEY_HEADERS) if value is not None),
                       None)
    return door.admit(authorization, as_sent(api_key))


def as_sent(value: str | None) -> str | None:
    """A header's value as the text its client sent. Tornado decodes a head's bytes as
    latin-1, one character a byte; clients send a key past ASCII as its UTF-8 bytes (curl,
    and any client handed bytes), so those bytes are read again as UTF-8. Bytes that are not
    UTF-8 are kept as they came (surrogateescape: a key's digest is over them)."""
    if value is None or value.isascii():
        return value
    try:
        sent = value.encode("latin-1")
    except UnicodeEncodeError:  # not latin-1's: already text (not a head Tornado parsed)
        return value
    return sent.decode("utf-8", "surrogateescape")


class Route(Protocol):
    """What an intake asks of the route it takes a request in for: an `Endpoint`
    (`gateway.rest.endpoint`), which imports this module, so it is described here and not
    imported (the rest floors, a lint-imports contract)."""

    @property
    def model_in_path(self) -> bool: ...

    @property
    def json_remedy(self) -> str: ...

    def json_only(self, intake: Intake) -> bool: ...


class Intake:
    """One inference request's head judged (`open`) and its body taken in (`data_received`,
    then `body`), for an `Endpoint`. `served` is the model its path names (unset for a route
    whose body names the model)."""

    served: ServedModel

    def __init__(self, service: InferenceService, limits: Limits, endpoint: Route,
                 headers: tornado.httputil.HTTPHeaders, query: str, call: Call) -> None:
        self.service = service
        self.limits = limits
        self.endpoint = endpoint
        self.headers = headers
        self.query = query
        self.call = call
        self._chunks: list[bytes] = []
        self._received = 0
        self._coding: str | None = None
        self._inflater: content_encoding.Inflater | None = None
        self._inflate_error: GatewayError | None = None

    def header(self, name: str) -> str | None:
        return header(self.headers, name)

    def open(self, model: str, version: str | None) -> None:
        """The checks of the module docstring, from the head alone; a GatewayError for the
        first that fails."""
        door = self.service.door
        if not door.open:
            self.call.tenant = admit(door, self.headers)
        if self.endpoint.model_in_path:
            self.served = self.service.model(model, version or "")
        call = self.call
        call.tighten(self.timeout_s())
        call.priority = priority_from_header(self.header(PRIORITY_HEADER))  # an OIP `priority` parameter wins later
        call.client = self.client_context()
        declared_header = self.header("Content-Length")
        declared = int(declared_header) if declared_header is not None and declared_header.isdigit() else 0
        limits = self.limits
        if declared > limits.max_body_bytes:
            raise PayloadTooLarge(
                f"request body of {declared} bytes exceeds the limit of {limits.max_body_bytes} bytes")
        encoding = self.header("Content-Encoding")
        if declared > limits.max_json_bytes and encoding is None and self.endpoint.json_only(self):
            # Not read at all: it could not be parsed.
            raise json_too_large(declared, limits, remedy=self.endpoint.json_remedy)
        self._coding = content_encoding.request_coding(encoding)

    def timeout_s(self) -> float | None:
        value = self.header(TIMEOUT_HEADER)
        if value is None:
            return None
        # Plain decimals only: float() would also take "inf", "1e400" (inf) and "1_000".
        if not _DECIMAL.fullmatch(value.strip()):
            raise InvalidInput(f"{TIMEOUT_HEADER} must be a number of milliseconds, got '{value}'")
        milliseconds = float(value)
        if not milliseconds > 0:
            raise InvalidInput(f"{TIMEOUT_HEADER} must be positive")
        return milliseconds / 1000

    def client_context(self, request_id: str = "") -> ClientContext:
        """The ids and trace context the client sent (`request_id`: one its body gave)."""
        return ClientContext(request_id or self.header("X-Request-Id") or "", self.header("traceparent") or "")

    @property
    def query_arguments(self) -> dict[str, list[bytes]]:
        """The query's arguments, as Tornado parses them (blank values kept)."""
        return tornado.httputil.parse_qs_bytes(self.query, keep_blank_values=True)

    # -- the body ------------------------------------------------------------------------

    def data_received(self, chunk: bytes) -> Awaitable[None] | None:
        self._received += len(chunk)
        if self._received > self.limits.max_body_bytes:
            return None
        if self._coding is None:
            self._chunks.append(chunk)
            return None
        # A compressed body is inflated as it arrives, within the same limit (a zip bomb stops
        # at it). A chunk can inflate about a thousandfold: a large one is inflated in a thread
        # (zlib lets go of the GIL), and Tornado reads the next chunk only once it is done.
        if self._inflater is None:
            self._inflater = content_encoding.Inflater(self._coding, self.limits.max_body_bytes)
        if self._inflate_error is not None:
            return None
        if len(chunk) < content_encoding.SMALL_COMPRESSED_BYTES:
            self._inflate(chunk)
            return None
        return asyncio.ensure_future(asyncio.to_thread(self._inflate, chunk))

    def _inflate(self, chunk: bytes) -> None:
        assert self._inflater is not None
        try:
            self._inflater.feed(chunk)
        except GatewayError as error:  # answered by the endpoint, when it reads the body
            self._inflate_error = error

    @property
    def body(self) -> bytes:
        """The whole body, decoded from its coding; PayloadTooLarge past `max_body_bytes`."""
        if self._received > self.limits.max_body_bytes:
            raise PayloadTooLarge(f"request body exceeds the limit of {self.limits.max_body_bytes} bytes")
        if self._coding is not None:
            if self._inflate_error is not None:
                raise self._inflate_error
            inflater = self._inflater or content_encoding.Inflater(self._coding, self.limits.max_body_bytes)
            self._chunks = [inflater.finish()]
            self._coding = self._inflater = None
        if len(self._chunks) > 1:  # joined once, and the chunks let go: a large body is not held twice
            self._chunks = [b"".join(self._chunks)]
        return self._chunks[0] if self._chunks else b""

    def release(self) -> None:
        """Let go of what the client sent (its connection closed): now, not when the garbage
        collector next finds this request."""
        self._chunks = []
