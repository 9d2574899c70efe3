"""A hey/ghz-style load generator for HTTP and gRPC endpoints.

    python -m tools.loadgen URL [options]                      # HTTP, like hey
    python -m tools.loadgen HOST:PORT --grpc --call pkg.Service/Method -d JSON   # gRPC, like ghz

Load models
-----------
* Closed loop (default): `-c` workers, each sending its next request as soon as the previous
  one is answered, until `-n` requests have been sent and answered or `-z` has elapsed.
* Open loop (`--rate R`): requests arrive at R per second (Poisson arrivals by default, or
  `--arrivals uniform`), whatever the server's speed; `-c` is then the most requests in
  flight at once. An arrival that finds `-c` requests in flight is not sent and is counted
  as *dropped*; one that the generator itself sends more than `--late-ms` after its
  scheduled time is sent and counted as *late* (the generator could not keep up).

Every run is bounded: by `-n` (default 200, like hey, when neither `-n` nor `-z` is given)
and/or by `-z`. When `-z` elapses, requests still in flight are abandoned and counted as
*unfinished* (not in the latency figures). Each request also has a timeout (`-t`).

HTTP engines: `fast` (default for http://) is a lean keep-alive HTTP/1.1 client on
asyncio.Protocol (one prebuilt request, one connection per worker), about 4x cheaper per
request than aiohttp; `aiohttp` (default for https://, or `--engine aiohttp`) is the
general-purpose client. gRPC uses grpc.aio with the request serialised once from JSON by
the project's generated descriptors (`google.protobuf.json_format`), answers left
undecoded. `--processes N` runs N generator processes (the load split between them) and
merges their results, when one process is the bottleneck.

Statistics: latencies of every answered request (any HTTP status or gRPC code; transport
failures have none), percentiles by the nearest-rank method, a hey-style histogram, the
status distribution and the error distribution (HTTP >= 400 answers with a snippet of
their body, gRPC non-OK codes with their details, transport failures).

Python API (what tools/bench.py uses):

    result = await tools.loadgen.run(tools.loadgen.Config(target=url, ...))
    print(result.format_report()); result.to_dict()
"""
from __future__ import annotations

import argparse
import array
import asyncio
import dataclasses
import json
import math
import multiprocessing
import random
import re
import sys
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

PERCENTILES = (10, 25, 50, 75, 90, 95, 99, 99.9)
DEFAULT_REQUESTS = 200
DEFAULT_CONCURRENCY = 50              # closed loop: workers
DEFAULT_OPEN_LOOP_CONCURRENCY = 1000  # open loop: most requests in flight
HISTOGRAM_BUCKETS = 10
MAX_ERROR_KINDS = 100                 # distinct error messages kept; the rest are pooled
OTHER_ERRORS = "(other errors)"
USER_AGENT = "batching-gateway-loadgen/1"
ENGINES = ("auto", "fast", "aiohttp")
ARRIVALS = ("poisson", "uniform")


# -- configuration ---------------------------------------------------------------------------


@dataclass
class Config:
    """One load run. `requests` and/or `duration` must be set: a run is always bounded."""
    target: str                             # http(s)://host:port/path, or host:port with grpc
    grpc: bool = False
    call: str = ""                          # gRPC: "package.Service/Method" (or ".Method")
    method: str = ""                        # HTTP: default GET, or POST when there is a body
    body: bytes = b""                       # HTTP body; gRPC: the request message as JSON
    headers: tuple[tuple[str, str], ...] = ()  # HTTP headers; gRPC metadata
    content_type: str = ""                  # HTTP: default application/json when there is a body
    requests: int | None = None             # -n
    duration: float | None = None           # -z, seconds
    concurrency: int | None = None          # -c; default 50 (closed) / 1000 (open loop)
    rate: float | None = None               # --rate: open loop, requests/s
    arrivals: str = "poisson"
    late_ms: float = 10.0
    timeout: float = 20.0                   # per request, seconds
    processes: int = 1
    connections: int = 1                    # gRPC channels (each its own TCP connection)
    engine: str = "auto"
    keepalive: bool = True
    progress: bool = False
    seed: int | None = None

    def validate(self) -> Config:
        if self.requests is None and self.duration is None:
            raise ValueError("unbounded run: set requests (-n) and/or duration (-z)")
        if self.requests is not None and self.requests < 1:
            raise ValueError("requests (-n) must be >= 1")
        if self.duration is not None and not self.duration > 0:
            raise ValueError("duration (-z) must be > 0")
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError("concurrency (-c) must be >= 1")
        if self.rate is not None and not self.rate > 0:
            raise ValueError("rate must be > 0 requests/s")
        if self.arrivals not in ARRIVALS:
            raise ValueError(f"arrivals must be one of {', '.join(ARRIVALS)}")
        if not self.timeout > 0:
            raise ValueError("timeout (-t) must be > 0")
        if self.processes < 1 or self.connections < 1:
            raise ValueError("processes and connections must be >= 1")
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}")
        if self.grpc:
            if not self.call:
                raise ValueError("gRPC needs --call package.Service/Method")
        else:
            scheme = urllib.parse.urlsplit(self.target).scheme
            if scheme not in ("http", "https"):
                raise ValueError(f"an HTTP target is a http:// or https:// URL, got {self.target!r}")
            if self.engine == "fast" and scheme != "http":
                raise ValueError("the fast engine speaks plain http://; use --engine aiohttp for https")
        return self

    @property
    def open_loop(self) -> bool:
        return self.rate is not None

    @property
    def workers(self) -> int:
        if self.concurrency is not None:
            return self.concurrency
        return DEFAULT_OPEN_LOOP_CONCURRENCY if self.open_loop else DEFAULT_CONCURRENCY

    @property
    def http_method(self) -> str:
        return (self.method or ("POST" if self.body else "GET")).upper()

    @property
    def http_engine(self) -> str:
        if self.engine != "auto":
            return self.engine
        return "fast" if urllib.parse.urlsplit(self.target).scheme == "http" else "aiohttp"

    def split(self, parts: int) -> list[Config]:
        """The same load cut into `parts` (one per process)."""
        configs = []
        for i in range(parts):
            def share(total: int | None) -> int | None:
                return None if total is None else total // parts + (1 if i < total % parts else 0)
            configs.append(dataclasses.replace(
                self, processes=1, progress=False,
                requests=share(self.requests),
                concurrency=max(1, share(self.workers)),
                rate=None if self.rate is None else self.rate / parts,
                seed=None if self.seed is None else self.seed + i,
            ))
        return [c for c in configs if c.requests is None or c.requests > 0]

    def describe(self) -> dict[str, Any]:
        document = dataclasses.asdict(self)
        try:
            text = self.body.decode()
        except UnicodeDecodeError:
            text = f"<{len(self.body)} binary bytes>"
        document["body"] = text if len(text) <= 4096 else text[:4096] + "..."
        document["body_bytes"] = len(self.body)
        document["headers"] = [list(h) for h in self.headers]
        document["concurrency"] = self.workers
        document["mode"] = "open" if self.open_loop else "closed"
        if not self.grpc:
            document["method"] = self.http_method
            document["engine"] = self.http_engine
        return document


