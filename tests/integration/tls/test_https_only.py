"""An entrypoint with HTTPS routers only: the no-peek TLS path (TLSAccept,
TLSCertificates.selecting_context).

On an entrypoint that only terminates into HTTPS under one set of TLS options,
OpenSSL's SNI callback picks the certificate. Several tests pin what the review
of that path found it must keep from the peek path it replaces:

- ``sniStrict`` holds for resumed sessions too. Under TLS 1.2, OpenSSL hands the
  SNI callback the *session's* server name on a resumption, not the one the client
  sent, and one ticket key covers every name of the options: a client holding a
  session for a known name could otherwise come back with an unknown name (or none)
  and be served. The peek reads the name from the ClientHello and refuses.
- A certificate snapshot is freed by reference counting: the data plane
  ``gc.freeze()``s after every switch, so a reference cycle through a context's
  SNI callback would keep every replaced snapshot (its contexts, certificates and
  keys) for the life of the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import ssl
import time
import weakref

import msgspec
import pytest
import uvloop

from edge.config.dynamic import TLSConfiguration
from edge.config.loader import decode_dynamic
from edge.config.merge import merge
from edge.config.runtime import build_runtime, check_tls
from edge.config.static import EntryPointKind, EntryPointTLS
from edge.router.tcp import build_tcp_routers
from edge.tcp.peek import Peek, PeekContext
from edge.tls.certs import TLSCertificates
from edge.tls.terminate import Acceptor, TLSAccept
from tests.harness import Edge, get, lb
from tests.integration.peers import (
    certificates,
    https_get,
    pair,
    recv_all,
    resumed_get,
    s_client_refused,
)
from tests.unit.tls.test_certs import handshake


def client(version: ssl.TLSVersion) -> ssl.SSLContext:
    ctx = ssl._create_unverified_context()
    ctx.minimum_version = ctx.maximum_version = version
    return ctx


STRICT = {"sniStrict": True}
STRICT_13 = {
    "sniStrict": True,
    "minVersion": "VersionTLS13",
}  # the no-peek path still takes this one


@pytest.fixture(scope="module", params=[STRICT, STRICT_13], ids=["strict", "strict-tls13-only"])
def strict_edge(request, tmp_path_factory, certs, whoami):
    dynamic = {
        "http": {
            "routers": {
                "a": {"rule": "Host(`a.test`)", "service": "who", "tls": {}},
                "echo": {"rule": "Host(`echo.test`)", "service": "who", "tls": {}},
            },
            "services": {"who": lb(whoami.url)},
        },
        "tls": {
            "certificates": certificates(certs, "a.test", "echo.test"),
            "options": {"default": request.param},
        },
    }
    e = Edge(tmp_path_factory.mktemp("strict"), dynamic)
    e.tls13_only = request.param is STRICT_13
    yield e
    e.stop()


@pytest.mark.parametrize(
    "version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3], ids=["tls12", "tls13"]
)
def test_sni_strict_refuses_an_unknown_name_that_offers_a_known_names_session(
    strict_edge,
    certs,
    version,
):
    if strict_edge.tls13_only and version != ssl.TLSVersion.TLSv1_3:
        with pytest.raises(ssl.SSLError, match="VERSION"):  # this edge offers TLS 1.3 only
            resumed_get(strict_edge.port, "a.test", ctx=client(version))
        return
    ctx = client(version)
    first = resumed_get(strict_edge.port, "a.test", ctx=ctx)
    assert first.answer.startswith(b"HTTP/1.1 200") and first.session is not None
    assert first.fingerprint == certs["pairs"]["a.test"].fingerprint
    again = resumed_get(strict_edge.port, "a.test", first.session, ctx)
    assert again.reused and again.answer.startswith(b"HTTP/1.1 200")  # the session does resume
    for name in ("nobody.test", None):
        with pytest.raises(ssl.SSLError, match="UNRECOGNIZED_NAME"):
            resumed_get(strict_edge.port, name, again.session, ctx)
    # and without a session, as before
    with pytest.raises(ssl.SSLError, match="UNRECOGNIZED_NAME"):
        resumed_get(strict_edge.port, "nobody.test", ctx=ctx)


def test_a_snapshot_whose_sni_callback_chose_certificates_is_freed_by_reference_counting(certs):
    section = msgspec.convert(
        {"certificates": certificates(certs, "a.test", "echo.test")}, TLSConfiguration
    )
    enabled = gc.isenabled()
    gc.disable()
    try:
        snapshot = TLSCertificates(section)
        context = snapshot.selecting_context()
        assert context is not None and context.sni_callback is not None
        for name in ("a.test", "echo.test", "nobody.test"):
            handshake(context, name)  # the callback built and set each certificate's context
        assert len(snapshot._contexts) == 2
        gone = weakref.ref(snapshot)
        del snapshot, context
        assert gone() is None, (
            "a reference cycle keeps the snapshot (gc.freeze() would keep it for good)"
        )
    finally:
        if enabled:
            gc.enable()


def test_the_no_peek_path_is_kept_for_sni_strict_only_where_tls_1_2_cannot_be_negotiated(certs):
    def selecting(options: dict) -> ssl.SSLContext | None:
        section = {"certificates": certificates(certs, "a.test"), "options": {"default": options}}
        return TLSCertificates(msgspec.convert(section, TLSConfiguration)).selecting_context()

    assert selecting({}) is not None
    assert selecting(STRICT) is None  # the peek serves it
    assert selecting({**STRICT, "maxVersion": "VersionTLS12"}) is None
    assert selecting(STRICT_13) is not None


def tls_get(
    port: int, server_name: str, requests: list[bytes], ctx: ssl.SSLContext | None = None
) -> list[bytes]:
    """Each of ``requests`` on one TLS connection for ``server_name``: each answer's status line."""
    ctx = ctx or ssl._create_unverified_context()
    lines = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        tls = ctx.wrap_socket(sock, server_hostname=server_name)
        reader = tls.makefile("rb")
        for request in requests:
            tls.sendall(request)
            lines.append(reader.readline().rstrip())
            length = 0
            while (line := reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            reader.read(length)
    return lines


def test_a_host_whose_tls_options_differ_from_the_sni_is_misdirected_not_served(
    tmp_path,
    pki,
    certs,
    whoami,
):
    # Traefik's snicheck: the handshake is made under the options of its server name,
    # so a Host whose routers need other options is answered 421 Misdirected Request;
    # otherwise a client skips a router's clientAuth by shaking hands for another name.
    mtls = {
        "clientAuth": {"caFiles": [certs["ca"]], "clientAuthType": "RequireAndVerifyClientCert"}
    }
    dynamic = {
        "http": {
            "routers": {
                "mtls": {"rule": "Host(`a.test`)", "service": "who", "tls": {"options": "mtls"}},
                "wild": {"rule": "Host(`*.w.test`)", "service": "who", "tls": {"options": "mtls"}},
                "open": {"rule": "Host(`echo.test`)", "service": "who", "tls": {}},
            },
            "services": {"who": lb(whoami.url)},
        },
        "tls": {
            "certificates": certificates(certs, "a.test", "echo.test"),
            "options": {"mtls": mtls},
        },
    }
    crt, key = pki.issue(cn="client-1", client=True).write(tmp_path, "client")
    with_cert = ssl.create_default_context(cafile=certs["ca"])
    with_cert.check_hostname = False
    with_cert.verify_mode = ssl.CERT_NONE  # x.w.test gets the default (self-signed) certificate
    with_cert.load_cert_chain(crt, key)
    e = Edge(tmp_path, dynamic)
    try:

        def get(host: bytes) -> bytes:
            return b"GET / HTTP/1.1\r\nHost: %s\r\n\r\n" % host

        # The open name's handshake asks for no certificate: its own Host answers on a
        # keep-alive connection, the client-auth hosts get 421 (the express path's host
        # table holds only the hosts of the handshake's options), and so does no Host
        # at all under a client-auth handshake (the default options are not mtls).
        assert tls_get(
            e.port,
            "echo.test",
            [get(b"echo.test"), get(b"a.test"), get(b"x.w.test"), get(b"echo.test")],
        ) == [
            b"HTTP/1.1 200 OK",
            b"HTTP/1.1 421 Misdirected Request",
            b"HTTP/1.1 421 Misdirected Request",
            b"HTTP/1.1 200 OK",
        ]
        assert tls_get(
            e.port,
            "a.test",
            [get(b"a.test"), get(b"x.w.test"), get(b"echo.test"), b"GET / HTTP/1.0\r\n\r\n"],
            with_cert,
        ) == [
            b"HTTP/1.1 200 OK",
            b"HTTP/1.1 200 OK",
            b"HTTP/1.1 421 Misdirected Request",
            b"HTTP/1.1 421 Misdirected Request",
        ]
        # A wildcard host's options hold for its names' handshakes: no certificate, no service.
        assert tls_get(e.port, "x.w.test", [get(b"x.w.test")], with_cert) == [b"HTTP/1.1 200 OK"]
        with pytest.raises((ssl.SSLError, ConnectionError)):
            tls_get(e.port, "x.w.test", [get(b"x.w.test")])
    finally:
        e.stop()


class _Echo(asyncio.Protocol):
    """Echoes and closes after "bye"; lets go of its transport when lost, as HTTPConnection does."""

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)
        if data.endswith(b"bye\n"):
            self.transport.close()

    def connection_lost(self, exc) -> None:
        self.transport = None


