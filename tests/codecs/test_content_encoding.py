"""wire/codecs/content_encoding.py: request codings, bounded incremental decoding (chunked,
multi-member gzip, zlib and raw deflate, the exact limit, corrupt data), Accept-Encoding
negotiation and the encoded forms."""
from __future__ import annotations

import gzip
import time
import tracemalloc
import zlib

import pytest

from wire.codecs import content_encoding as ce
from wire.errors import InvalidInput, PayloadTooLarge, UnsupportedEncoding

BODY = b'{"instances": [[1.0, 2.0, 3.0]]}' * 200


def raw_deflate(body: bytes) -> bytes:
    deflater = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return deflater.compress(body) + deflater.flush()


def byte_chunks(data: bytes) -> list[bytes]:
    return [data[i:i + 1] for i in range(len(data))]


@pytest.mark.parametrize("header, coding", [
    (None, None), ("", None), ("identity", None), (" Identity ", None),
    ("gzip", "gzip"), ("GZIP", "gzip"), ("x-gzip", "gzip"), (" deflate ", "deflate"),
    # identity is no coding at all, wherever it stands in a list (RFC 9110)
    ("gzip, identity", "gzip"), ("identity, deflate", "deflate"), ("identity, identity", None),
])
def test_request_codings(header, coding):
    assert ce.request_coding(header) == coding


@pytest.mark.parametrize("header", ["br", "zstd", "compress", "gzip, deflate", "gzip;q=1"])
def test_other_request_codings_are_unsupported(header):
    with pytest.raises(UnsupportedEncoding, match="is not supported: send the body as gzip, deflate or identity"):
        ce.request_coding(header)
    assert UnsupportedEncoding.http_status == 415


@pytest.mark.parametrize("coding, data", [
    ("gzip", gzip.compress(BODY)),
    ("deflate", zlib.compress(BODY)),
    ("deflate", raw_deflate(BODY)),
], ids=["gzip", "zlib-deflate", "raw-deflate"])
@pytest.mark.parametrize("split", [lambda d: [d], byte_chunks], ids=["whole", "byte-by-byte"])
def test_decode_whole_or_in_any_chunks(coding, data, split):
    assert ce.decode(coding, split(data), len(BODY)) == BODY


def test_gzip_members_are_concatenated():
    data = gzip.compress(b"abc") + gzip.compress(b"") + gzip.compress(b"def")
    assert ce.decode("gzip", [data], 6) == b"abcdef"
    assert ce.decode("gzip", byte_chunks(data), 6) == b"abcdef"
    with pytest.raises(PayloadTooLarge):
        ce.decode("gzip", [data], 5)


@pytest.mark.parametrize("coding, compress", [("gzip", gzip.compress), ("deflate", zlib.compress)])
def test_the_limit_is_on_the_decompressed_size(coding, compress):
    assert ce.decode(coding, [compress(BODY)], len(BODY)) == BODY
    with pytest.raises(PayloadTooLarge, match=f"exceeds the limit of {len(BODY) - 1} bytes once decompressed"):
        ce.decode(coding, [compress(BODY)], len(BODY) - 1)


def test_a_bomb_stops_at_the_limit():
    # 256 MiB of zeros in about 256 KiB: inflating it all takes around a second; the limit stops it at once.
    deflater = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    first = deflater.compress(block) + deflater.flush(zlib.Z_FULL_FLUSH)  # with the gzip header
    piece = deflater.compress(block) + deflater.flush(zlib.Z_FULL_FLUSH)  # the same bytes from now on
    chunks = [first] + [piece] * 255
    started = time.perf_counter()
    with pytest.raises(PayloadTooLarge):
        ce.decode("gzip", chunks, 1 << 20)
    assert time.perf_counter() - started < 0.5


@pytest.mark.parametrize("coding, data, message", [
    ("gzip", b"not gzip at all", "not valid gzip data"),
    ("gzip", gzip.compress(BODY)[:-1], "truncated"),
    ("gzip", b"", "truncated"),
    ("gzip", gzip.compress(BODY) + b"\x00", "truncated"),  # a second member that never starts
    ("deflate", b"\x78\x9c" + b"\xff" * 10, "not valid deflate data"),
    ("deflate", zlib.compress(BODY)[:-4], "truncated"),
    ("deflate", zlib.compress(BODY) + b"more", "data after the end of its stream"),
    ("deflate", raw_deflate(BODY) + b"more", "data after the end of its stream"),
])
def test_corrupt_data_is_invalid_input_naming_the_problem(coding, data, message):
    with pytest.raises(InvalidInput, match=message) as raised:
        ce.decode(coding, [data], 1 << 20)
    assert type(raised.value) is InvalidInput


@pytest.mark.parametrize("accept, coding", [
    ("gzip", "gzip"), ("deflate", "deflate"), ("gzip, deflate", "gzip"), ("deflate, gzip", "gzip"),
    ("deflate;q=1.0, gzip;q=0.5", "deflate"), ("gzip;q=0.5, deflate;q=0.5", "gzip"), ("x-gzip", "gzip"),
    ("*", "gzip"), ("gzip;q=0, *", "deflate"), ("*;q=0", None), ("br, zstd", None), ("identity", None),
    ("gzip;q=0", None), ("gzip;q=oops, deflate", "deflate"), ("", None), (" GZip ; Q=0.7 ", "gzip"),
])
def test_negotiate(accept, coding):
    assert ce.negotiate(accept) == coding


def test_encode():
    small = b"x" * (ce.MIN_ENCODED_BYTES - 1)
    assert ce.encode("gzip", small) is None and ce.encode("deflate", small) is None
    body = b"y" * ce.MIN_ENCODED_BYTES
    gzipped, deflated = ce.encode("gzip", body), ce.encode("deflate", body)
    assert gzipped is not None and gzipped[:2] == b"\x1f\x8b" and gzip.decompress(gzipped) == body
    # HTTP's deflate is the zlib format (what tritonclient's zlib.decompress reads), never raw deflate.
    assert deflated is not None and deflated[0] == 0x78 and zlib.decompress(deflated) == body


def test_sniffing_a_message_keeps_none_of_it():
    """Every gRPC request message is sniffed: none may outlive its request (a cache once kept
    the last 64 distinct messages, up to 64 x max_body_bytes per process)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for index in range(20):
            message = bytes([index]) * (4 << 20)  # distinct 4 MiB messages
            assert ce.sniff(message) is None
            del message
        assert tracemalloc.get_traced_memory()[0] - before < 1 << 20  # 80 MiB passed through, none kept
    finally:
        tracemalloc.stop()
