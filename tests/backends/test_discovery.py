"""Replicas found by DNS (backends.discovery): each address the url's host name resolves to
is one replica's address, in the url's own form."""
from __future__ import annotations

import pytest

from backends.discovery import dns_addresses


async def test_each_address_of_the_name_is_a_replica_url_with_the_scheme_port_and_path_kept():
    found = await dns_addresses("http://localhost:8080/base")()
    assert "http://127.0.0.1:8080/base" in found
    assert all(url.startswith("http://") and url.endswith(":8080/base") for url in found)
    assert found == sorted(set(found))  # an unchanged answer is the same list


async def test_a_grpc_address_stays_host_and_port_and_ipv6_goes_in_brackets():
    assert await dns_addresses("127.0.0.1:9000")() == ["127.0.0.1:9000"]
    assert await dns_addresses("http://[::1]:8000")() == ["http://[::1]:8000"]


async def test_a_name_that_does_not_resolve_raises_os_error_for_the_replica_set_to_keep_what_it_has():
    with pytest.raises(OSError):
        await dns_addresses("http://no-such-host.invalid:8000")()


def test_a_url_without_a_port_has_no_replica_address_to_make():
    with pytest.raises(ValueError, match="port"):
        dns_addresses("http://predictor.models.svc")
