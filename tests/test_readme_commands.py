"""The README's quick-start commands work as written against `batching-gateway serve`
(only the ports are changed, to the free ones the test's gateway got; hey runs 1 s; perf_analyzer
takes windows within 2x of each other as stable, see below), served
by one process and by `--workers 2`; the project's load generator as the quick start's
`.venv/bin/python` runs it (here with the test venv's interpreter, from the clone's root).
ghz is not packaged for this machine, so its command is the one not run here."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.processes import ROOT, python_module
from tests.readme import commands_after
from tools.client_tools import perf_analyzer


def quick_start_commands() -> list[str]:
    return commands_after("Then, in a second terminal, against the running gateway")


@pytest.mark.parametrize("workers", ["1", "2"], ids=["one-process", "workers-2"])
def test_quick_start_commands_work_as_written(tmp_path, workers):
    commands = quick_start_commands()
    assert {c.split()[0] for c in commands} >= {"curl", "grpcurl", "hey", "perf_analyzer", ".venv/bin/python"}
    gateway = python_module("gateway", "serve", "--http-port", "0", "--grpc-port", "0", "--log-level", "WARNING",
                            "--workers", workers)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    try:
        http_port = gateway.fields["http"].rsplit(":", 1)[1]
        grpc_port = gateway.fields["grpc"].rsplit(":", 1)[1]
        for command in commands:
            tool = command.split()[0]
            if tool == "ghz":
                continue
            runnable = (command.replace("localhost:8080", f"127.0.0.1:{http_port}")
                        .replace("localhost:8081", f"127.0.0.1:{grpc_port}").replace("-z 10s", "-z 1s"))
            argv = shlex.split(runnable)
            run_env = env
            if tool == "perf_analyzer":  # installed by the project (tools/client_tools.py)
                installed = perf_analyzer()
                # Its default stability (3 windows within 10%) is a property of the machine's
                # load, not of the command: 16 closed-loop clients saturate 2 shared cores, where
                # 1 s windows were measured at 0.77k to 1.3k req/s in one run (issue 40's note).
                # Served is what this checks; windows within 2x of each other are stable.
                argv = [*argv, "--stability-percentage", "100"]
                argv, run_env = installed.argv(*argv[1:]), {**env, **installed.env()}
            elif tool == ".venv/bin/python":  # the quick start's venv; this one has all it has
                argv[0] = sys.executable
            result = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=run_env, cwd=ROOT)
            assert result.returncode == 0, (command, result.stderr)
            if tool == "curl":
                body = orjson.loads(result.stdout)
                assert "predictions" in body or body["outputs"][0]["name"] == "OUTPUT0"
            elif tool == "grpcurl" and command.split()[-1] == "list":
                assert "inference.GRPCInferenceService" in result.stdout
            elif tool == "grpcurl":
                assert orjson.loads(result.stdout)["parameters"]["batch_id"]["string_param"]
            elif tool == "perf_analyzer":
                assert "Concurrency: 16" in result.stdout, result.stdout
            elif tool == "hey":
                assert "[200]" in result.stdout and "Error distribution" not in result.stdout
            elif tool == ".venv/bin/python":  # tools.loadgen over gRPC
                assert "[OK]" in result.stdout and "Error distribution" not in result.stdout, result.stdout
    finally:
        assert gateway.stop() == 0
