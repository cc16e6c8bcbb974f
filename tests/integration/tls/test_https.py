"""HTTPS: edge terminates TLS for HTTP routers (and terminating TCP routers) on a
TCP entrypoint: the certificate for each name, ALPN, client certificates, session
resumption across changes and workers, certificate files that change or break.

edge runs as a real process (``tests.harness.Edge``) on 127.0.0.1 port 0; clients
are ``openssl s_client``, curl and Python's ssl. Certificates are made when the
tests run (``tests/fixtures/tls/pki.py``, the ``pki`` and ``certs`` fixtures of
``tests/integration/conftest.py``).
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import ssl
import time
from pathlib import Path

import pytest

from edge.tcp.peek import Peek, PeekContext
from edge.tls.terminate import TLSAccept
from tests.harness import Edge, get, lb, read_response
from tests.integration.peers import (
    certificates,
    curl,
    https_get,
    pair,
    peer_fingerprint,
    recv_all,
    resumed_get,
    s_client_until,
    tcp_routers,
    tls_connect,
)

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
def test_https_with_traefiks_alpn_protocols_serves_curl_http2_and_http_1_1(
    tmp_path, path, certs, whoami, echo
):
    dynamic = alpn_config(certs, whoami, echo, with_tcp_router=path == "peek")
    _, routers = tcp_routers(dynamic)
    ctx = PeekContext(name="web", loop=None, connections=set(), http=None, https=None)  # type: ignore[arg-type]
    assert type(ctx.protocol(routers["web"])) is (Peek if path == "peek" else TLSAccept)
    e = Edge(tmp_path, dynamic)
    try:
        url = f"https://a.test:{e.port}/alpn"
        for flag, version, accepted in (
            ("--http2", b"2", b"h2"),
            ("--http1.1", b"1.1", b"http/1\\.1"),
        ):
            result = curl(
                "-v",
                flag,
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
            assert result.stdout == b"200 " + version
            assert re.search(rb"ALPN: server accepted " + accepted, result.stderr), result.stderr
        # Said once, naming the options and what is left out (edge has no ACME).
        for _ in range(100):
            if "alpnProtocols acme-tls/1 left out on HTTPS routers" in e.log:
                break
            time.sleep(0.05)
        assert (
            e.log.count("TLS options default: alpnProtocols acme-tls/1 left out on HTTPS routers")
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
    from tests.integration.config.test_workers import owners, wait_workers

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
