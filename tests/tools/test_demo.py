"""tools/demo.py, the README's "Coming from TorchServe" walk, run as a user types it: its three
commands (only the demo's folder and the gateway's ports changed, to a fresh folder and free
ones) start the real TorchServe and Triton, the gateway on the config the demo printed, and
upload the demo's picture with curl; Triton's answer, through the gateway, is TorchServe's own
for that picture; Ctrl-C's signal stops the demo and, by their PIDs, both servers."""
from __future__ import annotations

import base64
import json
import pathlib
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator

import pytest

from tests.predictors import images
from tests.predictors.harness import http_post_json
from tests.predictors.torchserve_clients import CURL_ENV
from tests.processes import gateway
from tests.readme import commands_after
from tools.processes import ServerProcess, is_alive

DEFAULT_WORKDIR = "/tmp/batching-gateway-demo"


@pytest.fixture
def workdir() -> Iterator[pathlib.Path]:
    # Short and fresh: TorchServe's worker sockets live under it (AF_UNIX paths), and a user's
    # own demo may be running in the default folder.
    folder = pathlib.Path(tempfile.mkdtemp(prefix="demo-", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_the_readme_walk_from_torchserve_runs_as_typed(workdir: pathlib.Path) -> None:
    start_demo, serve, upload = commands_after("## Coming from TorchServe")
    assert start_demo == ".venv/bin/python -m tools.demo"
    assert serve == f".venv/bin/batching-gateway serve --config {DEFAULT_WORKDIR}/gateway.toml"
    assert upload == f"curl -T {DEFAULT_WORKDIR}/kitten.png localhost:8080/predictions/image"

    log = workdir / "demo.log"
    demo = ServerProcess([sys.executable, *shlex.split(start_demo)[1:], "--workdir", str(workdir)], name="demo",
                         log_path=log, ready_probe=lambda: "Ctrl-C here" in log.read_text(errors="replace"),
                         ready_timeout=600, stop_timeout=60)  # a first run builds the TorchServe and Triton venvs
    started = time.monotonic()
    demo.start()
    try:
        printed = demo.log_text()
        print(f"the demo was ready after {time.monotonic() - started:.1f} s")
        # What it printed is the file it wrote, and the next two commands with that file.
        config_path = pathlib.Path(re.search(r"The gateway's config, (\S+):", printed)[1])
        config_text = config_path.read_text()
        assert config_path == workdir / "gateway.toml" and config_text in printed
        assert f"serve --config {config_path}\n" in printed
        assert f"curl -T {workdir}/kitten.png localhost:8080/predictions/image\n" in printed
        assert (workdir / "kitten.png").read_bytes() == images.png(1)
        pids = [int(pid) for pid in re.findall(r"\(pid (\d+)\)", printed)]
        assert len(pids) == 2 and all(is_alive(pid) for pid in pids)
        models = {model["name"]: model for model in tomllib.loads(config_text)["models"]}
        assert {name: model["backend"] for name, model in models.items()} == \
            {"image": "triton", "image_torchserve": "torchserve"}

        # `batching-gateway serve --config FILE` (python -m gateway: the same entry point), on free ports.
        server = gateway(config_path)
        try:
            address = server.http_address
            command = upload.replace(DEFAULT_WORKDIR, str(workdir)).replace("localhost:8080", address)
            done = subprocess.run(shlex.split(command), capture_output=True, env=CURL_ENV, timeout=60, check=True)
            from_triton = json.loads(done.stdout)
            via_torchserve = subprocess.run(shlex.split(command.replace("/image", "/image_torchserve")),
                                            capture_output=True, env=CURL_ENV, timeout=60, check=True).stdout
        finally:
            assert server.stop() == 0
        # TorchServe itself (its kserve envelope, at the address the config names), without the gateway;
        # JSON said so: TorchServe reads an undeclared body as a form.
        status, own = http_post_json(f"{models['image_torchserve']['url']}/v1/models/image:predict",
                                {"instances": [{"data": base64.b64encode(images.png(1)).decode()}]})
        assert status == 200
        assert from_triton == own["predictions"][0] == json.loads(via_torchserve)
        assert len(from_triton) == 5 and list(from_triton) == sorted(from_triton, key=from_triton.get, reverse=True)
    finally:
        demo.signal(signal.SIGINT)  # Ctrl-C
        code = demo.wait(timeout=60)
        demo.stop()
    assert code == 0 and "Stopping TorchServe and Triton." in demo.log_text()
    assert not [pid for pid in pids if is_alive(pid)]