def test_tls_accept_connections_are_freed_by_reference_counting(certs):
    # Served (a named certificate, the default one, no SNI), refused (not TLS), or
    # silent and dropped by the client: each TLSAccept is freed when its socket
    # closes, with the cyclic GC off (gc.freeze() would keep a cycle's for good).
    section = msgspec.convert({"certificates": certificates(certs, "a.test")}, TLSConfiguration)
    snapshot = TLSCertificates(section)

    async def main() -> tuple[list[bool], int]:
        loop = asyncio.get_running_loop()
        connections: set = set()
        made: list[weakref.ref] = []
        acceptor = Acceptor(
            context=snapshot.selecting_context(),
            loop=loop,
            connections=connections,
            https=lambda sni, client: _Echo(),
            plain=lambda raw, data, client: raw.close(),
            first_timeout=5.0,
            handshake_timeout=10.0,
        )

        def accept() -> TLSAccept:
            tls = TLSAccept(acceptor)
            made.append(weakref.ref(tls))
            return tls

        server = await loop.create_server(accept, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            for name in ("a.test", "other.test", ""):
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", port, ssl=ssl._create_unverified_context(), server_hostname=name
                )
                writer.write(b"hi bye\n")
                assert await asyncio.wait_for(reader.read(100), 10) == b"hi bye\n"
                writer.close()
                with contextlib.suppress(ssl.SSLError, ConnectionError):
                    await writer.wait_closed()
            for first in (b"GET / HTTP/1.1\r\n\r\n", b""):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(first)
                await asyncio.sleep(0.05)
                writer.close()
                await writer.wait_closed()
            for _ in range(100):  # bounded: the server side's closes run on the loop
                if all(ref() is None for ref in made):
                    break
                await asyncio.sleep(0.02)
            return [ref() is not None for ref in made], len(connections)
        finally:
            server.close()

    enabled = gc.isenabled()
    gc.disable()
    try:
        alive, tracked = uvloop.run(main())
    finally:
        if enabled:
            gc.enable()
    assert alive == [False] * 5 and tracked == 0


