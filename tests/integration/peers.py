"""Real peers and clients the integration tests share across capabilities.

Tools started by a test (``Process``: openssl, nginx, HAProxy; ``running``), small
servers in threads (``Backend`` keeps what each TCP connection sent,
``ThreadedServer`` runs a handler per connection, ``Scripted`` answers HTTP with
the statuses a test sets, health checks apart), and clients over TLS
(``openssl s_client``, Python's ssl, curl) with what they read back: the
certificate served, the answer, whether a session resumed; ``run`` runs a
coroutine on a fresh uvloop; ``tcp_routers`` builds the TCP routers of a dynamic
configuration for pure checks of their precedence. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import NamedTuple

import uvloop

from edge.config.loader import decode_dynamic
from edge.config.merge import merge
from edge.config.runtime import build_runtime, check_tls
from edge.router.tcp import build_tcp_routers
from edge.tls.certs import TLSCertificates
from tests.harness import need


def certificates(certs: dict, *names: str) -> list[dict]:
    return [pair(certs["files"][n]) for n in names]


def pair(files: tuple[str, str]) -> dict:
    """A certificate entry: ``files`` are (certFile, keyFile)."""
    return {"certFile": files[0], "keyFile": files[1]}


class Process:
    """A tool started by the test; the first line matching ``ready`` is kept."""

    def __init__(self, args: list[str], ready: str, timeout: float = 10.0) -> None:
        self.proc = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        found: list[re.Match] = []
        done = threading.Event()

        def read() -> None:
            for line in self.proc.stdout:
                m = re.search(ready, line)
                if m and not found:
                    found.append(m)
                    done.set()
            done.set()

        threading.Thread(target=read, daemon=True).start()
        if not done.wait(timeout) or not found:
            self.stop()
            raise TimeoutError(f"{args[0]}: {ready!r} not seen")
        self.match = found[0]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def s_server(crt: str, key: str, *extra: str, naccept: int = 100) -> Process:
    """``openssl s_server -rev`` on an ephemeral port: TLS with ``crt``/``key``, each line
    echoed reversed, for ``naccept`` connections at most."""
    args = ["-accept", "127.0.0.1:0", "-cert", crt, "-key", key, "-rev", "-naccept", str(naccept)]
    p = Process([need("openssl"), "s_server", *args, *extra], r"ACCEPT .*:(\d+)")
    p.port = int(p.match.group(1))
    return p


class Backend:
    """A TCP server in a thread: keeps what each connection sent until EOF, and may speak first."""

    def __init__(self, banner: bytes = b"") -> None:
        self.banner = banner
        self.received: list[bytes] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.done = threading.Event()
        self.closing = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.closing:
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(10)
                if self.banner:
                    conn.sendall(self.banner)
                chunks = []
                try:
                    while chunk := conn.recv(65536):
                        chunks.append(chunk)
                        if self.banner:
                            conn.sendall(chunk)
                except OSError:
                    pass
                self.received.append(b"".join(chunks))
                self.done.set()

    def close(self) -> None:
        self.closing = True
        self.thread.join(5)
        self.sock.close()


PEM_RE = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----\n", re.S)


def s_client_until(
    port: int,
    server_name: str,
    data: bytes,
    expect: bytes,
    timeout: float = 15,
    options: tuple[str, ...] = (),
) -> bytes:
    """``openssl s_client -showcerts`` (and ``options``): send ``data``, read until ``expect``
    (or timeout); its stdout."""
    proc = subprocess.Popen(
        [
            need("openssl"),
            "s_client",
            "-connect",
            f"127.0.0.1:{port}",
            "-servername",
            server_name,
            "-showcerts",
            "-ign_eof",
            *options,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    out = b""
    done = threading.Event()

    def read() -> None:
        nonlocal out
        while chunk := proc.stdout.read1(65536):
            out += chunk
            if expect in out:
                break
        done.set()

    threading.Thread(target=read, daemon=True).start()
    proc.stdin.write(data)
    proc.stdin.flush()
    done.wait(timeout)
    proc.kill()
    proc.wait(5)
    return out


def fingerprint_of(output: bytes) -> str | None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    m = PEM_RE.search(output.decode("latin-1"))
    if m is None:
        return None
    return x509.load_pem_x509_certificate(m.group(0).encode()).fingerprint(hashes.SHA256()).hex()


def tls_connect(port: int, server_name: str, ca: str | None) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=ca) if ca else ssl._create_unverified_context()
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    return ctx.wrap_socket(sock, server_hostname=server_name)


def peer_fingerprint(port: int, server_name: str, ca: str | None = None) -> str:
    with tls_connect(port, server_name, ca) as s:
        return hashlib.sha256(s.getpeercert(True)).hexdigest()


def https_get(port: int, host: str, path: str = "/", ca: str | None = None) -> tuple[int, dict]:
    """One request over TLS (SNI = Host); (status, JSON body or {})."""
    with tls_connect(port, host, ca) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        data = recv_all(s)
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split()[1])
    return status, json.loads(body) if body.startswith(b"{") else {}


def send_until(port: int, data: bytes, expect: bytes, timeout: float = 10) -> bytes:
    """Send ``data`` on a new connection to 127.0.0.1:``port``; read until ``expect``
    arrives, the server closes or resets, or ``timeout`` passes: what was read."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        got = b""
        deadline = time.monotonic() + timeout
        while expect not in got and time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            got += chunk
        return got


