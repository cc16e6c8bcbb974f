"""Real processes for integration tests: edge and whoami on 127.0.0.1, ephemeral ports.

Each process is started with ``python -m edge``; the harness reads its log to
learn the ports the OS chose (every address is ``127.0.0.1:0``) and waits for
``/ready``. Every wait has a timeout; every process is stopped at the end.
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
LISTEN_RE = re.compile(r"entrypoint (\S+): listening on \[?([0-9a-f.:]+?)\]?:(\d+)")
WHOAMI_RE = re.compile(r"whoami (\S+): (http|tcp|udp) on ([0-9a-f.:]+):(\d+)")
# Seconds a started process gets to listen and be ready, and a log line (a configuration
# applied) to appear: 1 s on an idle machine, but more than 10 on two cores shared by a
# dozen test runs; only a hang waits this long.
STARTUP = 30.0


class Proc:
    """A subprocess whose stderr is collected line by line in a thread; ``prefix`` runs
    it under a wrapper (``["prlimit", "--nofile=256:256"]``)."""

    def __init__(
        self,
        args: list[str],
        cwd: Path | None = None,
        env: dict | None = None,
        prefix: list[str] | None = None,
    ) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()
        full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        self.proc = subprocess.Popen(
            [*(prefix or ()), sys.executable, "-m", "edge", *args],
            cwd=cwd or ROOT,
            env=full_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_for(
        self, pattern: re.Pattern | str, timeout: float = STARTUP, start: int = 0
    ) -> re.Match:
        rx = re.compile(pattern) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        i = start
        with self._cond:
            while True:
                while i < len(self.lines):
                    m = rx.search(self.lines[i])
                    if m:
                        return m
                    i += 1
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and i >= len(self.lines)):
                    raise TimeoutError(
                        f"{rx.pattern!r} not seen; log:\n" + "\n".join(self.lines[-40:])
                    )
                self._cond.wait(min(left, 0.1))

    def all_matches(self, pattern: str) -> list[re.Match]:
        rx = re.compile(pattern)
        with self._cond:
            return [m for line in self.lines if (m := rx.search(line))]

    @property
    def log(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 15.0) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self._reader.join(timeout=5)
        return self.proc.returncode


class Whoami(Proc):
    def __init__(self, name: str = "whoami") -> None:
        super().__init__(["whoami", "--name", name, "--http", "127.0.0.1:0"])
        m = self.wait_for(WHOAMI_RE, timeout=STARTUP)
        self.name = name
        self.port = int(m.group(4))
        self.url = f"http://127.0.0.1:{self.port}"


class Edge(Proc):
    """edge run on a static + dynamic configuration written to ``tmp``."""

    def __init__(
        self,
        tmp: Path,
        dynamic: dict,
        *,
        parser: str = "httptools",
        entrypoints: dict | None = None,
        static_extra: dict | None = None,
        watch: bool = True,
        wait_ready: bool = True,
        prefix: list[str] | None = None,
    ) -> None:
        self.tmp = tmp
        self.dynamic_path = tmp / "dynamic.yaml"
        self.write_dynamic(dynamic)
        eps = entrypoints or {"web": {"address": "127.0.0.1:0"}}
        for ep in eps.values():
            ep.setdefault("http", {})["parser"] = parser
        eps.setdefault("traefik", {"address": "127.0.0.1:0"})
        static = {
            "entryPoints": eps,
            "providers": {"file": {"filename": str(self.dynamic_path), "watch": watch}},
            "providersThrottleDuration": "50ms",
            "ping": {"entryPoint": "traefik"},
            "log": {"level": "DEBUG"},
        }
        for key, value in (static_extra or {}).items():
            static[key] = value
        self.static_path = tmp / "static.yaml"
        self.static_path.write_text(yaml.safe_dump(static))
        super().__init__(["run", "--config", str(self.static_path)], prefix=prefix)
        self.ports: dict[str, int] = {}
        for _ in eps:
            m = self.wait_for(LISTEN_RE, timeout=STARTUP, start=0)
            break
        deadline = time.monotonic() + STARTUP
        while len(self.ports) < len(eps) and time.monotonic() < deadline:
            for m in self.all_matches(LISTEN_RE.pattern):
                self.ports[m.group(1)] = int(m.group(3))
            time.sleep(0.02)
        if len(self.ports) < len(eps):
            raise TimeoutError("entrypoints did not start:\n" + self.log)
        if wait_ready:
            self.wait_ready()

    @property
    def port(self) -> int:
        return self.ports["web"]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def write_dynamic(self, dynamic: dict) -> None:
        tmp = self.dynamic_path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(dynamic))
        os.replace(tmp, self.dynamic_path)

    def wait_ready(self, timeout: float = STARTUP) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, _, _ = get(self.ports["traefik"], "/ready")
            if status == 200:
                return
            time.sleep(0.05)
        raise TimeoutError("edge never became ready:\n" + self.log)

    def applied(self) -> int:
        """Configurations the data plane took: one line each (app.py logs a full
        switch or an in-place update), whatever the log level; the watcher's
        DEBUG line for the same round is not counted again."""
        return len(self.all_matches(r"configuration applied(:| in place)"))

    def wait_applied(self, count: int, timeout: float = STARTUP) -> None:
        deadline = time.monotonic() + timeout
        while self.applied() < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"configuration #{count} never applied:\n{self.log}")
            time.sleep(0.02)


def get(
    port: int,
    path: str = "/",
    host: str | None = None,
    headers: dict | None = None,
    method: str = "GET",
    body=None,
    timeout: float = 5.0,
):
    """(status, headers, body) of one request on a fresh connection; (0, {}, b"") if refused."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        hdrs = dict(headers or {})
        if host:
            hdrs["Host"] = host
        conn.request(method, path, body=body, headers=hdrs)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    except ConnectionRefusedError:
        return 0, {}, b""
    finally:
        conn.close()


