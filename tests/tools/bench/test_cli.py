"""tools/bench/cli.py end to end (`python -m tools.bench`): a 1-second kserve-docs run starts the
predictor and the gateway as processes, writes its table, JSON and plot, and leaves no server behind."""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tools.processes import ROOT


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except OSError:
        return False


def test_kserve_docs_smoke_run_writes_table_json_and_plot(tmp_path):
    out = tmp_path / "bench"
    completed = subprocess.run(
        [sys.executable, "-m", "tools.bench", "--scenario", "kserve-docs", "--duration", "1", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    table = (out / "results.md").read_text()
    assert "| run | clients | req/s | p50 ms |" in table
    for run in ("| direct |", "| gateway window |", "| gateway adaptive |"):
        assert run in table
    assert "Machine: " in table and "Python" in table
    results = json.loads((out / "results.json").read_text())
    assert set(results["machine"]["packages"]) >= {"grpcio", "tornado", "numpy", "orjson", "aiohttp"}
    scenario = results["scenarios"]["kserve-docs"]
    rows = scenario["tables"][0]["rows"]
    assert [r["name"] for r in rows] == ["direct", "gateway window", "gateway adaptive"]
    assert all(r["ok"] > 0 and r["errors"] == 0 for r in rows)
    assert all(r["mean_batch"] >= 1 for r in rows)
    assert len(scenario["checks"]) == 4
    assert (out / "batch_sizes.png").stat().st_size > 1000
    # It started the predictor and the gateway as their own processes, and stopped both.
    servers = results["servers"]
    assert sorted(s["argv"][1] for s in servers) == ["gateway", "tools.simulated_predictor"]
    assert not [s for s in servers if _alive(s["pid"])]


def test_gateway_from_runs_the_gateway_of_another_checkout_and_says_so(tmp_path):
    # The before of an A/B: the gateway from another checkout, the load and report from this one.
    before = tmp_path / "before"
    for package in ("gateway", "backends", "wire"):
        shutil.copytree(ROOT / package, before / package, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "bench"
    completed = subprocess.run(
        [sys.executable, "-m", "tools.bench", "--scenario", "kserve-docs", "--duration", "1", "--out", str(out),
         "--gateway-from", str(before)],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    gateway, = (s for s in results["servers"] if s["argv"][1] == "gateway")
    assert gateway["cwd"] == str(before.resolve())
    predictor, = (s for s in results["servers"] if s["argv"][1] == "tools.simulated_predictor")
    assert predictor["cwd"] == str(ROOT)
    assert ", the gateway's " in results["machine"]["commit"]


@pytest.mark.parametrize("flag", ["--gateway-from", "--before"])
def test_another_checkout_is_refused_when_it_is_no_checkout(tmp_path, flag):
    completed = subprocess.run(
        [sys.executable, "-m", "tools.bench", "--scenario", "kserve-docs", "--out", str(tmp_path / "bench"),
         flag, str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert completed.returncode == 2
    assert f"{flag}: {tmp_path} is not a checkout of this repository" in completed.stderr


def test_ctrl_c_stops_every_server(tmp_path):
    # SIGINT reaches the bench even when pytest itself ignores it (a background job of a
    # non-interactive shell, as CI runs it): the bench installs its own handler. No
    # preexec_fn here: Python code between fork and exec can deadlock in a process with
    # gRPC's threads (its fork handlers run then).
    out = tmp_path / "bench"
    process = subprocess.Popen(
        [sys.executable, "-m", "tools.bench", "--scenario", "kserve-docs", "--duration", "30", "--out", str(out)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 120
        for line in process.stderr:  # wait until both servers are up and it is measuring (30 s per run)
            if "kserve-docs: direct" in line or time.monotonic() > deadline:
                break
        time.sleep(1)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=120) == 130
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stderr.close()
    servers = json.loads((out / "results.json").read_text())["servers"]
    assert len(servers) == 2
    assert not [s for s in servers if _alive(s["pid"])]


def test_goodput_smoke_run_reports_every_system_at_each_load(tmp_path):
    out = tmp_path / "bench"
    completed = subprocess.run(
        [sys.executable, "-m", "tools.bench", "--scenario", "goodput", "--duration", "1", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=280,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    rows = json.loads((out / "results.json").read_text())["scenarios"]["goodput"]["tables"][0]["rows"]
    systems = ("adaptive (FIFO)", "window (50 ms)", "deadline", "Triton dynamic batcher")
    assert [(r["name"], r["load"]) for r in rows] == [
        *((system, load) for system in systems for load in (0.5, 0.8, 1.0, 1.2, 1.5, 2.0, "bursty")),
        *((f"deadline, priority {level} of 2", load) for load in ("1.5: 0.75 + 0.75", "1.5: 1.2 + 0.3")
          for level in (1, 2))]
    # Every system answers at every load (the lower of two priority levels may be refused
    # entirely at 1.5x: levels never share a batch, and level 1 keeps the predictor busy).
    assert all(r["answered"] > 0 for r in rows if r["name"] != "deadline, priority 2 of 2")
    # Only the deadline policy refuses (fast, explicit 503s); FIFO and window answer everything, late.
    assert all(r["refused_pct"] == 0 for r in rows if r["name"] in systems[:2])
    assert (out / "goodput.png").exists()
