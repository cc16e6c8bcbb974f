"""Secrets read from Kubernetes never leave edge through its API or its log
(edge.config.redact): a TLS Secret's key (an Ingress's ``tls``, which becomes inline PEM
in the runtime configuration), the htpasswd lines of ingress-nginx's ``auth-secret``,
and a CRD Middleware's Secrets (basicAuth users, forwardAuth's client key, rateLimit's
Redis credentials). Each is still served: HTTPS with the Secret's certificate, basic
authentication with the Secret's password. Emulator, provider and edge as in
``test_provider.py``; every wait is bounded."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import logging
import secrets
import socket
import ssl
from urllib.parse import quote

from edge.providers.kubernetes.provider import KubernetesCRDProvider
from tests.fixtures.tls.pki import PKI
from tests.integration.kubernetes import test_provider as KP
from tests.integration.kubernetes.test_crd_middlewares import curl as crd_curl
from tests.integration.kubernetes.test_crd_middlewares import route, secret
from tests.integration.kubernetes.test_crd_provider import _crd, _fast, endpoints, service
from tests.integration.kubernetes.test_crd_provider import static_config as crd_static
from tests.integration.kubernetes.test_ingress_nginx import (
    curl,
    htpasswd_secret,
    nginx_ingress,
    start_nginx_edge,
)
from tests.kube import objects as o

__all__ = ["emu"]
emu = KP.emu  # the emulator fixture, shared with the provider's tests

CA = PKI("kubernetes redact CA")
SITE = CA.issue("a.test")


def key_lines(pem: str) -> list[str]:
    """The base64 lines of a PEM private key, and a stretch of the Secret's own base64 of
    it (as the API server sends it): any one found is a leak."""
    lines = [line for line in pem.splitlines() if line and not line.startswith("-----")]
    return [*lines, base64.b64encode(pem.encode()).decode()[80:140]]


def leaked(text: str, found: list[str]) -> list[str]:
    return [s for s in found if s in text] + (["PRIVATE KEY"] if "PRIVATE KEY" in text else [])


def api_bodies(port: int) -> dict[str, str]:
    """Every API path the dashboard reads, and each element's own, with its body."""

    def body(path: str) -> str:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            assert resp.status == 200, (path, resp.status)
            return resp.read().decode()
        finally:
            conn.close()

    paths = ["/api/rawdata", "/api/overview", "/api/entrypoints"]
    for kind in ("routers", "services", "middlewares"):
        paths.append(f"/api/http/{kind}")
        paths += [
            f"/api/http/{kind}/{quote(e['name'], safe='@')}"
            for e in json.loads(body(f"/api/http/{kind}"))
        ]
    return {path: body(path) for path in paths}


def https_status(port: int, host: str) -> int:
    ctx = ssl.create_default_context(cadata=CA.cert_pem)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname=host) as tls,
    ):
        tls.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        resp = http.client.HTTPResponse(tls)
        resp.begin()
        return resp.status


def https_answers(port: int, host: str) -> int:
    """:func:`https_status`, 0 while the handshake fails (the Secret not read yet)."""
    try:
        return https_status(port, host)
    except (OSError, ssl.SSLError):
        return 0


def test_an_ingress_tls_secret_serves_https_and_shows_no_key(emu, whoami, caplog):
    caplog.set_level(logging.DEBUG)  # every logger: edge's, the client's, urllib3's
    emu.create(o.ingress_class("edge"))
    KP.backend_service(emu, "app", whoami)
    b64 = base64.b64encode
    emu.create(
        o.secret("site-tls", cert=b64(SITE.cert_pem.encode()).decode(),
                 key=b64(SITE.key_pem.encode()).decode())
    )  # fmt: skip
    emu.create(
        KP.ingress(
            "site",
            [("a.test", "/", "Prefix", "app")],
            tls=[{"hosts": ["a.test"], "secretName": "site-tls"}],
        )
    )
    static = KP.static_config(emu)
    static["api"] = {"insecure": True}
    edge = KP.InProcessEdge(static, tweak=KP.fast()).start()
    try:
        assert KP.until(lambda: edge.ready() == 200, 10.0)
        assert KP.until(lambda: https_answers(edge.port(), "a.test") == 200, 10.0)
        assert edge.app is not None and edge.app.runtime is not None
        # The runtime holds the key as inline PEM (what edge serves): the API must not.
        tls = edge.app.runtime.configuration.tls
        assert tls is not None and any("PRIVATE KEY" in c.key_file for c in tls.certificates)
        bodies = api_bodies(edge.port("traefik"))
        for path, body in bodies.items():
            assert leaked(body, key_lines(SITE.key_pem)) == [], (path, body)
        raw = json.loads(bodies["/api/rawdata"])
        assert any(r.get("tls") is not None for r in raw["routers"].values()), raw
        assert any(r.levelno == logging.DEBUG for r in caplog.records)  # the log was read
        assert leaked(caplog.text, key_lines(SITE.key_pem)) == []
    finally:
        KP.stop_all([edge])


