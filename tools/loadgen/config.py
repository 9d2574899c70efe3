"""What one load run is: `Config`, its defaults and its validation.

It holds the run's parameters and the rules between them (a run is always bounded, a
target fits its protocol, the engine fits the scheme) and how to cut one run into several
processes' shares. It must not know how requests are sent (engines), measured (runner) or
reported (report, cli).
"""
from __future__ import annotations

import dataclasses
import urllib.parse
from dataclasses import dataclass
from typing import Any

DEFAULT_REQUESTS = 200
DEFAULT_CONCURRENCY = 50              # closed loop: workers
DEFAULT_OPEN_LOOP_CONCURRENCY = 1000  # open loop: most requests in flight
ENGINES = ("auto", "fast", "aiohttp")
ARRIVALS = ("poisson", "uniform", "bursty")
BURST_PERIOD_S = 1.0  # bursty arrivals: on (at twice the rate) for half of each period, off for the other half


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
        def share(total: int, i: int) -> int:
            return total // parts + (1 if i < total % parts else 0)

        configs = []
        for i in range(parts):
            configs.append(dataclasses.replace(
                self, processes=1, progress=False,
                requests=None if self.requests is None else share(self.requests, i),
                concurrency=max(1, share(self.workers, i)),
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
