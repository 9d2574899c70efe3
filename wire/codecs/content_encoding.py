"""HTTP content codings of whole bodies: gzip and deflate, both ways, bytes in and bytes out.

What it holds: which `Content-Encoding` a request body may carry (`request_coding`: gzip,
its alias x-gzip, deflate, identity), decoding such a body within a size limit
(`decode`), which coding an `Accept-Encoding` header lets an answer use (`negotiate`),
and encoding an answer with it (`encode`); and which coding a compressed gRPC message
carries (`sniff`), so that gRPC messages are decoded within the same limit.

The limit applies to the DECOMPRESSED body: `decode` inflates incrementally, chunk by
chunk, and stops at the first byte past the limit, so a small compressed body that would
inflate to gigabytes costs at most the limit (plus one byte) before it is refused with
PayloadTooLarge. A body that is not valid in its coding is InvalidInput naming the problem;
a coding the gateway does not speak is UnsupportedEncoding (415).

"deflate" is the zlib format (RFC 1950 header and Adler-32 trailer around the deflate
data), as RFC 9110 defines it and as tritonclient sends and expects it (`zlib.compress`,
`zlib.decompress`). Answers are always zlib-wrapped; a request body that does not start
with a zlib header is read as raw deflate, which some clients send under that name.

What it must not know: Tornado, handlers, models or the wire format inside the body. It
sees header values and bytes; the HTTP front end decides when to call it.
"""
from __future__ import annotations

import functools
import zlib
from collections.abc import Sequence
from typing import Any

from wire.errors import InvalidInput, PayloadTooLarge, UnsupportedEncoding

GZIP = "gzip"
DEFLATE = "deflate"
_REQUEST_CODINGS = {"gzip": GZIP, "x-gzip": GZIP, "deflate": DEFLATE}
_IDENTITY = ("", "identity")

# Compressed data shorter than this inflates to at most about 4 MB (deflate expands at most
# about 1032-fold), a few milliseconds: the front ends inflate longer data off the event loop.
SMALL_COMPRESSED_BYTES = 4096

# An answer smaller than this is sent as it is: gzip's own framing is 18 bytes, and a small
# body gains nothing on the wire for the CPU it would cost. Clients must accept identity.
MIN_ENCODED_BYTES = 1024
LEVEL = 1  # zlib's fastest: most of the saving on JSON for a fraction of level 6's CPU

_GZIP_WBITS = 16 + zlib.MAX_WBITS   # gzip header and trailer
_ZLIB_WBITS = zlib.MAX_WBITS        # zlib header and trailer: HTTP's "deflate"
_RAW_WBITS = -zlib.MAX_WBITS        # no framing: what some clients send as "deflate"


def request_coding(header: str | None) -> str | None:
    """The coding of a request body from its `Content-Encoding` header: GZIP, DEFLATE, or
    None for an unencoded body. Anything else (including stacked codings) is refused."""
    if header is None:
        return None
    # "gzip, identity" is gzip: identity is no coding at all (RFC 9110), wherever it stands.
    names = [part.strip().lower() for part in header.split(",") if part.strip().lower() not in _IDENTITY]
    if not names:
        return None
    name = names[0] if len(names) == 1 else ", ".join(names)
    coding = _REQUEST_CODINGS.get(name)
    if coding is None:
        raise UnsupportedEncoding(
            f"Content-Encoding '{header.strip()}' is not supported: send the body as gzip, deflate or identity")
    return coding


def decode(coding: str, chunks: Sequence[bytes], max_bytes: int) -> bytes:
    """The body `chunks` carry in `coding`, inflated incrementally to at most `max_bytes`
    (`Inflater`, all at once)."""
    inflater = Inflater(coding, max_bytes)
    for chunk in chunks:
        inflater.feed(chunk)
    return inflater.finish()


