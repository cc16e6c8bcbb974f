"""One TCP entrypoint for TLS passthrough, TLS termination, raw TCP and plain HTTP (issue 8).

edge runs as a real process (``tests.harness.Edge``) on 127.0.0.1 port 0; its
peers are real: ``openssl s_server`` behind passthrough, ``edge whoami`` (HTTP and
TCP echo) behind termination and raw TCP, and small socket servers in threads
where a test must see the exact bytes a backend receives or must have the
server speak first. Clients are ``openssl s_client``, curl and Python's ssl.
Certificates are made when the tests run (``tests/fixtures/tls/pki.py``); the
passthrough backend's come from another CA, so a client can tell whose
certificate arrived. A few pure checks of the precedence on
:class:`edge.router.tcp.TCPRouter` come first (no sockets).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path
from typing import NamedTuple

import pytest

from edge.config.loader import decode_dynamic
from edge.config.merge import merge
from edge.config.runtime import build_runtime, check_tls
from edge.router.tcp import HTTPS, PASSTHROUGH, PLAIN, TERMINATE, build_tcp_routers
from edge.tcp.peek import Peek, PeekContext
from edge.tls.certs import TLSCertificates
from edge.tls.clienthello import ClientHello
from edge.tls.terminate import TLSAccept
from tests.fixtures.tls.pki import PKI
from tests.harness import WHOAMI_RE, Edge, Proc, get, lb, need, raw, read_response

# -- the precedence, pure ----------------------------------------------------------------


def tcp_routers(dynamic: dict, eps: tuple[str, ...] = ("web",)):
    conf = merge({"file": decode_dynamic(dynamic)})
    runtime = build_runtime(conf, dict.fromkeys(eps, "tcp"))
    certs = TLSCertificates(runtime.tls)
    check_tls(runtime, certs)
    return runtime, build_tcp_routers(runtime, eps, certs)


def hello(sni: str | None, alpn: tuple[str, ...] = ()) -> ClientHello:
    return ClientHello(server_name=sni, alpn=alpn, versions=(0x0304,), length=0)


TCP_SVC = {"loadBalancer": {"servers": [{"address": "127.0.0.1:9"}]}}
HTTP_SVC = lb("http://127.0.0.1:9")


def test_precedence_https_name_beats_tcp_catch_all_and_tcp_name_beats_https_catch_all():
    _, routers = tcp_routers(
        {
            "http": {
                "routers": {
                    "site": {"rule": "Host(`site.test`)", "service": "h", "tls": {}},
                    "paths": {"rule": "PathPrefix(`/p`)", "service": "h", "tls": {}},
                },
                "services": {"h": HTTP_SVC},
            },
            "tcp": {
                "routers": {
                    "all": {"rule": "HostSNI(`*`)", "service": "t", "tls": {"passthrough": True}},
                    "db": {
                        "rule": "HostSNI(`db.test`)",
                        "service": "t",
                        "tls": {"passthrough": True},
                    },
                    "alpn": {"rule": "ALPN(`x-proto`)", "service": "t", "tls": {}},
                },
                "services": {"t": TCP_SVC},
            },
        }
    )
    r = routers["web"]
    assert r is not None and not r.immediate
    assert r.tls(hello("site.test"), "1.2.3.4").mode == HTTPS  # an HTTPS name beats HostSNI(`*`)
    assert r.tls(hello("db.test"), "1.2.3.4").name == "db@file"  # a TCP name beats HTTPS catch-all
    assert r.tls(hello("x.test", ("x-proto",)), "1.2.3.4").name == "alpn@file"  # ALPN is specific
    assert (
        r.tls(hello("other.test"), "1.2.3.4").mode == HTTPS
    )  # HTTPS catch-all before TCP catch-all
    assert r.tls(hello(None), "1.2.3.4").mode == HTTPS
    assert r.plain("1.2.3.4") is None  # no TCP router without TLS: cleartext goes to HTTP


def test_precedence_without_https_routers():
    _, routers = tcp_routers(
        {
            "tcp": {
                "routers": {
                    "all": {"rule": "HostSNI(`*`)", "service": "t", "tls": {"passthrough": True}},
                    "term": {
                        "rule": "HostSNI(`t.test`)",
                        "service": "t",
                        "tls": {"options": "modern"},
                    },
                    "raw": {"rule": "HostSNI(`*`) && ClientIP(`10.0.0.0/8`)", "service": "t"},
                },
                "services": {"t": TCP_SVC},
            },
            "tls": {"options": {"modern": {"minVersion": "VersionTLS13"}}},
        }
    )
    r = routers["web"]
    assert r.tls(hello("t.test"), "1.2.3.4").mode == TERMINATE
    assert r.tls(hello("t.test"), "1.2.3.4").options == "modern@file"
    assert r.tls(hello("z.test"), "1.2.3.4").mode == PASSTHROUGH  # the TCP catch-all
    assert r.plain("10.1.2.3").mode == PLAIN and r.plain("1.2.3.4") is None
    assert r.at_once("10.1.2.3") is None  # TLS routers exist: the connection must be peeked


def test_immediate_only_with_tcp_routers_without_tls_and_nothing_else():
    dynamic = {
        "tcp": {
            "routers": {"raw": {"rule": "HostSNI(`*`)", "service": "t"}},
            "services": {"t": TCP_SVC},
        },
        "http": {
            "routers": {"web": {"rule": "Host(`w.test`)", "service": "h"}},
            "services": {"h": HTTP_SVC},
        },
    }
    _, routers = tcp_routers(dynamic)
    assert routers["web"].immediate and routers["web"].at_once("1.2.3.4").name == "raw@file"
    dynamic["http"]["routers"]["web"]["tls"] = {}
    _, routers = tcp_routers(dynamic)
    assert not routers["web"].immediate and routers["web"].at_once("1.2.3.4") is None


def test_no_tcp_router_and_no_https_router_means_no_connection_router():
    _, routers = tcp_routers(
        {
            "http": {
                "routers": {"web": {"rule": "Host(`w.test`)", "service": "h"}},
                "services": {"h": HTTP_SVC},
            }
        }
    )
    assert routers == {"web": None}


def test_only_an_entrypoint_that_terminates_every_tls_connection_into_https_under_one_options_skips_the_peek():
    def first_protocol(dynamic: dict) -> type:
        _, routers = tcp_routers(dynamic)
        ctx = PeekContext(name="web", loop=None, connections=set(), http=None, https=None)  # type: ignore[arg-type]
        protocol = ctx.protocol(routers["web"])
        assert type(ctx.protocol(routers["web"])) is type(protocol)  # one decision per router
        return type(protocol)

    https = {
        "routers": {
            "a": {"rule": "Host(`a.test`)", "service": "h", "tls": {}},
            "paths": {"rule": "PathPrefix(`/p`)", "service": "h", "tls": {}},
            "plain": {"rule": "Host(`plain.test`)", "service": "h"},
        },
        "services": {"h": HTTP_SVC},
    }
    assert first_protocol({"http": https}) is TLSAccept
    # Any TCP router: the peek decides (a name, ALPN, cleartext may be a TCP router's).
    for tcp in (
        {"rule": "HostSNI(`*`)", "service": "t"},
        {"rule": "HostSNI(`db.test`)", "service": "t", "tls": {"passthrough": True}},
        {"rule": "ALPN(`x`)", "service": "t", "tls": {}},
    ):
        dynamic = {"http": https, "tcp": {"routers": {"t": tcp}, "services": {"t": TCP_SVC}}}
        assert first_protocol(dynamic) is Peek, tcp
    # A name with TLS options of its own: the SSL object's settings depend on the name.
    mtls = dict(
        https,
        routers={
            **https["routers"],
            "b": {"rule": "Host(`b.test`)", "service": "h", "tls": {"options": "v13"}},
        },
    )
    dynamic = {"http": mtls, "tls": {"options": {"v13": {"minVersion": "VersionTLS13"}}}}
    assert first_protocol(dynamic) is Peek


def test_hostsni_name_without_tls_is_disabled_with_its_reason():
    runtime, routers = tcp_routers(
        {
            "tcp": {
                "routers": {"named": {"rule": "HostSNI(`db.test`)", "service": "t"}},
                "services": {"t": TCP_SVC},
            }
        }
    )
    info = runtime.tcp_routers["named@file"]
    assert info.status == "disabled"
    assert "without TLS has no server name" in info.errors[0]
    assert routers == {"web": None}


def test_weighted_tcp_services_round_robin_smoothly():
    _, routers = tcp_routers(
        {
            "tcp": {
                "routers": {"raw": {"rule": "HostSNI(`*`)", "service": "w"}},
                "services": {
                    "w": {
                        "weighted": {
                            "services": [{"name": "a", "weight": 3}, {"name": "b", "weight": 1}]
                        }
                    },
                    "a": {
                        "loadBalancer": {
                            "servers": [{"address": "10.0.0.1:1"}, {"address": "10.0.0.2:1"}],
                            "serversTransport": "slow",
                        }
                    },
                    "b": {"loadBalancer": {"servers": [{"address": "10.0.0.3:1"}]}},
                },
                "serversTransports": {"slow": {"dialTimeout": "2s", "terminationDelay": "250ms"}},
            }
        }
    )
    service = routers["web"].at_once("1.2.3.4").service
    picks = [service.pick().address for _ in range(8)]
    assert picks.count("10.0.0.3:1") == 2
    assert picks.count("10.0.0.1:1") == 3 and picks.count("10.0.0.2:1") == 3
    assert picks[:4].count("10.0.0.3:1") == 1  # spread out, not in a burst
    first = service.pick()
    assert (first.dial_timeout, first.termination_delay) == (
        2.0,
        0.25,
    )  # serversTransport slow@file


def test_check_tls_disables_routers_whose_key_or_options_cannot_serve(tmp_path):
    pki = PKI()
    good, other = pki.issue("good.test"), pki.issue("other.test")
    good_files = good.write(tmp_path, "good")
    mismatched = {"certFile": other.write(tmp_path, "other")[0], "keyFile": good_files[1]}
    runtime, routers = tcp_routers(
        {
            "http": {
                "routers": {
                    "good": {"rule": "Host(`good.test`)", "service": "h", "tls": {}},
                    "other": {"rule": "Host(`other.test`)", "service": "h", "tls": {}},
                    "weak": {
                        "rule": "Host(`good.test`) && Path(`/w`)",
                        "service": "h",
                        "tls": {"options": "weak"},
                    },
                    "plain": {"rule": "Host(`other.test`)", "service": "h"},
                },
                "services": {"h": HTTP_SVC},
            },
            "tcp": {
                "routers": {
                    "db": {"rule": "HostSNI(`other.test`)", "service": "t", "tls": {}},
                    "pt": {
                        "rule": "HostSNI(`other.test`)",
                        "service": "t",
                        "tls": {"passthrough": True},
                    },
                },
                "services": {"t": TCP_SVC},
            },
            "tls": {
                "certificates": [{"certFile": good_files[0], "keyFile": good_files[1]}, mismatched],
                "options": {"weak": {"cipherSuites": ["TLS_NOT_A_SUITE"]}},
            },
        }
    )
    status = {name: info.status for name, info in runtime.http_routers.items()}
    status.update({name: info.status for name, info in runtime.tcp_routers.items()})
    assert status == {
        "good@file": "enabled",
        "other@file": "disabled",  # its certificate's key is another's
        "weak@file": "disabled",  # its options cannot be applied
        "plain@file": "enabled",  # no TLS: no certificate needed
        "db@file": "disabled",  # a terminating TCP router needs the certificate too
        "pt@file": "enabled",  # passthrough terminates nothing
    }
    reason = runtime.http_routers["other@file"].errors[0]
    assert "does not match certFile" in reason and str(tmp_path / "other.crt") in reason
    assert "TLS_NOT_A_SUITE" in runtime.http_routers["weak@file"].errors[0]
    assert routers["web"].tls(hello("other.test"), "1.2.3.4").mode == PASSTHROUGH


# -- peers -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki() -> PKI:
    return PKI()


@pytest.fixture(scope="module")
def certs(tmp_path_factory, pki) -> dict:
    """Server certificates from the test CA on disk, and a backend's from another CA."""
    folder = tmp_path_factory.mktemp("tls")
    pairs = {name: pki.issue(name) for name in ("a.test", "echo.test", "good.test")}
    backend = PKI("backend CA").issue("pt.test")
    files = {name: pair.write(folder, name) for name, pair in pairs.items()}
    return {
        "ca": pki.write_ca(folder),
        "pairs": pairs,
        "files": files,
        "backend": backend,
        "backend_files": backend.write(folder, "backend"),
        "folder": folder,
    }


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


