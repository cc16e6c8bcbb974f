"""Entry point options (issue 8, item 7), through real edge processes and real peers.

- ``http.redirections.entryPoint``: plain HTTP answered with Traefik's statuses
  (301/308 permanent, 302/307 not) and the target entry point's port; curl
  follows it to the HTTPS router, under both codecs.
- ``http.tls``: every HTTP router on the entry point terminates TLS (split per
  entry point as Traefik's models do), with the model's TLS options.
- ``proxyProtocol``: HAProxy ``send-proxy`` / ``send-proxy-v2`` in front of edge;
  the client (connecting from 127.0.0.2) is who X-Forwarded-For and the access
  log name, for plain HTTP and for HTTPS edge terminates; a header from a peer
  not in ``trustedIPs`` closes the connection; a TCP router sees the header's
  address (ClientIP) and passes it on in its own PROXY header to nginx.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import time

import pytest

from edge.config.loader import decode_dynamic, decode_static
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.errors import ConfigError
from edge.tcp.proxyproto import encode_v2
from tests.fixtures.tls.pki import PKI
from tests.harness import ROOT, Edge, get, lb, need, raw
from tests.integration.peers import HAPROXY_DEFAULTS, free_port, running

# -- the static side and validation, pure ------------------------------------------------------


def test_redirect_target_resolves_to_its_port_and_bad_targets_are_refused():
    static = decode_static(
        {
            "entryPoints": {
                "web": {
                    "address": ":80",
                    "http": {"redirections": {"entryPoint": {"to": "websecure"}}},
                },
                "alt": {
                    "address": ":81",
                    "http": {"redirections": {"entryPoint": {"to": ":8443", "permanent": False}}},
                },
                "websecure": {"address": ":443"},
            }
        }
    )
    redirect = static.entry_points["web"].http.redirect
    assert (redirect.to, redirect.scheme, redirect.permanent, redirect.port) == (
        "websecure",
        "https",
        True,
        "443",
    )
    assert static.entry_points["alt"].http.redirect.port == "8443"
    for to, message in (
        ("nowhere", "no such entry point"),
        (":x", "not a port"),
        ("", "must name"),
    ):
        with pytest.raises(ConfigError, match=message):
            decode_static(
                {
                    "entryPoints": {
                        "web": {
                            "address": ":80",
                            "http": {"redirections": {"entryPoint": {"to": to}}},
                        }
                    }
                }
            )


def test_entry_point_tls_is_given_to_its_routers_as_traefik_models_do():
    static = decode_static(
        {
            "entryPoints": {
                "web": {"address": ":80"},
                "websecure": {"address": ":443", "http": {"tls": {"options": "modern"}}},
            }
        }
    )
    conf = decode_dynamic(
        {
            "http": {
                "routers": {
                    "both": {"rule": "Host(`a.test`)", "service": "s"},  # no entryPoints: every one
                    "only": {
                        "rule": "Host(`b.test`)",
                        "service": "s",
                        "entryPoints": ["websecure"],
                    },
                    "own": {
                        "rule": "Host(`c.test`)",
                        "service": "s",
                        "entryPoints": ["websecure"],
                        "tls": {},
                    },
                },
                "services": {"s": lb("http://127.0.0.1:1")},
            },
            "tls": {"options": {"modern": {"minVersion": "VersionTLS13"}}},
        }
    )
    rt = build_runtime(merge({"file": conf}), static.entry_point_protocols())
    routers = {
        name: (info.entry_points, info.config.tls and info.config.tls.options)
        for name, info in rt.http_routers.items()
    }
    assert routers == {
        "both@file": (["web"], None),  # plain HTTP where no model applies
        "websecure-both@file": (["websecure"], "modern@file"),  # TLS, with the model's options
        "only@file": (["websecure"], "modern@file"),
        "own@file": (["websecure"], ""),  # its own tls wins
    }
    assert all(info.status == "enabled" for info in rt.http_routers.values()), rt.errors()


# -- certificates and helpers -------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki() -> PKI:
    return PKI()


@pytest.fixture(scope="module")
def certs(tmp_path_factory, pki) -> dict:
    folder = tmp_path_factory.mktemp("ep-tls")
    pair = pki.issue("a.test", "s.test")
    crt, key = pair.write(folder, "site")
    return {
        "ca": pki.write_ca(folder),
        "tls": {"certificates": [{"certFile": crt, "keyFile": key}]},
        "pair": pair,
    }


def tls_get(
    port: int, host: str, ca: str, path: str = "/", source: str | None = None, **ctx_args
) -> tuple[int, dict]:
    ctx = ssl.create_default_context(cafile=ca)
    for name, value in ctx_args.items():
        setattr(ctx, name, value)
    sock = socket.create_connection(
        ("127.0.0.1", port), timeout=10, source_address=(source, 0) if source else None
    )
    with ctx.wrap_socket(sock, server_hostname=host) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body) if body.startswith(b"{") else {}


def http_get(port: int, host: str, source: str | None = None, method: str = "GET") -> bytes:
    """One request from ``source`` on a new connection; the whole response."""
    sock = socket.create_connection(
        ("127.0.0.1", port), timeout=10, source_address=(source, 0) if source else None
    )
    with sock:
        sock.sendall(
            f"{method} /who HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n".encode()
        )
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except ConnectionResetError:
            pass
        return data


def json_body(response: bytes) -> dict:
    return json.loads(response.partition(b"\r\n\r\n")[2])


# -- http.redirections.entryPoint ------------------------------------------------------------------


def test_http_redirects_to_the_https_entry_point_and_curl_follows(tmp_path, parser, whoami, certs):
    secure_port = free_port()
    eps = {
        "web": {
            "address": "127.0.0.1:0",
            "http": {"redirections": {"entryPoint": {"to": "websecure"}}},
        },
        "websecure": {"address": f"127.0.0.1:{secure_port}"},
        "temp": {
            "address": "127.0.0.1:0",
            "http": {"redirections": {"entryPoint": {"to": ":8443", "permanent": False}}},
        },
    }
    dynamic = {
        "http": {
            "routers": {
                "secure": {
                    "rule": "Host(`a.test`)",
                    "service": "who",
                    "tls": {},
                    "entryPoints": ["websecure"],
                }
            },
            "services": {"who": lb(whoami.url)},
        },
        "tls": certs["tls"],
    }
    e = Edge(tmp_path, dynamic, entrypoints=eps, parser=parser)
    try:
        web, temp = e.ports["web"], e.ports["temp"]
        status, headers, body = get(web, "/p?q=1", host="a.test")
        assert (status, headers["Location"], body) == (
            301,
            f"https://a.test:{secure_port}/p?q=1",
            b"Moved Permanently",
        )
        status, headers, _ = get(web, "/form", host="a.test:80", method="POST", body=b"x=1")
        assert (status, headers["Location"]) == (308, f"https://a.test:{secure_port}/form")
        status, headers, _ = get(temp, "/t", host="b.test")
        assert (status, headers["Location"]) == (302, "https://b.test:8443/t")
        assert get(temp, "/t", host="b.test", method="PUT", body=b"")[0] == 307
        # Keep-alive: two requests on one connection are both redirected (the express path defers).
        with socket.create_connection(("127.0.0.1", web), timeout=10) as s:
            s.sendall(
                b"GET /1 HTTP/1.1\r\nHost: a.test\r\n\r\nGET /2 HTTP/1.1\r\nHost: a.test\r\n\r\n"
            )
            data = b""
            deadline = time.monotonic() + 10
            while data.count(b"HTTP/1.1 301") < 2 and time.monotonic() < deadline:
                data += s.recv(65536)
        assert data.count(b"HTTP/1.1 301") == 2 and b"/2\r\n" in data
        # A request naming no host is not redirected (Traefik's rule needs one): the routers answer.
        assert raw(web, b"GET / HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 404")
        # curl follows the redirect to the HTTPS router.
        curl = subprocess.run(
            [
                need("curl"),
                "-sS",
                "-L",
                "--cacert",
                certs["ca"],
                "--resolve",
                f"a.test:{web}:127.0.0.1",
                "--resolve",
                f"a.test:{secure_port}:127.0.0.1",
                f"http://a.test:{web}/followed?x=1",
            ],
            capture_output=True,
            timeout=30,
        )
        assert curl.returncode == 0, curl.stderr
        info = json.loads(curl.stdout)
        assert info["path"] == "/followed" and info["headers"]["X-Forwarded-Proto"] == ["https"]
    finally:
        e.stop()


def test_redirect_names_a_port_0_target_bound_port_and_yields_to_routers_ranked_above_it(
    tmp_path, whoami, certs
):
    eps = {
        "web": {
            "address": "127.0.0.1:0",
            "http": {"redirections": {"entryPoint": {"to": "websecure"}}},
        },
        "low": {
            "address": "127.0.0.1:0",
            "http": {
                "redirections": {
                    "entryPoint": {"to": "websecure", "priority": 10, "permanent": False}
                }
            },
        },
        "websecure": {"address": "127.0.0.1:0"},
    }
    dynamic = {
        "http": {
            "routers": {
                # Ranked above Traefik's default redirect priority (MaxInt32 - 1): served on web.
                "acme": {
                    "rule": "PathPrefix(`/.well-known/`)",
                    "service": "who",
                    "priority": 2**31 - 1,
                },
                # A default priority (the rule's length) is below it on web, above 10 on low.
                "app": {"rule": "Host(`a.test`) && Path(`/app`)", "service": "who"},
                "secure": {
                    "rule": "Host(`a.test`)",
                    "service": "who",
                    "tls": {},
                    "entryPoints": ["websecure"],
                },
            },
            "services": {"who": lb(whoami.url)},
        },
        "tls": certs["tls"],
    }
    e = Edge(tmp_path, dynamic, entrypoints=eps)
    try:
        web, low, secure = e.ports["web"], e.ports["low"], e.ports["websecure"]
        assert secure not in (0, 443)
        # websecure was configured on port 0: the Location names the port it was bound to.
        status, headers, _ = get(web, "/p?q=1", host="a.test")
        assert (status, headers["Location"]) == (301, f"https://a.test:{secure}/p?q=1")
        # The router ranked above the redirect answers, on a new connection and on a kept one.
        status, _, body = get(web, "/.well-known/acme-challenge/x", host="a.test")
        assert status == 200 and json.loads(body)["path"] == "/.well-known/acme-challenge/x"
        with socket.create_connection(("127.0.0.1", web), timeout=10) as s:
            s.sendall(
                b"GET /.well-known/y HTTP/1.1\r\nHost: a.test\r\n\r\nGET /z HTTP/1.1\r\nHost: a.test\r\n\r\n"
            )
            data = b""
            deadline = time.monotonic() + 10
            while b"HTTP/1.1 301" not in data and time.monotonic() < deadline:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        assert data.startswith(b"HTTP/1.1 200") and b"HTTP/1.1 301" in data
        assert get(web, "/app", host="a.test")[0] == 301
        # Priority 10: the app router (priority 27) is above it and answers; other paths redirect.
        status, _, body = get(low, "/app", host="a.test")
        assert status == 200 and json.loads(body)["path"] == "/app"
        status, headers, _ = get(low, "/other", host="a.test")
        assert (status, headers["Location"]) == (302, f"https://a.test:{secure}/other")
    finally:
        e.stop()


# -- http.tls ---------------------------------------------------------------------------------------


def test_entry_point_tls_makes_every_router_on_it_terminate_tls(tmp_path, whoami, certs):
    eps = {
        "web": {"address": "127.0.0.1:0"},
        "websecure": {"address": "127.0.0.1:0", "http": {"tls": {}}},
        "modern": {"address": "127.0.0.1:0", "http": {"tls": {"options": "modern"}}},
    }
    dynamic = {
        "http": {
            "routers": {"app": {"rule": "Host(`a.test`)", "service": "who"}},
            "services": {"who": lb(whoami.url)},
        },
        "tls": {**certs["tls"], "options": {"modern": {"minVersion": "VersionTLS13"}}},
    }
    e = Edge(tmp_path, dynamic, entrypoints=eps)
    try:
        status, _, data = get(e.ports["web"], "/", host="a.test")
        assert status == 200 and json.loads(data)["headers"]["X-Forwarded-Proto"] == ["http"]
        status, info = tls_get(e.ports["websecure"], "a.test", certs["ca"], "/s")
        assert status == 200 and info["headers"]["X-Forwarded-Proto"] == ["https"]
        assert get(e.ports["websecure"], "/", host="a.test")[0] == 404  # never without TLS there
        assert tls_get(e.ports["modern"], "a.test", certs["ca"])[0] == 200
        with pytest.raises(ssl.SSLError):  # the model's options: TLS 1.3 only
            tls_get(
                e.ports["modern"], "a.test", certs["ca"], maximum_version=ssl.TLSVersion.TLSv1_2
            )
        check = subprocess.run(
            [sys.executable, "-m", "edge", "check", "--config", str(e.static_path)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert "router websecure-app@file: enabled" in check.stdout, check.stdout
        assert "router modern-app@file: enabled" in check.stdout
    finally:
        e.stop()


# -- proxyProtocol -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def proxied(tmp_path_factory, whoami, certs):
    """edge with a trusting entry point (``web``), a strict one (trusts 10.0.0.0/8 only) and
    HAProxy in front of both: ``v1`` and ``v2`` to web, ``untrusted`` to strict."""
    folder = tmp_path_factory.mktemp("proxied")
    access_log = folder / "access.log"
    eps = {
        "web": {
            "address": "127.0.0.1:0",
            "proxyProtocol": {"trustedIPs": ["127.0.0.1/32"]},
            "transport": {"respondingTimeouts": {"readTimeout": "1s"}},
        },
        "strict": {"address": "127.0.0.1:0", "proxyProtocol": {"trustedIPs": ["10.0.0.0/8"]}},
    }
    dynamic = {
        "http": {
            "routers": {
                "who": {"rule": "Host(`a.test`)", "service": "who"},
                "secure": {
                    "rule": "Host(`s.test`)",
                    "service": "who",
                    "tls": {},
                    "entryPoints": ["web"],
                },
            },
            "services": {"who": lb(whoami.url)},
        },
        "tls": certs["tls"],
    }
    e = Edge(
        folder,
        dynamic,
        entrypoints=eps,
        static_extra={"accessLog": {"filePath": str(access_log), "format": "json"}},
    )
    haproxy = need("haproxy")
    ports = {name: free_port() for name in ("v1", "v2", "untrusted", "ready")}
    cfg = folder / "haproxy.cfg"
    cfg.write_text(
        HAPROXY_DEFAULTS.format(ready=ports["ready"])
        + f"""