class Inflater:
    """One body in `coding`, inflated chunk by chunk as it arrives, to at most `max_bytes`.

    `feed` raises PayloadTooLarge as soon as the output would pass `max_bytes` (nothing more
    is inflated), InvalidInput if the data is corrupt or followed by garbage; `finish`
    InvalidInput if the stream is truncated. A gzip body may hold several members, as RFC
    1952 allows; their contents are concatenated. zlib releases the GIL while it inflates,
    so a caller may feed it from a thread, one chunk at a time."""

    def __init__(self, coding: str, max_bytes: int) -> None:
        self.coding = coding
        self.max_bytes = max_bytes
        self._decompressor: Any = zlib.decompressobj(_GZIP_WBITS) if coding == GZIP else None
        self._head = b""  # deflate: the first bytes, until there are two to tell zlib from raw
        self._parts: list[bytes] = []
        self._size = 0

    def feed(self, chunk: bytes) -> None:
        if self._decompressor is None:
            self._head += chunk
            if len(self._head) >= 2:
                self._start()
            return
        self._inflate(chunk)

    def _start(self) -> None:
        head, self._head = self._head, b""
        self._decompressor = zlib.decompressobj(_deflate_wbits(head[:2]))
        self._inflate(head)

    def _inflate(self, data: bytes) -> None:
        decompressor = self._decompressor
        try:
            while data:
                if decompressor.eof:  # more bytes after a complete stream
                    if self.coding != GZIP:
                        raise InvalidInput("deflate request body has data after the end of its stream")
                    decompressor = self._decompressor = zlib.decompressobj(_GZIP_WBITS)  # the next gzip member
                # At most one byte past the limit: a capped call means the body is too large,
                # an uncapped one has consumed its input (or reached the end of the stream).
                piece = decompressor.decompress(data, self.max_bytes + 1 - self._size)
                self._size += len(piece)
                if self._size > self.max_bytes:
                    raise PayloadTooLarge(
                        f"request body exceeds the limit of {self.max_bytes} bytes once decompressed ({self.coding})")
                self._parts.append(piece)
                data = decompressor.unused_data if decompressor.eof else decompressor.unconsumed_tail
        except zlib.error as error:
            raise InvalidInput(f"request body is not valid {self.coding} data: {error}") from None

    def finish(self) -> bytes:
        """The whole body, inflated."""
        if self._decompressor is None:
            self._start()
        if not self._decompressor.eof:
            raise InvalidInput(f"{self.coding} request body is truncated: its stream does not end")
        parts = self._parts
        return parts[0] if len(parts) == 1 else b"".join(parts)


def _deflate_wbits(head: bytes) -> int:
    # RFC 1950: compression method 8 in the low nibble, and the two bytes a multiple of 31.
    if len(head) == 2 and head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0:
        return _ZLIB_WBITS
    return _RAW_WBITS


def sniff(message: bytes) -> str | None:
    """The coding of a gRPC message that reached the gateway still compressed (its gRPC
    server leaves decompression to it, see gateway/grpc/server.py), told by its magic bytes:
    gzip's 1f 8b, or a zlib header (0x78, header checksum a multiple of 31). Neither can
    start one of the gateway's request messages: 0x1f is no valid protobuf tag, and 0x78
    would be field 15, which none of them has."""
    if message[:2] == b"\x1f\x8b":
        return GZIP
    if len(message) >= 2 and message[0] == 0x78 and (message[0] << 8 | message[1]) % 31 == 0:
        return DEFLATE
    return None


@functools.lru_cache(maxsize=64)  # clients send the same few header values, over and over
def negotiate(accept_encoding: str) -> str | None:
    """The coding an answer may use by the client's `Accept-Encoding`: GZIP or DEFLATE, the
    one with the higher q-value (gzip on a tie, `*` counting for both), or None."""
    weights: dict[str, float] = {}
    for item in accept_encoding.split(","):
        name, _, params = item.partition(";")
        name = name.strip().lower()
        weight = 1.0
        params = params.strip().lower()
        if params:
            key, _, value = params.partition("=")
            if key.strip() == "q":
                try:
                    weight = float(value)
                except ValueError:
                    weight = 0.0
        if name == "x-gzip":
            name = GZIP
        if name in (GZIP, DEFLATE, "*"):
            weights[name] = weight
    star = weights.get("*", 0.0)
    gzip, deflate = weights.get(GZIP, star), weights.get(DEFLATE, star)
    if max(gzip, deflate) <= 0:
        return None
    return GZIP if gzip >= deflate else DEFLATE


def encode(coding: str, body: bytes) -> bytes | None:
    """`body` in `coding` (GZIP or DEFLATE, zlib-wrapped), or None when it is too small to
    be worth encoding (send it as it is)."""
    if len(body) < MIN_ENCODED_BYTES:
        return None
    return zlib.compress(body, LEVEL, _GZIP_WBITS if coding == GZIP else _ZLIB_WBITS)