@pytest.fixture(scope="module")
def s_server(certs):
    """``openssl s_server -rev``: TLS with the backend CA's certificate for pt.test; echoes lines reversed."""
    crt, key = certs["backend_files"]
    p = Process(
        [
            need("openssl"),
            "s_server",
            "-accept",
            "127.0.0.1:0",
            "-cert",
            crt,
            "-key",
            key,
            "-rev",
            "-naccept",
            "1000",
        ],
        r"ACCEPT .*:(\d+)",
    )
    p.port = int(p.match.group(1))
    yield p
    p.stop()


@pytest.fixture(scope="module")
def echo():
    """``edge whoami --tcp``: a TCP echo server."""
    p = Proc(["whoami", "--name", "echo", "--tcp", "127.0.0.1:0"])
    p.port = int(p.wait_for(WHOAMI_RE).group(4))
    yield p
    p.stop()


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


@pytest.fixture
def backend():
    b = Backend()
    yield b
    b.close()


# -- clients -------------------------------------------------------------------------------

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


# -- one entrypoint, every kind -------------------------------------------------------------


def shared_config(certs: dict, whoami, echo, s_server, capture_port: int) -> dict:
    return {
        "http": {
            "routers": {
                "secure": {"rule": "Host(`a.test`)", "service": "who", "tls": {}},
                "plain": {"rule": "Host(`plain.test`)", "service": "who"},
            },
            "services": {"who": lb(whoami.url)},
        },
        "tcp": {
            "routers": {
                "pt": {
                    "rule": "HostSNI(`pt.test`)",
                    "service": "sserver",
                    "tls": {"passthrough": True},
                },
                "big": {
                    "rule": "HostSNI(`big.test`)",
                    "service": "capture",
                    "tls": {"passthrough": True},
                },
                "term": {"rule": "HostSNI(`echo.test`)", "service": "echo", "tls": {}},
            },
            "services": {
                "sserver": {
                    "loadBalancer": {"servers": [{"address": f"127.0.0.1:{s_server.port}"}]}
                },
                "capture": {
                    "loadBalancer": {"servers": [{"address": f"127.0.0.1:{capture_port}"}]}
                },
                "echo": {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{echo.port}"}]}},
            },
        },
        "tls": {"certificates": certificates(certs, "a.test", "echo.test")},
    }


@pytest.fixture(scope="module")
def capture():
    b = Backend()
    yield b
    b.close()


@pytest.fixture(scope="module")
def shared(tmp_path_factory, certs, whoami, echo, s_server, capture):
    e = Edge(
        tmp_path_factory.mktemp("shared"),
        shared_config(certs, whoami, echo, s_server, capture.port),
    )
    yield e
    e.stop()


def test_passthrough_delivers_the_backends_certificate_untouched(shared, certs):
    out = s_client_until(shared.port, "pt.test", b"hello edge\n", b"egde olleh")
    assert fingerprint_of(out) == certs["backend"].fingerprint, out
    assert b"egde olleh" in out  # s_server -rev answered through the splice


def test_https_router_terminates_with_the_certificate_for_its_name(shared, certs):
    assert (
        peer_fingerprint(shared.port, "a.test", certs["ca"]) == certs["pairs"]["a.test"].fingerprint
    )
    status, info = https_get(shared.port, "a.test", "/x", certs["ca"])
    assert status == 200
    assert info["headers"]["X-Forwarded-Proto"] == ["https"]
    assert info["headers"]["X-Forwarded-Port"] == ["443"]
    assert info["host"] == "a.test" and info["path"] == "/x"


def test_plain_http_is_served_on_the_same_port(shared):
    status, _, data = get(shared.port, "/", host="plain.test")
    assert status == 200
    assert json.loads(data)["headers"]["X-Forwarded-Proto"] == ["http"]
    assert get(shared.port, "/", host="unknown.test")[0] == 404


def test_a_router_with_tls_never_answers_over_plain_http(shared, certs):
    assert get(shared.port, "/", host="a.test")[0] == 404
    assert https_get(shared.port, "a.test", "/", certs["ca"])[0] == 200
    # and the plain router is not reachable over TLS (Traefik serves it only without TLS)
    assert https_get(shared.port, "plain.test")[0] == 404


def test_terminating_tcp_router_relays_plaintext(shared, certs):
    with tls_connect(shared.port, "echo.test", certs["ca"]) as s:
        assert (
            hashlib.sha256(s.getpeercert(True)).hexdigest()
            == certs["pairs"]["echo.test"].fingerprint
        )
        s.sendall(b"ping over tls\n")
        got = b""
        deadline = time.monotonic() + 10
        while len(got) < 14 and time.monotonic() < deadline:
            got += s.recv(100)
        assert got == b"ping over tls\n"


def test_unknown_name_with_https_routers_is_terminated_and_gets_404(shared):
    # Traefik: with HTTPS routers on the entrypoint, every TLS name without a TCP
    # router is terminated (default certificate) and the HTTP routers answer.
    assert https_get(shared.port, "nobody.test")[0] == 404


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


def test_a_server_name_with_a_trailing_dot_is_refused_for_passthrough_and_termination(
    shared, capture
):
    """RFC 6066 section 3: a host_name has no trailing dot, and Go's crypto/tls (hence
    Traefik) refuses such a ClientHello. The peek dropped the dot: 'big.test.' was
    passed through to big.test's server, 'a.test.' and 'echo.test.' terminated with
    their certificates. Now each is refused with unrecognized_name (112), the alert the
    parser's error carries, and nothing reaches a server."""
    relayed = len(capture.received)
    for name in ("big.test.", "pt.test.", "a.test.", "echo.test.", "A.TEST."):
        out = s_client_refused(shared.port, name)
        assert re.search(r"SSL alert number 112", out), (name, out)
        assert "BEGIN CERTIFICATE" not in out and "Server certificate" not in out, (name, out)
    time.sleep(0.3)  # a relayed connection would have reached the backend by now
    assert len(capture.received) == relayed
    assert (
        fingerprint_of(s_client_until(shared.port, "pt.test", b"x\n", b"x")) is not None
    )  # the names serve


def big_client_hello(
    server_name: str, ca: str
) -> tuple[ssl.SSLObject, ssl.MemoryBIO, ssl.MemoryBIO, bytes]:
    """A real client's first flight, about 12 KB (a long ALPN list), and the client to finish with."""
    ctx = ssl.create_default_context(cafile=ca)
    ctx.set_alpn_protocols([f"x-{i:03d}-" + "p" * 240 for i in range(48)] + ["http/1.1"])
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = ctx.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        client.do_handshake()
    return client, incoming, outgoing, outgoing.read()


def fragment(first_flight: bytes, size: int) -> bytes:
    """The ClientHello of one TLS record re-recorded as several records of ``size`` bytes."""
    assert first_flight[0] == 22
    length = int.from_bytes(first_flight[3:5], "big")
    assert len(first_flight) == 5 + length  # one record: the ClientHello alone
    message = first_flight[5:]
    version = first_flight[1:3]
    out = b""
    for i in range(0, len(message), size):
        piece = message[i : i + size]
        out += b"\x16" + version + len(piece).to_bytes(2, "big") + piece
    return out


def send_slowly(sock: socket.socket, data: bytes, piece: int = 1500) -> None:
    for i in range(0, len(data), piece):
        sock.sendall(data[i : i + piece])
        time.sleep(0.005)


def test_fragmented_12k_client_hello_routes_to_passthrough_untouched(shared, certs, capture):
    _, _, _, flight = big_client_hello("big.test", certs["ca"])
    records = fragment(flight, 4000)
    assert len(records) > 12_000
    with socket.create_connection(("127.0.0.1", shared.port), timeout=10) as s:
        send_slowly(s, records)
        s.shutdown(socket.SHUT_WR)
        assert capture.done.wait(10)
    assert capture.received[-1] == records  # every byte, in order, as sent


def test_fragmented_12k_client_hello_terminates_and_serves_https(shared, certs):
    client, incoming, outgoing, flight = big_client_hello("a.test", certs["ca"])
    with socket.create_connection(("127.0.0.1", shared.port), timeout=10) as s:
        send_slowly(s, fragment(flight, 3000))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                client.do_handshake()
                break
            except ssl.SSLWantReadError:
                if outgoing.pending:
                    s.sendall(outgoing.read())
                data = s.recv(65536)
                assert data, "edge closed during the handshake"
                incoming.write(data)
        assert client.selected_alpn_protocol() == "http/1.1"
        assert (
            hashlib.sha256(client.getpeercert(True)).hexdigest()
            == certs["pairs"]["a.test"].fingerprint
        )
        if outgoing.pending:
            s.sendall(outgoing.read())
        client.write(b"GET /big HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
        s.sendall(outgoing.read())
        response = b""
        while time.monotonic() < deadline and b"}" not in response:
            data = s.recv(65536)
            if not data:
                break
            incoming.write(data)
            with contextlib.suppress(ssl.SSLWantReadError):
                response += client.read(65536)
    assert response.startswith(b"HTTP/1.1 200")
    assert json.loads(response.partition(b"\r\n\r\n")[2])["path"] == "/big"


# -- HTTPS under both codecs --------------------------------------------------------------


def test_https_router_with_curl_under_both_codecs(tmp_path, parser, certs, whoami):
    dynamic = {
        "http": {
            "routers": {"secure": {"rule": "Host(`a.test`)", "service": "who", "tls": {}}},
            "services": {"who": lb(whoami.url)},
        },
        "tls": {"certificates": certificates(certs, "a.test")},
    }
    e = Edge(tmp_path, dynamic, parser=parser)
    try:
        url = f"https://a.test:{e.port}/hello?x=1"
        result = curl("--resolve", f"a.test:{e.port}:127.0.0.1", "--cacert", certs["ca"], url)
        assert result.returncode == 0, result.stderr
        info = json.loads(result.stdout)
        assert info["path"] == "/hello" and info["query"] == "x=1"
        assert info["headers"]["X-Forwarded-Proto"] == ["https"]
        # keep-alive: two requests on one TLS connection
        result = curl(
            "--resolve",
            f"a.test:{e.port}:127.0.0.1",
            "--cacert",
            certs["ca"],
            url,
            url,
            "-w",
            "%{num_connects}\n",
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.decode().rstrip().endswith("0")  # the second reused the connection
        # the same router is not there over plain HTTP
        assert get(e.port, "/", host="a.test")[0] == 404
    finally:
        e.stop()


# -- ALPN: HTTPS offers what edge speaks, a terminating TCP router the list as configured ----------

TRAEFIK_ALPN = ["h2", "http/1.1", "acme-tls/1"]  # Traefik's default alpnProtocols, as users copy it


def alpn_config(certs: dict, whoami, echo, with_tcp_router: bool) -> dict:
    dynamic = {
        "http": {
            "routers": {"secure": {"rule": "Host(`a.test`)", "service": "who", "tls": {}}},
            "services": {"who": lb(whoami.url)},
        },
        "tls": {
            "certificates": certificates(certs, "a.test", "echo.test"),
            "options": {"default": {"alpnProtocols": TRAEFIK_ALPN}},
        },
    }
    if with_tcp_router:  # a terminating TCP router: the entrypoint peeks
        dynamic["tcp"] = {
            "routers": {"term": {"rule": "HostSNI(`echo.test`)", "service": "echo", "tls": {}}},
            "services": {
                "echo": {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{echo.port}"}]}}
            },
        }
    return dynamic


@pytest.mark.parametrize("path", ["peek", "no-peek"])
def test_https_with_h2_in_alpn_protocols_answers_http_1_1_to_curl_http2(
    tmp_path, path, certs, whoami, echo
):
    dynamic = alpn_config(certs, whoami, echo, with_tcp_router=path == "peek")
    _, routers = tcp_routers(dynamic)
    ctx = PeekContext(name="web", loop=None, connections=set(), http=None, https=None)  # type: ignore[arg-type]
    assert type(ctx.protocol(routers["web"])) is (Peek if path == "peek" else TLSAccept)
    e = Edge(tmp_path, dynamic)
    try:
        url = f"https://a.test:{e.port}/alpn"
        # curl offers h2 first (and would speak HTTP/2 had edge accepted it).
        result = curl(
            "-v",
            "--http2",
            "--resolve",
            f"a.test:{e.port}:127.0.0.1",
            "--cacert",
            certs["ca"],
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{http_version}",
            url,
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout == b"200 1.1"
        assert re.search(rb"ALPN: offers h2", result.stderr), result.stderr
        assert re.search(rb"ALPN: server accepted http/1\.1", result.stderr), result.stderr
        # A client offering h2 alone gets no ALPN and speaks HTTP/1.1.
        out = subprocess.run(
            [
                need("openssl"),
                "s_client",
                "-connect",
                f"127.0.0.1:{e.port}",
                "-servername",
                "a.test",
                "-alpn",
                "h2",
                "-ign_eof",
            ],
            input=b"GET /alpn HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n",
            capture_output=True,
            timeout=15,
        ).stdout
        assert b"No ALPN negotiated" in out and b"HTTP/1.1 200" in out, out
        # Said once, naming the options.
        for _ in range(100):
            if "alpnProtocols h2, acme-tls/1 left out on HTTPS routers" in e.log:
                break
            time.sleep(0.05)
        assert (
            e.log.count(
                "TLS options default: alpnProtocols h2, acme-tls/1 left out on HTTPS routers"
            )
            == 1
        ), e.log
    finally:
        e.stop()


def test_terminating_tcp_router_negotiates_h2_from_the_configured_list(
    tmp_path, certs, whoami, echo
):
    # Traefik hands a TCP router the connection under the options' list as it is: the
    # TCP server behind it may speak HTTP/2 (or anything); edge only relays plaintext.
    e = Edge(tmp_path, alpn_config(certs, whoami, echo, with_tcp_router=True))
    try:
        out = s_client_until(
            e.port, "echo.test", b"plaintext to the echo\n", b"echo\n", options=("-alpn", "h2")
        )
        assert b"ALPN protocol: h2" in out, out
        assert out.split(b"ALPN protocol: h2", 1)[1].endswith(b"plaintext to the echo\n"), (
            out
        )  # echoed
    finally:
        e.stop()


# -- raw TCP ----------------------------------------------------------------------------------


def test_raw_tcp_echo_through_hostsni_star(tmp_path, echo):
    dynamic = {
        "tcp": {
            "routers": {"raw": {"rule": "HostSNI(`*`)", "service": "echo"}},
            "services": {
                "echo": {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{echo.port}"}]}}
            },
        }
    }
    e = Edge(tmp_path, dynamic)
    try:
        payload = bytes(range(256)) * 64
        assert raw(e.port, payload, half_close=True) == payload
        # A TLS ClientHello is bytes like any other here: relayed, not parsed.
        assert (
            raw(e.port, b"\x16\x03\x01\x00\x05hello", half_close=True)
            == b"\x16\x03\x01\x00\x05hello"
        )
    finally:
        e.stop()


def test_raw_tcp_server_speaks_first_without_waiting_for_the_peek(tmp_path):
    server = Backend(banner=b"220 ready\r\n")
    dynamic = {
        "tcp": {
            "routers": {"raw": {"rule": "HostSNI(`*`)", "service": "smtp"}},
            "services": {
                "smtp": {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{server.port}"}]}}
            },
        }
    }
    e = Edge(tmp_path, dynamic)
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=10) as s:
            start = time.monotonic()
            assert s.recv(100) == b"220 ready\r\n"  # the client has sent nothing
            assert time.monotonic() - start < 2
            s.sendall(b"HELO x\r\n")
            assert s.recv(100) == b"HELO x\r\n"
    finally:
        e.stop()
        server.close()


def test_a_server_that_refuses_the_dial_closes_the_client(tmp_path):
    dead = socket.create_server(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    dead.close()  # nothing listens there now
    dynamic = {
        "tcp": {
            "routers": {"raw": {"rule": "HostSNI(`*`)", "service": "dead"}},
            "services": {"dead": {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{port}"}]}}},
        }
    }
    e = Edge(tmp_path, dynamic)
    try:
        start = time.monotonic()
        assert raw(e.port, b"hello", timeout=5) == b""
        assert time.monotonic() - start < 3
        e.wait_for(
            rf"tcp router raw@file: service dead@file: dial 127.0.0.1:{port}: .*connection closed"
        )
    finally:
        e.stop()


@pytest.fixture
def nginx_proxy_protocol(tmp_path):
    """nginx with ``listen ... proxy_protocol``: answers with the address the PROXY header gave."""
    nginx = need("nginx")
    port = free_port()
    folder = tmp_path / "nginx"
    folder.mkdir()
    conf = folder / "nginx.conf"
    conf.write_text(
        f"""
worker_processes 1; daemon off; master_process off; pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {folder}/body; proxy_temp_path {folder}/proxy;
    fastcgi_temp_path {folder}/fastcgi; uwsgi_temp_path {folder}/uwsgi; scgi_temp_path {folder}/scgi;
    server {{
        listen 127.0.0.1:{port} proxy_protocol;
        location / {{ return 200 "$proxy_protocol_addr $proxy_protocol_port\n"; }}
    }}
}}
"""
    )
    proc = subprocess.Popen(
        [nginx, "-p", str(folder), "-c", str(conf), "-e", f"{folder}/error.log"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("nginx did not start:\n" + (folder / "error.log").read_text())
    yield port
    proc.terminate()
    proc.wait(10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_proxy_protocol_v1_and_v2_parsed_by_nginx(tmp_path, nginx_proxy_protocol):
    def service(version: int) -> dict:
        return {
            "loadBalancer": {
                "servers": [{"address": f"127.0.0.1:{nginx_proxy_protocol}"}],
                "proxyProtocol": {"version": version},
            }
        }

    dynamic = {
        "tcp": {
            "routers": {
                "one": {"rule": "HostSNI(`*`)", "service": "v1", "entryPoints": ["one"]},
                "two": {"rule": "HostSNI(`*`)", "service": "v2", "entryPoints": ["two"]},
            },
            "services": {"v1": service(1), "v2": service(2)},
        }
    }
    eps = {"one": {"address": "127.0.0.1:0"}, "two": {"address": "127.0.0.1:0"}}
    e = Edge(tmp_path, dynamic, entrypoints=eps)
    try:
        for ep in ("one", "two"):
            with socket.create_connection(("127.0.0.1", e.ports[ep]), timeout=10) as s:
                s.sendall(b"GET / HTTP/1.0\r\nHost: pp.test\r\n\r\n")
                response = recv_all(s)
                client_port = s.getsockname()[1]
            assert response.startswith(b"HTTP/1.1 200"), response
            assert response.endswith(f"127.0.0.1 {client_port}\n".encode()), (ep, response)
    finally:
        e.stop()


# -- refusals and timeouts ---------------------------------------------------------------------


@pytest.fixture
def passthrough_only(tmp_path, backend):
    dynamic = {
        "tcp": {
            "routers": {
                "pt": {"rule": "HostSNI(`pt.test`)", "service": "b", "tls": {"passthrough": True}}
            },
            "services": {
                "b": {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{backend.port}"}]}}
            },
        }
    }
    eps = {
        "web": {
            "address": "127.0.0.1:0",
            "transport": {"respondingTimeouts": {"readTimeout": "1s"}},
        }
    }
    e = Edge(tmp_path, dynamic, entrypoints=eps)
    yield e
    e.stop()


def test_tls_name_without_router_gets_an_alert_and_http_gets_404(passthrough_only):
    with pytest.raises(ssl.SSLError, match="UNRECOGNIZED_NAME"):
        tls_connect(passthrough_only.port, "nobody.test", None)
    assert get(passthrough_only.port, "/", host="x.test")[0] == 404


def test_three_bytes_then_silence_is_closed_after_the_peek_timeout(passthrough_only):
    with socket.create_connection(("127.0.0.1", passthrough_only.port), timeout=10) as s:
        start = time.monotonic()
        s.sendall(b"\x16\x03\x01")
        try:
            data = s.recv(100)
        except ConnectionResetError:
            data = b""
        elapsed = time.monotonic() - start
    assert data == b""  # closed, nothing sent
    assert 0.9 <= elapsed < 3.5, (
        elapsed
    )  # readTimeout 1s bounds the peek; the sweep runs every 0.25s


def test_silent_client_is_closed_after_the_peek_timeout(passthrough_only):
    with socket.create_connection(("127.0.0.1", passthrough_only.port), timeout=10) as s:
        start = time.monotonic()
        assert s.recv(100) == b""
        assert 0.9 <= time.monotonic() - start < 3.5


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


# -- certificates from the dynamic configuration ------------------------------------------------


def test_certificate_change_applies_to_new_connections_without_restart(
    tmp_path, pki, certs, whoami
):
    def dynamic(cert: tuple[str, str]) -> dict:
        return {
            "http": {
                "routers": {"secure": {"rule": "Host(`a.test`)", "service": "who", "tls": {}}},
                "services": {"who": lb(whoami.url)},
            },
            "tls": {"certificates": [{"certFile": cert[0], "keyFile": cert[1]}]},
        }

    e = Edge(tmp_path, dynamic(certs["files"]["a.test"]))
    try:
        old = tls_connect(e.port, "a.test", certs["ca"])
        assert (
            hashlib.sha256(old.getpeercert(True)).hexdigest()
            == certs["pairs"]["a.test"].fingerprint
        )
        renewed = pki.issue("a.test")
        applied = e.applied()
        e.write_dynamic(dynamic(renewed.write(tmp_path, "renewed")))
        e.wait_applied(applied + 1)
        assert peer_fingerprint(e.port, "a.test", certs["ca"]) == renewed.fingerprint
        # the connection made before keeps working with the certificate it got
        old.sendall(b"GET /old HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
        assert recv_all(old).startswith(b"HTTP/1.1 200")
        old.close()
    finally:
        e.stop()


def test_mutual_tls_refuses_a_client_without_certificate_and_serves_one_with_it(
    tmp_path, pki, certs, whoami
):
    client_cert = pki.issue(cn="client-1", client=True).write(tmp_path, "client")
    dynamic = {
        "http": {
            "routers": {
                "mtls": {"rule": "Host(`a.test`)", "service": "who", "tls": {"options": "mtls"}},
                "open": {"rule": "Host(`echo.test`)", "service": "who", "tls": {}},
            },
            "services": {"who": lb(whoami.url)},
        },
        "tls": {
            "certificates": certificates(certs, "a.test", "echo.test"),
            "options": {
                "mtls": {
                    "clientAuth": {
                        "caFiles": [certs["ca"]],
                        "clientAuthType": "RequireAndVerifyClientCert",
                    }
                }
            },
        },
    }
    e = Edge(tmp_path, dynamic)
    try:
        base = ["--resolve", f"a.test:{e.port}:127.0.0.1", "--cacert", certs["ca"]]
        refused = curl(*base, f"https://a.test:{e.port}/")
        assert refused.returncode != 0  # the handshake (or the first read) fails: no certificate
        accepted = curl(
            *base, "--cert", client_cert[0], "--key", client_cert[1], f"https://a.test:{e.port}/m"
        )
        assert accepted.returncode == 0, accepted.stderr
        assert json.loads(accepted.stdout)["path"] == "/m"
        # the other name on the same port asks for no client certificate
        assert https_get(e.port, "echo.test", "/", certs["ca"])[0] == 200
    finally:
        e.stop()


def test_invalid_certificate_path_disables_only_its_router(tmp_path, certs, whoami):
    missing = str(Path(tmp_path) / "missing.crt")
    dynamic = {
        "http": {
            "routers": {
                "good": {"rule": "Host(`good.test`)", "service": "who", "tls": {}},
                "bad": {"rule": "Host(`bad.test`)", "service": "who", "tls": {}},
            },
            "services": {"who": lb(whoami.url)},
        },
        "tls": {
            "certificates": [
                *certificates(certs, "good.test"),
                {"certFile": missing, "keyFile": certs["files"]["good.test"][1]},
            ]
        },
    }
    e = Edge(tmp_path, dynamic)
    try:
        line = e.wait_for(r"router bad@file: .*")
        assert f"certFile {missing}: no such file" in line.group(0)
        assert "router good@file" not in e.log
        assert (
            peer_fingerprint(e.port, "good.test", certs["ca"])
            == certs["pairs"]["good.test"].fingerprint
        )
        assert https_get(e.port, "good.test", "/", certs["ca"])[0] == 200
        assert https_get(e.port, "bad.test")[0] == 404  # disabled: not served, TLS or not
        assert get(e.port, "/", host="bad.test")[0] == 404
    finally:
        e.stop()


def tls_dynamic(
    whoami, cert: tuple[str, str], *extra_routers: str, broken: str | None = None
) -> dict:
    """An HTTPS router for a.test with ``cert``, plus plain routers named ``extra_routers``;
    ``broken``: a router for bad.test whose certificate file is that missing path."""
    routers = {"secure": {"rule": "Host(`a.test`)", "service": "who", "tls": {}}}
    routers.update(
        {name: {"rule": f"Host(`{name}.test`)", "service": "who"} for name in extra_routers}
    )
    certificates = [pair(cert)]
    if broken is not None:
        routers["bad"] = {"rule": "Host(`bad.test`)", "service": "who", "tls": {}}
        certificates.append({"certFile": broken, "keyFile": cert[1]})
    return {
        "http": {"routers": routers, "services": {"who": lb(whoami.url)}},
        "tls": {"certificates": certificates},
    }


def change(e: Edge, dynamic: dict) -> None:
    applied = e.applied()
    e.write_dynamic(dynamic)
    e.wait_applied(applied + 1)


def test_sessions_resume_across_a_route_change_that_leaves_tls_alone(tmp_path, certs, whoami):
    # The live certificate snapshot stays while its tls section and files do: its SSL
    # contexts keep their session-ticket keys, so clients keep resuming. A snapshot
    # rebuilt on every change (Kubernetes endpoint churn: every second or two) would
    # make every client pay a full handshake after each one.
    e = Edge(tmp_path, tls_dynamic(whoami, certs["files"]["a.test"]))
    try:
        ctx = ssl._create_unverified_context()
        got = resumed_get(e.port, "a.test", ctx=ctx)
        assert got.answer.startswith(b"HTTP/1.1 200") and not got.reused
        for round_ in range(2):
            change(
                e,
                tls_dynamic(
                    whoami, certs["files"]["a.test"], *[f"r{i}" for i in range(round_ + 1)]
                ),
            )
            assert get(e.port, "/", host=f"r{round_}.test")[0] == 200  # the new routes serve
            got = resumed_get(e.port, "a.test", got.session, ctx)
            assert got.reused and got.answer.startswith(b"HTTP/1.1 200"), round_
    finally:
        e.stop()


def test_sessions_resume_across_a_change_of_the_tls_section(tmp_path, pki, certs, whoami):
    # A certificate added for another name makes a new snapshot, with new contexts; the
    # session-ticket key is the process's (edge.tls.tickets), so a.test's session resumes.
    e = Edge(tmp_path, tls_dynamic(whoami, certs["files"]["a.test"]))
    try:
        ctx = ssl._create_unverified_context()
        got = resumed_get(e.port, "a.test", ctx=ctx)
        assert got.answer.startswith(b"HTTP/1.1 200") and not got.reused
        other = pki.issue("other.test").write(tmp_path, "other")
        dynamic = tls_dynamic(whoami, certs["files"]["a.test"])
        dynamic["tls"]["certificates"].append(pair(other))
        change(e, dynamic)
        assert peer_fingerprint(e.port, "other.test", certs["ca"]) != peer_fingerprint(
            e.port, "a.test", certs["ca"]
        )
        got = resumed_get(e.port, "a.test", got.session, ctx)
        assert got.reused and got.answer.startswith(b"HTTP/1.1 200")
    finally:
        e.stop()


def keepalive_resumed(
    port: int, server_name: str, session: ssl.SSLSession, ctx: ssl.SSLContext
) -> tuple[ssl.SSLSocket, bool]:
    """A TLS connection offering ``session``, one keep-alive GET answered on it; (the open
    connection, whether it resumed)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    tls = ctx.wrap_socket(sock, server_hostname=server_name, session=session)
    tls.sendall(f"GET / HTTP/1.1\r\nHost: {server_name}\r\n\r\n".encode())
    response = read_response(tls)
    assert response.startswith(b"HTTP/1.1 200"), response
    return tls, tls.session_reused


def test_sessions_resume_on_every_worker(tmp_path, certs, whoami):
    # workers: 2 share the port by SO_REUSEPORT: a client's next connection lands on
    # either. Every worker's contexts have the supervisor's ticket key, so a ticket one
    # issued resumes on the other (nginx's workers share their keys the same way).
    from tests.integration.test_workers import owners, wait_workers

    e = Edge(tmp_path, tls_dynamic(whoami, certs["files"]["a.test"]), static_extra={"workers": 2})
    opened: list[ssl.SSLSocket] = []
    try:
        pids = wait_workers(e)
        ctx = ssl._create_unverified_context()
        session = resumed_get(e.port, "a.test", ctx=ctx).session
        resumed = []
        for _ in range(24):  # held open, so /proc shows which worker took each
            tls, reused = keepalive_resumed(e.port, "a.test", session, ctx)
            opened.append(tls)
            resumed.append(reused)
        counts = owners(pids, e.port)
        assert sum(counts.values()) == 24 and all(n > 0 for n in counts.values()), counts
        assert all(resumed), resumed
    finally:
        for tls in opened:
            tls.close()
        assert e.stop() == 0


def mtls_dynamic(whoami, certs: dict, *, default_auth: bool = False) -> dict:
    """echo.test under the default options (``default_auth``: they require a client
    certificate too), a.test under options ``mtls``, which require one."""
    auth = {
        "clientAuth": {"caFiles": [certs["ca"]], "clientAuthType": "RequireAndVerifyClientCert"}
    }
    options: dict = {"mtls": auth}
    if default_auth:
        options["default"] = auth
    return {
        "http": {
            "routers": {
                "mtls": {"rule": "Host(`a.test`)", "service": "who", "tls": {"options": "mtls"}},
                "open": {"rule": "Host(`echo.test`)", "service": "who", "tls": {}},
            },
            "services": {"who": lb(whoami.url)},
        },
        "tls": {"certificates": certificates(certs, "a.test", "echo.test"), "options": options},
    }


def refused_or_fresh(
    port: int, server_name: str, session: ssl.SSLSession, ctx: ssl.SSLContext
) -> str:
    """Offer ``session`` to ``server_name`` without a client certificate: 'resumed' (and
    served: the bypass), 'refused' (no certificate, so the handshake or first read
    fails), or 'answered' (a full handshake served without a certificate)."""
    try:
        got = resumed_get(port, server_name, session, ctx)
    except (ssl.SSLError, ConnectionError, OSError):
        return "refused"
    if got.reused:
        return "resumed"
    return "answered" if got.answer.startswith(b"HTTP/1.1 2") else "refused"


def test_a_session_from_an_open_name_does_not_resume_where_a_client_certificate_is_required(
    tmp_path, certs, whoami
):
    # One ticket key for every context would let a client shake hands for the open
    # name, then resume that session for the mTLS name with no certificate: a
    # resumption skips the certificate request. Each options entry has its own key.
    e = Edge(tmp_path, mtls_dynamic(whoami, certs))
    try:
        ctx = ssl._create_unverified_context()
        got = resumed_get(e.port, "echo.test", ctx=ctx)
        assert got.answer.startswith(b"HTTP/1.1 200")
        assert resumed_get(e.port, "echo.test", got.session, ctx).reused  # tickets work
        assert refused_or_fresh(e.port, "a.test", got.session, ctx) == "refused"
        # The same options, another certificate: resumes (as the selecting context does).
        assert resumed_get(e.port, "echo.test", got.session, ctx).reused
    finally:
        e.stop()


def test_a_session_does_not_resume_after_its_options_start_requiring_a_client_certificate(
    tmp_path, certs, whoami
):
    e = Edge(tmp_path, mtls_dynamic(whoami, certs))
    try:
        ctx = ssl._create_unverified_context()
        session = resumed_get(e.port, "echo.test", ctx=ctx).session
        change(e, mtls_dynamic(whoami, certs, default_auth=True))  # default now requires one
        assert refused_or_fresh(e.port, "echo.test", session, ctx) == "refused"
    finally:
        e.stop()


def test_certificate_file_rewritten_in_place_is_read_at_the_next_change(
    tmp_path, pki, certs, whoami
):
    # The same tls section naming the same paths, but the files hold a renewed
    # certificate (cert-manager, a Secret volume): the next change reads them.
    files = pki.issue("a.test").write(tmp_path, "inplace")
    e = Edge(tmp_path, tls_dynamic(whoami, files))
    try:
        before = peer_fingerprint(e.port, "a.test", certs["ca"])
        renewed = pki.issue("a.test")
        renewed.write(tmp_path, "inplace")
        change(e, tls_dynamic(whoami, files, "other"))
        assert before != renewed.fingerprint
        assert peer_fingerprint(e.port, "a.test", certs["ca"]) == renewed.fingerprint
    finally:
        e.stop()


def test_a_broken_certificate_is_logged_once_while_routes_change_and_its_end_is_said(
    tmp_path, certs, whoami
):
    missing = str(tmp_path / "missing.crt")
    cert = certs["files"]["a.test"]
    e = Edge(tmp_path, tls_dynamic(whoami, cert, broken=missing))
    try:
        e.wait_for(r"router bad@file: .*no such file")
        for round_ in range(2):  # unrelated routes come and go; the certificate stays broken
            change(e, tls_dynamic(whoami, cert, f"r{round_}", broken=missing))
        assert len(e.all_matches(r"certificate left out: .*missing\.crt")) == 1, e.log
        assert len(e.all_matches(r"ERROR.*router bad@file: .*no such file")) == 1, e.log
        change(e, tls_dynamic(whoami, cert))  # the broken entry and its router are gone
        e.wait_for(r"resolved: router bad@file: .*no such file")
        assert https_get(e.port, "a.test", "/", certs["ca"])[0] == 200
    finally:
        e.stop()


# -- memory under a slow reader ---------------------------------------------------------------

MIB = 1 << 20


def vm_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


class TLSSource:
    """A TLS server in a thread (the backend CA's pt.test): sends ``total`` bytes as fast
    as the connection takes them, a 32-byte trailer last, then closes; notes when it
    finished writing."""

    def __init__(self, certs: dict, total: int) -> None:
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(*certs["backend_files"])
        self.total = total
        self.trailer = hashlib.sha256(str(total).encode()).digest()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(30)
        self.port = self.sock.getsockname()[1]
        self.finished = 0.0  # monotonic time the last byte was handed to the kernel
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            conn, _ = self.sock.accept()
            with self.ctx.wrap_socket(conn, server_side=True) as tls:
                tls.settimeout(60)
                block = os.urandom(MIB)
                left = self.total - len(self.trailer)
                while left > 0:
                    n = min(left, len(block))
                    tls.sendall(block[:n])
                    left -= n
                tls.sendall(self.trailer)
                self.finished = time.monotonic()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def close(self) -> None:
        self.thread.join(5)
        self.sock.close()


@pytest.mark.slow
def test_1_gib_through_passthrough_to_a_slow_reader_keeps_edge_memory_bounded(tmp_path, certs):
    """The issue's check: 1 GiB through a passthrough router to a client that reads at a
    paced 48 MiB/s (the backend could send many times faster). Edge's flow control must
    hold the backend back rather than buffer: its RSS, sampled every 20 ms, stays within
    32 MiB of what it was before the transfer, and the backend finishes writing only
    when the reader is within a few MiB of the end (the kernel's socket buffers and
    edge's high-water marks are all that may sit between them)."""
    total, rate = 1 << 30, 48 * MIB
    source = TLSSource(certs, total)
    dynamic = {
        "tcp": {
            "routers": {
                "pt": {"rule": "HostSNI(`pt.test`)", "service": "b", "tls": {"passthrough": True}}
            },
            "services": {
                "b": {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{source.port}"}]}}
            },
        }
    }
    e = Edge(tmp_path, dynamic, static_extra={"log": {"level": "INFO"}})
    peak = {"rss": 0}
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.02):
            peak["rss"] = max(peak["rss"], vm_rss(e.proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    try:
        base = vm_rss(e.proc.pid)
        sampler.start()
        got, tail, behind = 0, b"", None
        ctx = ssl._create_unverified_context()  # the backend's own certificate, checked below
        with (
            socket.create_connection(("127.0.0.1", e.port), timeout=30) as raw_sock,
            ctx.wrap_socket(raw_sock, server_hostname="pt.test") as s,
        ):
            assert hashlib.sha256(s.getpeercert(True)).hexdigest() == certs["backend"].fingerprint
            start = time.monotonic()
            while True:
                chunk = s.recv(256 * 1024)
                if not chunk:
                    break
                got += len(chunk)
                tail = (tail + chunk)[-32:]
                if behind is None and source.finished:
                    behind = total - got  # what was in flight when the backend was done
                ahead = got / rate - (time.monotonic() - start)
                if ahead > 0:
                    time.sleep(ahead)
            elapsed = time.monotonic() - start
        sampling.set()
        sampler.join(5)
        assert source.error is None, source.error
        assert got == total and tail == source.trailer
        assert elapsed >= total / rate * 0.95  # the reader set the pace
        assert behind is not None and behind < 24 * MIB, behind
        assert peak["rss"] - base < 32 * MIB, (peak["rss"], base)
    finally:
        sampling.set()
        source.close()
        e.stop()