frontend v1
  bind 127.0.0.1:{ports["v1"]}
  default_backend v1
backend v1
  server edge 127.0.0.1:{e.ports["web"]} send-proxy
frontend v2
  bind 127.0.0.1:{ports["v2"]}
  default_backend v2
backend v2
  server edge 127.0.0.1:{e.ports["web"]} send-proxy-v2
frontend untrusted
  bind 127.0.0.1:{ports["untrusted"]}
  default_backend untrusted
backend untrusted
  server edge 127.0.0.1:{e.ports["strict"]} send-proxy-v2
"""
    )
    try:
        with running([haproxy, "-db", "-f", str(cfg)], folder / "haproxy.log", ports["ready"]):
            yield e, ports, access_log
    finally:
        e.stop()


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_haproxy_header_names_the_client_for_http(proxied, version):
    _, ports, access_log = proxied
    response = http_get(ports[version], "a.test", source="127.0.0.2")
    assert response.startswith(b"HTTP/1.1 200"), response
    info = json_body(response)
    assert info["headers"]["X-Forwarded-For"] == ["127.0.0.2"]  # not HAProxy's 127.0.0.1
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        records = [json.loads(line) for line in access_log.read_text().splitlines() if line]
        if any(r["ClientHost"] == "127.0.0.2" for r in records):
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"no access log line for 127.0.0.2: {access_log.read_text()}")


def test_haproxy_header_names_the_client_for_https_edge_terminates(proxied, certs):
    _, ports, _ = proxied
    status, info = tls_get(ports["v2"], "s.test", certs["ca"], "/tls", source="127.0.0.2")
    assert status == 200 and info["headers"]["X-Forwarded-For"] == ["127.0.0.2"]
    assert info["headers"]["X-Forwarded-Proto"] == ["https"]


def test_a_trusted_peer_may_send_no_header_or_a_local_one(proxied):
    e, _, _ = proxied
    response = http_get(e.ports["web"], "a.test", source="127.0.0.1")
    assert json_body(response)["headers"]["X-Forwarded-For"] == ["127.0.0.1"]
    local = encode_v2(None, None, command="LOCAL")  # a proxy's own health check
    response = raw(
        e.ports["web"], local + b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"
    )
    assert response.startswith(b"HTTP/1.1 200") and json_body(response)["headers"][
        "X-Forwarded-For"
    ] == ["127.0.0.1"]


def test_a_header_from_an_untrusted_peer_is_refused(proxied):
    e, ports, _ = proxied
    assert (
        http_get(ports["untrusted"], "a.test", source="127.0.0.2") == b""
    )  # HAProxy's connection closed
    e.wait_for(
        r"strict: 127\.0\.0\.1 sent a PROXY protocol header but is not in proxyProtocol\.trustedIPs; closed"
    )
    header = b"PROXY TCP4 192.0.2.1 127.0.0.1 1234 80\r\n"
    assert raw(e.ports["strict"], header + b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n") == b""
    # without a header the same peer is served as itself
    response = http_get(e.ports["strict"], "a.test")
    assert response.startswith(b"HTTP/1.1 200") and json_body(response)["headers"][
        "X-Forwarded-For"
    ] == ["127.0.0.1"]


def test_malformed_or_unfinished_headers_close_the_connection(proxied):
    e, _, _ = proxied
    assert (
        raw(e.ports["web"], b"PROXY TCP4 not-an-ip 127.0.0.1 1 2\r\nGET / HTTP/1.1\r\n\r\n") == b""
    )
    with socket.create_connection(("127.0.0.1", e.ports["web"]), timeout=10) as s:
        start = time.monotonic()
        s.sendall(b"PROXY TCP4 192.0")
        assert s.recv(100) == b""
        assert 0.9 <= time.monotonic() - start < 3.5  # readTimeout 1s bounds the header too


def test_tcp_router_sees_the_header_client_and_passes_it_on(tmp_path, nginx_proxy_protocol):
    eps = {"tcpin": {"address": "127.0.0.1:0", "proxyProtocol": {"insecure": True}}}
    dynamic = {
        "tcp": {
            "routers": {
                "doc": {"rule": "HostSNI(`*`) && ClientIP(`192.0.2.0/24`)", "service": "pp"}
            },
            "services": {
                "pp": {
                    "loadBalancer": {
                        "servers": [{"address": f"127.0.0.1:{nginx_proxy_protocol}"}],
                        "proxyProtocol": {"version": 1},
                    }
                }
            },
        }
    }
    e = Edge(tmp_path, dynamic, entrypoints=eps)
    try:
        request = b"GET / HTTP/1.0\r\nHost: pp.test\r\n\r\n"
        got = raw(e.ports["tcpin"], b"PROXY TCP4 192.0.2.7 127.0.0.1 5555 443\r\n" + request)
        assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"192.0.2.7 5555\n"), got
        # another client address: the TCP router's ClientIP does not match; HTTP answers 404
        got = raw(e.ports["tcpin"], b"PROXY TCP4 198.51.100.1 127.0.0.1 5555 443\r\n" + request)
        assert got.startswith(b"HTTP/1.1 404"), got
    finally:
        e.stop()
