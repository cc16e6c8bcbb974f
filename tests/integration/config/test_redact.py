"""Secrets never leave edge (edge.config.redact): a real edge whose configuration holds
a rateLimit's Redis password (a real ``redis-server`` asking for it), basicAuth and
digestAuth users, an inline TLS key, client certificate keys and the OTLP export's
Authorization header. The API (every path the dashboard reads), ``edge check`` and
edge's DEBUG log show none of them, while what edge serves still uses each one: the
right password passes basicAuth, the rate limit reaches Redis through AUTH, the
certificate serves TLS, and the collector gets the header."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import secrets
import subprocess
import sys
from urllib.parse import quote

import pytest

from tests.fixtures.tls.pki import PKI
from tests.harness import ROOT, Edge, get, lb
from tests.integration.http.test_redis_limit import REDIS, RedisServer
from tests.integration.observability.otlp import Collector
from tests.integration.peers import https_get

pytestmark = pytest.mark.skipif(
    REDIS is None, reason="redis-server is not installed (apt-get install redis-server)"
)

REDIS_PASSWORD = "redis-" + secrets.token_hex(12)
OTLP_TOKEN = "otlp-" + secrets.token_hex(12)
UPSTREAM_TOKEN = "upstream-" + secrets.token_hex(12)
BASIC_PASSWORD = "basic-" + secrets.token_hex(8)
BASIC_HASH = "{SHA}" + base64.b64encode(hashlib.sha1(BASIC_PASSWORD.encode()).digest()).decode()
DIGEST_HASH = hashlib.md5(b"ann:private:digest-pw").hexdigest()
CA = PKI("redact CA")
SITE = CA.issue("a.test")
CLIENT = CA.issue(client=True)


def key_lines(pem: str) -> list[str]:
    """The base64 lines of a PEM private key: any one of them found is a leak."""
    return [line for line in pem.splitlines() if line and not line.startswith("-----")]


SECRETS = [
    REDIS_PASSWORD,
    UPSTREAM_TOKEN,
    OTLP_TOKEN,
    BASIC_HASH,
    BASIC_HASH.removeprefix("{SHA}"),
    DIGEST_HASH,
    *key_lines(SITE.key_pem),
    *key_lines(CLIENT.key_pem),
]


def leaked(text: str) -> list[str]:
    return [s for s in SECRETS if s in text] + (["PRIVATE KEY"] if "PRIVATE KEY" in text else [])


@pytest.fixture(scope="module")
def redis(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis"), password=REDIS_PASSWORD)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def collector():
    c = Collector()
    yield c
    c.server.shutdown()


@pytest.fixture(scope="module")
def served(tmp_path_factory, whoami, redis, collector):
    folder = tmp_path_factory.mktemp("redact")
    client_key = folder / "client.key"
    client_key.write_text(CLIENT.key_pem)
    dynamic = {
        "http": {
            "routers": {
                "basic": {"rule": "Host(`basic.test`)", "service": "app", "middlewares": ["basic"]},
                "digest": {
                    "rule": "Host(`digest.test`)",
                    "service": "app",
                    "middlewares": ["digest"],
                },
                "limited": {
                    "rule": "Host(`limited.test`)",
                    "service": "app",
                    "middlewares": ["limit"],
                },
                "secure": {"rule": "Host(`a.test`)", "service": "mtls", "tls": {}},
                "signed": {
                    "rule": "Host(`signed.test`)",
                    "service": "app",
                    "middlewares": ["sign"],
                },
            },
            "services": {
                "app": lb(whoami.url),
                "mtls": lb(whoami.url, serversTransport="mtls"),
            },
            "middlewares": {
                "basic": {"basicAuth": {"users": [f"ann:{BASIC_HASH}"]}},
                "sign": {
                    "headers": {
                        "customRequestHeaders": {
                            "Authorization": f"Bearer {UPSTREAM_TOKEN}",
                            "X-Tenant": "blue",
                        }
                    }
                },
                "digest": {"digestAuth": {"users": [f"ann:private:{DIGEST_HASH}"]}},
                "limit": {
                    "rateLimit": {
                        "average": 1000,
                        "burst": 1000,
                        "redis": {
                            "endpoints": [f"127.0.0.1:{redis.port}"],
                            "password": REDIS_PASSWORD,
                        },
                    }
                },
                "auth": {
                    "forwardAuth": {
                        "address": "https://127.0.0.1:9/auth",
                        "tls": {"cert": CLIENT.cert_pem, "key": CLIENT.key_pem},
                    }
                },
            },
            "serversTransports": {
                "mtls": {
                    "certificates": [{"certFile": CLIENT.cert_pem, "keyFile": str(client_key)}]
                }
            },
        },
        "tls": {"certificates": [{"certFile": SITE.cert_pem, "keyFile": SITE.key_pem}]},
    }
    static = {
        "api": {"insecure": True},
        "tracing": {
            "otlp": {
                "http": {
                    "endpoint": collector.endpoint,
                    "headers": {"Authorization": f"Bearer {OTLP_TOKEN}"},
                }
            }
        },
    }
    e = Edge(folder, dynamic, static_extra=static)
    e.ca = CA.write_ca(folder)
    yield e
    e.stop()


def api_body(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def test_the_api_shows_no_secret_on_any_path(served, redis):
    port = served.ports["traefik"]
    paths = [
        "/api/rawdata",
        "/api/overview",
        "/api/entrypoints",
        "/api/version",
        "/api/requests",
        *(
            f"/api/{section}/{kind}"
            for section in ("http", "tcp")
            for kind in ("routers", "services", "middlewares")
        ),
    ]
    for section, kind in (("http", "middlewares"), ("http", "services"), ("http", "routers")):
        status, body = api_body(port, f"/api/{section}/{kind}")
        assert status == 200
        paths += [f"/api/{section}/{kind}/{quote(e['name'], safe='@')}" for e in json.loads(body)]
    assert "/api/http/middlewares/limit@file" in paths
    for path in paths:
        status, body = api_body(port, path)
        assert status == 200, (path, body)
        assert leaked(body) == [], (path, body)
    # What is shown says a secret is there, in Traefik's mask.
    raw = json.loads(api_body(port, "/api/rawdata")[1])
    middlewares = raw["middlewares"]
    assert middlewares["limit@file"]["rateLimit"]["redis"]["password"] == "xxxx"
    assert middlewares["limit@file"]["rateLimit"]["redis"]["endpoints"] == [
        f"127.0.0.1:{redis.port}"
    ]
    assert middlewares["basic@file"]["basicAuth"]["users"] == ["xxxx"]
    assert middlewares["sign@file"]["headers"]["customRequestHeaders"] == {
        "Authorization": "xxxx",
        "X-Tenant": "blue",
    }
    assert middlewares["digest@file"]["digestAuth"]["users"] == ["xxxx"]
    assert middlewares["auth@file"]["forwardAuth"]["tls"]["key"] == "xxxx"
    assert "BEGIN CERTIFICATE" in middlewares["auth@file"]["forwardAuth"]["tls"]["cert"]


def test_what_edge_serves_keeps_every_secret(served, redis, collector):
    port = served.port
    auth = "Basic " + base64.b64encode(f"ann:{BASIC_PASSWORD}".encode()).decode()
    assert get(port, "/", host="basic.test", headers={"Authorization": auth})[0] == 200
    wrong = "Basic " + base64.b64encode(b"ann:wrong").decode()
    assert get(port, "/", host="basic.test", headers={"Authorization": wrong})[0] == 401
    # The upstream gets the header the headers middleware sets, as written.
    status, _, body = get(port, "/", host="signed.test")
    assert status == 200
    assert json.loads(body)["headers"]["Authorization"] == [f"Bearer {UPSTREAM_TOKEN}"]
    # The rate limit asks Redis, which wants the password: a refused AUTH would be a 500.
    assert get(port, "/", host="limited.test")[0] == 200
    # The inline certificate and key serve TLS, verified against the CA.
    status, _ = https_get(port, "a.test", ca=served.ca)
    assert status == 200
    # The collector gets the export's header as configured.
    collector.wait_spans(1)
    assert any(post.get("Authorization") == f"Bearer {OTLP_TOKEN}" for post in collector.posts)


def test_the_log_shows_no_secret(served):
    assert get(served.port, "/", host="limited.test")[0] == 200
    assert "DEBUG" in served.log  # the harness runs edge at DEBUG
    assert leaked(served.log) == []


def test_edge_check_shows_no_secret(served):
    done = subprocess.run(
        [sys.executable, "-m", "edge", "check", "--config", str(served.static_path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    out = done.stdout + done.stderr
    assert "middleware limit@file" in out, out
    assert leaked(out) == [], out
