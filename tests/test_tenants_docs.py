"""docs/tenants.md works as written: its config, saved as `tenants.toml` with the keys its
shell block gives (run by bash in a fresh directory, `batching-gateway` being this checkout's
`python -m gateway`), passes `check-config`, and so does it with the page's `[shared]` table
added; the gateway started on it as the block starts it answers the page's Python and curl
examples (only the port changed to the free one the test's gateway got)."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import orjson

from tests.processes import ROOT
from tests.readme import block_after
from tools.processes import ServerProcess

DOC = "docs/tenants.md"
SECTION = "## Tenants in the config"
SERVE = "batching-gateway serve --config tenants.toml"


def page_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", (ROOT / DOC).read_text(), re.S)


def gateway_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def keys_as_the_page_gives_them(directory: Path) -> tuple[dict[str, str], str]:
    """The config saved and the shell block run up to its `serve` line, in `directory`: the
    environment it leaves (its exported keys) and check-config's output."""
    (directory / "tenants.toml").write_text(block_after(SECTION, "toml", DOC))
    lines = block_after(SECTION, "sh", DOC).strip().splitlines()
    assert lines[-1] == SERVE
    script = "\n".join([f"batching-gateway() {{ {shlex.quote(sys.executable)} -m gateway \"$@\"; }}",
                        "set -eu", *lines[:-1], "echo ---", "env -0"])
    done = subprocess.run(["bash", "-c", script], cwd=directory, env=gateway_env(), capture_output=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    checked, _, environment = done.stdout.decode().partition("---\n")
    env = dict(entry.split("=", 1) for entry in environment.split("\0") if "=" in entry)
    return env, checked


def test_every_config_on_the_tenants_page_passes_check_config_as_written(tmp_path):
    toml_blocks = page_blocks("toml")
    assert len(toml_blocks) == 2 and toml_blocks[1].startswith("[shared]")
    env, checked = keys_as_the_page_gives_them(tmp_path)
    assert "3 tenant(s): search, indexing, prometheus" in checked, checked
    # The [shared] table, added to tenants.toml as the page says (check-config asks no Redis).
    config = tmp_path / "tenants.toml"
    config.write_text(config.read_text() + "\n" + toml_blocks[1])
    done = subprocess.run([sys.executable, "-m", "gateway", "check-config", "tenants.toml"], cwd=tmp_path,
                          env={**env, **gateway_env()}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_tenants_page_clients_are_answered_as_written(tmp_path):
    env, _ = keys_as_the_page_gives_them(tmp_path)
    server = ServerProcess([sys.executable, "-m", "gateway", *shlex.split(SERVE)[1:], "--http-port", "0",
                            "--grpc-port", "0", "--log-level", "WARNING"],
                           cwd=tmp_path, env={**env, **gateway_env()}).start()
    try:
        port = server.fields["http"].rsplit(":", 1)[1]
        [snippet] = [block for block in page_blocks("python") if "openai.OpenAI" in block]
        assert snippet.startswith("import os\n")
        done = subprocess.run([sys.executable, "-c", snippet.replace("127.0.0.1:8080", f"127.0.0.1:{port}")],
                              env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert int(done.stdout) > 0  # the embedding's length
        [curl] = [block for block in page_blocks("bash") if "$INDEXING_API_KEY" in block]
        command = re.sub(r"\\\n\s*", " ", curl).strip().replace("127.0.0.1:8080", f"127.0.0.1:{port}")
        done = subprocess.run(["bash", "-c", command + " --fail-with-body -sS"], env=env, capture_output=True,
                              text=True, timeout=30)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "predictions" in orjson.loads(done.stdout)
    finally:
        assert server.stop() == 0