# -- statistics --------------------------------------------------------------------------------


def percentile(sorted_values: Any, p: float) -> float:
    """Nearest rank: the smallest value with at least p% of the values at or below it."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    rank = max(1, math.ceil(round(p / 100.0 * n, 9)))
    return float(sorted_values[min(rank, n) - 1])


def percentiles(values: Any, ps: tuple[float, ...] = PERCENTILES) -> dict[str, float]:
    ordered = sorted(values)
    return {_pkey(p): percentile(ordered, p) for p in ps}


def histogram(values: Any, buckets: int = HISTOGRAM_BUCKETS) -> list[tuple[float, int]]:
    """hey's histogram: `buckets + 1` marks evenly spaced from fastest to slowest; each
    value is counted at the first mark at or above it."""
    if len(values) == 0:
        return []
    lo, hi = min(values), max(values)
    if hi == lo:
        return [(lo, len(values))]
    step = (hi - lo) / buckets
    marks = [lo + step * i for i in range(buckets)] + [hi]
    counts = [0] * len(marks)
    try:
        import numpy as np
        index = np.searchsorted(np.asarray(marks), np.asarray(values, dtype=float), side="left")
        np.clip(index, 0, len(marks) - 1, out=index)
        for i, c in enumerate(np.bincount(index, minlength=len(marks))):
            counts[i] = int(c)
    except ImportError:  # pragma: no cover - numpy is a dependency
        import bisect
        for v in values:
            counts[min(bisect.bisect_left(marks, v), len(marks) - 1)] += 1
    return list(zip(marks, counts))


def _pkey(p: float) -> str:
    return f"{p:g}"


def _is_ok(status: str) -> bool:
    return status == "OK" or (len(status) == 3 and status.startswith("2"))


@dataclass
class Result:
    config: Config
    started_at: float = 0.0                 # unix time
    elapsed_s: float = 0.0
    latencies: array.array = field(default_factory=lambda: array.array("d"))  # seconds, answered requests
    statuses: dict[str, int] = field(default_factory=dict)   # "200", "404" / "OK", "NOT_FOUND"
    errors: dict[str, int] = field(default_factory=dict)     # message -> count
    sent: int = 0                           # requests started
    transport_errors: int = 0               # requests that got no answer at all
    unfinished: int = 0                     # in flight when the run was cut short by -z
    late: int = 0                           # open loop: sent > late_ms behind schedule
    dropped: int = 0                        # open loop: not sent, -c requests in flight
    max_lag_s: float = 0.0                  # open loop: worst lateness of a send
    bytes_received: int = 0
    cpu_s: float = 0.0                      # the generator's own CPU time (all processes)
    processes: int = 1

    @property
    def answered(self) -> int:
        return len(self.latencies)

    @property
    def finished(self) -> int:
        return self.answered + self.transport_errors

    @property
    def ok(self) -> int:
        return sum(n for status, n in self.statuses.items() if _is_ok(status))

    @property
    def rps(self) -> float:
        return self.finished / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        lat = self.latencies
        n = len(lat)
        ms = 1000.0
        return {
            "total_s": self.elapsed_s,
            "sent": self.sent,
            "finished": self.finished,
            "answered": n,
            "ok": self.ok,
            "errors": sum(self.errors.values()),
            "transport_errors": self.transport_errors,
            "unfinished": self.unfinished,
            "slowest_ms": max(lat) * ms if n else None,
            "fastest_ms": min(lat) * ms if n else None,
            "average_ms": sum(lat) / n * ms if n else None,
            "rps": self.rps,
            "ok_rps": self.ok / self.elapsed_s if self.elapsed_s > 0 else 0.0,
            "bytes_received": self.bytes_received,
            "bytes_per_answer": self.bytes_received / n if n else None,
            "late": self.late,
            "dropped": self.dropped,
            "max_lag_ms": self.max_lag_s * ms,
            "cpu_s": self.cpu_s,
            "cpu_us_per_request": self.cpu_s / self.sent * 1e6 if self.sent else None,
            "processes": self.processes,
        }

    def percentiles_ms(self) -> dict[str, float | None]:
        if not self.latencies:
            return {_pkey(p): None for p in PERCENTILES}
        return {k: v * 1000.0 for k, v in percentiles(self.latencies).items()}

    def histogram_ms(self) -> list[dict[str, float]]:
        return [{"le_ms": mark * 1000.0, "count": count} for mark, count in histogram(self.latencies)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool": "tools.loadgen",
            "started_at": self.started_at,
            "config": self.config.describe(),
            "summary": self.summary(),
            "percentiles_ms": self.percentiles_ms(),
            "histogram": self.histogram_ms(),
            "status_codes": dict(sorted(self.statuses.items())),
            "errors": dict(sorted(self.errors.items(), key=lambda kv: -kv[1])),
        }

    def format_report(self) -> str:
        s = self.summary()
        out = ["", "Summary:", f"  Total:\t{self.elapsed_s:.4f} secs"]
        if self.answered:
            out += [f"  Slowest:\t{s['slowest_ms'] / 1000:.4f} secs",
                    f"  Fastest:\t{s['fastest_ms'] / 1000:.4f} secs",
                    f"  Average:\t{s['average_ms'] / 1000:.4f} secs"]
        out.append(f"  Requests/sec:\t{self.rps:.4f}")
        out += ["", f"  Requests:\t{self.sent} sent, {self.finished} finished, {self.ok} ok"
                    + (f", {self.unfinished} unfinished at the end" if self.unfinished else "")]
        if self.answered:
            out += [f"  Total data:\t{self.bytes_received} bytes",
                    f"  Size/answer:\t{self.bytes_received // self.answered} bytes"]
        if self.config.open_loop:
            out += ["", "Open loop:",
                    f"  Target rate:\t{self.config.rate:g} req/s ({self.config.arrivals} arrivals)",
                    f"  Achieved:\t{self.sent / self.elapsed_s if self.elapsed_s else 0:.1f} req/s sent",
                    f"  Late:\t\t{self.late} (sent more than {self.config.late_ms:g} ms behind schedule; "
                    f"worst {self.max_lag_s * 1000:.1f} ms)",
                    f"  Dropped:\t{self.dropped} (not sent: {self.config.workers} already in flight)"]
        if self.answered:
            out += ["", "Response time histogram:"]
            bars = histogram(self.latencies)
            top = max(c for _, c in bars) or 1
            for mark, count in bars:
                out.append(f"  {mark:.3f} [{count}]\t|{'■' * round(40 * count / top)}")
            out += ["", "Latency distribution:"]
            for p, value in self.percentiles_ms().items():
                out.append(f"  {p}% in {value / 1000:.4f} secs")
        if self.statuses:
            out += ["", "Status code distribution:"]
            for status, count in sorted(self.statuses.items()):
                out.append(f"  [{status}]\t{count} responses")
        if self.errors:
            out += ["", "Error distribution:"]
            for message, count in sorted(self.errors.items(), key=lambda kv: -kv[1]):
                out.append(f"  [{count}]\t{message}")
        cpu = s["cpu_us_per_request"]
        out += ["", f"Load generator: {self.processes} process(es), {s['cpu_s']:.2f} s CPU"
                    + (f" ({cpu:.0f} us/request, ceiling ~{1e6 / cpu:.0f} req/s per core)" if cpu else ""), ""]
        return "\n".join(out)

    @classmethod
    def merge(cls, config: Config, parts: list[Result]) -> Result:
        merged = cls(config, processes=len(parts))
        merged.started_at = min(p.started_at for p in parts)
        merged.elapsed_s = max(p.elapsed_s for p in parts)
        for p in parts:
            merged.latencies.extend(p.latencies)
            for key in ("sent", "transport_errors", "unfinished", "late", "dropped", "bytes_received"):
                setattr(merged, key, getattr(merged, key) + getattr(p, key))
            merged.cpu_s += p.cpu_s
            merged.max_lag_s = max(merged.max_lag_s, p.max_lag_s)
            for status, n in p.statuses.items():
                merged.statuses[status] = merged.statuses.get(status, 0) + n
            for message, n in p.errors.items():
                _count_error(merged.errors, message, n)
        return merged

    def to_wire(self) -> dict[str, Any]:
        """Picklable form to send back from a worker process."""
        document = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "config"}
        document["latencies"] = self.latencies.tobytes()
        return document

    @classmethod
    def from_wire(cls, config: Config, document: dict[str, Any]) -> Result:
        latencies = array.array("d")
        latencies.frombytes(document.pop("latencies"))
        return cls(config=config, latencies=latencies, **document)


def _count_error(errors: dict[str, int], message: str, n: int = 1) -> None:
    if message not in errors and len(errors) >= MAX_ERROR_KINDS:
        message = OTHER_ERRORS
    errors[message] = errors.get(message, 0) + n


class Live:
    """Counters a caller can watch while a run goes on, and a way to end it early."""

    def __init__(self) -> None:
        self.sent = 0
        self.finished = 0
        self.inflight = 0
        self.errors = 0
        self._stop: asyncio.Event | None = None

    def stop(self) -> None:
        """End the run now, like -z elapsing (call on the run's event loop)."""
        if self._stop is not None:
            self._stop.set()


# -- engines: one request, answered as (status or None, bytes, error message or None) -------------


def _snippet(body: bytes) -> str:
    text = body[:160].decode("utf-8", "replace")
    return re.sub(r"\s+", " ", text).strip()


def _transport_error(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return f"timeout: no answer within {timeout:g} s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:200]


class _HttpConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection: send a prebuilt request, read one response
    (Content-Length, chunked, or until close; no body for HEAD, 1xx, 204 and 304)."""

    __slots__ = ("transport", "buffer", "waiter", "closed", "head_only", "head", "got_data", "timer")

    def __init__(self, head_only: bool) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future | None = None
        self.closed = False
        self.head_only = head_only
        self.head: tuple[int, int, int, bool] | None = None  # status, header end, length (-1 chunked, -2 to close), close
        self.got_data = False
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        if self.head is not None and self.head[2] == -2:  # body ends with the connection
            status, end, _, _ = self.head
            self._finish(status, bytes(self.buffer[end:]))
        else:
            self.waiter = None
            waiter.set_exception(ConnectionResetError("connection closed by the server"
                                                      + ("" if self.got_data else " before answering")))

    def data_received(self, data: bytes) -> None:
        self.got_data = True
        self.buffer += data
        if self.waiter is not None:
            try:
                self._parse()
            except ValueError as exc:  # a Content-Length or chunk size that is not a number
                self._fail(f"malformed HTTP response: {exc}")

    def send(self, request: bytes, timeout: float) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        self.waiter = waiter = loop.create_future()
        self.head = None
        self.got_data = False
        self.buffer.clear()
        self.timer = loop.call_later(timeout, self._on_timeout)
        self.transport.write(request)
        return waiter

    def _on_timeout(self) -> None:
        waiter, self.waiter = self.waiter, None
        self.abort()
        if waiter is not None and not waiter.done():
            waiter.set_exception(TimeoutError())

    def abort(self) -> None:
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
        if self.transport is not None:
            self.transport.abort()

    def _finish(self, status: int, body: bytes) -> None:
        waiter, self.waiter = self.waiter, None
        if self.timer is not None:
            self.timer.cancel()
        if waiter is not None and not waiter.done():
            waiter.set_result((status, body))

    def _parse(self) -> None:
        buffer = self.buffer
        while self.head is None:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buffer[:end]).decode("latin-1")
            lines = head.split("\r\n")
            try:
                status = int(lines[0].split(" ", 2)[1])
            except (IndexError, ValueError):
                self._fail(f"bad status line {lines[0][:80]!r}")
                return
            if 100 <= status < 200:  # 100 Continue and friends: the real answer follows
                del buffer[:end + 4]
                continue
            length, close = -2, False
            for line in lines[1:]:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name == "content-length":
                    length = int(value.strip())
                elif name == "transfer-encoding" and "chunked" in value.lower():
                    length = -1
                elif name == "connection" and value.strip().lower() == "close":
                    close = True
            if self.head_only or status in (204, 304):
                length = 0
            if length == -2:
                close = True
            self.head = (status, end + 4, length, close)
        status, start, length, close = self.head
        if length >= 0:
            if len(buffer) < start + length:
                return
            body = bytes(buffer[start:start + length])
        elif length == -1:
            body = self._dechunk(start)
            if body is None:
                return
        else:
            return  # until close: connection_lost finishes it
        if close:
            self.abort()
        self._finish(status, body)

    def _dechunk(self, position: int) -> bytes | None:
        buffer, parts = self.buffer, []
        while True:
            line_end = buffer.find(b"\r\n", position)
            if line_end < 0:
                return None
            size = int(bytes(buffer[position:line_end]).split(b";")[0].strip() or b"0", 16)
            position = line_end + 2
            if size == 0:
                # trailers (usually none) end with an empty line
                if buffer.find(b"\r\n\r\n", position - 2) < 0:
                    return None
                return b"".join(parts)
            if len(buffer) < position + size + 2:
                return None
            parts.append(bytes(buffer[position:position + size]))
            position += size + 2

    def _fail(self, message: str) -> None:
        waiter, self.waiter = self.waiter, None
        self.abort()
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionError(message))


class _Slot:
    """Per-worker state of an engine (its connection, or its gRPC channel)."""
    __slots__ = ("connection", "index")

    def __init__(self, index: int) -> None:
        self.connection: Any = None
        self.index = index


class FastHttpEngine:
    def __init__(self, config: Config) -> None:
        parts = urllib.parse.urlsplit(config.target)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.timeout = config.timeout
        self.keepalive = config.keepalive
        self.head_only = config.http_method == "HEAD"
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.request = _build_request(config, path, parts.netloc)

    async def start(self) -> None:
        pass

    def new_slot(self, index: int) -> _Slot:
        return _Slot(index)

    async def call(self, slot: _Slot) -> tuple[str | None, int, str | None]:
        connection: _HttpConnection | None = slot.connection
        reused = connection is not None and not connection.closed
        for attempt in (0, 1):
            try:
                if connection is None or connection.closed:
                    loop = asyncio.get_running_loop()
                    _, connection = await asyncio.wait_for(loop.create_connection(
                        lambda: _HttpConnection(self.head_only), self.host, self.port), self.timeout)
                    slot.connection = connection
                waiter = connection.send(self.request, self.timeout)
                try:
                    status, body = await waiter
                except asyncio.CancelledError:
                    connection.abort()
                    raise
            except (OSError, TimeoutError) as exc:
                slot.connection = None
                if connection is not None:
                    connection.abort()
                # A keep-alive connection the server closed while idle: retry once, fresh.
                if attempt == 0 and reused and isinstance(exc, ConnectionResetError) and not connection.got_data:
                    connection = None
                    continue
                return None, 0, _transport_error(exc, self.timeout)
            if not self.keepalive:
                connection.abort()
                slot.connection = None
            if status >= 400:
                return str(status), len(body), f"HTTP {status}: {_snippet(body)}"
            return str(status), len(body), None
        raise AssertionError("unreachable")

    def release(self, slot: _Slot) -> None:
        if slot.connection is not None:
            slot.connection.abort()
            slot.connection = None

    async def close(self) -> None:
        pass


def _build_request(config: Config, path: str, netloc: str) -> bytes:
    method = config.http_method
    names = {name.lower() for name, _ in config.headers}
    lines = [f"{method} {path} HTTP/1.1"]
    if "host" not in names:
        lines.append(f"Host: {netloc}")
    if "user-agent" not in names:
        lines.append(f"User-Agent: {USER_AGENT}")
    if config.body or method in ("POST", "PUT", "PATCH"):
        if "content-type" not in names:
            lines.append(f"Content-Type: {config.content_type or 'application/json'}")
        lines.append(f"Content-Length: {len(config.body)}")
    if not config.keepalive:
        lines.append("Connection: close")
    lines += [f"{name}: {value}" for name, value in config.headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + config.body


class AiohttpEngine:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.session: Any = None
        self.headers: dict[str, str] = {}

    async def start(self) -> None:
        import aiohttp
        import yarl
        config = self.config
        self.url = yarl.URL(config.target)
        self.headers = {"User-Agent": USER_AGENT}
        if config.body or config.http_method in ("POST", "PUT", "PATCH"):
            self.headers["Content-Type"] = config.content_type or "application/json"
        for name, value in config.headers:
            self.headers[name] = value
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=config.workers, limit_per_host=config.workers,
                                           force_close=not config.keepalive),
            timeout=aiohttp.ClientTimeout(total=config.timeout),
            skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
            auto_decompress=False,
        )
        self._errors = (aiohttp.ClientError, OSError, asyncio.TimeoutError)

    def new_slot(self, index: int) -> _Slot:
        return _Slot(index)

    async def call(self, slot: _Slot) -> tuple[str | None, int, str | None]:
        try:
            async with self.session.request(self.config.http_method, self.url, data=self.config.body or None,
                                            headers=self.headers, allow_redirects=False) as response:
                body = await response.read()
                status = response.status
        except self._errors as exc:
            return None, 0, _transport_error(exc, self.config.timeout)
        if status >= 400:
            return str(status), len(body), f"HTTP {status}: {_snippet(body)}"
        return str(status), len(body), None

    def release(self, slot: _Slot) -> None:
        pass

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()


def grpc_method(call: str) -> tuple[str, Any]:
    """`package.Service/Method` (or `package.Service.Method`) -> (wire path, input message class),
    from the descriptors this project generates (and the gRPC health service)."""
    from google.protobuf import descriptor_pool, message_factory

    from wire.generated import pool
    from wire.generated.inference import grpc_service_pb2  # noqa: F401  (registers its descriptors)

    service_name, _, method_name = call.replace("/", ".").rpartition(".")
    if not service_name or not method_name:
        raise ValueError(f"--call must look like package.Service/Method, got {call!r}")
    service = None
    pools = [pool.POOL, descriptor_pool.Default()]
    try:
        from grpc_health.v1 import health_pb2  # noqa: F401  (registers grpc.health.v1)
    except ImportError:  # pragma: no cover
        pass
    for candidate in pools:
        try:
            service = candidate.FindServiceByName(service_name)
            break
        except KeyError:
            continue
    if service is None:
        raise ValueError(f"unknown gRPC service {service_name!r} (known: inference.GRPCInferenceService, "
                         f"grpc.health.v1.Health)")
    method = service.methods_by_name.get(method_name)
    if method is None:
        raise ValueError(f"service {service_name} has no method {method_name!r} "
                         f"(it has {', '.join(sorted(service.methods_by_name))})")
    return f"/{service.full_name}/{method.name}", message_factory.GetMessageClass(method.input_type)


def grpc_payload(call: str, body: bytes) -> tuple[str, bytes]:
    """The wire path and the serialised request built from JSON (empty body: empty message)."""
    from google.protobuf import json_format
    path, message_class = grpc_method(call)
    message = message_class()
    if body.strip():
        try:
            json_format.Parse(body.decode(), message)
        except json_format.ParseError as exc:
            raise ValueError(f"request JSON does not fit {message_class.DESCRIPTOR.full_name}: {exc}") from None
    return path, message.SerializeToString()


class GrpcEngine:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.path, self.payload = grpc_payload(config.call, config.body)
        self.metadata = tuple((name.lower(), value) for name, value in config.headers) or None
        self.channels: list[Any] = []
        self.callables: list[Any] = []

    async def start(self) -> None:
        import grpc
        self._grpc = grpc
        target = self.config.target.removeprefix("grpc://")
        for i in range(self.config.connections):
            channel = grpc.aio.insecure_channel(target, options=[
                ("grpc.use_local_subchannel_pool", 1),  # each channel its own TCP connection
                ("grpc.max_receive_message_length", -1),
                ("grpc.primary_user_agent", USER_AGENT),
            ])
            self.channels.append(channel)
            # Raw bytes both ways: serialised once, answers never decoded.
            self.callables.append(channel.unary_unary(self.path))

    def new_slot(self, index: int) -> _Slot:
        slot = _Slot(index)
        slot.connection = self.callables[index % len(self.callables)]
        return slot

    async def call(self, slot: _Slot) -> tuple[str | None, int, str | None]:
        try:
            answer = await slot.connection(self.payload, timeout=self.config.timeout, metadata=self.metadata)
        except self._grpc.aio.AioRpcError as exc:
            code = exc.code().name
            return code, 0, f"{code}: {exc.details()}"
        return "OK", len(answer), None

    def release(self, slot: _Slot) -> None:
        pass

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close(grace=None)


def make_engine(config: Config) -> Any:
    if config.grpc:
        return GrpcEngine(config)
    return FastHttpEngine(config) if config.http_engine == "fast" else AiohttpEngine(config)


# -- the run -------------------------------------------------------------------------------------


class _Runner:
    def __init__(self, config: Config, live: Live) -> None:
        self.config = config
        self.live = live
        self.engine = make_engine(config)
        self.result = Result(config)
        self.remaining = config.requests  # None: until the deadline
        self.last_done = 0.0

    def _record(self, latency: float, status: str | None, size: int, error: str | None) -> None:
        result = self.result
        if status is not None:
            result.latencies.append(latency)
            result.statuses[status] = result.statuses.get(status, 0) + 1
            result.bytes_received += size
        else:
            result.transport_errors += 1
        if error is not None:
            _count_error(result.errors, error)
            self.live.errors += 1
        self.live.finished += 1
        self.last_done = time.perf_counter()

    async def _closed_worker(self, index: int) -> None:
        engine, live, clock = self.engine, self.live, time.perf_counter
        slot = engine.new_slot(index)
        call, record = engine.call, self._record
        try:
            while True:
                if self.remaining is not None:
                    if self.remaining <= 0:
                        return
                    self.remaining -= 1
                live.sent += 1
                live.inflight += 1
                started = clock()
                try:
                    status, size, error = await call(slot)
                finally:
                    live.inflight -= 1
                record(clock() - started, status, size, error)
        finally:
            engine.release(slot)

    async def _open_loop(self, end: float | None) -> None:
        config, live, engine = self.config, self.live, self.engine
        loop = asyncio.get_running_loop()
        rng = random.Random(config.seed)
        rate, cap, late_s = config.rate, config.workers, config.late_ms / 1000.0
        poisson = config.arrivals == "poisson"
        idle: list[_Slot] = []
        tasks: set[asyncio.Task] = set()
        counter = 0
        record, clock = self._record, time.perf_counter

        async def one() -> None:
            nonlocal counter
            slot = idle.pop() if idle else engine.new_slot(counter)
            counter += 1
            started = clock()
            try:
                status, size, error = await engine.call(slot)
            except asyncio.CancelledError:
                engine.release(slot)
                raise
            finally:
                live.inflight -= 1
            idle.append(slot)
            record(clock() - started, status, size, error)

        arrivals = 0
        next_at = loop.time() + (rng.expovariate(rate) if poisson else 0.0)
        try:
            while (self.remaining is None or arrivals < self.remaining) and (end is None or next_at < end):
                now = loop.time()
                if next_at > now:
                    await asyncio.sleep(next_at - now)
                    continue
                lag = now - next_at
                arrivals += 1
                if live.inflight >= cap:
                    self.result.dropped += 1
                else:
                    if lag > late_s:
                        self.result.late += 1
                    if lag > self.result.max_lag_s:
                        self.result.max_lag_s = lag
                    live.sent += 1
                    live.inflight += 1
                    task = loop.create_task(one())
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                next_at += rng.expovariate(rate) if poisson else 1.0 / rate
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            for task in tasks:
                task.cancel()
            for slot in idle:
                engine.release(slot)

    async def run(self) -> Result:
        config, live = self.config, self.live
        loop = asyncio.get_running_loop()
        live._stop = stop = asyncio.Event()
        await self.engine.start()
        result = self.result
        cpu0 = time.process_time()
        result.started_at = time.time()
        start = time.perf_counter()
        end = None if config.duration is None else loop.time() + config.duration
        if config.open_loop:
            jobs = [loop.create_task(self._open_loop(end))]
        else:
            workers = config.workers if config.requests is None else min(config.workers, config.requests)
            jobs = [loop.create_task(self._closed_worker(i)) for i in range(workers)]
        failures: list[BaseException] = []

        def on_done(job: asyncio.Task) -> None:
            if not job.cancelled() and job.exception() is not None:
                failures.append(job.exception())  # a bug, not a failed request: end the run
                stop.set()

        for job in jobs:
            job.add_done_callback(on_done)
        everything = asyncio.gather(*jobs, return_exceptions=True)
        stopper = loop.create_task(stop.wait())
        how = "finished"
        try:
            timeout = None if end is None else max(0.0, end - loop.time())
            done, _ = await asyncio.wait({everything, stopper}, timeout=timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
            if everything not in done:
                how = "stopped" if stopper in done else "deadline"
        finally:
            result.unfinished = live.inflight
            for job in jobs:
                job.cancel()
            await asyncio.gather(everything, return_exceptions=True)
            stopper.cancel()
            stopped = time.perf_counter()
            await self.engine.close()
        if failures:
            raise failures[0]
        if how == "deadline":
            result.elapsed_s = config.duration
        elif how == "stopped" or not self.last_done:
            result.elapsed_s = stopped - start
        else:
            result.elapsed_s = self.last_done - start
        result.sent = live.sent
        result.cpu_s = time.process_time() - cpu0
        return result


async def _progress(config: Config, live: Live, started: float, stream: Any) -> None:
    width = 30
    try:
        while True:
            await asyncio.sleep(0.2)
            _draw_progress(config, live.finished, live.errors, started, stream, width)
    except asyncio.CancelledError:
        _draw_progress(config, live.finished, live.errors, started, stream, width)
        stream.write("\n")
        stream.flush()
        raise


def _draw_progress(config: Config, finished: int, errors: int, started: float, stream: Any, width: int) -> None:
    elapsed = time.perf_counter() - started
    fractions = []
    if config.requests:
        fractions.append(finished / config.requests)
    if config.duration:
        fractions.append(elapsed / config.duration)
    fraction = min(1.0, max(fractions)) if fractions else 0.0
    filled = int(width * fraction)
    bar = "=" * filled + (">" if filled < width else "") + " " * (width - filled - 1)
    total = f"/{config.requests}" if config.requests else ""
    rate = finished / elapsed if elapsed > 0 else 0.0
    stream.write(f"\r[{bar}] {fraction * 100:3.0f}%  {finished}{total} done  {rate:,.0f} req/s  "
                 f"{errors} errors  {elapsed:.1f}s ")
    stream.flush()


async def run(config: Config, live: Live | None = None) -> Result:
    """Run one bounded load and return its Result (the Python API)."""
    config.validate()
    if config.processes > 1:
        return await asyncio.get_running_loop().run_in_executor(None, _run_processes, config)
    live = live or Live()
    runner = _Runner(config, live)
    progress = None
    if config.progress:
        progress = asyncio.get_running_loop().create_task(_progress(config, live, time.perf_counter(), sys.stderr))
    try:
        return await runner.run()
    finally:
        if progress is not None:
            progress.cancel()
            await asyncio.gather(progress, return_exceptions=True)


# -- several processes -----------------------------------------------------------------------------


def _child(config: Config, pipe: Any, go: Any, counter: Any) -> None:
    async def main() -> Result:
        live = Live()

        async def publish() -> None:
            while True:
                counter.value = live.finished
                await asyncio.sleep(0.1)

        pipe.send("ready")
        while not go.wait(0.1):
            pass
        task = asyncio.get_running_loop().create_task(publish())
        try:
            return await run(config, live)
        finally:
            task.cancel()
            counter.value = live.finished

    try:
        pipe.send(("result", asyncio.run(main()).to_wire()))
    except BaseException as exc:  # report, never hang the parent
        pipe.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        pipe.close()


def _run_processes(config: Config) -> Result:
    context = multiprocessing.get_context("spawn")  # no fork: grpc and event loops do not survive it
    parts = config.split(config.processes)
    go = context.Event()
    children = []
    for part in parts:
        ours, theirs = context.Pipe()
        counter = context.Value("q", 0, lock=False)
        process = context.Process(target=_child, args=(part, theirs, go, counter), daemon=True)
        process.start()
        children.append((process, ours, counter))
    try:
        for process, pipe, _ in children:
            if not pipe.poll(60) or pipe.recv() != "ready":
                raise RuntimeError("a load generator process did not start")
        go.set()
        started = time.perf_counter()
        results: list[Result | None] = [None] * len(children)
        limit = _time_bound(config) + 60
        while any(r is None for r in results):
            for i, (process, pipe, _) in enumerate(children):
                if results[i] is None and pipe.poll(0):
                    kind, payload = pipe.recv()
                    if kind == "error":
                        raise RuntimeError(f"load generator process failed: {payload}")
                    results[i] = Result.from_wire(parts[i], payload)
                elif results[i] is None and not process.is_alive() and not pipe.poll(0.2):
                    raise RuntimeError(f"load generator process exited with {process.exitcode}")
            if config.progress:
                _draw_progress(config, sum(c.value for _, _, c in children), 0, started, sys.stderr, 30)
            if time.perf_counter() - started > limit:
                raise RuntimeError("load generator processes did not finish in time")
            time.sleep(0.1)
        if config.progress:
            sys.stderr.write("\n")
        return Result.merge(config, [r for r in results if r is not None])
    finally:
        for process, pipe, _ in children:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
            pipe.close()


def _time_bound(config: Config) -> float:
    """A generous upper bound of a run's length, for watchdogs."""
    if config.duration is not None:
        return config.duration + config.timeout
    per = config.timeout * math.ceil(config.requests / max(1, config.workers))
    if config.rate:
        per = max(per, config.requests / config.rate + config.timeout)
    return per


# -- command line ----------------------------------------------------------------------------------


def parse_duration(text: str) -> float:
    """`10s`, `500ms`, `2m`, `1h`, or plain seconds."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h)?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 10s, 500ms, 2m)")
    value = float(match.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[match.group(2)]
    if value <= 0:
        raise argparse.ArgumentTypeError("a duration must be > 0")
    return value


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"a header looks like 'Name: value', got {text!r}")
    return name.strip(), value.strip()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tools.loadgen",
        description="hey/ghz-style load generator: closed loop (-c workers) or open loop (--rate), "
                    "HTTP or gRPC, always bounded by -n and/or -z.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  python -m tools.loadgen -z 10s -c 5 -m POST -d '{\"instances\": [[1,2,3,4]]}' \\\n"
               "      http://127.0.0.1:8080/v1/models/demo:predict\n"
               "  python -m tools.loadgen --grpc --call inference.GRPCInferenceService/ModelInfer -c 16 -n 5000 \\\n"
               "      -d '{\"model_name\":\"demo\",\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,4],"
               "\"contents\":{\"fp32_contents\":[1,2,3,4]}}]}' 127.0.0.1:8081\n"
               "  python -m tools.loadgen --rate 500 -z 30s -D body.json http://127.0.0.1:8080/v1/models/demo:predict",
    )
    p.add_argument("target", help="URL (HTTP) or host:port (gRPC)")
    p.add_argument("-n", dest="requests", type=int, help=f"requests to send (default {DEFAULT_REQUESTS} without -z)")
    p.add_argument("-z", dest="duration", type=parse_duration, help="duration to send for, e.g. 10s, 500ms, 2m")
    p.add_argument("-c", dest="concurrency", type=int,
                   help=f"closed loop: concurrent workers (default {DEFAULT_CONCURRENCY}); "
                        f"open loop: most requests in flight (default {DEFAULT_OPEN_LOOP_CONCURRENCY})")
    p.add_argument("--rate", type=float, help="open loop: target arrivals per second")
    p.add_argument("--arrivals", choices=ARRIVALS, default="poisson", help="open loop arrival process")
    p.add_argument("--late-ms", type=float, default=10.0, help="open loop: a send this late is counted as late")
    p.add_argument("-t", dest="timeout", type=float, default=20.0, help="timeout of each request, seconds (default 20)")
    p.add_argument("-m", dest="method", default="", help="HTTP method (default GET, or POST with a body)")
    body = p.add_mutually_exclusive_group()
    body.add_argument("-d", dest="data", help="request body (gRPC: the request message as JSON)")
    body.add_argument("-D", dest="data_file", help="read the request body (gRPC: JSON) from this file")
    p.add_argument("-H", dest="headers", action="append", type=_header, default=[],
                   help="header 'Name: value' (gRPC: metadata); repeatable")
    p.add_argument("-T", dest="content_type", default="", help="HTTP Content-Type (default application/json with a body)")
    p.add_argument("--disable-keepalive", action="store_true", help="HTTP: a new connection per request")
    p.add_argument("--engine", choices=ENGINES, default="auto",
                   help="HTTP client: fast (own HTTP/1.1 client; default for http://) or aiohttp (default for https://)")
    p.add_argument("--grpc", action="store_true", help="the target is a gRPC server (host:port, plaintext)")
    p.add_argument("--call", default="", help="gRPC method, e.g. inference.GRPCInferenceService/ModelInfer")
    p.add_argument("--connections", type=int, default=1, help="gRPC: channels (TCP connections) to spread calls over")
    p.add_argument("--processes", type=int, default=1, help="generator processes (the load is split between them)")
    p.add_argument("--seed", type=int, help="random seed of the open loop's arrivals")
    progress = p.add_mutually_exclusive_group()
    progress.add_argument("--progress", action="store_true", default=None, help="progress bar on stderr (default: if a TTY)")
    progress.add_argument("--no-progress", dest="progress", action="store_false")
    p.add_argument("--json", dest="json_file", help="write the full result as JSON to this file ('-' for stdout)")
    p.add_argument("-q", "--quiet", action="store_true", help="do not print the summary")
    return p


def config_from_args(args: argparse.Namespace) -> Config:
    if args.data_file:
        with open(args.data_file, "rb") as handle:
            body = handle.read()
    else:
        body = (args.data or "").encode()
    requests = args.requests
    if requests is None and args.duration is None:
        requests = DEFAULT_REQUESTS
    progress = args.progress if args.progress is not None else sys.stderr.isatty()
    return Config(
        target=args.target, grpc=args.grpc, call=args.call, method=args.method, body=body,
        headers=tuple(args.headers), content_type=args.content_type, requests=requests,
        duration=args.duration, concurrency=args.concurrency, rate=args.rate, arrivals=args.arrivals,
        late_ms=args.late_ms, timeout=args.timeout, processes=args.processes, connections=args.connections,
        engine=args.engine, keepalive=not args.disable_keepalive, progress=progress, seed=args.seed,
    ).validate()


def write_json(result: Result, destination: str) -> None:
    text = json.dumps(result.to_dict(), indent=2)
    if destination == "-":
        sys.stdout.write(text + "\n")
    else:
        with open(destination, "w") as handle:
            handle.write(text + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
        if config.grpc:
            grpc_payload(config.call, config.body)  # fail on a bad method or JSON before starting
    except (ValueError, OSError) as exc:
        parser.error(str(exc))
    try:
        result = asyncio.run(run(config))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    if not args.quiet and args.json_file != "-":
        print(result.format_report())
    if args.json_file:
        write_json(result, args.json_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
