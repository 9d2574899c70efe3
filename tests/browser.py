"""A real headless Chromium for the tests, driven through chromedriver's W3C WebDriver HTTP
API with the standard library alone (urllib and json): no selenium.

`chromium(tmp_path)` starts /usr/bin/chromedriver on a free port (`tools.processes`, the
project's one launcher), opens one session of /usr/bin/chromium with a fresh profile in
`tmp_path`, and yields a `Browser`; the session is quit and chromedriver stopped by PID on
the way out, whatever happened. Every call and every wait is bounded.

`python -m tests.browser screenshot URL OUT.png` takes one screenshot of a live page after
letting it run a while: tools/screenshot_dashboard.py runs it as a process (tools never
import tests), since `chromium --screenshot` cannot let a page poll in real time.

It knows WebDriver and Chromium's flags, nothing of the gateway.
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import json
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tools.processes import LOOPBACK, ServerProcess, free_port

CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM = "/usr/bin/chromium"
# Headless and quiet: nothing fetched from Google's services while a test runs.
CHROMIUM_ARGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                 "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync")
COMMAND_TIMEOUT_S = 30.0  # one WebDriver command, session creation included


class WebDriverError(RuntimeError):
    """chromedriver refused a command; the message is its error and message."""


def _call(url: str, method: str = "GET", body: dict[str, Any] | None = None,
          timeout: float = COMMAND_TIMEOUT_S) -> Any:
    """One WebDriver command: JSON in, the answer's `value` out."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json; charset=utf-8"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())["value"]
    except urllib.error.HTTPError as error:
        value = json.loads(error.read() or b"{}").get("value", {})
        raise WebDriverError(f"{method} {url}: {value.get('error')}: {value.get('message', '')[:500]}") from None


class Browser:
    """One WebDriver session."""

    def __init__(self, driver_url: str, session_id: str) -> None:
        self.url = f"{driver_url}/session/{session_id}"

    def get(self, url: str) -> None:
        """Navigate to `url` and wait until it has loaded."""
        _call(f"{self.url}/url", "POST", {"url": url})

    def execute(self, script: str, *args: Any) -> Any:
        """Run `script` (a function body: `return ...`) in the page; its return value."""
        return _call(f"{self.url}/execute/sync", "POST", {"script": script, "args": list(args)})

    def wait_for(self, script: str, predicate: Callable[[Any], bool] = bool, timeout: float = 10.0,
                 what: str = "") -> Any:
        """Run `script` until `predicate` holds for its value (polled every 0.1 s), and return
        that value; TimeoutError after `timeout` seconds with the last value seen."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.execute(script)
            if predicate(value):
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout:g} s for {what or script!r}; last value {value!r}")
            time.sleep(0.1)

    def console(self) -> list[dict[str, Any]]:
        """The browser console's entries since the last call (`level`, `message`, `timestamp`):
        chromedriver's log endpoint, which the `goog:loggingPrefs` capability turns on."""
        return _call(f"{self.url}/se/log", "POST", {"type": "browser"})

    def set_window_size(self, width: int, height: int) -> None:
        _call(f"{self.url}/window/rect", "POST", {"width": width, "height": height})

    def cdp(self, command: str, params: dict[str, Any] | None = None) -> Any:
        """A Chrome DevTools Protocol command, through chromedriver's own endpoint for it."""
        return _call(f"{self.url}/goog/cdp/execute", "POST", {"cmd": command, "params": params or {}})

    def screenshot_png(self) -> bytes:
        return base64.b64decode(_call(f"{self.url}/screenshot"))

    def quit(self) -> None:
        _call(self.url, "DELETE")


@contextlib.contextmanager
def chromium(tmp_path: Path, width: int = 1280, height: int = 900) -> Iterator[Browser]:
    """A headless Chromium session, profile and logs in `tmp_path`; quit and stopped on exit."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not Path(path).exists()]
    assert not missing, (f"{', '.join(missing)} not installed: run tools/run_tests.sh (it installs Debian's "
                         "chromium and chromium-driver) or apt-get install -y chromium chromium-driver")
    port = free_port()
    driver_url = f"http://{LOOPBACK}:{port}"
    driver = ServerProcess([CHROMEDRIVER, f"--port={port}"], name="chromedriver",
                           log_path=tmp_path / "chromedriver.log", ready_probe=lambda: _driver_ready(driver_url),
                           stop_timeout=10.0)
    driver.start()
    try:
        options = {"binary": CHROMIUM,
                   "args": [*CHROMIUM_ARGS, f"--user-data-dir={tmp_path / 'chromium-profile'}",
                            f"--window-size={width},{height}"]}
        session = _call(f"{driver_url}/session", "POST", {"capabilities": {"alwaysMatch": {
            "browserName": "chrome", "goog:chromeOptions": options, "goog:loggingPrefs": {"browser": "ALL"},
            "timeouts": {"pageLoad": 20_000, "script": 10_000}}}})
        browser = Browser(driver_url, session["sessionId"])
        try:
            yield browser
        finally:
            with contextlib.suppress(WebDriverError, OSError):
                browser.quit()
    finally:
        driver.stop()


def _driver_ready(driver_url: str) -> bool:
    try:
        return bool(_call(f"{driver_url}/status", timeout=2)["ready"])
    except (OSError, ValueError, KeyError):
        return False


def screenshot(url: str, out: Path, wait_s: float, width: int, max_height: int) -> None:
    """Load `url`, let it run `wait_s` seconds, make the viewport as tall as the page (at most
    `max_height`), and write a PNG of it to `out`."""
    with tempfile.TemporaryDirectory(prefix="screenshot-") as folder, chromium(Path(folder), width, 900) as browser:
        browser.get(url)
        time.sleep(wait_s)
        height = int(browser.execute("return document.documentElement.scrollHeight"))
        # The viewport, not the window: a headless window grows no taller than its screen.
        browser.cdp("Emulation.setDeviceMetricsOverride",
                    {"width": width, "height": min(height, max_height), "deviceScaleFactor": 1, "mobile": False})
        time.sleep(1.5)  # one more poll, drawn at the new size
        out.write_bytes(browser.screenshot_png())
        severe = [entry["message"] for entry in browser.console() if entry["level"] == "SEVERE"]
        if severe:
            raise RuntimeError(f"the page logged errors: {severe}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.browser", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    shot = commands.add_parser("screenshot", help="a PNG of a live page after it ran a while")
    shot.add_argument("url")
    shot.add_argument("out", type=Path)
    shot.add_argument("--wait-s", type=float, default=20.0, help="how long the page runs first")
    shot.add_argument("--width", type=int, default=1280)
    shot.add_argument("--max-height", type=int, default=2400)
    args = parser.parse_args(argv)
    screenshot(args.url, args.out, args.wait_s, args.width, args.max_height)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
