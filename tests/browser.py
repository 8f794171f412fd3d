"""A headless Chromium for the dashboard's tests and benchmark, driven by Playwright.

Playwright's Python package (its own Node driver inside the wheel) drives Debian's
`chromium` (`apt-get install -y chromium`), not a browser of its own: never run
`playwright install`. Chromium gets the flags this machine needs (without the
background-networking ones it keeps trying to reach the internet).

    with chromium() as browser, Tab(browser) as tab:
        tab.load("http://127.0.0.1:8000/")   # until window.dashboardRendered
        print(tab.page.title(), tab.console_errors)

A screenshot of a run's dashboard (docs/dashboard.png):
`python -m tests.browser --run_dir=DIR --out=docs/dashboard.png`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator

from playwright.sync_api import Browser, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


class BrowserMissing(RuntimeError):
    """No Chromium binary on this machine."""


def find_chromium() -> str:
    """$CHROMIUM if set, else Debian's /usr/bin/chromium."""
    binary = os.environ.get("CHROMIUM", CHROMIUM)
    path = shutil.which(binary)
    if path is None:
        raise BrowserMissing(
            f"headless Chromium not found at {binary}: install Debian's browser with "
            "`apt-get update && apt-get install -y chromium`, or set CHROMIUM=/path/to/chromium"
        )
    return path


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    """Debian's Chromium, started headless by Playwright; closed on leaving the block."""
    binary = find_chromium()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=binary, args=list(CHROMIUM_ARGS))
        try:
            yield browser
        finally:
            browser.close()


class Tab:
    """One page in a fresh browser context (empty cache) that records what went wrong.

    `console_errors`: console.error/assert calls, the browser's error log entries (a
    resource that failed to load), uncaught exceptions, failed requests and responses
    with status >= 400. `requests`: every URL the page asked for; `responses`:
    (url, status) of every response.
    """

    def __init__(self, browser: Browser, width: int = 1400, height: int = 1000):
        self.context = browser.new_context(viewport={"width": width, "height": height})
        self.page = self.context.new_page()
        self.console_errors: list[str] = []
        self.requests: list[str] = []
        self.responses: list[tuple[str, int]] = []
        self.page.on("console", self._on_console)
        self.page.on("pageerror", lambda error: self.console_errors.append(f"uncaught: {error}"))
        self.page.on("requestfailed", lambda r: self.console_errors.append(f"request failed: {r.url} {r.failure}"))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("response", self._on_response)

    def _on_console(self, message) -> None:
        if message.type in ("error", "assert"):
            self.console_errors.append(f"console.{message.type}: {message.text} {message.location.get('url', '')}".strip())

    def _on_response(self, response) -> None:
        self.responses.append((response.url, response.status))
        if response.status >= 400:
            self.console_errors.append(f"HTTP {response.status}: {response.url}")

    def load(self, url: str, timeout_s: float = 30.0) -> None:
        """Opens `url` and waits until the dashboard has drawn every chart once."""
        self.page.goto(url)
        self.wait_for("window.dashboardRendered === true", timeout_s)

    def wait_for(self, expression: str, timeout_s: float = 30.0, polling_ms: float | None = None):
        """Waits until the JavaScript expression is truthy; returns its value. On a timeout
        the error names the page's console errors (often the reason)."""
        try:
            handle = self.page.wait_for_function(expression, timeout=timeout_s * 1000,
                                                 polling=polling_ms if polling_ms is not None else "raf")
        except PlaywrightTimeoutError as e:
            raise PlaywrightTimeoutError(f"{e.message}\nconsole errors: {self.console_errors}") from None
        return handle.json_value()

    def text(self, element_id: str) -> str:
        return self.page.text_content(f"#{element_id}")

    def close(self) -> None:
        self.context.close()

    def __enter__(self) -> Tab:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def screenshot_dashboard(run_dir: str, path: str, width: int = 1400) -> str:
    """A full-page PNG of the dashboard of `run_dir` as served (e.g. docs/dashboard.png)."""
    from dashboard.server import serve

    server, url = serve(run_dir, 0)
    try:
        with chromium() as browser, Tab(browser, width=width) as tab:
            tab.load(url, timeout_s=120)
            if tab.console_errors:
                raise RuntimeError(f"console errors on the dashboard: {tab.console_errors}")
            tab.page.screenshot(path=path, full_page=True)
            return path
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Screenshot of a run's dashboard in headless Chromium.")
    parser.add_argument("--run_dir", required=True)
    parser.add_argument("--out", default="docs/dashboard.png")
    parser.add_argument("--width", type=int, default=1400)
    args = parser.parse_args()
    print(screenshot_dashboard(args.run_dir, args.out, args.width))