def read_until_closed(
    sock: socket.socket, timeout: float, quiet: float | None = None
) -> tuple[bytes, bool]:
    """Everything ``sock`` receives, and whether the peer closed (or reset) the connection:
    False when ``timeout`` passed first, or, with ``quiet``, nothing came for that long."""
    sock.settimeout(quiet if quiet is not None else timeout)
    chunks = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return b"".join(chunks), False
        except ConnectionResetError:
            return b"".join(chunks), True
        if not chunk:
            return b"".join(chunks), True
        chunks.append(chunk)
    return b"".join(chunks), False


def read_response(s: socket.socket, bodiless: bool = False) -> bytes:
    """One response from ``s``: a head and the Content-Length body it names (none when
    ``bodiless``, an answer to HEAD)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = s.recv(65536)
        assert data, buf
        buf += data
    head, _, body = buf.partition(b"\r\n\r\n")
    length = (
        0 if bodiless else int(head.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
    )
    while len(body) < length:
        data = s.recv(65536)
        assert data, buf
        body += data
    assert len(body) == length, (head, body)  # nothing more: the next request was not sent yet
    return head + b"\r\n\r\n" + body


def raw(
    port: int,
    data: bytes,
    timeout: float = 5.0,
    half_close: bool = False,
    quiet: float | None = None,
) -> bytes:
    """Send bytes on a new connection; everything the server sends until it closes (or
    ``timeout``; with ``quiet``, until nothing came for that long)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        return read_until_closed(s, timeout, quiet)[0]


def need(tool: str) -> str:
    """The path of a system tool, or skip the test saying how to get it."""
    import pytest

    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} is not installed (apt-get install {tool}; .ci/run installs it)")
    return path


def lb(*urls: str, **extra) -> dict:
    return {"loadBalancer": {"servers": [{"url": u} for u in urls], **extra}}