def recv_all(sock: socket.socket, timeout: float = 10) -> bytes:
    chunks = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except (TimeoutError, ssl.SSLError, ConnectionResetError):
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def curl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([need("curl"), "-sS", *args], capture_output=True, timeout=30)


class Got(NamedTuple):
    answer: bytes
    fingerprint: str  # of the certificate served
    session: ssl.SSLSession | None  # to offer next
    reused: bool  # this connection resumed the session offered


def resumed_get(
    port: int,
    server_name: str | None,
    session: ssl.SSLSession | None = None,
    ctx: ssl.SSLContext | None = None,
) -> Got:
    """GET / with Connection: close over TLS, offering ``session`` (made with ``ctx``)."""
    ctx = ctx or ssl._create_unverified_context()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        tls = ctx.wrap_socket(sock, server_hostname=server_name, session=session)
        fingerprint = hashlib.sha256(tls.getpeercert(True)).hexdigest()
        host = server_name or "nobody.test"
        tls.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        answer = recv_all(tls)
        got = Got(answer, fingerprint, tls.session, tls.session_reused)
        tls.close()
    return got


def free_port(host: str = "127.0.0.1") -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_listening(proc: subprocess.Popen, port: int, host: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}")
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"{proc.args[0]} is not listening on {host}:{port}")


@contextlib.contextmanager
def running(args: list[str], log: Path, *ports: int):
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    try:
        for port in ports:
            wait_listening(proc, port)
        yield proc
    except Exception as exc:
        raise AssertionError(f"{exc}; log:\n{log.read_text(errors='replace')}") from exc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


HAPROXY_DEFAULTS = """
defaults
  mode tcp
  timeout connect 5s
  timeout client 10s
  timeout server 10s
frontend ready
  mode http
  bind 127.0.0.1:{ready}
  http-request return status 200
"""


class ThreadedServer:
    """A server on 127.0.0.1 (port 0), a thread per connection running ``_serve(socket,
    number)``; every wait is bounded, and ``stop`` ends them all."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.stopped = False
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        n = 0
        while not self.stopped:
            try:
                c, _ = self.sock.accept()
            except TimeoutError:
                continue
            n += 1
            t = threading.Thread(target=self._serve, args=(c, n), daemon=True)
            self.threads.append(t)
            t.start()

    def _serve(self, c: socket.socket, n: int) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self.stopped = True
        for t in self.threads:
            t.join(2)
        self.sock.close()


def read_request(c: socket.socket) -> tuple[bytes, bytes] | None:
    """One request from ``c`` (its timeout bounds each read): its head, without the
    blank line, and the body its Content-Length says (what came of it); None when
    the peer closed before the head ended. Heads are read up to 64 KiB."""
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 65536:
        chunk = c.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = c.recv(65536)
        if not chunk:
            break
        body += chunk
    return head, body


class Scripted(ThreadedServer):
    """An HTTP/1.1 server: ``GET /health`` answers ``health`` (the status the test sets),
    anything else ``status`` (200 unless the test sets it) with the server's name; every
    answer closes the connection."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.health = 200
        self.status = 200
        self.served = 0  # requests other than health checks
        self.checks = 0
        self.lock = threading.Lock()
        super().__init__()

    def _serve(self, c: socket.socket, n: int) -> None:
        c.settimeout(2.0)
        try:
            data = b""
            while b"\r\n\r\n" not in data and len(data) < 65536:
                chunk = c.recv(65536)
                if not chunk:
                    return
                data += chunk
            target = data.split(b" ", 2)[1] if data.count(b" ") >= 2 else b""
            if target == b"/health":
                with self.lock:
                    self.checks += 1
                status, body = self.health, b"health"
            else:
                with self.lock:
                    self.served += 1
                status, body = self.status, self.name.encode()
            c.sendall(
                b"HTTP/1.1 %d X\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                % (status, len(body), body)
            )
        except OSError:
            pass
        finally:
            c.close()


LOOP_TIMEOUT = 30.0


def run(main: Callable[[], Awaitable[None]], timeout: float = LOOP_TIMEOUT) -> None:
    """Run ``main()`` on a fresh uvloop; an exception raised in a callback fails the test."""
    errors: list[dict] = []

    async def bounded() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: errors.append(ctx))
        async with asyncio.timeout(timeout):
            await main()

    uvloop.run(bounded())
    assert not errors, f"errors inside loop callbacks: {errors}"


def s_client_refused(port: int, server_name: str, timeout: float = 15) -> str:
    """``openssl s_client -servername`` with nothing to send: everything it printed
    (stdout and stderr), the handshake's outcome included."""
    done = subprocess.run(
        [need("openssl"), "s_client", "-connect", f"127.0.0.1:{port}", "-servername", server_name],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout,
    )
    return (done.stdout + done.stderr).decode("latin-1")


def tcp_routers(dynamic: dict, eps: tuple[str, ...] = ("web",)):
    conf = merge({"file": decode_dynamic(dynamic)})
    runtime = build_runtime(conf, dict.fromkeys(eps, "tcp"))
    certs = TLSCertificates(runtime.tls)
    check_tls(runtime, certs)
    return runtime, build_tcp_routers(runtime, eps, certs)
