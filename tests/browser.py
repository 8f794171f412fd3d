"""A headless Chromium for the dashboard's tests and benchmark, driven by Playwright.

Playwright's Python package (its own Node driver inside the wheel) drives Debian's
`chromium` (`apt-get install -y chromium`), not a browser of its own: never run
`playwright install`. Chromium gets the flags this machine needs (without the
background-networking ones it keeps trying to reach the internet).

    with chromium() as browser, Tab(browser) as tab:
        tab.load("http://127.0.0.1:8000/")   # until window.dashboardRendered
        print(tab.page.title(), tab.console_errors)

A screenshot of a run's dashboard (docs/dashboard.png):
`python -m tests.browser --run_dir=DIR --out=docs/dashboard.png`; of a game watched on its watch
page (docs/watch.png): `python -m tests.browser --run_dir=DIR --watch HOME AWAY --seed=1
--frame=16 --out=docs/watch.png`.
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
        self._record()

    @classmethod
    def opened(cls, tab: Tab, page) -> Tab:
        """`page`, a page that `tab`'s page opened (a new tab of its context: `with
        tab.context.expect_page() as p: ...; Tab.opened(tab, p.value)`), recorded as a Tab records
        its own from now on; closing `tab` closes it."""
        new = cls.__new__(cls)
        new.context, new.page = tab.context, page
        new._record()
        return new

    def _record(self) -> None:
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


def open_watch(tab: Tab, url: str, timeout_s: float = 300.0) -> None:
    """Opens a watch page (`url`: .../watch?home=..&away=..&seed=..) and waits until its game is
    played and its first frame shown, or the page says why it cannot be (window.watchError)."""
    tab.page.goto(url)
    tab.wait_for("window.watchReady || window.watchError", timeout_s, polling_ms=200)


def screenshot_watch(run_dir: str, home: str, away: str, seed: int, path: str, frame: int | None = None,
                     width: int = 900) -> str:
    """A PNG of the watch page of a game of `run_dir` (`home` against `away`, from `seed`) as
    served, paused at `frame` (from 0; None: the last), e.g. docs/watch.png."""
    from urllib.parse import urlencode

    from dashboard.server import serve
    from experiments.watch import watch

    server, url = serve(run_dir, 0, watch=watch)
    try:
        with chromium() as browser, Tab(browser, width=width, height=800) as tab:
            open_watch(tab, f"{url}watch?{urlencode({'home': home, 'away': away, 'seed': seed})}", 900)
            error = tab.page.evaluate("window.watchError")
            if error or tab.console_errors:
                raise RuntimeError(f"the watch page: {error or tab.console_errors}")
            tab.page.evaluate("(k) => { pause(); showFrame(k === null ? frames.length - 1 : k); }", frame)
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
    parser.add_argument("--watch", nargs=2, metavar=("HOME", "AWAY"), default=None,
                        help="the watch page of a game between these two players instead of the dashboard")
    parser.add_argument("--seed", type=int, default=0, help="with --watch: the game's seed")
    parser.add_argument("--frame", type=int, default=None, help="with --watch: the frame shown (from 0; default the last)")
    args = parser.parse_args()
    if args.watch:
        print(screenshot_watch(args.run_dir, *args.watch, args.seed, args.out, args.frame, min(args.width, 900)))
    else:
        print(screenshot_dashboard(args.run_dir, args.out, args.width))
