"""docs/rerank.md works as written: its simulated-reranker config served by
`batching-gateway serve`, its curl commands and its `cohere` snippet (only the port changed
to the free one the test's gateway got), and its predictor configs are valid configs."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib

import numpy as np
import orjson

from backends.simulated.reranker import score
from gateway import config
from tests.processes import ROOT, gateway
from tests.readme import block_after, commands_after

DOC = "docs/rerank.md"
QUERY = "What is the capital of the United States?"
DOCUMENTS = ["Carson City is the capital of Nevada.", "Washington, D.C. is the capital of the United States.",
             "Capital punishment exists in the United States."]


def best_first() -> list[int]:
    scores = np.array([score(QUERY.encode(), document.encode()) for document in DOCUMENTS])
    return np.argsort(-scores, kind="stable").tolist()


def test_the_try_it_config_commands_and_python_work_as_written(tmp_path):
    path = tmp_path / "rerank.toml"
    path.write_text(block_after("## Try it on the simulated reranker", "toml", DOC))
    server = gateway(path)
    try:
        port = server.fields["http"].rsplit(":", 1)[1]
        for command in commands_after("## Try it on the simulated reranker", DOC):
            done = subprocess.run(shlex.split(command.replace("127.0.0.1:8080", f"127.0.0.1:{port}")),
                                  capture_output=True, text=True, timeout=30, check=True)
            answer = orjson.loads(done.stdout)
            if command.endswith("/v1/models"):
                assert [model["id"] for model in answer["data"]] == ["reranker"]
            else:
                assert [item["index"] for item in answer["results"]] == best_first()[:2]
                assert answer["meta"]["api_version"]["version"] == "2"
                printed = orjson.loads(block_after("## Try it on the simulated reranker", "json", DOC))
                assert {**answer, "id": printed["id"]} == printed  # what the page says it prints, but the id
        snippet = block_after("With the official clients", "python", DOC).replace("127.0.0.1:8080",
                                                                                  f"127.0.0.1:{port}")
        done = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines == [str(best_first()), DOCUMENTS[best_first()[0]]]
    finally:
        assert server.stop() == 0


def test_every_predictor_config_on_the_page_is_valid():
    page = (ROOT / DOC).read_text()
    blocks = re.findall(r"```toml\n(.*?)```", page, re.S)
    assert len(blocks) == 4
    for block in blocks:
        document = tomllib.loads(block)
        for model in document["models"]:
            model.get("rerank", {}).pop("tokenizer", None)  # a path on the user's machine
        parsed = config.parse(document)
        assert all(isinstance(model.kind, config.RerankConfig) for model in parsed.models)


def results_page() -> tuple[str, dict[str, str]]:
    """docs/bench/rerank-results.md's commit, and its checks' measured figures by what they compare."""
    page = (ROOT / "docs/bench/rerank-results.md").read_text()
    commit = re.search(r"; commit (\w+)\.", page)
    assert commit is not None
    figures = dict(re.findall(r"^- (?:PASS|FAIL): (.+?): ([\d.]+x) \(target", page, re.M))
    return commit.group(1), figures


def test_the_rerank_figures_in_the_readme_and_on_the_page_are_the_results_pages():
    commit, figures = results_page()
    score = figures['32 distinct queries: gateway api = "score" vs the server\'s Cohere endpoint, pairs/s']
    oip = figures["32 distinct queries: gateway OIP pairs vs the server's Cohere endpoint, pairs/s"]
    real = figures['real cross-encoder, 32 clients: gateway -> score server (api = "score") vs Infinity alone, pairs/s']
    page = (ROOT / DOC).read_text()
    performance = page[page.index("## Performance"):]
    assert re.search(r"one run at commit\s+(\w+)", performance).group(1) == commit
    assert {score, oip, real} <= set(re.findall(r"[\d.]+x", performance))
    readme = (ROOT / "README.md").read_text()
    rerank = readme[readme.index("## Rerank (Cohere clients)"):readme.index("## What it measured")]
    assert re.findall(r"(?<![\d.])(?<!target )\d[\d.]*x", rerank) == [score, real]  # the measured, not the targets
