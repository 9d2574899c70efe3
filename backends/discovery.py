"""Where a model's replicas are found at run time: DNS.

A Kubernetes headless Service (`clusterIP: None`) answers a lookup of its name with the
address of every ready pod behind it; a predictor Deployment scaled by an autoscaler is
found by re-resolving it (`backends.replicas.ReplicaSet` does so periodically). Each
address becomes one replica's address in the configured url's form: the same scheme, port
and path, with the host replaced by the address (IPv6 in brackets).

It knows URLs and the resolver, not the replica set or any protocol.
"""
from __future__ import annotations

import asyncio
import ipaddress
import socket
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

    async def resolve() -> list[str]:
        found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return sorted({at(str(sockaddr[0])) for *_, sockaddr in found})

    return resolve
