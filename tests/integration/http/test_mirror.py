"""Mirroring services through a real edge, under both HTTP/1.1 codecs: the main service
answers the client, each mirror gets a copy of its share of the requests, byte for
byte (a recording backend compares bodies), ``mirrorBody`` and ``maxBodySize`` are
honoured, and a mirror that hangs or is gone costs the client nothing (main latency
measured against the same route without mirrors)."""

from __future__ import annotations

import socket
import statistics
import time

import pytest

from tests.harness import Edge, get, lb
from tests.integration.http.servers import TIMEOUT, H11Backend, exchange
from tests.integration.peers import ThreadedServer

PARSERS = ["httptools", "h11"]


class Hung(ThreadedServer):
    """A mirror that accepts connections, reads what comes and never answers."""

    def _serve(self, c: socket.socket, n: int) -> None:
        c.settimeout(0.2)
        try:
            while not self.stopped:
                try:
                    if not c.recv(65536):
                        return
                except TimeoutError:
                    continue
        except OSError:
            pass
        finally:
            c.close()


@pytest.fixture
def main():
    b = H11Backend(after_body=True)
    yield b
    b.stop()


@pytest.fixture
def shadow():
    b = H11Backend(after_body=True)
    yield b
    b.stop()


def start(tmp_path, parser: str, main: str, mirrors: list[tuple[str, int]], **mirroring) -> Edge:
    services: dict = {"main": lb(main)}
    for i, (url, _) in enumerate(mirrors):
        services[f"m{i}"] = lb(url)
    services["app"] = {
        "mirroring": {
            "service": "main",
            "mirrors": [{"name": f"m{i}", "percent": p} for i, (_, p) in enumerate(mirrors)],
            **mirroring,
        }
    }
    dyn = {
        "http": {
            "routers": {
                "app": {"rule": "Host(`app.example`)", "service": "app"},
                "plain": {"rule": "Host(`plain.example`)", "service": "main"},
            },
            "services": services,
        }
    }
    return Edge(tmp_path, dyn, parser=parser)


def wait_for(backend: H11Backend, count: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while len(backend.requests) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)  # anything more it still had to read


def post(port: int, body: bytes, chunked: bool = False, path: str = "/up") -> bytes:
    if chunked:
        framed = b"".join(
            b"%x\r\n%s\r\n" % (len(body[i : i + 5000]), body[i : i + 5000])
            for i in range(0, len(body), 5000)
        )
        head = b"Transfer-Encoding: chunked\r\n"
        data = framed + b"0\r\n\r\n"
    else:
        head = b"Content-Length: %d\r\n" % len(body)
        data = body
    return exchange(
        port,
        b"POST "
        + path.encode()
        + b" HTTP/1.1\r\nHost: app.example\r\nX-Tag: t\r\n"
        + head
        + b"Connection: close\r\n\r\n"
        + data,
    )


@pytest.mark.parametrize("parser", PARSERS)
def test_the_mirror_gets_the_request_byte_for_byte_and_the_client_the_mains_answer(
    tmp_path, parser, main, shadow
):
    e = start(tmp_path, parser, main.url, [(shadow.url, 100)])
    try:
        body = bytes(range(256)) * 400  # 102,400 bytes
        for chunked in (False, True):
            out = post(e.port, body, chunked=chunked)
            assert out.startswith(b"HTTP/1.1 200") and out.endswith(b"POST /up 102400"), out[:200]
        status, _, answer = get(e.port, "/q?x=1", host="app.example")
        assert (status, answer) == (200, b"GET /q?x=1 0")
        expected = [(b"GET", b"/q?x=1", b""), (b"POST", b"/up", body), (b"POST", b"/up", body)]
        # Copies go each from its own task, on a connection of its own when none is
        # idle: they may reach the mirror in any order.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            got = sorted((r.method, r.target, r.body) for r in list(shadow.requests))
            if got == expected:
                break
            time.sleep(0.05)
        assert got == expected
        copy = next(r for r in shadow.requests if r.method == b"POST")
        assert copy.header(b"host") == [b"app.example"] and copy.header(b"x-tag") == [b"t"]
        assert copy.header(b"x-forwarded-for") == [b"127.0.0.1"]
        assert len(main.requests) == 3 and main.requests[1].body == body
        assert not shadow.errors and not main.errors
    finally:
        e.stop()


@pytest.mark.parametrize("parser", PARSERS)
def test_a_request_held_before_it_goes_upstream_is_mirrored_whole(tmp_path, parser, main, shadow):
    """A rateLimit holds a request for its token (up to half the interval) before the
    service sees it, while the client's body arrives: the copy still gets that body,
    and a bodiless GET complete before the hold ends is mirrored too."""
    dyn = {
        "http": {
            "routers": {"app": {"rule": "Host(`app.example`)", "service": "app",
                                "middlewares": ["hold"]}},
            "middlewares": {"hold": {"rateLimit": {"average": 1, "burst": 1}}},
            "services": {
                "main": lb(main.url),
                "shadow": lb(shadow.url),
                "app": {"mirroring": {"service": "main", "mirrors": [{"name": "shadow",
                                                                       "percent": 100}]}},
            },
        }
    }  # fmt: skip
    e = Edge(tmp_path, dyn, parser=parser)
    try:
        body = bytes(range(256)) * 40  # 10,240 bytes
        assert get(e.port, "/first", host="app.example")[0] == 200  # the burst's token
        held = []
        for send in (
            lambda: post(e.port, body),
            lambda: post(e.port, body, chunked=True),
            lambda: exchange(e.port, b"GET /g HTTP/1.1\r\nHost: app.example\r\n"
                             b"Connection: close\r\n\r\n"),
        ):  # fmt: skip
            time.sleep(0.6)  # the next token is 0.4 s away: held, not refused (0.5 s)
            t0 = time.monotonic()
            out = send()
            held.append(time.monotonic() - t0)
            assert out.startswith(b"HTTP/1.1 200"), out[:200]
        assert all(h > 0.1 for h in held), held  # each was held before going upstream
        expected = [(b"GET", b"/first", b""), (b"GET", b"/g", b""),
                    (b"POST", b"/up", body), (b"POST", b"/up", body)]  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            got = sorted((r.method, r.target, r.body) for r in list(shadow.requests))
            if got == expected:
                break
            time.sleep(0.05)
        assert got == expected
        assert len(main.requests) == 4 and not shadow.errors
    finally:
        e.stop()


