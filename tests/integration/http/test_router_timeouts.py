"""A router's ``timeouts`` through a real edge, under both codecs: ``request`` bounds a
whole request, every try included, ``backendRequest`` each try (the Gateway API's
HTTPRoute timeouts, GEP-1742). Backends: ``edge whoami`` (``?delay=`` holds its whole
answer), :class:`Stalling` (reads a request and never answers), :class:`Trickling`
(a head and a little of the body at once, the rest never). Times are measured with
generous margins (two shared cores); every wait is bounded.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time

import pytest

from tests.harness import Whoami, get, lb
from tests.integration.http.servers import edge_with
from tests.integration.peers import ThreadedServer, read_request

CODECS = ["httptools", "h11"]
HOLD = 5.0  # seconds a stalling backend holds a request (longer than any bound here)


class Stalling(ThreadedServer):
    """Reads each request, answers nothing for :data:`HOLD` seconds (or until stopped),
    then closes; ``trickle`` sends a head and 2 of its 10 body bytes first."""

    def __init__(self, trickle: bool = False) -> None:
        self.trickle = trickle
        self.seen = 0
        self.lock = threading.Lock()
        super().__init__()

    def _serve(self, c: socket.socket, n: int) -> None:
        c.settimeout(2.0)
        try:
            if read_request(c) is None:
                return
            with self.lock:
                self.seen += 1
            if self.trickle:
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab")
            end = time.monotonic() + HOLD
            while not self.stopped and time.monotonic() < end:
                time.sleep(0.05)
        except OSError:
            pass
        finally:
            c.close()


@pytest.fixture
def stalling():
    servers: list[Stalling] = []

    def make(trickle: bool = False) -> Stalling:
        servers.append(Stalling(trickle))
        return servers[-1]

    yield make
    for s in servers:
        s.stop()


def timed(port: int, path: str = "/") -> tuple[int, bytes, float]:
    start = time.monotonic()
    status, _, body = get(port, path, host="app.example", timeout=10)
    return status, body, time.monotonic() - start


@pytest.mark.parametrize("codec", CODECS)
def test_request_timeout_answers_504_once_it_runs_out(tmp_path, codec, whoami: Whoami):
    """A server slower than ``request`` gets the client 504 at the bound; a quicker
    one is served; ``0s`` is no bound."""
    e = edge_with(tmp_path, codec, lb(whoami.url), timeouts={"request": "500ms"})
    try:
        status, _, took = timed(e.port, "/?delay=3")
        assert status == 504 and 0.4 < took < 2.0, (status, took)
        assert timed(e.port, "/?delay=0.05")[0] == 200
        e.write_dynamic(edge_dynamic(lb(whoami.url), timeouts={"request": "0s"}))
        assert until_status(e.port, "/?delay=0.8", 200)
    finally:
        e.stop()


def edge_dynamic(service: dict, **router) -> dict:
    return {"http": {"routers": {"app": {"rule": "Host(`app.example`)", "service": "app", **router}},
                     "services": {"app": service}}}  # fmt: skip


def until_status(port: int, path: str, status: int, seconds: float = 10.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if timed(port, path)[0] == status:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("codec", CODECS)
def test_request_timeout_cuts_a_response_begun(tmp_path, codec, stalling):
    """Once the head went to the client, a request past its bound can only be cut:
    the client reads the head and part of the body, then the connection ends."""
    server = stalling(trickle=True)
    e = edge_with(tmp_path, codec, lb(server.url), timeouts={"request": "500ms"})
    conn = http.client.HTTPConnection("127.0.0.1", e.port, timeout=10)
    try:
        start = time.monotonic()
        conn.request("GET", "/", headers={"Host": "app.example"})
        resp = conn.getresponse()
        assert resp.status == 200
        with pytest.raises(http.client.IncompleteRead) as got:
            resp.read()
        assert got.value.partial == b"ab"
        assert time.monotonic() - start < 3.0  # the bound, not the server's HOLD
    finally:
        conn.close()
        e.stop()


@pytest.mark.parametrize("codec", CODECS)
def test_backend_request_timeout_bounds_each_try(tmp_path, codec, stalling, whoami: Whoami):
    """``backendRequest`` gives up on a server that does not answer: 504 alone; with
    a retry, the next try goes to the next server, which answers."""
    stall = stalling()
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
    alone = edge_with(tmp_path / "a", codec, lb(stall.url), timeouts={"backendRequest": "300ms"})
    try:
        status, _, took = timed(alone.port)
        assert status == 504 and 0.2 < took < 2.0, (status, took)
    finally:
        alone.stop()
    e = edge_with(
        tmp_path / "b",
        codec,
        lb(stall.url, whoami.url),
        {"retry": {"retry": {"attempts": 2}}},
        timeouts={"backendRequest": "300ms", "request": "4s"},
    )
    try:
        for _ in range(4):  # round robin: every other request tries the stalling one first
            status, body, took = timed(e.port)
            assert status == 200 and b'"name":"w1"' in body and took < 3.0, (status, body, took)
        assert stall.seen >= 3  # 1 + the 2 of 4 that started there
    finally:
        e.stop()


@pytest.mark.parametrize("codec", CODECS)
def test_request_timeout_spans_every_try(tmp_path, codec, stalling):
    """Tries of 800 ms each under a request bound of 1 s: the second try is cut by the
    request's bound (504 at about 1 s), not run to its own end or retried again."""
    one, two = stalling(), stalling()
    e = edge_with(
        tmp_path,
        codec,
        lb(one.url, two.url),
        {"retry": {"retry": {"attempts": 3}}},
        timeouts={"request": "1s", "backendRequest": "800ms"},
    )
    try:
        status, _, took = timed(e.port)
        assert status == 504 and 0.9 < took < 1.55, (status, took)
        assert one.seen + two.seen == 2
    finally:
        e.stop()
