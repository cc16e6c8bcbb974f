"""TLS termination over an already-open transport: edge.tls.terminate with edge.tls.certs.

A tiny uvloop server in a thread plays the TCP entrypoint: it reads the first
chunk of a connection (the ClientHello), takes the SNI from it, asks the
certificate snapshot for a context and hands the raw transport, the chunk and
the context to :func:`start_tls`, with an echo protocol or the real
``HTTPConnection`` proxying to a whoami backend. Clients are real: openssl
s_client, curl, Python's ssl on a socket.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import json
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
import uvloop

from edge.config.dynamic import Configuration
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.http.codec.parsers import parser_classes
from edge.http.server.connection import HTTPConnection, HTTPContext
from edge.router.factory import build_http_routers
from edge.tls.certs import TLSCertificates
from edge.tls.terminate import Acceptor, TLSAccept, TLSTransport, refuse, start_tls
from edge.transports import TransportRegistry
from tests.fixtures.tls.pki import PKI
from tests.harness import lb, need

MIB = 1 << 20


def sni_of(hello: bytes) -> str | None:
    """The server name of a ClientHello held whole in ``hello`` (the test's peek)."""
    if len(hello) < 9 or hello[0] != 22 or hello[5] != 1:
        return None
    i = 9 + 2 + 32  # record header, handshake header, version, random
    i += 1 + hello[i]  # session id
    i += 2 + int.from_bytes(hello[i : i + 2], "big")  # cipher suites
    i += 1 + hello[i]  # compression methods
    end = i + 2 + int.from_bytes(hello[i : i + 2], "big")
    i += 2
    while i + 4 <= end:
        kind, size = (
            int.from_bytes(hello[i : i + 2], "big"),
            int.from_bytes(hello[i + 2 : i + 4], "big"),
        )
        if kind == 0:  # server_name: list length, type 0, name length, name
            n = int.from_bytes(hello[i + 7 : i + 9], "big")
            return hello[i + 9 : i + 9 + n].decode("ascii")
        i += 4 + size
    return None


class Peek(asyncio.Protocol):
    """The entrypoint's part: first chunk -> SNI -> context -> start_tls."""

    def __init__(self, server: TLSServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.server.accepted += 1

    def data_received(self, data: bytes) -> None:
        server = self.server
        ctx = server.certs.context_for(sni_of(data), server.options, tcp=server.tcp)
        if ctx is None:
            refuse(self.transport)
            return
        app = server.app_factory()
        tls = start_tls(
            self.transport,
            ctx,
            app,
            data,
            handshake_timeout=server.handshake_timeout,
            connections=server.connections,
        )
        server.adapters.append(tls)
        server.apps.append(app)


class TLSServer:
    """A uvloop server on 127.0.0.1:0 in a thread; ``setup(loop)`` returns the app factory."""

    def __init__(
        self,
        certs: TLSCertificates,
        setup: Callable[[asyncio.AbstractEventLoop], Callable[[], asyncio.Protocol]],
        *,
        options: str = "default",
        tcp: bool = False,
        handshake_timeout: float = 10.0,
        connections: set | None = None,
    ) -> None:
        self.certs = certs
        self.options = options
        self.tcp = tcp  # a terminating TCP router's contexts (the ALPN list as configured)
        self.handshake_timeout = handshake_timeout
        # Given: handshakes are bounded as on an entrypoint (in its set, swept every 50 ms).
        self.connections = connections
        self.swept = 0
        self.setup = setup
        self.accepted = 0
        self.adapters: list[TLSTransport] = []
        self.apps: list[asyncio.Protocol] = []
        self.loop = uvloop.new_event_loop()
        self.port = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        loop = self.loop
        asyncio.set_event_loop(loop)
        self.app_factory = self.setup(loop)
        server = loop.run_until_complete(loop.create_server(lambda: Peek(self), "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        if self.connections is not None:
            self._sweep()
        self._ready.set()
        loop.run_forever()
        server.close()
        for tls in self.adapters:
            tls.abort()
        loop.run_until_complete(asyncio.sleep(0.05))
        loop.close()

    def _sweep(self) -> None:
        """TCPEntryPoint.sweep's loop over the set (edge.entrypoints.tcp)."""
        now = self.loop.time()
        for conn in list(self.connections):
            if conn.deadline_kind and conn.deadline <= now:
                conn.deadline_passed()
                self.swept += 1
        self.loop.call_later(0.05, self._sweep)

    def __enter__(self) -> TLSServer:
        self._thread.start()
        assert self._ready.wait(10), "server did not start"
        return self

    def __exit__(self, *exc) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    def call(self, fn: Callable[[], object]) -> object:
        """Run ``fn`` on the server's loop; its result."""
        fut: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            try:
                fut.set_result(fn())
            except BaseException as exc:
                fut.set_exception(exc)

        self.loop.call_soon_threadsafe(run)
        return fut.result(timeout=10)


class Echo(asyncio.Protocol):
    """Echoes; closes after a line "bye"; records what happened to it."""

    def __init__(self) -> None:
        self.transport = None
        self.events: list[str] = []
        self.received = 0

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.events.append("made")

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        self.transport.write(data)
        if data.endswith(b"bye\n"):
            self.transport.close()

    def eof_received(self):
        self.events.append("eof")
        return False

    def connection_lost(self, exc) -> None:
        self.events.append("lost")


def echo_setup(loop):
    return Echo


# -- certificates -------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki() -> PKI:
    return PKI()


@pytest.fixture(scope="module")
def pki_files(tmp_path_factory, pki):
    """CA, server and client certificates on disk (and the pairs)."""
    folder = tmp_path_factory.mktemp("pki")
    pairs = {
        "a": pki.issue("a.test"),
        "b": pki.issue("b.test", kind="rsa"),
        "wild": pki.issue("*.wild.test"),
        "store": pki.issue("default.test"),
        "client": pki.issue(cn="client-1", client=True),
    }
    files = {name: pair.write(folder, name) for name, pair in pairs.items()}
    return {"ca": pki.write_ca(folder), "pairs": pairs, "files": files, "folder": folder}


def snapshot(pki_files, options: dict | None = None) -> TLSCertificates:
    pairs, files = pki_files["pairs"], pki_files["files"]
    section = {
        "certificates": [
            {"certFile": files["a"][0], "keyFile": files["a"][1]},
            {"certFile": pairs["b"].cert_pem, "keyFile": pairs["b"].key_pem},
            {"certFile": files["wild"][0], "keyFile": files["wild"][1]},
        ],
        "stores": {
            "default": {
                "defaultCertificate": {"certFile": files["store"][0], "keyFile": files["store"][1]}
            }
        },
        "options": options or {},
    }
    certs = TLSCertificates(merge({"file": msgspec.convert({"tls": section}, Configuration)}).tls)
    assert certs.errors == ()
    return certs


# -- clients --------------------------------------------------------------------------


def s_client(
    port: int, *args: str, data: bytes = b"", timeout: float = 10
) -> subprocess.CompletedProcess:
    openssl = need("openssl")
    return subprocess.run(
        [openssl, "s_client", "-connect", f"127.0.0.1:{port}", *args],
        input=data,
        capture_output=True,
        timeout=timeout,
    )


PEM_RE = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----\n", re.S)


def served_fingerprint(result: subprocess.CompletedProcess) -> str | None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    m = PEM_RE.search(result.stdout)
    if m is None:
        return None
    return x509.load_pem_x509_certificate(m.group(0)).fingerprint(hashes.SHA256()).hex()


def tls_socket(
    port: int, server_name: str, *, ca: str, cert=None, timeout: float = 10
) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=ca)
    if cert is not None:
        ctx.load_cert_chain(*cert)
    raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return ctx.wrap_socket(raw, server_hostname=server_name, suppress_ragged_eofs=False)


# -- tests: certificates by SNI -------------------------------------------------------


def test_certificate_by_sni_and_default(pki_files):
    pairs = pki_files["pairs"]
    with TLSServer(snapshot(pki_files), echo_setup) as server:
        for name, expected in [
            ("a.test", "a"),
            ("b.test", "b"),
            ("x.wild.test", "wild"),
            ("unknown.test", "store"),
            ("a.b.wild.test", "store"),
        ]:
            # -ign_eof: wait for the echo (the server closes after "bye").
            result = s_client(server.port, "-servername", name, "-ign_eof", data=b"hello\nbye\n")
            assert served_fingerprint(result) == pairs[expected].fingerprint, (name, result.stderr)
            assert b"---\nhello\nbye\n" in result.stdout  # echoed through the adapter
        result = s_client(server.port, "-noservername")
        assert served_fingerprint(result) == pairs["store"].fingerprint


def test_new_snapshot_applies_to_new_connections_only(pki, pki_files):
    pairs = pki_files["pairs"]
    with TLSServer(snapshot(pki_files), echo_setup) as server:
        old = tls_socket(server.port, "a.test", ca=pki_files["ca"])
        renewed = pki.issue("a.test")
        server.certs = TLSCertificates(
            merge(
                {
                    "file": msgspec.convert(
                        {
                            "tls": {
                                "certificates": [
                                    {"certFile": renewed.cert_pem, "keyFile": renewed.key_pem}
                                ]
                            }
                        },
                        Configuration,
                    )
                }
            ).tls
        )
        new = tls_socket(server.port, "a.test", ca=pki_files["ca"])
        assert hashlib.sha256(new.getpeercert(True)).hexdigest() == renewed.fingerprint
        assert hashlib.sha256(old.getpeercert(True)).hexdigest() == pairs["a"].fingerprint
        for sock in (old, new):
            sock.sendall(b"still here\n")
            assert recv_exactly(sock, 11) == b"still here\n"
            sock.close()


def recv_exactly(sock, n: int, timeout: float = 10) -> bytes:
    buf = b""
    deadline = time.monotonic() + timeout
    while len(buf) < n and time.monotonic() < deadline:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return buf


def test_sni_strict_refuses_unknown_names(pki_files):
    certs = snapshot(pki_files, {"strict": {"sniStrict": True}})
    with TLSServer(certs, echo_setup, options="strict@file") as server:
        ok = s_client(server.port, "-servername", "a.test")
        assert served_fingerprint(ok) == pki_files["pairs"]["a"].fingerprint
        refused = s_client(server.port, "-servername", "unknown.test")
        assert served_fingerprint(refused) is None
        assert b"alert number 112" in refused.stderr or b"unrecognized name" in refused.stderr, (
            refused.stderr
        )
        assert served_fingerprint(s_client(server.port, "-noservername")) is None


def test_min_version_tls13_refuses_tls12(pki_files):
    certs = snapshot(pki_files, {"modern": {"minVersion": "VersionTLS13"}})
    with TLSServer(certs, echo_setup, options="modern@file") as server:
        refused = s_client(server.port, "-servername", "a.test", "-tls1_2")
        assert served_fingerprint(refused) is None
        assert b"alert number 70" in refused.stderr or b"protocol version" in refused.stderr, (
            refused.stderr
        )
        ok = s_client(server.port, "-servername", "a.test", "-tls1_3")
        assert served_fingerprint(ok) == pki_files["pairs"]["a"].fingerprint
        assert b"TLSv1.3" in ok.stdout


def test_no_shared_cipher_fails_with_an_alert(pki_files):
    certs = snapshot(
        pki_files,
        {
            "gcm": {
                "maxVersion": "VersionTLS12",
                "cipherSuites": ["TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"],
            }
        },
    )
    with TLSServer(certs, echo_setup, options="gcm@file") as server:
        ok = s_client(server.port, "-servername", "b.test", "-tls1_2")
        assert b"ECDHE-RSA-AES256-GCM-SHA384" in ok.stdout
        refused = s_client(
            server.port,
            "-servername",
            "b.test",
            "-tls1_2",
            "-cipher",
            "ECDHE-RSA-AES128-GCM-SHA256",
        )
        assert served_fingerprint(refused) is None
        assert b"alert number 40" in refused.stderr or b"handshake failure" in refused.stderr, (
            refused.stderr
        )
        assert server.call(lambda: server.apps[-1].events) == []  # the application never saw it


def test_alpn(pki_files):
    certs = snapshot(pki_files, {"h2": {"alpnProtocols": ["h2", "http/1.1"]}})
    with TLSServer(certs, echo_setup) as server:  # the default options: h2, then http/1.1
        result = s_client(server.port, "-servername", "a.test", "-alpn", "h2,http/1.1")
        assert b"ALPN protocol: h2" in result.stdout
        result = s_client(server.port, "-servername", "a.test", "-alpn", "http/1.1")
        assert b"ALPN protocol: http/1.1" in result.stdout
    with TLSServer(certs, echo_setup, options="h2@file") as server:  # into HTTPS
        result = s_client(server.port, "-servername", "a.test", "-alpn", "h2,http/1.1")
        assert b"ALPN protocol: h2" in result.stdout
    with TLSServer(certs, echo_setup, options="h2@file", tcp=True) as server:
        result = s_client(server.port, "-servername", "a.test", "-alpn", "h2,http/1.1")
        assert b"ALPN protocol: h2" in result.stdout
        result = s_client(server.port, "-servername", "a.test", "-alpn", "spdy/1")
        assert b"No ALPN negotiated" in result.stdout


# -- tests: the transport -------------------------------------------------------------


def test_close_sends_close_notify_and_peer_close_reaches_the_app(pki_files):
    with TLSServer(snapshot(pki_files), echo_setup) as server:
        sock = tls_socket(server.port, "a.test", ca=pki_files["ca"])
        sock.sendall(b"one\nbye\n")
        assert recv_exactly(sock, 8) == b"one\nbye\n"
        # A ragged EOF would raise SSLEOFError (suppress_ragged_eofs=False): b"" is close_notify.
        assert sock.recv(100) == b""
        sock.close()
        sock = tls_socket(server.port, "a.test", ca=pki_files["ca"])
        sock.sendall(b"two\n")
        assert recv_exactly(sock, 4) == b"two\n"
        client_address = sock.getsockname()
        tls = server.adapters[-1]
        assert server.call(lambda: tls.get_extra_info("peername")) == client_address
        assert server.call(lambda: tls.get_extra_info("ssl_object").version()) == "TLSv1.3"
        sock.unwrap().close()  # the client's close_notify
        deadline = time.monotonic() + 5
        while server.call(lambda: list(server.apps[-1].events)) != ["made", "eof", "lost"]:
            assert time.monotonic() < deadline, server.apps[-1].events
            time.sleep(0.02)


def test_handshake_timeout(pki_files):
    hello = client_hello("a.test")
    with TLSServer(snapshot(pki_files), echo_setup, handshake_timeout=0.3) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(hello)  # and never the rest of the handshake
            start = time.monotonic()
            got = b""
            while True:
                try:
                    chunk = sock.recv(65536)
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                got += chunk
            elapsed = time.monotonic() - start
        assert got[:1] == b"\x16"  # the server's flight came
        assert 0.2 < elapsed < 4, elapsed
        assert server.apps[-1].events == []


def test_handshake_deadline_from_the_entrypoints_sweep(pki_files):
    # start_tls(connections=...): no timer; the transport is in the set until its handshake
    # ends, and the sweep closes it past its deadline.
    connections: set = set()
    with TLSServer(
        snapshot(pki_files), echo_setup, handshake_timeout=0.3, connections=connections
    ) as server:
        with tls_socket(server.port, "a.test", ca=str(pki_files["ca"])) as done:
            done.sendall(b"hi\n")
            assert done.recv(10) == b"hi\n"
            assert server.call(lambda: len(connections)) == 0  # the handshake ended: left the set
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(client_hello("a.test"))  # and never the rest of the handshake
            start = time.monotonic()
            assert sock.recv(1)[:1] == b"\x16"  # the server's flight
            assert server.call(lambda: len(connections)) == 1
            got = b"x"
            while got:
                try:
                    got = sock.recv(65536)
                except ConnectionResetError:
                    break
            elapsed = time.monotonic() - start
        assert 0.2 < elapsed < 4, elapsed
        assert server.call(lambda: (len(connections), server.swept)) == (0, 1)
        assert server.apps[-1].events == []
        assert all(tls._timer is None for tls in server.adapters)


class Clock:
    """The loop's clock, as TLSAccept reads it (``acceptor.loop.time()``)."""

    def __init__(self) -> None:
        self.now = 100.0

    def time(self) -> float:
        return self.now


class FakeRaw:
    """A raw transport that records what is done to it."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.written = b""
        self.protocol = None

    def write(self, data) -> None:
        self.written += bytes(data)

    def close(self) -> None:
        self.events.append("close")

    def abort(self) -> None:
        self.events.append("abort")

    def set_protocol(self, protocol) -> None:
        self.protocol = protocol

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 40000) if name == "peername" else default


def test_tls_accept_deadlines_plain_first_bytes_and_drain(pki_files):
    certs = snapshot(pki_files)
    context = certs.selecting_context()
    assert (
        context is not None and context.sni_callback is not None
    )  # named certificates: chosen by name
    clock, connections, plain, made = Clock(), set(), [], []

    def https(sni, client):
        made.append((sni, client))
        return Echo()

    acceptor = Acceptor(
        context=context,
        loop=clock,
        connections=connections,
        https=https,  # type: ignore[arg-type]
        plain=lambda raw, data, client: plain.append((raw, data, client)),
        first_timeout=2.0,
        handshake_timeout=10.0,
    )

    def accepted(client=None) -> tuple[TLSAccept, FakeRaw]:
        tls, raw = TLSAccept(acceptor, client), FakeRaw()
        tls.connection_made(raw)  # type: ignore[arg-type]
        return tls, raw

    # Silent: in the entrypoint's set with the first bytes' deadline; the sweep's call aborts it.
    tls, raw = accepted()
    assert tls in connections and tls.deadline_kind and tls.deadline == 102.0
    tls.deadline_passed()
    assert raw.events == ["abort"] and tls not in connections
    # A TLS record's first bytes: the deadline becomes the handshake's, from the accept.
    hello = client_hello("a.test")
    tls, raw = accepted()
    clock.now = 101.0
    tls.data_received(hello[:7])
    assert tls.deadline == 110.0 and tls in connections and raw.written == b""
    tls.data_received(
        hello[7:]
    )  # the whole ClientHello: the server's flight, the certificate chosen
    assert raw.written[:1] == b"\x16" and tls.sni == "a.test"
    assert tls.get_extra_info("sslcontext") is certs.context_for("a.test")
    assert tls in connections and made == []  # the handshake is not done: no application yet
    tls.shutdown()  # a drain
    assert raw.events == ["close"]
    tls.connection_lost(None)
    assert tls not in connections and made == []
    # A server name that is not ASCII: CPython cannot hand it to the callback; refused
    # with an alert (internal_error; CPython also reports it to sys.unraisablehook).
    tls, raw = accepted()
    hooked: list = []
    hook, sys.unraisablehook = sys.unraisablehook, hooked.append
    try:
        tls.data_received(hello.replace(b"a.test", b"\xe9.test"))
    finally:
        sys.unraisablehook = hook
    assert raw.written == bytes((21, 3, 3, 0, 2, 2, 80)) and raw.events == ["close"]
    assert len(hooked) == 1 and hooked[0].exc_type is UnicodeDecodeError
    tls.connection_lost(None)
    assert tls not in connections and made == []
    # Not TLS: the connection is plain's, with its first bytes (and the client a PROXY
    # protocol header named), and leaves the set.
    tls, raw = accepted(("10.0.0.7", 1234))
    tls.data_received(b"GET / HTTP/1.1\r\n")
    assert plain == [(raw, b"GET / HTTP/1.1\r\n", ("10.0.0.7", 1234))] and tls not in connections
    tls.data_received(b"Host: x\r\n\r\n")  # (never: the raw transport has another protocol now)
    assert len(plain) == 1


def client_hello(server_name: str) -> bytes:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    out = ssl.MemoryBIO()
    obj = ctx.wrap_bio(ssl.MemoryBIO(), out, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    return out.read()


class BioClient:
    """A TLS client over a plain socket with memory BIOs: it can end its TCP side
    without close_notify (a truncation) or send close_notify and keep reading."""

    def __init__(self, port: int, server_name: str, ca: str, timeout: float = 10) -> None:
        ctx = ssl.create_default_context(cafile=ca)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = ctx.wrap_bio(self.incoming, self.outgoing, server_hostname=server_name)
        for _ in range(20):
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._pump()
        else:
            raise AssertionError("no handshake")
        self._pump(receive=False)

    def _pump(self, receive: bool = True) -> bool:
        """Send what is pending; read one chunk if asked. False at TCP EOF."""
        if self.outgoing.pending:
            self.sock.sendall(self.outgoing.read())
        if receive:
            data = self.sock.recv(65536)
            if not data:
                return False
            self.incoming.write(data)
        return True

    def send(self, data: bytes) -> None:
        self.tls.write(data)
        self._pump(receive=False)

    def send_close_notify(self) -> None:
        with contextlib.suppress(ssl.SSLWantReadError):
            self.tls.unwrap()
        self._pump(receive=False)

    def read_all(self) -> tuple[bytes, bool]:
        """Plaintext until the server's close_notify or TCP EOF; and whether close_notify came."""
        out = b""
        for _ in range(10_000):
            try:
                chunk = self.tls.read(65536)
                if not chunk:
                    return out, True
                out += chunk
                continue
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLZeroReturnError:
                return out, True
            if not self._pump():
                return out, False
        raise AssertionError("read_all: too many reads")


class Wire:
    """A raw transport's surface that records each write (one entry per write)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.protocol = None

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_reading(self) -> bool:
        return True

    def set_protocol(self, protocol) -> None:
        self.protocol = protocol

    def close(self) -> None:
        self.closed = True

    abort = close

    def get_extra_info(self, name: str, default=None):
        return default


def test_tls13_tickets_leave_with_the_first_response(pki_files):
    """A TLS 1.3 server's session tickets are not a write of their own: they leave
    with the first bytes edge sends, and a client that keeps them resumes."""
    ctx = snapshot(pki_files).context_for("a.test")
    assert ctx is not None
    client_ctx = ssl.create_default_context(cafile=pki_files["ca"])

    async def connection(session):
        cin, cout = ssl.MemoryBIO(), ssl.MemoryBIO()
        client = client_ctx.wrap_bio(cin, cout, server_hostname="a.test", session=session)
        with pytest.raises(ssl.SSLWantReadError):
            client.do_handshake()
        wire, app = Wire(), Echo()
        tls = start_tls(wire, ctx, app, cout.read(), handshake_timeout=0)  # type: ignore[arg-type]
        assert len(wire.writes) == 1, "the server's flight"
        cin.write(wire.writes[0])
        client.do_handshake()
        tls.data_received(cout.read())  # the client's Finished alone: the handshake ends
        assert app.events == ["made"]
        assert len(wire.writes) == 1, "the session tickets were written alone"
        client.write(b"ping\n")
        tls.data_received(cout.read())
        assert len(wire.writes) == 2, "tickets and the answer: one write"
        cin.write(wire.writes[1])
        assert client.read(100) == b"ping\n"
        tls.close()
        assert len(wire.writes) == 3 and wire.closed  # close_notify
        return client

    async def run():
        first = await connection(None)
        assert first.version() == "TLSv1.3" and not first.session_reused
        assert first.session is not None and first.session.has_ticket
        second = await connection(first.session)
        assert second.session_reused

    asyncio.run(run())


class HalfClose(asyncio.Protocol):
    """On the peer's EOF, answers and closes its own half when the transport can."""

    def __init__(self) -> None:
        self.transport = None
        self.data = b""
        self.events: list[str] = []

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.data += data

    def eof_received(self):
        self.events.append(f"eof can_write_eof={self.transport.can_write_eof()}")
        self.transport.write(b"got " + self.data)
        if self.transport.can_write_eof():
            self.transport.write_eof()
            return True
        return False

    def connection_lost(self, exc) -> None:
        self.events.append("lost")


def test_tls13_half_close(pki_files):
    """close_notify ends the client's half only: the server still answers (TLS 1.3)."""
    with TLSServer(snapshot(pki_files), lambda loop: HalfClose) as server:
        client = BioClient(server.port, "a.test", pki_files["ca"])
        client.send(b"ping")
        client.send_close_notify()
        data, notified = client.read_all()
        assert (data, notified) == (b"got ping", True)
        client.sock.close()
        assert wait_lost(server) == ["eof can_write_eof=True", "lost"]


class CloseFirst(HalfClose):
    """Answers the first bytes and ends its half at once (close_notify), then reads on."""

    def data_received(self, data: bytes) -> None:
        if not self.data:
            self.transport.write(b"bye")
            self.transport.write_eof()
        self.data += data

    def eof_received(self):
        self.events.append(f"eof after {self.data!r}")
        return False  # both halves are done: close


def wait_lost(server) -> list[str]:
    """The last app's events once its connection is lost (5 s at most)."""
    deadline = time.monotonic() + 5
    while "lost" not in (events := server.call(lambda: list(server.apps[-1].events))):
        assert time.monotonic() < deadline, events
        time.sleep(0.02)
    return events


def test_tls13_half_close_server_first_then_data_and_close_notify_in_one_read(pki_files):
    """edge's close_notify first; the client's last bytes and its close_notify then
    arrive in one read: the bytes reach the app, then its EOF (CPython raises
    SSLZeroReturnError for a close_notify once ours is sent, which is not an error)."""
    with TLSServer(snapshot(pki_files), lambda loop: CloseFirst) as server:
        client = BioClient(server.port, "a.test", pki_files["ca"])
        client.send(b"hello")
        data, notified = client.read_all()
        assert (data, notified) == (b"bye", True)
        client.tls.write(b" and the rest")
        with contextlib.suppress(ssl.SSLError):
            client.tls.unwrap()
        client._pump(receive=False)  # both records in one segment
        events = wait_lost(server)
        client.sock.close()
        assert events == ["eof after b'hello and the rest'", "lost"]


def test_tcp_eof_without_close_notify_reaches_http(pki_files, whoami):
    """A request then a bare TCP FIN: HTTPConnection keeps the connection open to answer."""
    counters: dict = {}
    with TLSServer(snapshot(pki_files), http_setup(whoami.url, "httptools", counters)) as server:
        client = BioClient(server.port, "a.test", pki_files["ca"])
        client.send(b"GET /half HTTP/1.1\r\nHost: a.test\r\n\r\n")
        client.sock.shutdown(socket.SHUT_WR)
        data, notified = client.read_all()
        assert data.startswith(b"HTTP/1.1 200 "), data[:100]
        assert json.loads(data.split(b"\r\n\r\n", 1)[1])["path"] == "/half"
        assert notified  # then edge closed with close_notify
        client.sock.close()


SINK_TOTAL = (
    32 * MIB
)  # more than loopback's socket buffers hold, so a paused reader blocks the client


class Sink(asyncio.Protocol):
    """Pauses reading at the first bytes; counts and hashes what it gets."""

    def __init__(self) -> None:
        self.transport = None
        self.received = 0
        self.digest = hashlib.sha256()

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.received == 0:
            self.transport.pause_reading()
        self.received += len(data)
        self.digest.update(data)
        if self.received >= SINK_TOTAL:
            self.transport.write(self.digest.hexdigest().encode())


def test_app_pause_reading_stops_the_client(pki_files):
    payload = bytes(range(256)) * (SINK_TOTAL // 256)
    with TLSServer(snapshot(pki_files), lambda loop: Sink) as server:
        sock = tls_socket(server.port, "a.test", ca=pki_files["ca"])
        sender = threading.Thread(target=sock.sendall, args=(payload,), daemon=True)
        sender.start()
        deadline = time.monotonic() + 10
        while not server.call(lambda: server.apps and server.apps[-1].received):
            assert time.monotonic() < deadline, "no data reached the application"
            time.sleep(0.02)
        time.sleep(0.5)  # time for more to arrive, if pausing did not work
        received, reading = server.call(
            lambda: (server.apps[-1].received, server.adapters[-1].is_reading())
        )
        assert not reading
        assert 0 < received <= MIB, received  # paused: the kernel's buffers fill, not edge
        assert sender.is_alive()  # the client is blocked
        server.call(lambda: server.apps[-1].transport.resume_reading())
        sender.join(30)
        assert not sender.is_alive()
        assert recv_exactly(sock, 64) == hashlib.sha256(payload).hexdigest().encode()
        sock.close()


# -- tests: the real HTTP server over the adapter ---------------------------------------


def http_setup(whoami_url: str, parser: str, counters: dict):
    class Counting(HTTPConnection):
        def pause_writing(self) -> None:
            counters["pause_writing"] = counters.get("pause_writing", 0) + 1
            super().pause_writing()

    def setup(loop):
        conf = msgspec.convert(
            {
                "http": {
                    "routers": {"a": {"rule": "Host(`a.test`)", "service": "w"}},
                    "services": {"w": lb(whoami_url)},
                }
            },
            Configuration,
        )
        runtime = build_runtime(merge({"file": conf}), {"websecure": "tcp"})
        transports = TransportRegistry(loop)
        transports.update(runtime.servers_transports)
        request_parser, response_parser = parser_classes(parser)
        ctx = HTTPContext(
            name="websecure",
            port=443,
            loop=loop,
            request_parser=request_parser,
            response_parser=response_parser,
            scheme=b"https",
        )
        ctx.router = build_http_routers(runtime, transports, ["websecure"])["websecure"]
        counters["ctx"] = ctx
        return lambda: Counting(ctx)

    return setup


def curl(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([need("curl"), "-sS", *args], capture_output=True, timeout=timeout)


def test_https_through_http_connection(pki_files, whoami, parser, tmp_path):
    body = tmp_path / "body.bin"
    body.write_bytes(b"z" * MIB)
    out = tmp_path / "out.bin"
    counters: dict = {}
    with TLSServer(snapshot(pki_files), http_setup(whoami.url, parser, counters)) as server:
        base = f"https://a.test:{server.port}"
        common = ["--resolve", f"a.test:{server.port}:127.0.0.1", "--cacert", pki_files["ca"]]
        fmt = "\n%{http_code} %{num_connects} %{size_download}\n"
        result = curl(
            *common,
            "-w",
            fmt,
            f"{base}/one",
            "--next",
            *common,
            "-w",
            fmt,
            f"{base}/two?x=1",
            "--next",
            *common,
            "-w",
            fmt,
            "--data-binary",
            f"@{body}",
            f"{base}/upload",
            "--next",
            *common,
            "-w",
            fmt,
            "-o",
            str(out),
            f"{base}/data?size={MIB}",
        )
        assert result.returncode == 0, result.stderr
        lines = result.stdout.decode().splitlines()
        stats = [line.split() for line in lines if re.fullmatch(r"\d{3} \d+ \d+", line)]
        assert [s[:2] for s in stats] == [["200", "1"], ["200", "0"], ["200", "0"], ["200", "0"]]
        answers = [json.loads(line) for line in lines if line.startswith("{")]
        assert [a["path"] for a in answers] == ["/one", "/two", "/upload"]
        assert answers[0]["host"] == f"a.test:{server.port}"
        assert answers[0]["headers"]["X-Forwarded-Proto"] == ["https"]
        assert answers[2]["bodyBytes"] == MIB
        assert out.stat().st_size == MIB and out.read_bytes() == b"x" * MIB
        assert server.accepted == 1  # keep-alive: one connection for all four


def test_mutual_tls_with_curl(pki_files, whoami):
    ca = pki_files["ca"]
    certs = snapshot(
        pki_files,
        {"mtls": {"clientAuth": {"caFiles": [ca], "clientAuthType": "RequireAndVerifyClientCert"}}},
    )
    counters: dict = {}
    with TLSServer(
        certs, http_setup(whoami.url, "httptools", counters), options="mtls@file"
    ) as server:
        common = ["--resolve", f"a.test:{server.port}:127.0.0.1", "--cacert", ca]
        url = f"https://a.test:{server.port}/who"
        # HTTP/1.1: curl's HTTP/2 path (ALPN h2) may write its preface into the
        # refusal and report the socket's loss instead of the TLS alert.
        refused = curl(*common, "--http1.1", url)
        assert refused.returncode != 0
        assert b"alert" in refused.stderr, refused.stderr
        client_crt, client_key = pki_files["files"]["client"]
        accepted = curl(*common, "--cert", client_crt, "--key", client_key, url)
        assert accepted.returncode == 0, accepted.stderr
        assert json.loads(accepted.stdout)["path"] == "/who"
        stranger = PKI("stranger").issue(cn="intruder", client=True)
        crt, key = stranger.write(Path(pki_files["folder"]), "intruder")
        assert curl(*common, "--cert", crt, "--key", key, url).returncode != 0


def test_slow_reader_keeps_server_buffers_bounded(pki_files, whoami):
    size = 64 * MIB
    counters: dict = {}
    with TLSServer(snapshot(pki_files), http_setup(whoami.url, "httptools", counters)) as server:
        peak = [0]

        def sample() -> None:
            for tls in server.adapters:
                if not tls.is_closing():
                    peak[0] = max(peak[0], tls.get_write_buffer_size())
            server.loop.call_later(0.005, sample)

        server.call(sample)
        sock = tls_socket(server.port, "a.test", ca=pki_files["ca"])
        sock.sendall(f"GET /data?size={size} HTTP/1.1\r\nHost: a.test\r\n\r\n".encode())
        got = 0
        start = time.monotonic()
        rate = 16 * MIB  # bytes per second the client reads
        while got < 24 * MIB and time.monotonic() - start < 20:
            chunk = sock.recv(64 * 1024)
            if not chunk:
                break
            got += len(chunk)
            ahead = got / rate - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)
        sock.close()
        assert got >= 24 * MIB
        assert counters.get("pause_writing", 0) > 0  # the raw transport's pressure reached HTTP
        assert peak[0] < 2 * MIB, peak[0]
