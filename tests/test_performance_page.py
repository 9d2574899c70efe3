"""docs/performance.md's commands work as written: the benchmark's venv (the quick start's
`.venv` with the `bench` extra) runs `python -m tools.bench` in its cheapest form, `--help`,
which imports every scenario; and every scenario a page names is one the benchmark has."""
from __future__ import annotations

import importlib.metadata
import re
import shlex
import subprocess
import tomllib

from packaging.requirements import Requirement

from tests.processes import ROOT
from tests.quick_start_venv import VENV, python_module_argv
from tests.readme import commands_after
from tools.bench.scenarios import SCENARIOS

DOC = "docs/performance.md"
MARKER = "Every command on this page runs from the clone's root"


def test_the_benchmark_runs_as_the_page_says_in_the_quick_start_venv_with_the_bench_extra():
    commands = commands_after(MARKER, DOC)
    assert commands[:2] == [".venv/bin/pip install '.[bench]'", ". .venv/bin/activate"]
    extras = re.fullmatch(r"\.\[(.+)\]", shlex.split(commands[0])[2])
    assert extras is not None
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for line in project["optional-dependencies"][extras.group(1)]:  # the test venv plays that venv: it has them
        requirement = Requirement(line)
        if requirement.name != project["name"]:
            assert importlib.metadata.version(requirement.name) in requirement.specifier, line
    for command in commands[2:]:
        argv = shlex.split(command)
        assert argv[0] == "python"  # the activated venv's
        done = subprocess.run(python_module_argv([VENV + "python", *argv[1:]], extras.group(1)),
                              capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert done.returncode == 0, done.stderr
        assert all(f"  {name} " in done.stdout for name in SCENARIOS), done.stdout


def test_without_the_extra_the_quick_start_venv_cannot_import_the_benchmark():
    """What the page's first line is for: the quick start's venv alone fails (this fails if
    the extra stops being needed, and the page should then stop asking for it)."""
    done = subprocess.run(python_module_argv([VENV + "python", "-m", "tools.bench", "--help"]),
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 1 and "ModuleNotFoundError" in done.stderr


def test_every_scenario_the_docs_name_is_one_the_benchmark_runs():
    named: set[str] = set()
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for match in re.finditer(r"python -m tools\.bench\b([^`\n]*)", page.read_text()):
            scenarios = re.search(r"--scenario((?:\s+[a-z][a-z-]*)+)", match.group(1))
            if scenarios:
                named.update(scenarios.group(1).split())
    assert named and named <= {*SCENARIOS, "all"}, named - {*SCENARIOS, "all"}