def test_ingress_nginx_auth_secret_lets_its_users_in_and_shows_no_hash(emu, whoami, caplog):
    caplog.set_level(logging.DEBUG)  # every logger: edge's, the client's, urllib3's
    password = "pw-" + secrets.token_hex(8)
    digest = base64.b64encode(hashlib.sha1(password.encode()).digest()).decode()
    emu.create(o.ingress_class("nginx", controller="k8s.io/ingress-nginx"))
    KP.backend_service(emu, "app", whoami)
    emu.create(htpasswd_secret("staff", "default", {"alice": password}))
    emu.create(
        nginx_ingress(
            "staff",
            "staff.test",
            [("/", "Prefix", "app")],
            {"auth-type": "basic", "auth-secret": "staff"},
        )
    )
    edge = start_nginx_edge(emu)
    try:
        port = edge.port()

        def code(*args: str) -> str:
            return curl(port, "/", "staff.test", "-o", "/dev/null", "-w", "%{http_code}", *args)

        assert KP.until(lambda: code("-u", f"alice:{password}") == "200", 10.0)
        assert code("-u", "alice:wrong") == "401"
        bodies = api_bodies(edge.port("traefik"))
        shown = [m for m in json.loads(bodies["/api/http/middlewares"]) if "basicAuth" in m]
        assert shown and all(m["basicAuth"]["users"] == ["xxxx"] for m in shown), shown
        for path, body in bodies.items():
            assert leaked(body, [digest, password]) == [], (path, body)
        assert leaked(caplog.text, [digest, password]) == []
    finally:
        KP.stop_all([edge])


def test_crd_middleware_secrets_show_masked(emu, whoami, caplog):
    caplog.set_level(logging.DEBUG)  # every logger: edge's, the client's, urllib3's
    emu.create(service("app", 80))
    emu.create(endpoints("app-1", "app", whoami.port))
    client = CA.issue(cn="edge-client", client=True)
    users = "bob:{SHA}" + base64.b64encode(hashlib.sha1(b"crd-pw").digest()).decode()
    redis_password = "redis-" + secrets.token_hex(8)
    emu.create(secret("users", {"users": users + "\n"}))
    emu.create(secret("client", {"tls.crt": client.cert_pem, "tls.key": client.key_pem}))
    emu.create(secret("redis", {"username": "limiter", "password": redis_password}))
    middlewares = {
        "basic": {"basicAuth": {"secret": "users"}},
        "guard": {
            "forwardAuth": {"address": "https://127.0.0.1:9/auth", "tls": {"certSecret": "client"}}
        },
        "limit": {
            "rateLimit": {
                "average": 10,
                "redis": {"endpoints": ["127.0.0.1:9"], "secret": "redis"},
            }
        },
    }
    for name, spec in middlewares.items():
        emu.create(_crd("Middleware", name, spec))
        emu.create(route(name, f"{name}.test", name))
    static = crd_static(emu)
    static["api"] = {"insecure": True}
    edge = KP.InProcessEdge(static, tweak=_fast).start()
    try:
        assert KP.until(lambda: edge.ready() == 200, 10.0)
        assert edge.app is not None
        provider = next(p for p in edge.app.providers if isinstance(p, KubernetesCRDProvider))
        assert provider.conversion.problems == []
        # basicAuth serves with the Secret's user
        assert KP.until(
            lambda: crd_curl(edge.port(), "basic.test", "/", "-u", "bob:crd-pw")[0] == 200, 10.0
        )
        assert crd_curl(edge.port(), "basic.test", "/", "-u", "bob:nope")[0] == 401
        bodies = api_bodies(edge.port("traefik"))
        found = [
            users,
            users.split(":", 1)[1],
            redis_password,
            "limiter",
            *key_lines(client.key_pem),
        ]
        for path, body in bodies.items():
            assert leaked(body, found) == [], (path, body)
        shown = {m["name"]: m for m in json.loads(bodies["/api/http/middlewares"])}
        assert shown["default-limit@kubernetescrd"]["rateLimit"]["redis"]["password"] == "xxxx"
        assert shown["default-guard@kubernetescrd"]["forwardAuth"]["tls"]["key"] == "xxxx"
        assert leaked(caplog.text, found) == []
    finally:
        KP.stop_all([edge])
