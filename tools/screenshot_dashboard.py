"""The picture of the live page in docs/operations.md: `python -m tools.screenshot_dashboard` writes
docs/dashboard.png.

It starts the gateway as the README's quick start does (`serve` on its embedded default:
model `demo` on the simulated predictor), puts the README's own `hey` load on it (5 clients
of one v1 row, for as long as the picture takes), and has headless Chromium (`python -m
tests.browser screenshot`, the tests' WebDriver client, run as a process: tools never
import tests) photograph /dashboard after it has polled for a while. Everything it starts
is stopped by PID on the way out.

It knows the gateway's command line and its v1 endpoint, nothing of its insides.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from tools.processes import ROOT, ServerProcess, python_module_command

OUT = ROOT / "docs" / "dashboard.png"
# The README's hey command, but for its duration and the gateway's port.
HEY = ("hey", "-c", "5", "-m", "POST", "-d", '{"instances": [[1, 2, 3, 4]]}')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--wait-s", type=float, default=15.0, help="how long the page polls under load first")
    args = parser.parse_args(argv)
    gateway = ServerProcess(python_module_command("gateway", "serve", "--http-port", "0", "--grpc-port", "0",
                                                  "--log-level", "WARNING"), name="gateway")
    load: subprocess.Popen[bytes] | None = None
    try:
        gateway.start()
        load = subprocess.Popen([*HEY, "-z", f"{args.wait_s + 60:.0f}s", f"{gateway.http_url}/v1/models/demo:predict"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        subprocess.run(python_module_command("tests.browser", "screenshot", f"{gateway.http_url}/dashboard",
                                             str(args.out), "--wait-s", str(args.wait_s)),
                       cwd=ROOT, check=True, timeout=args.wait_s + 120)
    finally:
        if load is not None:
            load.terminate()
            load.wait(timeout=15)
        gateway.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
