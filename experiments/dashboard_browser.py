"""A headless Chromium driven over the DevTools protocol, with the standard library only.

For the dashboard's end-to-end tests, its benchmark and its screenshot: no Selenium, no
websocket package and no downloaded browser, only Debian's `chromium`
(`apt-get install -y chromium`). Chromium is started with the flags this machine needs
(without the background-networking ones it keeps trying to reach the internet) and a
fresh `--user-data-dir`; `--remote-debugging-port=0` makes it pick a free port, which it
writes to `<user-data-dir>/DevToolsActivePort`. We talk to the page target through a
minimal RFC 6455 websocket client.

    with Chromium() as browser:
        browser.navigate("http://127.0.0.1:8000/")
        browser.wait_for("window.dashboardRendered === true")
        print(browser.evaluate("document.title"), browser.console_errors)
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request
from urllib.parse import urlparse

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


class BrowserMissing(RuntimeError):
    """No Chromium binary on this machine."""


class BrowserError(RuntimeError):
    """Chromium did not start, crashed, or a DevTools call failed."""


def find_chromium() -> str:
    """The Chromium binary: $CHROMIUM if set, else the first of CANDIDATES on PATH."""
    explicit = os.environ.get("CHROMIUM")
    if explicit:
        if shutil.which(explicit):
            return shutil.which(explicit)
        raise BrowserMissing(f"$CHROMIUM={explicit!r} is not an executable")
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    raise BrowserMissing(
        "headless Chromium not found (looked for " + ", ".join(CANDIDATES) + " on PATH): "
        "install Debian's browser with `apt-get update && apt-get install -y chromium`, "
        "or set CHROMIUM=/path/to/chromium"
    )


class _WebSocket:
    """A client websocket (RFC 6455): text frames out (masked), text frames in."""

    def __init__(self, url: str, timeout: float):
        parts = urlparse(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {parts.path} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        response = b""
        while b"\r\n\r\n" not in response:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise BrowserError(f"websocket handshake with {url} closed early")
            response += chunk
        head, self._buffer = response.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise BrowserError(f"websocket handshake with {url} refused: {head[:200]!r}")

    def _read(self, n: int) -> bytes:
        while len(self._buffer) < n:
            chunk = self.sock.recv(max(65536, n - len(self._buffer)))
            if not chunk:
                raise BrowserError("the browser closed the DevTools connection")
            self._buffer += chunk
        data, self._buffer = self._buffer[:n], self._buffer[n:]
        return data

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        header = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        repeated = (mask * (n // 4 + 1))[:n]
        masked = (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(n, "big") if n else b""
        self.sock.sendall(header + mask + masked)

    def send(self, text: str) -> None:
        self._send_frame(0x1, text.encode())

    def recv(self) -> str:
        message = b""
        while True:
            b0, b1 = self._read(2)
            opcode, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else None
            payload = self._read(n)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            if opcode == 0x8:
                raise BrowserError("the browser closed the DevTools connection")
            if opcode == 0x9:
                self._send_frame(0xA, payload)
                continue
            if opcode in (0x0, 0x1, 0x2):
                message += payload
                if b0 & 0x80:
                    return message.decode()

    def close(self) -> None:
        try:
            self._send_frame(0x8, b"")
        except OSError:
            pass
        self.sock.close()


class Chromium:
    """One headless Chromium with one page, driven over the DevTools protocol.

    `console_errors` collects console.error/assert calls, uncaught exceptions and the
    browser's own error log entries (failed loads); `requests` every URL the page asked for.
    """

    def __init__(self, width: int = 1400, height: int = 1000, timeout: float = 30.0, binary: str | None = None):
        self.binary = binary or find_chromium()
        self.timeout = timeout
        self.user_data_dir = tempfile.mkdtemp(prefix="dashboard-chromium-")
        self.console_errors: list[str] = []
        self.requests: list[str] = []
        self._events: list[dict] = []
        self._next_id = 0
        self._stderr = open(os.path.join(self.user_data_dir, "stderr.log"), "w+b")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [self.binary, *CHROMIUM_FLAGS, f"--user-data-dir={self.user_data_dir}",
             "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
             f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=self._stderr,
        )
        try:
            port = self._devtools_port()
            self.ws = _WebSocket(self._page_websocket_url(port), timeout)
            for domain in ("Page", "Runtime", "Log", "Network"):
                self.call(f"{domain}.enable")
            self.call("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        except BaseException:
            self.close()
            raise

    def _stderr_tail(self) -> str:
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-2000:]

    def _devtools_port(self) -> int:
        path = os.path.join(self.user_data_dir, "DevToolsActivePort")
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrowserError(f"{self.binary} exited with code {self.proc.returncode}:\n{self._stderr_tail()}")
            try:
                with open(path) as f:
                    line = f.readline().strip()
                if line:
                    return int(line)
            except (FileNotFoundError, ValueError):
                pass
            time.sleep(0.05)
        raise BrowserError(f"{self.binary} did not open its DevTools port in {self.timeout:.0f} s:\n{self._stderr_tail()}")

    def _page_websocket_url(self, port: int) -> str:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=self.timeout) as r:
                targets = json.load(r)
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
            time.sleep(0.05)
        raise BrowserError("Chromium opened no page target")

    # -- DevTools protocol -------------------------------------------------------

    def _handle_event(self, message: dict) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            args = params.get("args", [])
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in args)
            self.console_errors.append(f"console.{params['type']}: {text}")
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            description = details.get("exception", {}).get("description") or details.get("text")
            self.console_errors.append(f"uncaught: {description}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.console_errors.append(f"log: {entry.get('text')} {entry.get('url', '')}".strip())
        elif method == "Network.requestWillBeSent":
            self.requests.append(params.get("request", {}).get("url", ""))
        self._events.append(message)

    def call(self, method: str, params: dict | None = None) -> dict:
        self._next_id += 1
        call_id = self._next_id
        self.ws.send(json.dumps({"id": call_id, "method": method, "params": params or {}}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == call_id:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._handle_event(message)

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (promises are awaited)."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise BrowserError(f"{expression!r} threw: {details.get('exception', {}).get('description') or details.get('text')}")
        return result.get("result", {}).get("value")

    def navigate(self, url: str) -> None:
        result = self.call("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise BrowserError(f"could not load {url}: {result['errorText']}")

    def wait_for(self, expression: str, timeout: float | None = None, interval: float = 0.02):
        """Polls until the expression is truthy and returns its value.

        An expression that throws counts as not yet true (the page may still be loading).
        """
        deadline = time.monotonic() + (timeout or self.timeout)
        error = None
        while True:
            try:
                value = self.evaluate(expression)
                if value:
                    return value
            except BrowserError as e:
                error = e
            if time.monotonic() > deadline:
                raise BrowserError(
                    f"timed out after {timeout or self.timeout:.0f} s waiting for {expression!r}"
                    + (f" (last error: {error})" if error else "") + f"; console errors: {self.console_errors}"
                )
            time.sleep(interval)

    def blank(self) -> None:
        """Leaves the current page for about:blank and forgets its console errors and requests."""
        self.navigate("about:blank")
        self.wait_for("location.href === 'about:blank' && document.readyState === 'complete'")
        self.console_errors.clear()
        self.requests.clear()

    def hover(self, x: float, y: float) -> None:
        self.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})

    def screenshot(self, path: str, full_page: bool = True) -> str:
        """Writes a PNG of the page (the whole scrollable height if full_page)."""
        params = {"format": "png"}
        if full_page:
            metrics = self.call("Page.getLayoutMetrics")
            size = metrics.get("cssContentSize") or metrics["contentSize"]
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1})
        data = self.call("Page.captureScreenshot", params)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            ws.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._stderr.close()
        shutil.rmtree(self.user_data_dir, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def screenshot_dashboard(run_dir: str, path: str, width: int = 1400) -> str:
    """A full-page PNG of the dashboard of `run_dir` (as served), e.g. for docs/dashboard.png."""
    from experiments.dashboard import serve

    server, url = serve(run_dir, 0)
    try:
        with Chromium(width=width, height=1000) as browser:
            browser.navigate(url)
            browser.wait_for("window.dashboardRendered === true", timeout=120)
            if browser.console_errors:
                raise BrowserError(f"console errors on the dashboard: {browser.console_errors}")
            return browser.screenshot(path)
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
