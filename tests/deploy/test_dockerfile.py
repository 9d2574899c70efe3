"""The Dockerfile, checked without a Docker engine: hadolint, what it installs and how,
who it runs as, what it exposes, its health check, its build context, and its entrypoint
run for real against this checkout's gateway."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.deploy.support import (
    DEPLOY,
    DOCKERFILE,
    ROOT,
    GatewayProcess,
    dockerfile_instructions,
    gateway_command_shim,
    shell_words,
    stages,
    tool,
)

ENTRYPOINT_SCRIPT = DEPLOY / "docker" / "entrypoint.sh"
DEFAULT_CONFIG = Path("/etc/batching-gateway/gateway.toml")


def instructions(keyword: str, stage: int | None = None):
    found = dockerfile_instructions()
    if stage is not None:
        found = stages(found)[stage]
    return [i for i in found if i.keyword == keyword]


# -- hadolint --------------------------------------------------------------------------

def test_hadolint_finds_nothing():
    result = subprocess.run(
        [tool("hadolint"), "--config", str(ROOT / ".hadolint.yaml"), "--no-color", "--format", "json",
         "--failure-threshold", "style", str(DOCKERFILE)],
        capture_output=True, text=True, timeout=60, cwd=ROOT)
    findings = json.loads(result.stdout or "[]")
    assert findings == [], "\n".join(f"line {f['line']}: {f['code']} {f['level']}: {f['message']}" for f in findings)
    assert result.returncode == 0, result.stderr


def test_hadolint_really_lints_with_this_config(tmp_path):
    # The same run on a Dockerfile with known faults must report them (the linter is not a no-op).
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN pip install requests\nCMD python -m http.server\n")
    result = subprocess.run(
        [tool("hadolint"), "--config", str(ROOT / ".hadolint.yaml"), "--no-color", "--format", "json", str(bad)],
        capture_output=True, text=True, timeout=60, cwd=ROOT)
    codes = {finding["code"] for finding in json.loads(result.stdout)}
    assert {"DL3006", "DL3013", "DL3042", "DL3025"} <= codes
    assert result.returncode != 0


def test_every_ignored_hadolint_rule_says_why():
    config_path = ROOT / ".hadolint.yaml"
    config = yaml.safe_load(config_path.read_text())
    lines = config_path.read_text().splitlines()
    for code in config.get("ignored") or []:
        index = next(i for i, line in enumerate(lines) if re.search(rf"\b{code}\b", line) and not line.lstrip().startswith("#"))
        reason = "#" in lines[index] or lines[index - 1].lstrip().startswith("#")
        assert reason, f".hadolint.yaml ignores {code} without a comment saying why"
    for override in ("error", "warning", "info", "style"):
        assert not (config.get("override") or {}).get(override), "no rule is demoted or promoted silently"


# -- base image, install, user, ports, health check -----------------------------------

def test_base_image_is_pinned_by_tag_and_shared_by_every_stage():
    froms = instructions("FROM")
    external = [shell_words(f.arguments)[0] for f in froms if shell_words(f.arguments)[0] != "base"]
    assert len(external) == 1, f"one base image, named once (stage `base`): {external}"
    image = external[0]
    name, _, tag = image.partition("@")[0].partition(":")
    assert name == "python" and re.fullmatch(r"3\.11\.\d+-slim(-\w+)?", tag), \
        f"pinned by full version tag (python:3.11.N-slim-...), got {image}"
    aliases = [shell_words(f.arguments) for f in froms]
    assert aliases[0][1:] == ["AS", "base"]
    assert all(words[0] == "base" for words in aliases[1:]), "build and runtime stages both start from `base`"
    assert "digest" in DOCKERFILE.read_text(), "the Dockerfile says why to pin the digest in production"


def test_the_image_installs_the_gateway_the_way_the_readme_does():
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"pip install \.(\s|$)", readme), "the README installs with `pip install .`"
    installs = []
    for run in instructions("RUN"):
        for command in re.split(r"&&|;", run.arguments):
            words = shell_words(command)
            if len(words) >= 2 and words[0].endswith("pip") and words[1] == "install":
                installs.append([w for w in words[2:] if not w.startswith("-")])
    # With the `shared` extra (Redis's client): [shared] works in the image (deploy/components/shared-quotas).
    assert installs == [[".[shared]"]], f"exactly one `pip install [options] .[shared]`, got {installs}"
    # ...into the venv that the runtime stage copies and puts first on PATH.
    build_runs = " ".join(r.arguments for r in instructions("RUN", stage=1))
    assert "python -m venv /opt/gateway" in build_runs and "/opt/gateway/bin/pip install" in build_runs
    copies = [shell_words(c.arguments) for c in instructions("COPY", stage=2)]
    assert ["--from=build", "/opt/gateway", "/opt/gateway"] in copies
    env = " ".join(e.arguments for e in instructions("ENV", stage=2))
    assert "PATH=/opt/gateway/bin:$PATH" in env


def test_the_image_runs_as_a_numeric_non_root_user():
    users = instructions("USER")
    assert users, "the Dockerfile sets USER"
    final_stage = stages(dockerfile_instructions())[-1]
    last_user = [i for i in final_stage if i.keyword == "USER"][-1].arguments
    uid, _, gid = last_user.partition(":")
    # Numeric: Kubernetes verifies runAsNonRoot only against a numeric USER.
    assert uid.isdigit() and int(uid) != 0, f"USER {last_user}"
    assert gid.isdigit() and int(gid) != 0, f"USER {last_user}"
    # No instruction after USER switches back to root.
    after = final_stage[final_stage.index([i for i in final_stage if i.keyword == "USER"][-1]):]
    assert not any(i.keyword == "USER" and i.arguments.split(":")[0] in ("0", "root") for i in after)


def test_the_image_exposes_http_8080_and_grpc_8081():
    exposed = {port for e in instructions("EXPOSE") for port in e.arguments.split()}
    assert exposed == {"8080", "8081"}


def test_the_image_has_a_healthcheck_on_the_gateways_liveness_endpoint():
    checks = instructions("HEALTHCHECK")
    assert len(checks) == 1
    arguments = checks[0].arguments
    assert not arguments.startswith("NONE")
    assert " CMD " in f" {arguments} "
    for option in ("--interval=", "--timeout=", "--start-period=", "--retries="):
        assert option in arguments, option
    assert "http://127.0.0.1:8080/v2/health/live" in arguments


def test_the_healthcheck_command_passes_against_a_live_gateway_and_fails_without_one():
    # Run the HEALTHCHECK's own command (exec form) with the port swapped for the test's.
    arguments = instructions("HEALTHCHECK")[0].arguments
    command = json.loads(arguments.split(" CMD ", 1)[1])
    assert command[0] == "python"
    gateway = GatewayProcess.module("serve", "--http-port", "0", "--grpc-port", "0", "--log-level", "WARNING")
    try:
        port = gateway.fields["http"].rsplit(":", 1)[1]
        probe = [sys.executable, *command[1:-1], command[-1].replace(":8080/", f":{port}/")]
        assert subprocess.run(probe, capture_output=True, timeout=10).returncode == 0
    finally:
        assert gateway.stop() == 0
    failing = subprocess.run([sys.executable, *command[1:-1], command[-1].replace(":8080/", f":{port}/")],
                             capture_output=True, timeout=10)
    assert failing.returncode != 0


def test_the_entrypoint_serves_on_all_interfaces_with_fixed_ports():
    entrypoint = instructions("ENTRYPOINT")[-1].arguments
    assert json.loads(entrypoint) == ["gateway-entrypoint"], "exec form, through the entrypoint script"
    copies = [shell_words(c.arguments) for c in instructions("COPY", stage=2)]
    assert ["--chmod=0755", "deploy/docker/entrypoint.sh", "/usr/local/bin/gateway-entrypoint"] in copies
    script = ENTRYPOINT_SCRIPT.read_text()
    assert 'exec batching-gateway serve --host 0.0.0.0 --http-port 8080 --grpc-port 8081 "$@"' in script


# -- build context ---------------------------------------------------------------------

def _dockerignore_regex(pattern: str) -> re.Pattern:
    """One .dockerignore pattern (Go filepath.Match plus `**`) as a regex over a path."""
    pattern = os.path.normpath(pattern.lstrip("/"))
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out, i = out + "[" + pattern[i + 1:end].replace("^", "\\^") + "]", end + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def _dockerignore_rules() -> list[tuple[bool, re.Pattern]]:
    rules = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        exclude = not line.startswith("!")
        rules.append((exclude, _dockerignore_regex(line.lstrip("!"))))
    return rules


def _in_context(path: str, rules) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    parts = path.split("/")
    candidates = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    excluded = False
    for exclude, regex in rules:
        if any(regex.fullmatch(candidate) for candidate in candidates):
            excluded = exclude
    return not excluded


def build_context() -> set[str]:
    rules = _dockerignore_rules()
    for big in (".git", ".venv"):
        assert not _in_context(f"{big}/x", rules), f"{big}/ must stay out of the build context"
    files = set()
    for directory, subdirectories, names in os.walk(ROOT):
        relative = os.path.relpath(directory, ROOT)
        subdirectories[:] = [d for d in subdirectories if not (relative == "." and d in (".git", ".venv"))]
        for name in names:
            path = os.path.normpath(os.path.join(relative, name))
            if _in_context(path, rules):
                files.add(path)
    return files


def test_the_build_context_holds_what_the_dockerfile_copies_and_nothing_else():
    context = build_context()
    sources = []
    for copy in instructions("COPY"):
        words = [w for w in shell_words(copy.arguments) if not w.startswith("--")]
        if any(w.startswith("--from") for w in shell_words(copy.arguments)):
            continue
        sources.extend(words[:-1])
    assert sources, "the Dockerfile copies from the build context"
    for source in sources:
        source = os.path.normpath(source)
        assert source in context or any(p.startswith(source + "/") for p in context), \
            f"COPY {source}: not in the build context (.dockerignore)"
    tracked = subprocess.run(["git", "ls-files", "gateway", "backends", "wire"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    missing = [p for p in tracked if p.endswith(".py") and p not in context]
    assert not missing, f"tracked sources left out of the image: {missing}"
    copied_roots = {os.path.normpath(s) for s in sources}
    stray = sorted(p for p in context if not any(p == r or p.startswith(r + "/") for r in copied_roots))
    assert not stray, f"in the build context but never copied (add to .dockerignore): {stray[:20]}"
    assert not any("__pycache__" in p or p.endswith(".pyc") for p in context)


def test_the_build_context_builds_a_complete_wheel(tmp_path):
    # The Dockerfile's `pip install .`, minus the dependency downloads: a wheel built from
    # exactly the files the build context holds must contain every module and both commands.
    context_dir = tmp_path / "context"
    for relative in build_context():
        target = context_dir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / relative, target)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-cache-dir",
         "--disable-pip-version-check", "-q", "-w", str(tmp_path / "dist"), str(context_dir)],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    wheel_path = tmp_path / "dist" / f"batching_gateway-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel_path) as wheel:
        names = set(wheel.namelist())
        entry_points = wheel.read(f"batching_gateway-{version}.dist-info/entry_points.txt").decode()
    tracked = subprocess.run(["git", "ls-files", "gateway", "backends", "wire"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    missing = [p for p in tracked if p.endswith(".py") and p not in names]
    assert not missing, f"modules missing from the wheel: {missing}"
    assert "batching-gateway = gateway.cli:main" in entry_points


# -- the entrypoint script, run for real -----------------------------------------------

def test_the_entrypoint_script_passes_shellcheck():
    result = subprocess.run([tool("shellcheck"), "--shell=sh", "--severity=style", str(ENTRYPOINT_SCRIPT)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert ENTRYPOINT_SCRIPT.read_text().startswith("#!/bin/sh\n")


@pytest.fixture
def entrypoint_env(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gateway_command_shim(bin_dir)
    env = {k: v for k, v in os.environ.items() if k != "GATEWAY_CONFIG"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


# The image's ports are fixed; these extra arguments (appended, so they win) let the test
# run beside anything else on this machine.
LOCAL = ["--host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0", "--log-level", "WARNING"]


def test_entrypoint_with_gateway_config_serves_that_file(tmp_path, entrypoint_env):
    config = tmp_path / "gateway.toml"
    config.write_text('[[models]]\nname = "from-file"\nbackend = "simulated"\n')
    entrypoint_env["GATEWAY_CONFIG"] = str(config)
    gateway = GatewayProcess(["sh", str(ENTRYPOINT_SCRIPT), *LOCAL], env=entrypoint_env)
    try:
        assert gateway.fields["models"] == "from-file"
        # exec all the way down: the PID the container runtime signals is the gateway itself.
        cmdline = Path(f"/proc/{gateway.pid}/cmdline").read_bytes().split(b"\0")
        assert b"gateway" in cmdline and b"serve" in cmdline, cmdline
    finally:
        assert gateway.stop() == 0


def test_entrypoint_with_a_missing_gateway_config_fails_loudly(entrypoint_env):
    entrypoint_env["GATEWAY_CONFIG"] = "/nonexistent/gateway.toml"
    result = subprocess.run(["sh", str(ENTRYPOINT_SCRIPT), *LOCAL], env=entrypoint_env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "/nonexistent/gateway.toml: file not found" in result.stderr


def test_entrypoint_without_a_config_serves_the_embedded_default(entrypoint_env):
    assert not DEFAULT_CONFIG.exists(), f"this test needs {DEFAULT_CONFIG} absent on the test machine"
    gateway = GatewayProcess(["sh", str(ENTRYPOINT_SCRIPT), *LOCAL], env=entrypoint_env)
    try:
        assert gateway.fields["models"] == "demo"
        assert "serving the embedded default" in gateway.stderr_text()
    finally:
        assert gateway.stop() == 0
