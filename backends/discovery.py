"""Where a model's replicas are found at run time: DNS.

A Kubernetes headless Service (`clusterIP: None`) answers a lookup of its name with the
address of every ready pod behind it; a predictor Deployment scaled by an autoscaler is
found by re-resolving it (`backends.replicas.ReplicaSet` does so periodically). Each
address becomes one replica's address in the configured url's form: the same scheme, port
and path, with the host replaced by the address (IPv6 in brackets).

A lookup runs on a daemon thread of its own, one at a time per name: the system's resolver
can hang (an unreachable DNS server, retried for tens of seconds), and a lookup on asyncio's
default executor or uvloop's thread pool would hold the process's exit until it returned,
since both are joined when the loop closes. A hung lookup holds nothing: awaiting it is
cancelled at a stop, the thread ends with the process, and the next refresh waits on the
same lookup instead of starting another thread.

It knows URLs and the resolver, not the replica set or any protocol.
"""
from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from backends.replicas import Resolve


def dns_addresses(url: str) -> Resolve:
    """A resolver of `url`'s host name (an `http(s)://host:port` url, or gRPC's `host:port`)
    into one url per address it resolves to, sorted (so an unchanged answer is the same list)."""
    has_scheme = "://" in url
    parts = urlsplit(url if has_scheme else f"//{url}")
    host, port = parts.hostname, parts.port
    if not host or port is None:
        raise ValueError(f"a replica url found by DNS needs a host name and a port, got {url!r}")

    def at(address: str) -> str:
        shown = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
        netloc = f"{shown}:{port}"
        return urlunsplit(parts._replace(netloc=netloc)) if has_scheme else netloc

    lookup: asyncio.Future[list[Any]] | None = None  # the lookup running now, if any

    async def resolve() -> list[str]:
        nonlocal lookup
        if lookup is None or lookup.done():
            lookup = on_daemon_thread(lambda: socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        found = await asyncio.shield(lookup)  # a cancelled wait leaves the lookup to the next refresh
        return sorted({at(str(sockaddr[0])) for *_, sockaddr in found})

    return resolve


def on_daemon_thread(work: Callable[[], list[Any]]) -> asyncio.Future[list[Any]]:
    """`work()` on a new daemon thread, as a future of this loop: the process may exit while
    it runs (see the module docstring)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[list[Any]] = loop.create_future()
    future.add_done_callback(_retrieved)

    def settle(result: list[Any] | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result or [])

    def run() -> None:
        try:
            result, error = work(), None
        except Exception as failed:  # an OSError (socket.gaierror) for a name that does not resolve
            result, error = None, failed
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits for it any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="dns-lookup", daemon=True).start()
    return future


def _retrieved(future: asyncio.Future[list[Any]]) -> None:
    """A lookup's failure is read by whoever awaits it; one nobody awaits any more (a stop
    came first) must not be reported as never retrieved."""
    if not future.cancelled():
        future.exception()