@pytest.fixture(scope="module")
def no_idle_timeout(tmp_path_factory, certs, whoami):
    dynamic = {
        "http": {
            "routers": {
                "a": {"rule": "Host(`a.test`)", "service": "who", "tls": {}},
                "plain": {"rule": "Host(`plain.test`)", "service": "who"},
            },
            "services": {"who": lb(whoami.url)},
        },
        "tls": {"certificates": certificates(certs, "a.test")},
    }
    timeouts = {"readTimeout": "1s", "idleTimeout": "0s"}
    eps = {"web": {"address": "127.0.0.1:0", "transport": {"respondingTimeouts": timeouts}}}
    e = Edge(tmp_path_factory.mktemp("noidle"), dynamic, entrypoints=eps)
    yield e
    e.stop()


@pytest.mark.parametrize("over_tls", [False, True], ids=["plain", "tls"])
def test_read_timeout_bounds_an_unfinished_head_with_idle_timeout_zero(no_idle_timeout, over_tls):
    with socket.create_connection(("127.0.0.1", no_idle_timeout.port), timeout=10) as sock:
        conn = (
            ssl._create_unverified_context().wrap_socket(sock, server_hostname="a.test")
            if over_tls
            else sock
        )
        # A whole request first: it is served (the edge is up, the route works).
        host = b"a.test" if over_tls else b"plain.test"
        conn.sendall(b"GET / HTTP/1.1\r\nHost: " + host + b"\r\nContent-Length: 0\r\n\r\n")
        assert conn.recv(12) == b"HTTP/1.1 200"
        time.sleep(0.3)
        while True:  # the rest of that answer
            conn.settimeout(0.3)
            try:
                if not conn.recv(65536):
                    break
            except (TimeoutError, ssl.SSLError):
                break
        conn.settimeout(5)
        conn.sendall(b"GET / HTTP/1.1\r\nHost: " + host + b"\r\n")  # and never the end of the head
        start = time.monotonic()
        closed = False
        while not closed and time.monotonic() - start < 5:  # an answer (408) may come first
            try:
                closed = conn.recv(100) == b""
            except TimeoutError:
                break
            except (ConnectionError, ssl.SSLError):
                closed = True
        elapsed = time.monotonic() - start
    assert closed and elapsed < 4, f"still open after {elapsed:.1f}s (readTimeout 1s)"


