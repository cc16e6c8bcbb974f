"""TLS from edge to its servers (issue 8, items 2 and 6), against real peers.

HTTP: ``https://`` server URLs through ``http.serversTransports`` (serverName,
insecureSkipVerify, rootCAs, client certificates) to nginx, one server block
that only serves TLS and one with ``ssl_verify_client on`` (it answers 400 to a
client without a certificate). TCP: ``servers[].tls: true`` through
``tcp.serversTransports.<n>.tls`` to ``openssl s_server -rev`` (it only speaks
TLS: a reversed line back means edge re-encrypted), with and without a required
client certificate, and ``proxyProtocol`` on the transport to nginx
``listen ... proxy_protocol`` in the clear and under TLS (the header goes before
the handshake, as Traefik's dialer sends it). Certificates come from a test CA
made when the tests run; edge trusts it only where a transport says so.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
import sys
import threading
import time

import pytest
import yaml

from edge.config.loader import decode_dynamic
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from tests.fixtures.tls.pki import PKI
from tests.harness import ROOT, Edge, get, lb, need
from tests.integration import peers
from tests.integration.peers import Process, free_port, running, send_until

# -- validation, pure ----------------------------------------------------------------------


def runtime_of(dynamic: dict):
    return build_runtime(merge({"file": decode_dynamic(dynamic)}), {"web": "tcp"})


def test_broken_transport_files_disable_the_services_that_use_them_over_tls(tmp_path):
    missing = str(tmp_path / "missing-ca.crt")
    rt = runtime_of(
        {
            "http": {
                "routers": {
                    "tls": {"rule": "Host(`a.test`)", "service": "secure"},
                    "plain": {"rule": "Host(`b.test`)", "service": "plain"},
                },
                "services": {
                    "secure": lb("https://127.0.0.1:1", serversTransport="broken"),
                    "plain": lb(
                        "http://127.0.0.1:1", serversTransport="broken"
                    ),  # no TLS: not concerned
                },
                "serversTransports": {"broken": {"rootCAs": [missing]}},
            },
            "tcp": {
                "routers": {"t": {"rule": "HostSNI(`*`)", "service": "t"}},
                "services": {
                    "t": {
                        "loadBalancer": {
                            "servers": [{"address": "127.0.0.1:1", "tls": True}],
                            "serversTransport": "client",
                        }
                    }
                },
                "serversTransports": {
                    "client": {"tls": {"certificates": [{"certFile": missing, "keyFile": missing}]}}
                },
            },
        }
    )
    secure = rt.http_services["secure@file"]
    assert secure.status == "disabled"
    assert secure.errors == [f"serversTransport 'broken@file': rootCAs[0] {missing}: no such file"]
    assert rt.http_routers["tls@file"].status == "disabled"
    assert rt.http_services["plain@file"].status == "enabled"
    assert rt.tcp_services["t@file"].status == "disabled"
    assert rt.tcp_services["t@file"].errors == [
        f"serversTransport 'client@file': tls: certificates[0]: certFile {missing}: no such file"
    ]
    assert rt.tcp_routers["t@file"].status == "disabled"


def test_transport_warnings_for_settings_that_do_nothing():
    rt = runtime_of(
        {
            "tcp": {
                "services": {
                    # Traefik v3: with a serversTransport named, the load balancer's proxyProtocol is not read.
                    "pp": {
                        "loadBalancer": {
                            "servers": [{"address": "127.0.0.1:1"}],
                            "serversTransport": "plain",
                            "proxyProtocol": {"version": 1},
                        }
                    },
                    # tls on the transport, but no server asks for TLS.
                    "notls": {
                        "loadBalancer": {
                            "servers": [{"address": "127.0.0.1:1"}],
                            "serversTransport": "tls",
                        }
                    },
                },
                "serversTransports": {"plain": {}, "tls": {"tls": {"insecureSkipVerify": True}}},
            }
        }
    )
    pp, notls = rt.tcp_services["pp@file"], rt.tcp_services["notls@file"]
    assert pp.status == "warning" and "proxyProtocol is not used" in pp.errors[0]
    assert notls.status == "warning" and "no server has tls: true" in notls.errors[0]


# -- peers -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki() -> PKI:
    return PKI()


@pytest.fixture(scope="module")
def files(tmp_path_factory, pki) -> dict:
    folder = tmp_path_factory.mktemp("upstream-tls")
    server = pki.issue("up.test")
    client = pki.issue(cn="edge-client", client=True)
    other_ca = PKI("another CA")
    stranger = other_ca.issue(cn="stranger", client=True)
    return {
        "folder": folder,
        "ca": pki.write_ca(folder),
        "ca_pem": pki.cert_pem,
        "server": server.write(folder, "up"),
        "client": client.write(folder, "client"),
        "client_pair": client,
        "stranger": stranger.write(folder, "stranger"),
    }


@pytest.fixture(scope="module")
def nginx(tmp_path_factory, files):
    """nginx: TLS only (``tls``), TLS with a required client certificate (``mtls``),
    PROXY protocol in the clear (``pp``) and under TLS (``pp_tls``)."""
    nginx = need("nginx")
    folder = tmp_path_factory.mktemp("nginx")
    (folder / "logs").mkdir()
    ports = {k: free_port() for k in ("tls", "mtls", "pp", "pp_tls")}
    crt, key = files["server"]
    conf = folder / "nginx.conf"
    conf.write_text(
        f"""
