"""tools/predictor_envs.py: a lock whose pin carries a local version label (torch's CPU
build, a file of this machine's wheel folder) still builds on a machine without the folder:
the rest of the lock as pinned, and the registry's release of that version instead.
(Built for real once, PIP_FIND_LINKS pointed elsewhere: the TorchServe venv, 4.7 GB with
the registry's torch 2.13.0, passed tests/backends/test_real_torchserve.py.)"""
from __future__ import annotations

from tools import predictor_envs

LOCK = """# Lock for the 'x' predictor venv.
# Top-level pins: torch==2.13.0+cpu, pillow
filelock==3.20.0 \\
    --hash=sha256:aaaa
    # via torch
pillow==12.0.0 \\
    --hash=sha256:bbbb
torch==2.13.0+cpu \\
    --hash=sha256:cccc \\
    --hash=sha256:dddd
    # via -r requirements.in
typing-extensions==4.15.0 \\
    --hash=sha256:eeee
    # via torch
"""


def test_the_pins_with_a_local_label_are_the_local_folders_files():
    assert predictor_envs.local_pins(LOCK) == ["torch==2.13.0+cpu"]
    for spec in predictor_envs.SPECS.values():
        pins = predictor_envs.local_pins(spec.lock_file.read_text())
        assert bool(pins) == spec.local_wheels, spec.name  # every local pin is declared, and only those


def test_without_the_folder_the_rest_of_the_lock_stays_pinned_and_the_local_pin_goes():
    rest = predictor_envs._without_local_pins(LOCK)
    assert "torch==2.13.0+cpu" not in rest.split("# Top-level")[1].split("\n", 1)[1]
    assert "cccc" not in rest and "dddd" not in rest
    for kept in ("filelock==3.20.0", "aaaa", "pillow==12.0.0", "bbbb", "typing-extensions==4.15.0", "eeee"):
        assert kept in rest


def test_without_the_folder_nothing_is_looked_for_there(monkeypatch, tmp_path):
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "absent"))
    assert predictor_envs.local_wheel_dirs() == []
    assert predictor_envs._find_links(predictor_envs.SPECS["torchserve"]) == []
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    assert predictor_envs._find_links(predictor_envs.SPECS["torchserve"]) == ["--find-links", str(tmp_path)]
