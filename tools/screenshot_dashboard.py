"""The picture of the live page in docs/operations.md: `python -m tools.screenshot_dashboard` writes
docs/dashboard.png.

It starts a gateway process (`tools.processes`) serving two simulated models (`demo` with
the adaptive policy; `ranked` with an `slo_ms`, two priority levels and `max_inflight =
"auto"`), sends them light closed-loop load from a few threads, and has headless Chromium
(`python -m tests.browser screenshot`, the tests' WebDriver client, run as a process: tools
never import tests) photograph /dashboard after it has polled for a while. Everything it
starts is stopped by PID on the way out.

It knows the gateway's command line and its v1 endpoint, nothing of its insides.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from tools.processes import ROOT, ServerProcess, python_module_command

OUT = ROOT / "docs" / "dashboard.png"
CONFIG = """
[[models]]
name = "demo"
backend = "simulated"
simulated = { call_ms = 4, per_instance_ms = 0.3 }
batching = { max_batch_size = 16 }

[[models]]
name = "ranked"
backend = "simulated"
simulated = { call_ms = 2, per_instance_ms = 0.5 }
batching = { slo_ms = 40, priority_levels = 2, max_inflight = "auto" }
"""
# (model, clients, pause between a client's requests in seconds, priority header or "")
LOAD = (("demo", 10, 0.004, ""), ("ranked", 3, 0.01, "1"), ("ranked", 4, 0.005, "2"))


def client(url: str, model: str, pause_s: float, priority: str, stop: threading.Event) -> None:
    headers = {"Content-Type": "application/json", **({"X-Request-Priority": priority} if priority else {})}
    body = b'{"instances": [[1.0, 2.0]]}'
    while not stop.is_set():
        request = urllib.request.Request(f"{url}/v1/models/{model}:predict", data=body, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                response.read()
        except (urllib.error.URLError, OSError):
            pass  # a refusal or a late answer is part of the picture
        time.sleep(pause_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--wait-s", type=float, default=25.0, help="how long the page polls under load first")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dashboard-") as folder:
        config = Path(folder) / "gateway.toml"
        config.write_text(CONFIG)
        gateway = ServerProcess(python_module_command("gateway", "serve", "--config", str(config), "--http-port", "0",
                                                      "--grpc-port", "0", "--log-level", "WARNING"), name="gateway")
        stop = threading.Event()
        threads: list[threading.Thread] = []
        try:
            gateway.start()
            for model, clients, pause_s, priority in LOAD:
                for _ in range(clients):
                    thread = threading.Thread(target=client, args=(gateway.http_url, model, pause_s, priority, stop),
                                              daemon=True)
                    thread.start()
                    threads.append(thread)
            subprocess.run(python_module_command("tests.browser", "screenshot", f"{gateway.http_url}/dashboard",
                                                 str(args.out), "--wait-s", str(args.wait_s)),
                           cwd=ROOT, check=True, timeout=args.wait_s + 120)
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=15)
            gateway.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