def test_an_entrypoints_http_tls_options_and_a_wildcard_hosts_options_keep_the_peek():
    # The no-peek path serves one options name (the default route's): the options an
    # entry point's http.tls gives its routers, and a Host(`*.x`) router's own, are
    # names with other options, so those entry points keep the peek.
    def first_protocol(dynamic: dict, http_tls: EntryPointTLS | None = None) -> type:
        runtime = build_runtime(
            merge({"file": decode_dynamic(dynamic)}), {"web": EntryPointKind("tcp", http_tls)}
        )
        snapshot = TLSCertificates(runtime.tls)
        check_tls(runtime, snapshot)
        router = build_tcp_routers(runtime, ("web",), snapshot)["web"]
        ctx = PeekContext(name="web", loop=None, connections=set(), http=None, https=None)  # type: ignore[arg-type]
        return type(ctx.protocol(router))

    service = {"h": lb("http://127.0.0.1:9")}
    options = {"options": {"v13": {"minVersion": "VersionTLS13"}}}
    plain_routers = {
        "http": {"routers": {"a": {"rule": "Host(`a.test`)", "service": "h"}}, "services": service}
    }
    assert first_protocol({**plain_routers, "tls": options}, EntryPointTLS()) is TLSAccept
    assert first_protocol({**plain_routers, "tls": options}, EntryPointTLS(options="v13")) is Peek
    wildcard = {"rule": "Host(`*.w.test`)", "service": "h", "tls": {"options": "v13"}}
    routers = {"a": {"rule": "Host(`a.test`)", "service": "h", "tls": {}}, "w": wildcard}
    assert (
        first_protocol({"http": {"routers": routers, "services": service}, "tls": options}) is Peek
    )


# -- an entrypoint with HTTPS routers only: no peek stage (TLSAccept) ------------------------


@pytest.fixture(scope="module")
def https_only(tmp_path_factory, pki, certs, whoami):
    folder = tmp_path_factory.mktemp("https_only")
    wild, default = pki.issue("*.wild.test"), pki.issue("default.test")
    dynamic = {
        "http": {
            "routers": {
                "a": {"rule": "Host(`a.test`)", "service": "who", "tls": {}},
                "wild": {"rule": "Host(`x.wild.test`)", "service": "who", "tls": {}},
            },
            "services": {"who": lb(whoami.url)},
        },
        "tls": {
            "certificates": [*certificates(certs, "a.test"), pair(wild.write(folder, "wild"))],
            "stores": {"default": {"defaultCertificate": pair(default.write(folder, "default"))}},
        },
    }
    eps = {
        "web": {
            "address": "127.0.0.1:0",
            "transport": {"respondingTimeouts": {"readTimeout": "1s"}},
        }
    }
    e = Edge(folder, dynamic, entrypoints=eps)
    e.fingerprints = {
        "a.test": certs["pairs"]["a.test"].fingerprint,
        "wild": wild.fingerprint,
        "default": default.fingerprint,
    }
    yield e
    e.stop()


def test_https_only_serves_the_certificate_for_each_name_and_resumes_sessions(https_only):
    fp = https_only.fingerprints
    cases = (
        ("a.test", fp["a.test"]),
        ("x.wild.test", fp["wild"]),
        ("nobody.test", fp["default"]),
        (None, fp["default"]),
    )
    for name, expected in cases:
        status = (
            b"HTTP/1.1 200" if name in ("a.test", "x.wild.test") else b"HTTP/1.1 404"
        )  # routed by Host
        ctx = ssl._create_unverified_context()
        got = resumed_get(https_only.port, name, ctx=ctx)
        assert got.fingerprint == expected and got.answer.startswith(status), (name, got.answer)
        assert got.session is not None and not got.reused
        # The session (its tickets came with the answer) resumes, and the request is served.
        for _ in range(2):
            got = resumed_get(https_only.port, name, got.session, ctx)
            assert got.reused and got.answer.startswith(status), (name, got.answer)
    status, info = https_get(https_only.port, "a.test")
    assert status == 200 and info["headers"]["X-Forwarded-Proto"] == ["https"]


