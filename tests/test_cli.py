"""The command line, run as users run it: a real process on the one launcher
(`tools.processes`), stopped by PID."""
from __future__ import annotations

import os
import subprocess
import sys

from tests.harness import http_json
from tests.processes import python_module


def test_serve_with_no_arguments_but_ports_answers_on_the_embedded_demo_model():
    process = python_module("gateway", "serve", "--http-port", "0", "--grpc-port", "0", "--log-level", "WARNING")
    try:
        ready = process.fields
        assert ready["models"] == "demo"
        assert ready["loop"] == "asyncio"  # the default; uvloop is opt-in
        url = "http://" + ready["http"]
        status, body = http_json("POST", f"{url}/v1/models/demo:predict", {"instances": [[1, 2, 3, 4]]})
        assert status == 200 and body["predictions"] == [[2, 4, 6, 8]]
    finally:
        assert process.stop() == 0


def test_serve_with_a_config_file(tmp_path):
    path = tmp_path / "gateway.toml"
    path.write_text('[[models]]\nname = "twice"\nbackend = "simulated"\n[models.batching]\nmax_batch_size = 8\n')
    process = python_module("gateway", "serve", "--config", str(path), "--host", "127.0.0.1", "--http-port", "0",
                            "--grpc-port", "0")
    try:
        ready = process.fields
        assert ready["models"] == "twice"
        status, body = http_json("POST", f"http://{ready['http']}/v1/models/twice:predict", {"instances": [[3]]})
        assert status == 200 and body["predictions"] == [[6]]
    finally:
        assert process.stop() == 0


def test_serve_on_uvloop_when_asked():
    process = python_module("gateway", "serve", "--loop", "uvloop", "--http-port", "0", "--grpc-port", "0",
                            "--log-level", "WARNING")
    try:
        ready = process.fields
        assert ready["loop"] == "uvloop"
        status, body = http_json("POST", f"http://{ready['http']}/v1/models/demo:predict", {"instances": [[1, 2]]})
        assert status == 200 and body["predictions"] == [[2, 4]]
    finally:
        assert process.stop() == 0


def test_a_config_error_exits_2_naming_the_key(tmp_path):
    path = tmp_path / "gateway.toml"
    path.write_text('[[models]]\nname = "m"\n[models.batching]\nmax_batch_size = -3\n')
    result = subprocess.run([sys.executable, "-m", "gateway", "serve", "--config", str(path)],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "models[0].batching.max_batch_size" in result.stderr and ">= 1" in result.stderr


def test_check_config_reads_a_named_token_encoding_and_refuses_one_it_cannot_read(tmp_path):
    from tests.kinds.test_tokens import cl100k_file

    path = tmp_path / "gateway.toml"
    model = '[[models]]\nname = "e"\n[models.simulated]\ntask = "embed"\n[models.embeddings]\n'
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(tmp_path / "empty")}  # nothing is downloaded
    path.write_text(model + f'token_ids_file = "{cl100k_file()}"\n')
    ok = subprocess.run([sys.executable, "-m", "gateway", "check-config", str(path)], capture_output=True, text=True,
                        timeout=30, env=env)
    assert ok.returncode == 0 and "ok" in ok.stdout, ok.stderr
    path.write_text(model + 'token_ids = "o200k_base"\n')
    bad = subprocess.run([sys.executable, "-m", "gateway", "check-config", str(path)], capture_output=True, text=True,
                         timeout=30, env=env)
    assert bad.returncode == 2 and "models[0].embeddings.token_ids: no o200k_base file at" in bad.stderr, bad.stderr


def test_check_config(tmp_path):
    path = tmp_path / "gateway.toml"
    path.write_text('[[models]]\nname = "m"\n')
    ok = subprocess.run([sys.executable, "-m", "gateway", "check-config", str(path)], capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0 and "ok" in ok.stdout
    path.write_text('[[models]]\nname = "m"\nbackend = "nope"\n')
    bad = subprocess.run([sys.executable, "-m", "gateway", "check-config", str(path)], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "models[0].backend" in bad.stderr
    path.write_text('[server]\nhttp_listen_backlog = 0\n\n[[models]]\nname = "m"\n')
    bad = subprocess.run([sys.executable, "-m", "gateway", "check-config", str(path)], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "server.http_listen_backlog" in bad.stderr and ">= 1" in bad.stderr


def test_check_config_takes_a_rerank_model_and_refuses_a_bad_rerank_key(tmp_path):
    path = tmp_path / "gateway.toml"
    path.write_text('[[models]]\nname = "r"\nbackend = "kserve"\napi = "score"\nurl = "http://127.0.0.1:1"\n')
    ok = subprocess.run([sys.executable, "-m", "gateway", "check-config", str(path)], capture_output=True, text=True,
                        timeout=30)
    assert ok.returncode == 0 and "ok" in ok.stdout, ok.stderr
    path.write_text('[[models]]\nname = "r"\nbackend = "kserve"\napi = "score"\nurl = "http://127.0.0.1:1"\n'
                    '[models.rerank]\nquery_input = "q"\n')
    bad = subprocess.run([sys.executable, "-m", "gateway", "check-config", str(path)], capture_output=True, text=True,
                         timeout=30)
    assert bad.returncode == 2 and "models[0].rerank.query_input" in bad.stderr, bad.stderr
