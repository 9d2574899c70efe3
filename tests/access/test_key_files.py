"""A tenant's `key_file` is read safely (issue 45, item 6): a regular file of at most 64 KiB,
read off the event loop. A named pipe, a device or a larger file is a config error naming
the tenant's key (`tenants[0].key_file`), never what the file holds; a reload meeting one
is refused while the gateway goes on serving (before, a pipe froze it)."""
from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

from gateway import cli
from gateway import config as gateway_config
from gateway.access.keys import MAX_KEY_FILE_BYTES
from tests.harness import http_json, running_gateway

KEY = "sk-file-key-0a1b2c3d4e5f6071"
MODEL = '[[models]]\nname = "demo"\nbackend = "simulated"\n'


def with_key_file(path: Path | str) -> str:
    return MODEL + f'[[tenants]]\nname = "indexing"\nkey_file = "{path}"\n'


def check_config(tmp_path: Path, key_file: Path | str) -> subprocess.CompletedProcess[str]:
    """`check-config` as a command: bounded, so that a read that never ends fails the test."""
    path = tmp_path / "gateway.toml"
    path.write_text(with_key_file(key_file))
    return subprocess.run([sys.executable, "-m", "gateway", "check-config", str(path)], capture_output=True, text=True,
                          timeout=60)


def test_a_named_pipe_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "key.fifo"
    os.mkfifo(fifo)
    done = check_config(tmp_path, fifo)  # before: blocked in open() until the timeout
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "tenants[0].key_file" in done.stderr and "not a regular file" in done.stderr


def test_a_device_is_refused(tmp_path):
    done = check_config(tmp_path, "/dev/null")  # before: read as an empty key ("is empty")
    assert done.returncode == 2 and "tenants[0].key_file" in done.stderr and "not a regular file" in done.stderr


def test_a_file_over_64_kib_is_refused_without_saying_what_it_holds(tmp_path, capsys):
    big = tmp_path / "big.key"
    secret = "sk-not-a-key-but-secret-0011223344"
    big.write_text(secret + "x" * MAX_KEY_FILE_BYTES)  # before: taken whole as a key
    path = tmp_path / "gateway.toml"
    path.write_text(with_key_file(big))
    assert cli.main(["check-config", str(path)]) == 2
    error = capsys.readouterr().err
    assert "tenants[0].key_file" in error and "larger than 64 KiB" in error, error
    assert secret not in error and "xxxx" not in error
    # At the bound it is a key (with its newline, as `echo` writes it).
    fits = tmp_path / "fits.key"
    fits.write_text(KEY + " " * (MAX_KEY_FILE_BYTES - len(KEY) - 1) + "\n")
    path.write_text(with_key_file(fits))
    assert cli.main(["check-config", str(path)]) == 0


def test_a_reload_naming_a_pipe_is_refused_and_the_gateway_goes_on_serving(tmp_path, caplog):
    """The reload reads the file off the loop and refuses the pipe: the running config stays
    and requests keep being answered. Before: the reload blocked the event loop in open()."""
    key_file = tmp_path / "indexing.key"
    key_file.write_text(KEY + "\n")
    fifo = tmp_path / "key.fifo"
    os.mkfifo(fifo)
    path = tmp_path / "gateway.toml"
    document = {"models": [{"name": "demo", "backend": "simulated"}], "server": {"http_port": 0, "grpc_port": 0},
                "tenants": [{"name": "indexing", "key_file": str(key_file)}]}
    with running_gateway(gateway_config.parse(document)) as gw:
        url = f"{gw.http_url}/v1/models/demo:predict"
        headers = {"Authorization": f"Bearer {KEY}"}
        path.write_text(with_key_file(fifo))
        try:
            with caplog.at_level(logging.ERROR, logger="gateway.process.server"):
                gw.call(gw.gateway.reload(str(path)), timeout=30)
            assert "tenants[0].key_file" in caplog.text and "not a regular file" in caplog.text
            assert http_json("POST", url, {"instances": [[1]]}, headers=headers)[0] == 200  # the old key stands
        finally:
            _unblock(fifo)


def _unblock(fifo: Path) -> None:
    """Should a reader be blocked on the pipe (the behaviour before), give it an end of file."""
    def write() -> None:
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # ENXIO when nobody reads it: nothing to do
    thread = threading.Thread(target=write)
    thread.start()
    thread.join(timeout=10)

