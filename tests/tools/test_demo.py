"""tools/demo.py, the README's "Coming from TorchServe" walk, run as a user types it: its three
commands (the demo's folder, which the README shows as `/tmp/batching-gateway-demo-XXXXXXXX`,
and the gateway's ports changed, to a fresh folder and free ones) start the real TorchServe
and Triton, the gateway on the config the demo printed, and upload the demo's picture with
curl; Triton's answer, through the gateway, is TorchServe's own for that picture (the same
document; each route's bytes and Content-Type as docs/from-torchserve.md says); Ctrl-C's
signal stops the demo and, by their PIDs, both servers. Without `--workdir`, each run's
folder is its own."""
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
import urllib.request
from collections.abc import Iterator

import pytest

from tests.predictors import images
from tests.predictors.harness import http_post_json
from tests.predictors.torchserve_clients import CURL_ENV
from tests.processes import gateway
from tests.readme import commands_after
from tools.demo import WORKDIR_PREFIX, run_folder
from tools.processes import ServerProcess, is_alive

SHOWN_WORKDIR = f"/tmp/{WORKDIR_PREFIX}XXXXXXXX"  # the README's stand-in for the folder a run makes


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
    assert serve == f".venv/bin/batching-gateway serve --config {SHOWN_WORKDIR}/gateway.toml"
    assert upload == f"curl -T {SHOWN_WORKDIR}/kitten.png localhost:8080/predictions/image"

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
            command = upload.replace(SHOWN_WORKDIR, str(workdir)).replace("localhost:8080", address)
            done = subprocess.run(shlex.split(command), capture_output=True, env=CURL_ENV, timeout=60, check=True)
            from_triton = json.loads(done.stdout)
            via_torchserve = subprocess.run(shlex.split(command.replace("/image", "/image_torchserve")),
                                            capture_output=True, env=CURL_ENV, timeout=60, check=True).stdout
            # The same document, not the same bytes (docs/from-torchserve.md says which): Triton's
            # route answers the moved model's text as it wrote it, TorchServe's compact JSON.
            shown = {route: content_type(f"{server.http_url}/predictions/{route}", images.png(1))
                     for route in ("image", "image_torchserve")}
            assert shown == {"image": "text/plain; charset=utf-8", "image_torchserve": "application/json"}
            assert done.stdout == json.dumps(from_triton, indent=2).encode() and b"\n" not in via_torchserve
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


def content_type(url: str, upload: bytes) -> str:
    """The Content-Type of the answer to `curl -T` (a PUT of the file; urllib would declare it a
    form, curl declares none: a raw body either way)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never a proxy
    request = urllib.request.Request(url, data=upload, method="PUT", headers={"Content-Type": "application/octet-stream"})
    with opener.open(request, timeout=60) as answer:
        return answer.headers["Content-Type"]


def test_each_run_gets_a_folder_of_its_own_that_only_its_user_can_read():
    """Without --workdir: a new folder in the temporary directory, never a fixed one that
    every user of the machine shares (the demo removes it when it stops)."""
    first, second = run_folder(), run_folder()
    try:
        assert first != second and first.name.startswith(WORKDIR_PREFIX)
        assert first.parent == pathlib.Path(tempfile.gettempdir()).resolve()
        assert first.stat().st_mode & 0o777 == 0o700
    finally:
        for folder in (first, second):
            shutil.rmtree(folder, ignore_errors=True)