worker_processes 1;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {folder}/body; proxy_temp_path {folder}/proxy;
    fastcgi_temp_path {folder}/fastcgi; uwsgi_temp_path {folder}/uwsgi; scgi_temp_path {folder}/scgi;
    ssl_certificate {crt}; ssl_certificate_key {key}; ssl_protocols TLSv1.2 TLSv1.3;
    server {{
        listen 127.0.0.1:{ports["tls"]} ssl;
        location / {{ return 200 "tls $ssl_protocol sni=$ssl_server_name uri=$request_uri\\n"; }}
    }}
    server {{
        listen 127.0.0.1:{ports["mtls"]} ssl;
        ssl_verify_client on; ssl_client_certificate {files["ca"]};
        location / {{ return 200 "mtls client=$ssl_client_s_dn verify=$ssl_client_verify\\n"; }}
    }}
    server {{
        listen 127.0.0.1:{ports["pp"]} proxy_protocol;
        location / {{ return 200 "pp $proxy_protocol_addr $proxy_protocol_port\\n"; }}
    }}
    server {{
        listen 127.0.0.1:{ports["pp_tls"]} ssl proxy_protocol;
        location / {{ return 200 "pp-tls $proxy_protocol_addr $proxy_protocol_port $ssl_protocol\\n"; }}
    }}
}}
"""
    )
    args = [
        nginx,
        "-p",
        str(folder),
        "-c",
        str(conf),
        "-g",
        f"daemon off; master_process off; pid {folder}/nginx.pid; error_log {folder}/error.log;",
    ]
    with running(args, folder / "nginx.log", *ports.values()):
        yield ports


def https_config(files: dict, nginx: dict) -> dict:
    tls_url = f"https://127.0.0.1:{nginx['tls']}"
    mtls_url = f"https://127.0.0.1:{nginx['mtls']}"
    client = {"certFile": files["client"][0], "keyFile": files["client"][1]}
    pair = files["client_pair"]
    routes = {
        "verified": (tls_url, "ca"),
        "default": (tls_url, ""),  # the system's CAs do not know the test CA
        "insecure": (tls_url, "insecure"),
        "wrongname": (tls_url, "wrongname"),
        "mtls": (mtls_url, "client"),
        "inline": (mtls_url, "inline"),
        "nocert": (mtls_url, "ca"),
        "stranger": (mtls_url, "stranger"),
        "broken": (tls_url, "broken"),
    }
    routers, services = {}, {}
    for name, (url, transport) in routes.items():
        routers[name] = {"rule": f"Host(`{name}.test`)", "service": name}
        services[name] = lb(url, **({"serversTransport": transport} if transport else {}))
    return {
        "http": {
            "routers": routers,
            "services": services,
            "serversTransports": {
                "ca": {"rootCAs": [files["ca"]], "serverName": "up.test"},
                "insecure": {"insecureSkipVerify": True},
                "wrongname": {"rootCAs": [files["ca"]], "serverName": "other.test"},
                "client": {
                    "rootCAs": [files["ca"]],
                    "serverName": "up.test",
                    "certificates": [client],
                },
                # every value inline PEM instead of a path
                "inline": {
                    "rootCAs": [files["ca_pem"]],
                    "serverName": "up.test",
                    "certificates": [{"certFile": pair.cert_pem, "keyFile": pair.key_pem}],
                },
                "stranger": {
                    "rootCAs": [files["ca"]],
                    "serverName": "up.test",
                    "certificates": [
                        {"certFile": files["stranger"][0], "keyFile": files["stranger"][1]}
                    ],
                },
                "broken": {"rootCAs": [str(files["folder"] / "nowhere.crt")]},
            },
        }
    }


@pytest.fixture(scope="module")
def edge(tmp_path_factory, files, nginx):
    e = Edge(tmp_path_factory.mktemp("edge"), https_config(files, nginx))
    yield e
    e.stop()


def body(port: int, host: str, path: str = "/") -> tuple[int, str]:
    status, _, data = get(port, path, host=host, timeout=10)
    return status, data.decode(errors="replace")


def test_https_server_verified_with_root_cas_and_server_name(edge):
    status, text = body(edge.port, "verified.test", "/x?y=1")
    assert status == 200, text
    assert text.startswith("tls TLSv1.3 sni=up.test uri=/x?y=1")  # serverName is the SNI sent


def test_https_server_unknown_to_the_system_cas_is_refused(edge):
    status, _ = body(edge.port, "default.test")
    assert status == 502
    edge.wait_for(r"certificate verify failed")


def test_insecure_skip_verify_accepts_any_certificate(edge):
    status, text = body(edge.port, "insecure.test")
    assert status == 200 and text.startswith("tls "), text


def test_server_name_that_the_certificate_does_not_hold_is_refused(edge):
    assert body(edge.port, "wrongname.test")[0] == 502


def test_client_certificate_is_presented_to_a_server_that_requires_one(edge):
    status, text = body(edge.port, "mtls.test")
    assert status == 200, text
    assert text == "mtls client=CN=edge-client verify=SUCCESS\n"
    status, text = body(edge.port, "inline.test")  # the same from inline PEM
    assert status == 200 and "CN=edge-client" in text, text


def test_server_requiring_a_client_certificate_refuses_edge_without_one(edge):
    status, text = body(edge.port, "nocert.test")
    assert status == 400 and "No required SSL certificate was sent" in text, text
    # a certificate from a CA the server does not trust is no better
    status, text = body(edge.port, "stranger.test")
    assert status == 400, text


def test_unreadable_root_ca_disables_its_router_and_edge_check_says_why(edge, files):
    line = edge.wait_for(r"router broken@file: .*")
    assert "nowhere.crt: no such file" in line.group(0)
    assert body(edge.port, "broken.test")[0] == 404  # disabled: not served
    assert body(edge.port, "verified.test")[0] == 200  # the rest serves
    check = subprocess.run(
        [sys.executable, "-m", "edge", "check", "--config", str(edge.static_path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert check.returncode == 1
    assert (
        "service broken@file: disabled: serversTransport 'broken@file': rootCAs[0]" in check.stdout
    ), check.stdout


def test_edge_check_reports_a_missing_certificate_of_tls_certificates(tmp_path, files):
    missing = str(tmp_path / "missing.crt")
    dynamic = {
        "http": {
            "routers": {"site": {"rule": "Host(`site.test`)", "service": "s", "tls": {}}},
            "services": {"s": lb("http://127.0.0.1:1")},
        },
        "tls": {"certificates": [{"certFile": missing, "keyFile": files["server"][1]}]},
    }
    (tmp_path / "dynamic.yaml").write_text(yaml.safe_dump(dynamic))
    static = {
        "entryPoints": {"web": {"address": "127.0.0.1:0"}},
        "providers": {"file": {"filename": "dynamic.yaml"}},
    }
    (tmp_path / "static.yaml").write_text(yaml.safe_dump(static))
    check = subprocess.run(
        [sys.executable, "-m", "edge", "check", "--config", str(tmp_path / "static.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert check.returncode == 1
    line = next(line for line in check.stdout.splitlines() if line.startswith("router site@file"))
    assert line.startswith("router site@file: disabled: no certificate for site.test: "), line
    assert f"certFile {missing}: no such file" in line


# -- TCP: re-encryption and the PROXY header on the transport ------------------------------------


def s_server(files: dict, *extra: str) -> Process:
    crt, key = files["server"]
    return peers.s_server(crt, key, *extra)


@pytest.fixture(scope="module")
def tcp_edge(tmp_path_factory, files, nginx):
    plain = s_server(files)
    strict = s_server(files, "-Verify", "1", "-CAfile", files["ca"], "-verify_return_error")
    client = {"certFile": files["client"][0], "keyFile": files["client"][1]}
    tls = {"rootCAs": [files["ca"]], "serverName": "up.test"}

    def service(port: int, transport: str, tls: bool = True) -> dict:
        server = {"address": f"127.0.0.1:{port}", **({"tls": True} if tls else {})}
        return {"loadBalancer": {"servers": [server], "serversTransport": transport}}

    routes = {
        "reencrypt": service(plain.port, "tls"),
        "unverified": service(plain.port, "default-ca"),
        "clientcert": service(strict.port, "mtls"),
        "nocert": service(strict.port, "tls"),
        "pp": service(nginx["pp"], "pp1", tls=False),
        "pptls": service(nginx["pp_tls"], "pp2tls"),
    }
    eps = {name: {"address": "127.0.0.1:0"} for name in routes}
    eps["web"] = {"address": "127.0.0.1:0"}
    dynamic = {
        "tcp": {
            "routers": {
                name: {"rule": "HostSNI(`*`)", "service": name, "entryPoints": [name]}
                for name in routes
            },
            "services": routes,
            "serversTransports": {
                "tls": {"tls": tls},
                "default-ca": {"tls": {"serverName": "up.test"}},  # the system's CAs
                "mtls": {"tls": {**tls, "certificates": [client]}},
                "pp1": {"proxyProtocol": {"version": 1}},
                "pp2tls": {"proxyProtocol": {"version": 2}, "tls": tls},
            },
        }
    }
    e = Edge(tmp_path_factory.mktemp("tcp-edge"), dynamic, entrypoints=eps)
    yield e
    e.stop()
    plain.stop()
    strict.stop()


def test_tcp_server_with_tls_gets_a_tls_connection_from_edge(tcp_edge):
    # s_server speaks only TLS; the reversed line comes back through edge's re-encryption.
    got = send_until(tcp_edge.ports["reencrypt"], b"hello edge\n", b"egde olleh")
    assert b"egde olleh" in got, got


def test_tcp_server_not_verified_by_the_transport_is_not_reached(tcp_edge):
    got = send_until(tcp_edge.ports["unverified"], b"hello edge\n", b"egde olleh")
    assert got == b""
    tcp_edge.wait_for(
        r"tcp router unverified@file: service unverified@file: dial .*handshake failed: CERTIFICATE_VERIFY_FAILED"
    )


def test_tcp_transport_presents_its_client_certificate(tcp_edge):
    assert b"egde olleh" in send_until(tcp_edge.ports["clientcert"], b"hello edge\n", b"egde olleh")
    # the same server refuses edge when the transport has no certificate to present
    assert b"egde olleh" not in send_until(
        tcp_edge.ports["nocert"], b"hello edge\n", b"egde olleh", timeout=5
    )


@pytest.mark.parametrize("entry_point, expect", [("pp", "pp"), ("pptls", "pp-tls")])
def test_tcp_transport_proxy_protocol_clear_and_under_tls(tcp_edge, entry_point, expect):
    with socket.create_connection(("127.0.0.1", tcp_edge.ports[entry_point]), timeout=10) as s:
        s.sendall(b"GET / HTTP/1.0\r\nHost: pp.test\r\n\r\n")
        client_port = s.getsockname()[1]
        response = b""
        while chunk := s.recv(65536):
            response += chunk
    assert response.startswith(b"HTTP/1.1 200"), response
    text = response.partition(b"\r\n\r\n")[2].decode()
    assert text.startswith(f"{expect} 127.0.0.1 {client_port}"), text
    if expect == "pp-tls":
        assert text.rstrip().endswith("TLSv1.3")


# -- TCP: half-close through re-encryption (TLS 1.3) --------------------------------------------


class HalfCloseServer:
    """A TLS 1.3 server on a real socket, driven by hand (``ssl.SSLObject`` over memory
    BIOs) so that it can half-close, which blocking ``ssl`` sockets cannot.

    ``answer_after_eof``: reads until the client's close_notify, then answers with
    what it got, reversed, and closes. ``close_first``: sends a greeting and its
    close_notify at once, then reads on until the client's close_notify. ``hold``:
    reads until the client's close_notify, then neither answers nor closes. ``got``:
    what the client sent; ``close_notify``: whether the client's end came as a
    close_notify (not a bare FIN).
    """

    def __init__(self, files: dict, mode: str) -> None:
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(*files["server"])
        self.ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        self.mode = mode
        self.got = b""
        self.close_notify = False
        self.error: BaseException | None = None
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(20)
        self.port = self.sock.getsockname()[1]
        self.done = threading.Event()
        self.release = threading.Event()  # ends ``hold``
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            conn, _ = self.sock.accept()
            with conn:
                conn.settimeout(20)
                self._serve(conn)
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            self.done.set()

    def _serve(self, conn: socket.socket) -> None:
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = self.ctx.wrap_bio(incoming, outgoing, server_side=True)

        def flush() -> None:
            if outgoing.pending:
                conn.sendall(outgoing.read())

        def pump() -> bool:
            data = conn.recv(65536)
            if data:
                incoming.write(data)
            return bool(data)

        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                flush()
                if not pump():
                    raise ConnectionError("closed during the handshake") from None
        flush()
        if self.mode == "close_first":
            tls.write(b"hello; that is all from me\n")
            with contextlib.suppress(ssl.SSLWantReadError):
                tls.unwrap()  # our close_notify; the client's comes later
            flush()
        while True:  # read until the client's close_notify
            try:
                chunk = tls.read(65536)
            except ssl.SSLWantReadError:
                flush()
                if not pump():
                    return  # a FIN without close_notify
                continue
            except ssl.SSLZeroReturnError:
                chunk = b""
            if not chunk:
                self.close_notify = True
                break
            self.got += chunk
        if self.mode == "answer_after_eof":
            tls.write(self.got[::-1] + b"\n")
            with contextlib.suppress(ssl.SSLError):
                tls.unwrap()
            flush()
        elif self.mode == "hold":  # neither answers nor closes: the half-open pair stays
            self.release.wait(10)


@pytest.fixture
def half_close_edge(tmp_path, files):
    servers: dict[str, HalfCloseServer] = {}

    def start(mode: str, termination_delay: str = "10s") -> tuple[Edge, HalfCloseServer]:
        server = servers[mode] = HalfCloseServer(files, mode)
        dynamic = {
            "tcp": {
                "routers": {"t": {"rule": "HostSNI(`*`)", "service": "t"}},
                "services": {
                    "t": {
                        "loadBalancer": {
                            "servers": [{"address": f"127.0.0.1:{server.port}", "tls": True}],
                            "serversTransport": "tls",
                        }
                    }
                },
                "serversTransports": {
                    "tls": {
                        "tls": {"rootCAs": [files["ca"]], "serverName": "up.test"},
                        "terminationDelay": termination_delay,
                    }
                },
            }
        }
        e = edges.append(Edge(tmp_path / mode, dynamic)) or edges[-1]
        return e, server

    edges: list[Edge] = []
    for mode in ("answer_after_eof", "close_first", "hold"):
        (tmp_path / mode).mkdir()
    yield start
    for e in edges:
        e.stop()
    for server in servers.values():
        server.release.set()
        server.sock.close()


def read_to_eof(s: socket.socket, timeout: float = 15) -> bytes:
    got = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        chunk = s.recv(65536)
        if not chunk:
            return got
        got += chunk
    raise TimeoutError(f"no EOF within {timeout}s; got {got!r}")


def test_reencrypt_client_eof_reaches_the_server_as_close_notify_and_its_answer_still_comes(
    half_close_edge,
):
    e, server = half_close_edge("answer_after_eof")
    with socket.create_connection(("127.0.0.1", e.port), timeout=15) as s:
        s.sendall(b"ping one, ")
        time.sleep(0.2)  # two reads at the server, the EOF after them
        s.sendall(b"ping two")
        s.shutdown(socket.SHUT_WR)
        answer = read_to_eof(s)
    assert server.done.wait(15) and server.error is None, server.error
    # The server saw everything, then a close_notify (not a truncation), then answered.
    assert server.got == b"ping one, ping two" and server.close_notify
    assert answer == b"owt gnip ,eno gnip\n"


def test_reencrypt_server_close_notify_reaches_the_client_as_eof_and_it_may_still_send(
    half_close_edge,
):
    e, server = half_close_edge("close_first")
    with socket.create_connection(("127.0.0.1", e.port), timeout=15) as s:
        greeting = read_to_eof(s)  # the server's close_notify arrives as EOF
        assert greeting == b"hello; that is all from me\n"
        s.sendall(b"still here, ")
        time.sleep(0.2)
        s.sendall(b"and done")
        s.shutdown(socket.SHUT_WR)
        assert read_to_eof(s) == b""
    assert server.done.wait(15) and server.error is None, server.error
    assert server.got == b"still here, and done" and server.close_notify


def test_reencrypt_half_open_pair_closes_after_the_termination_delay(half_close_edge):
    # After the client's EOF the server neither answers nor closes: the other direction
    # may flow for terminationDelay (300 ms here), then edge closes both sides.
    e, server = half_close_edge("hold", termination_delay="300ms")
    with socket.create_connection(("127.0.0.1", e.port), timeout=15) as s:
        s.sendall(b"x")
        time.sleep(0.2)
        start = time.monotonic()
        s.shutdown(socket.SHUT_WR)
        assert read_to_eof(s) == b""
        waited = time.monotonic() - start
    assert 0.25 < waited < 5, waited  # the delay, not the server's 10 s
    assert not server.done.is_set()  # the server still holds its side
    server.release.set()
    assert server.done.wait(15) and server.error is None, server.error
    assert server.got == b"x" and server.close_notify


def test_static_servers_transport_is_the_default_of_every_http_service(tmp_path, files, nginx):
    """Traefik's static ``serversTransport``: every service naming no transport uses it
    (here ``insecureSkipVerify``, which edge refused to start with); a service with a
    transport of its own keeps its own, which verifies."""
    tls_url = f"https://127.0.0.1:{nginx['tls']}"
    dynamic = {
        "http": {
            "routers": {
                "plain": {"rule": "Host(`plain.test`)", "service": "plain"},
                "own": {"rule": "Host(`own.test`)", "service": "own"},
            },
            "services": {
                "plain": lb(tls_url),
                "own": lb(tls_url, serversTransport="strict"),
            },
            "serversTransports": {"strict": {"maxIdleConnsPerHost": 1}},  # the system's CAs
        }
    }
    static = {"serversTransport": {"insecureSkipVerify": True, "maxIdleConnsPerHost": 4}}
    e = Edge(tmp_path, dynamic, static_extra=static)
    try:
        status, text = body(e.port, "plain.test")
        assert status == 200 and text.startswith("tls "), text
        assert body(e.port, "own.test")[0] == 502  # its own transport does not know the CA
    finally:
        e.stop()


def test_static_tcp_servers_transport_is_the_default_of_every_tcp_service(tmp_path, files):
    """Traefik's static ``tcpServersTransport``: a TCP service naming no transport dials
    with it (here its ``tls.insecureSkipVerify`` reaches a server whose CA edge lacks)."""
    plain = s_server(files)
    dynamic = {
        "tcp": {
            "routers": {"t": {"rule": "HostSNI(`*`)", "service": "t", "entryPoints": ["web"]}},
            "services": {
                "t": {
                    "loadBalancer": {
                        "servers": [{"address": f"127.0.0.1:{plain.port}", "tls": True}]
                    }
                }
            },
        }
    }
    static = {"tcpServersTransport": {"dialTimeout": "5s", "tls": {"insecureSkipVerify": True}}}
    e = Edge(tmp_path, dynamic, static_extra=static)
    try:
        got = send_until(e.port, b"hello edge\n", b"egde olleh")
        assert b"egde olleh" in got, got
    finally:
        e.stop()
        plain.stop()
