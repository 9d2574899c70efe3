"""The quick start's `.venv` (`python3 -m venv .venv && .venv/bin/pip install .`), as the tests
that run the README's and the docs' `.venv/bin/...` commands play it: with the test venv's
interpreter, from the clone's root, but with imports limited to the distributions that
`pip install .` (plus the extras a page names) would have put there, so a command that needs
more than the page says fails here as it would for a new user. It knows no command and no
server: it maps `.venv/bin/<program>` to the test venv's, and runs a module in the limit.
"""
from __future__ import annotations

import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from tests.processes import ROOT

VENV = ".venv/bin/"
# What `python3 -m venv` puts in every venv, whatever was installed after.
ALWAYS = frozenset({"pip", "setuptools"})

# Run in the child: refuse to import a top-level module of a distribution the venv would not
# have, then run the module as `python -m` does.
_LIMITED = """
import importlib.abc, runpy, sys
blocked = set(sys.argv[1].split(","))
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (not in the quick start's venv)", name=name)
        return None
sys.meta_path.insert(0, Absent())
module, sys.argv = sys.argv[2], [sys.argv[2], *sys.argv[3:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def _name(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def distributions(*extras: str) -> set[str]:
    """The distributions `pip install '.[extras]'` installs: the gateway's dependencies, the
    extras' (a self-reference such as `batching-gateway[otel]` followed), and what each of
    those requires in turn, as the installed metadata says."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    own = _name(project["name"])
    wanted: list[tuple[str, str]] = [(line, "") for line in project["dependencies"]]
    seen_extras: set[str] = set()
    pending = list(extras)
    while pending:
        extra = pending.pop()
        if extra in seen_extras:
            continue
        seen_extras.add(extra)
        for line in project["optional-dependencies"][extra]:
            requirement = Requirement(line)
            if _name(requirement.name) == own:
                pending.extend(requirement.extras)
            else:
                wanted.append((line, extra))
    found: set[str] = {*ALWAYS, own}  # the gateway itself (its egg-info in the clone, once built, says so)
    while wanted:
        line, extra = wanted.pop()
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = _name(requirement.name)
        if name in found:
            continue
        found.add(name)
        try:
            requires = importlib.metadata.requires(requirement.name) or []
        except importlib.metadata.PackageNotFoundError:  # not in the test venv either: nothing follows
            continue
        for sub in requires:
            wanted.extend((sub, chosen) for chosen in ("", *requirement.extras))
    return found


def absent_modules(*extras: str) -> set[str]:
    """Top-level modules installed in the test venv whose distributions the quick start's
    venv (with `extras`) would not have."""
    allowed = distributions(*extras)
    return {module for module, owners in importlib.metadata.packages_distributions().items()
            if not {_name(owner) for owner in owners} & allowed}


def program(argv0: str) -> str:
    """`.venv/bin/<program>` as the test venv's own `<program>`."""
    assert argv0.startswith(VENV), argv0
    return str(Path(sys.executable).parent / argv0.removeprefix(VENV))


def python_module_argv(argv: list[str], *extras: str) -> list[str]:
    """`.venv/bin/python -m <module> <args>` as a command that runs it with the test venv's
    interpreter, importing only what the quick start's venv (with `extras`) would hold."""
    assert argv[0] == VENV + "python" and argv[1] == "-m", argv
    return [sys.executable, "-c", _LIMITED, ",".join(sorted(absent_modules(*extras))), *argv[2:]]
