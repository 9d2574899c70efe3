"""docs/embeddings.md works as written: its simulated-encoder config served by
`batching-gateway serve`, its curl commands and its `openai` snippet (only the port changed
to the free one the test's gateway got), and its predictor configs are valid configs."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib

import orjson

from gateway import config
from tests.kinds.test_tokens import cl100k_file
from tests.processes import ROOT, gateway
from tests.readme import block_after, commands_after

DOC = "docs/embeddings.md"


def test_the_try_it_config_commands_and_python_work_as_written(tmp_path):
    path = tmp_path / "embeddings.toml"
    path.write_text(block_after("## Try it on the simulated encoder", "toml", DOC))
    server = gateway(path)
    try:
        port = server.fields["http"].rsplit(":", 1)[1]
        for command in commands_after("## Try it on the simulated encoder", DOC):
            done = subprocess.run(shlex.split(command.replace("127.0.0.1:8080", f"127.0.0.1:{port}")),
                                  capture_output=True, text=True, timeout=30, check=True)
            answer = orjson.loads(done.stdout)
            if command.endswith("/v1/models"):
                assert [model["id"] for model in answer["data"]] == ["encoder"]
            else:
                assert [item["index"] for item in answer["data"]] == [0, 1]
                assert len(answer["data"][0]["embedding"]) == 32 and answer["usage"]["prompt_tokens"] == 10
        snippet = block_after("With the official client", "python", DOC).replace("127.0.0.1:8080", f"127.0.0.1:{port}")
        done = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["2", "32", "10"]
    finally:
        assert server.stop() == 0


def test_every_predictor_config_on_the_page_is_valid():
    page = (ROOT / DOC).read_text()
    blocks = re.findall(r"```toml\n(.*?)```", page, re.S)
    assert len(blocks) == 4
    for block in blocks:
        document = tomllib.loads(block)
        for model in document["models"]:  # paths on the user's machine
            embeddings = model.get("embeddings", {})
            embeddings.pop("tokenizer", None)
            if "token_ids_file" in embeddings:
                embeddings["token_ids_file"] = cl100k_file()  # the same file, as a package ships it
        parsed = config.parse(document)
        assert all(isinstance(model.kind, config.EmbeddingsConfig) for model in parsed.models)
