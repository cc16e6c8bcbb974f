"""Sticky sessions through a real edge: ``sticky.cookie`` on a load balancer and on a
weighted service, with two ``edge whoami`` backends and curl keeping a cookie jar
(``-c`` / ``-b``), under both HTTP/1.1 codecs.

A client with the cookie reaches the same backend every time and gets no new cookie;
one without gets the cookie of the backend that answered, with the attributes
configured; a cookie naming a server removed from the configuration or failing its
health check is answered by another server, and the cookie reset to it.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.harness import Edge, Whoami, lb, need

PARSERS = ["httptools", "h11"]


@pytest.fixture
def whoamis():
    made = [Whoami("a"), Whoami("b")]
    yield made
    for w in made:
        w.stop()


def value(url: str) -> str:
    """The cookie value Traefik v3 writes for a server: the SHA-256 of its URL, 16 hex digits."""
    return hashlib.sha256(url.encode()).hexdigest()[:16]


def curl(e: Edge, jar: Path, host: str = "app.example") -> tuple[str, list[str], str]:
    """(name of the whoami that answered, Set-Cookie values, body) of one request sent
    with the cookies of ``jar``, whose cookies it then updates."""
    out = subprocess.run(
        [
            need("curl"),
            "-sS",
            "-i",
            "--max-time",
            "10",
            "-b",
            str(jar),
            "-c",
            str(jar),
            "-H",
            f"Host: {host}",
            f"{e.url}/",
        ],
        capture_output=True,
        timeout=20,
        check=True,
    ).stdout.decode()
    head, _, body = out.replace("\r\n", "\n").partition("\n\n")
    cookies = [
        line.split(":", 1)[1].strip()
        for line in head.split("\n")
        if line.lower().startswith("set-cookie:")
    ]
    return json.loads(body)["name"] if body.startswith("{") else "", cookies, body


def start(tmp_path, parser: str, services: dict, service: str = "app") -> Edge:
    dyn = {
        "http": {
            "routers": {"app": {"rule": "Host(`app.example`)", "service": service}},
            "services": services,
        }
    }
    return Edge(tmp_path, dyn, parser=parser)


@pytest.mark.parametrize("parser", PARSERS)
def test_the_cookie_keeps_a_client_on_its_backend(tmp_path, parser, whoamis):
    a, b = whoamis
    cookie = {
        "name": "lb",
        "secure": True,
        "httpOnly": True,
        "sameSite": "lax",
        "maxAge": 60,
        "path": "/",
        "domain": "app.example",
    }
    e = start(tmp_path, parser, {"app": lb(a.url, b.url, sticky={"cookie": cookie})})
    try:
        jar = tmp_path / "jar"
        first, cookies, _ = curl(e, jar)
        assert first in ("a", "b")
        url = {"a": a.url, "b": b.url}[first]
        assert cookies == [
            f"lb={value(url)}; Path=/; Domain=app.example; Max-Age=60; HttpOnly; Secure;"
            " SameSite=Lax"
        ]
        # curl sends a Secure cookie over plain HTTP to no one: a second jar without it.
        plain = tmp_path / "plain"
        plain.write_text(f"app.example\tFALSE\t/\tFALSE\t0\tlb\t{value(url)}\n")
        for _ in range(8):
            name, again, _ = curl(e, plain)
            assert (name, again) == (first, [])
        # Without the cookie the balancer goes round, setting each client's.
        seen = set()
        for _ in range(4):
            name, cookies, _ = curl(e, tmp_path / "fresh")
            (tmp_path / "fresh").unlink(missing_ok=True)
            seen.add(name)
            assert cookies[0].startswith(f"lb={value({'a': a.url, 'b': b.url}[name])};")
        assert seen == {"a", "b"}
    finally:
        e.stop()


@pytest.mark.parametrize("parser", PARSERS)
def test_a_cookie_naming_a_removed_server_repicks_and_resets(tmp_path, parser, whoamis):
    a, b = whoamis
    e = start(tmp_path, parser, {"app": lb(a.url, b.url, sticky={"cookie": {"name": "s"}})})
    try:
        jar = tmp_path / "jar"
        jar.write_text(f"app.example\tFALSE\t/\tFALSE\t0\ts\t{value(a.url)}\n")
        assert curl(e, jar)[:2] == ("a", [])
        applied = e.applied()
        e.write_dynamic(
            {
                "http": {
                    "routers": {"app": {"rule": "Host(`app.example`)", "service": "app"}},
                    "services": {"app": lb(b.url, sticky={"cookie": {"name": "s"}})},
                }
            }
        )
        e.wait_applied(applied + 1, timeout=15)
        name, cookies, _ = curl(e, jar)
        assert (name, cookies) == ("b", [f"s={value(b.url)}; Path=/"])
        assert curl(e, jar)[:2] == ("b", [])  # the jar now holds b's cookie
    finally:
        e.stop()


@pytest.mark.parametrize("parser", PARSERS)
def test_a_cookie_naming_an_unhealthy_server_repicks_and_resets(tmp_path, parser, whoamis):
    a, b = whoamis
    check = {"path": "/health", "interval": "200ms", "timeout": "1s"}
    e = start(
        tmp_path,
        parser,
        {"app": lb(a.url, b.url, healthCheck=check, sticky={"cookie": {"name": "s"}})},
    )
    try:
        jar = tmp_path / "jar"
        jar.write_text(f"app.example\tFALSE\t/\tFALSE\t0\ts\t{value(a.url)}\n")
        assert curl(e, jar)[:2] == ("a", [])
        a.stop()  # its checks fail: it leaves the rotation
        deadline = time.monotonic() + 15
        while True:
            try:
                name, cookies, _ = curl(e, jar)
            except subprocess.CalledProcessError:
                name, cookies = "", []
            if name == "b":
                break
            assert time.monotonic() < deadline, e.log
            time.sleep(0.1)
        assert cookies == [f"s={value(b.url)}; Path=/"]
        assert curl(e, jar)[:2] == ("b", [])
    finally:
        e.stop()


@pytest.mark.parametrize("parser", PARSERS)
def test_a_weighted_sticky_service_keeps_a_client_on_its_child(tmp_path, parser, whoamis):
    a, b = whoamis
    services = {
        "w": {
            "weighted": {
                "services": [{"name": "one", "weight": 1}, {"name": "two", "weight": 1}],
                "sticky": {"cookie": {"name": "w"}},
            }
        },
        "one": lb(a.url),
        "two": lb(b.url),
    }
    e = start(tmp_path, parser, services, service="w")
    try:
        jar = tmp_path / "jar"
        first, cookies, _ = curl(e, jar)
        child = {"a": "one", "b": "two"}[first]  # as Traefik names its file's children
        assert cookies == [f"w={value(child)}; Path=/"]
        for _ in range(8):
            assert curl(e, jar)[:2] == (first, [])
        seen = set()
        for _ in range(4):
            (tmp_path / "fresh").unlink(missing_ok=True)
            seen.add(curl(e, tmp_path / "fresh")[0])
        assert seen == {"a", "b"}
    finally:
        e.stop()


@pytest.mark.parametrize("parser", PARSERS)
def test_the_default_cookie_name_is_traefiks(tmp_path, parser, whoamis):
    a, _ = whoamis
    e = start(tmp_path, parser, {"app": lb(a.url, sticky={"cookie": {}})})
    try:
        name = "_" + hashlib.sha1(b"_TRAEFIK_BACKEND_app@file").hexdigest()[:5]
        _, cookies, _ = curl(e, tmp_path / "jar")
        assert cookies == [f"{name}={value(a.url)}; Path=/"]
    finally:
        e.stop()