@pytest.mark.parametrize("parser", PARSERS)
def test_each_mirror_gets_exactly_its_percent(tmp_path, parser, main, shadow):
    other = H11Backend(after_body=True)
    e = start(tmp_path, parser, main.url, [(shadow.url, 10), (other.url, 50)])
    try:
        for i in range(60):
            assert get(e.port, f"/n{i}", host="app.example")[0] == 200
        wait_for(shadow, 6)
        wait_for(other, 30)
        # Traefik's counter: the 1st, 11th, 21st... request for 10 %, every other one for 50 %.
        # (In any order: each copy goes from its own task.)
        assert sorted(r.target for r in shadow.requests) == sorted(
            b"/n%d" % i for i in range(0, 60, 10)
        )
        assert sorted(r.target for r in other.requests) == sorted(
            b"/n%d" % i for i in range(0, 60, 2)
        )
        assert len(main.requests) == 60
    finally:
        e.stop()
        other.stop()


@pytest.mark.parametrize("parser", PARSERS)
def test_mirror_body_false_sends_the_head_alone(tmp_path, parser, main, shadow):
    e = start(tmp_path, parser, main.url, [(shadow.url, 100)], mirrorBody=False)
    try:
        assert post(e.port, b"x" * 3000).endswith(b"POST /up 3000")
        assert post(e.port, b"y" * 3000, chunked=True).endswith(b"POST /up 3000")
        wait_for(shadow, 2)
        assert [(r.method, r.body) for r in shadow.requests] == [(b"POST", b"")] * 2
        assert [r.header(b"content-length") for r in shadow.requests] == [[], []]
    finally:
        e.stop()


@pytest.mark.parametrize("parser", PARSERS)
def test_a_body_over_max_body_size_is_served_and_not_mirrored(tmp_path, parser, main, shadow):
    e = start(tmp_path, parser, main.url, [(shadow.url, 100)], maxBodySize=1000)
    try:
        assert post(e.port, b"a" * 1001, path="/big").endswith(b"POST /big 1001")
        assert post(e.port, b"b" * 1001, chunked=True, path="/bigc").endswith(b"POST /bigc 1001")
        assert post(e.port, b"c" * 1000, path="/fits").endswith(b"POST /fits 1000")
        deadline = time.monotonic() + 10
        while len(shadow.requests[:1]) < 1 or len(shadow.requests[0].body) < 1000:
            assert time.monotonic() < deadline, shadow.requests
            time.sleep(0.05)
        time.sleep(0.3)  # any copy that should not come has had its time
        assert [(r.target, r.body) for r in shadow.requests] == [(b"/fits", b"c" * 1000)]
        assert len(main.requests) == 3
    finally:
        e.stop()


def latencies(port: int, hosts: tuple[str, ...], n: int) -> list[list[float]]:
    """``n`` requests to each of ``hosts``, taken in turn (so a machine that gets busier
    meanwhile slows them alike): the seconds each took, per host."""
    out: list[list[float]] = [[] for _ in hosts]
    for i in range(n):
        for host, took in zip(hosts, out, strict=True):
            t = time.perf_counter()
            status, _, _ = get(port, f"/l{i}", host=host, timeout=TIMEOUT)
            took.append(time.perf_counter() - t)
            assert status == 200
    return out


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("kind", ["hung", "gone"])
def test_a_hung_or_gone_mirror_does_not_slow_the_main_answer(tmp_path, parser, kind, main):
    hung = Hung()
    if kind == "gone":
        hung.stop()  # its port now refuses
    e = start(tmp_path, parser, main.url, [(hung.url, 100)])
    try:
        n = 60
        routes = ("plain.example", "app.example")
        latencies(e.port, routes, 10)  # warm up both routes' pools
        plain, mirrored = latencies(e.port, routes, n)
        p, m = statistics.median(plain), statistics.median(mirrored)
        print(
            f"{parser} {kind} mirror: main median {m * 1e3:.2f} ms, without mirrors {p * 1e3:.2f} ms"
        )
        # 2 shared cores: generous; a copy the client waited for would cost the mirror's
        # timeout (30 s) per request when it hangs, and a dial per request when it is gone.
        assert m < p * 3 + 0.010, (m, p)
        assert max(mirrored) < 1.0, max(mirrored)
        assert len(main.requests) == 2 * n + 20
    finally:
        e.stop()
        hung.stop()