def test_https_only_serves_plain_http_on_the_same_port(https_only):
    assert get(https_only.port, "/", host="a.test")[0] == 404  # its routers are HTTPS routers


def test_https_only_closes_a_silent_client_and_an_unfinished_handshake_after_read_timeout(
    https_only,
):
    for first in (b"", b"\x16\x03\x01", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"):
        with socket.create_connection(("127.0.0.1", https_only.port), timeout=10) as s:
            start = time.monotonic()
            s.sendall(first)
            try:
                data = s.recv(100)
            except ConnectionResetError:
                data = b""
            elapsed = time.monotonic() - start
        assert data == b"", first  # closed, nothing sent
        assert 0.9 <= elapsed < 3.5, (first, elapsed)  # readTimeout 1s; the sweep runs every 0.25s


def test_https_only_refuses_a_server_name_that_is_not_ascii_with_an_alert_and_one_log_line(
    https_only,
):
    # CPython cannot decode such a name for the SNI callback: OpenSSL sends
    # internal_error, and Python reports the failure to sys.unraisablehook, which
    # setup_logging routes to the log at DEBUG (by default it prints a traceback on
    # stderr, a line per connection any client could ask for).
    ctx = ssl._create_unverified_context()
    out = ssl.MemoryBIO()
    hello = ctx.wrap_bio(ssl.MemoryBIO(), out, server_hostname="a.test")
    with pytest.raises(ssl.SSLWantReadError):
        hello.do_handshake()
    first = out.read().replace(b"a.test", b"\xe9.test")
    for _ in range(2):
        with socket.create_connection(("127.0.0.1", https_only.port), timeout=10) as s:
            s.sendall(first)
            assert recv_all(s) == bytes((21, 3, 3, 0, 2, 2, 80))  # alert: fatal, internal_error
    for _ in range(100):  # bounded: edge's log line may land after the alert
        lines = https_only.all_matches(r"TLS handshake refused: a server name that is not ASCII")
        if len(lines) >= 2:
            break
        time.sleep(0.05)
    assert len(lines) == 2
    assert "Traceback" not in https_only.log and "Exception ignored" not in https_only.log
    assert resumed_get(https_only.port, "a.test").answer.startswith(
        b"HTTP/1.1 200"
    )  # the rest serves


def test_https_only_refuses_a_server_name_with_a_trailing_dot_with_unrecognized_name(https_only):
    """Without a peek stage OpenSSL's SNI callback picks the certificate, and it served
    'a.test.' a.test's certificate (the dot dropped). RFC 6066 forbids the dot and Go's
    crypto/tls (Traefik) refuses the ClientHello: unrecognized_name, as the peek's parser."""
    for name in ("a.test.", "x.wild.test.", "nobody.test."):
        out = s_client_refused(https_only.port, name)
        assert "SSL alert number 112" in out, (name, out)
        assert "BEGIN CERTIFICATE" not in out and "Server certificate" not in out, (name, out)
    assert resumed_get(https_only.port, "a.test").fingerprint == https_only.fingerprints["a.test"]


def test_https_only_with_sni_strict_refuses_unknown_names_with_an_alert(tmp_path, certs, whoami):
    dynamic = {
        "http": {
            "routers": {"a": {"rule": "Host(`a.test`)", "service": "who", "tls": {}}},
            "services": {"who": lb(whoami.url)},
        },
        "tls": {
            "certificates": certificates(certs, "a.test"),
            "options": {"default": {"sniStrict": True}},
        },
    }
    e = Edge(tmp_path, dynamic)
    try:
        for name in ("nobody.test", None):
            with pytest.raises(ssl.SSLError, match="UNRECOGNIZED_NAME"):
                resumed_get(e.port, name)
        got = resumed_get(e.port, "a.test")
        assert got.answer.startswith(b"HTTP/1.1 200")
        assert got.fingerprint == certs["pairs"]["a.test"].fingerprint
    finally:
        e.stop()
