"""Headless Chromium driven over the Chrome DevTools Protocol, for the dashboard's tests.

A small CDP client over the page's websocket (``websockets``, a test dependency): one
browser process with its own profile, one page, commands answered by id, every event
kept so that a test can read what the page logged (``Runtime.consoleAPICalled``,
``Runtime.exceptionThrown``, ``Log.entryAdded``). Every wait is bounded by a timeout.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import ClientConnection, connect

START_TIMEOUT = 60.0  # a cold Chromium on a busy 2-core machine
COMMAND_TIMEOUT = 30.0


def chromium() -> str:
    """Debian's ``chromium`` (or one on PATH); the test skips, saying so, without it."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("chromium is not installed (Debian's chromium package drives these tests)")


class CDPError(Exception):
    pass


class Browser:
    """One headless Chromium page; ``host_rules`` maps names to addresses
    (``--host-resolver-rules``, e.g. ``MAP api.test 127.0.0.1``)."""

    def __init__(self, profile: Path, *, host_rules: str | None = None) -> None:
        profile.mkdir(parents=True, exist_ok=True)
        self.profile = profile
        args = [
            chromium(),
            "--headless=new",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            "--window-size=1400,1000",
        ]
        if os.geteuid() == 0:  # Chromium's sandbox refuses root
            args.append("--no-sandbox")
        if host_rules:
            args.append(f"--host-resolver-rules={host_rules}")
        self.log_path = profile / "chromium.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [*args, "about:blank"], stdout=log, stderr=subprocess.STDOUT
            )
        self.events: list[dict[str, Any]] = []
        self._id = 0
        self._closing = contextlib.ExitStack()
        try:
            self.ws = self._attach()
            for domain in ("Runtime", "Log", "Page"):
                self.send(f"{domain}.enable")
        except BaseException:
            self.close()
            raise

    def _attach(self) -> ClientConnection:
        """The page's websocket: the port from DevToolsActivePort, the page from /json/list."""
        active = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT
        port = 0
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise CDPError(f"chromium exited ({self.proc.returncode}):\n{self.output}")
            if active.exists():
                first = active.read_text().split("\n", 1)[0].strip()
                if first.isdigit():
                    port = int(first)
                    break
            time.sleep(0.1)
        if not port:
            raise CDPError(f"chromium gave no DevTools port:\n{self.output}")
        while time.monotonic() < deadline:
            direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            with direct.open(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                pages = [t for t in json.loads(r.read()) if t.get("type") == "page"]
            if pages:
                url = pages[0]["webSocketDebuggerUrl"]
                return self._closing.enter_context(connect(url, max_size=None, open_timeout=10))
            time.sleep(0.1)
        raise CDPError(f"chromium opened no page:\n{self.output}")

    @property
    def output(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def send(
        self, method: str, params: dict[str, Any] | None = None, timeout: float = COMMAND_TIMEOUT
    ) -> dict[str, Any]:
        """Run one command and return its result; the events meanwhile are kept."""
        self._id += 1
        ident = self._id
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params or {}}))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{method}: no answer in {timeout} s")
            message = json.loads(self.ws.recv(timeout=left))
            if message.get("id") == ident:
                if "error" in message:
                    raise CDPError(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self.events.append(message)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            raise CDPError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30.0, interval: float = 0.1) -> Any:
        """Evaluate ``expression`` until it is truthy (its value) or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(interval)
        raise TimeoutError(f"never true in {timeout} s: {expression}\nlast value: {value!r}")

    def open(self, url: str, timeout: float = 30.0) -> None:
        """Load ``url`` as a new document (never a same-document move to another
        fragment) and wait until it and its deferred scripts ran; redirects followed."""
        for target, loaded in (
            ("about:blank", "location.href === 'about:blank'"),
            (url, "location.href !== 'about:blank' && document.readyState === 'complete'"),
        ):
            self.send("Page.navigate", {"url": target})
            self.wait_for(loaded, timeout)

    def screenshot(self, path: Path) -> Path:
        """A PNG of the page as shown, written to ``path``."""
        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
        path.write_bytes(base64.b64decode(data["data"]))
        return path

    def problems(self) -> list[str]:
        """What the page reported as an error so far: console errors and assertions,
        uncaught exceptions, and the browser's own error entries (a resource that failed,
        a Content-Security-Policy violation)."""
        self.send("Runtime.evaluate", {"expression": "0"})  # take in the events sent so far
        found = []
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(f"exception: {params['exceptionDetails']}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(f"console.{params['type']}: {params.get('args')}")
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                entry = params["entry"]
                found.append(
                    f"log ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}"
                )
        return found

    def close(self) -> None:
        self._closing.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
