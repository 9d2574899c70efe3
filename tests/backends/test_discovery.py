"""Replicas found by DNS (backends.discovery): each address the url's host name resolves to
is one replica's address, in the url's own form; a lookup that hangs does not hold the exit."""
from __future__ import annotations

import signal
import subprocess

import pytest

from backends.discovery import dns_addresses
from tests.backends.stalled_resolver import NAME
from tests.harness import wait_for
from tests.processes import python_module, simulated_predictor


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


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_sigterm_exits_within_grace_while_a_dns_lookup_hangs(tmp_path, loop):
    """The gateway, in a process whose resolver hangs on the replicas' name once the test
    says so (tests/backends/stalled_resolver.py): with a refresh's lookup hung, SIGTERM
    exits cleanly and the lookup is still hung when it does; the stop never awaited it.
    On either loop: asyncio's default executor and uvloop's thread pool are both joined
    at exit, so neither may run the lookup."""
    predictor = simulated_predictor()
    port = predictor.fields["http"]
    config = tmp_path / "gateway.toml"
    config.write_text(f'[server]\ngrace_s = 1\n[[models]]\nname = "demo"\nbackend = "kserve"\napi = "v1"\n'
                      f'url = "http://{NAME}:{port}"\ndns_replicas = true\n'
                      'dns_refresh_ms = 100\n[[models.inputs]]\nname = "INPUT0"\ndatatype = "FP32"\n'
                      '[[models.outputs]]\nname = "OUTPUT0"\ndatatype = "FP32"\n')
    process = python_module("tests.backends.stalled_resolver", "serve", "--config", str(config), "--http-port", "0",
                            "--grpc-port", "0", "--loop", loop, env={"STALLED_RESOLVER_DIR": str(tmp_path)})
    try:
        (tmp_path / "stall").touch()
        wait_for((tmp_path / "stalled").exists, "a refresh's lookup to hang")
        process.signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=60)  # grace is 1 s: only a stop that awaits the lookup takes this long
        except subprocess.TimeoutExpired:
            pytest.fail("SIGTERM did not end the gateway while a DNS lookup hung")
        assert code == 0, process.log_text()[-2000:]
    finally:
        process.kill()
        predictor.stop()
