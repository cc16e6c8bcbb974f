"""retry through a real edge, under both codecs: purpose-built backends fail on
schedule (nothing listening, or a connection closed once the request was read), and
the answers, the requests each backend saw and the time the backoff took show what
was tried again and what was not.

Backends: :class:`Flaky` answers 200 with its name and the length of the body it
read, or (``drop``) reads the request and closes without a word; a dead server is
a port nothing listens on (refused at once). Every answer closes its connection.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from tests.harness import get, lb
from tests.integration.http.servers import edge_with
from tests.integration.peers import ThreadedServer, free_port, read_request

CODECS = ["httptools", "h11"]


class Flaky(ThreadedServer):
    def __init__(self, name: str, drop: bool = False, partial: bool = False) -> None:
        self.name = name
        self.drop = drop
        self.partial = partial  # a head and part of its body, then the close
        self.seen: list[bytes] = []  # request lines, in order
        self.lock = threading.Lock()
        super().__init__()

    def _serve(self, c: socket.socket, n: int) -> None:
        c.settimeout(2.0)
        try:
            request = read_request(c)
            if request is None:
                return
            head, body = request
            with self.lock:
                self.seen.append(head.split(b"\r\n")[0])
            if self.drop:
                return
            if self.partial:
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
                return
            answer = b"%s %d" % (self.name.encode(), len(body))
            c.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                % (len(answer), answer)
            )
        except OSError:
            pass
        finally:
            c.close()


@pytest.fixture
def good():
    s = Flaky("good")
    yield s
    s.stop()


@pytest.fixture
def dropping():
    s = Flaky("drop", drop=True)
    yield s
    s.stop()


def dead() -> str:
    return f"http://127.0.0.1:{free_port()}"


def request(e, method: str = "GET", body: bytes | None = None) -> tuple[int, bytes]:
    status, _, got = get(e.port, "/", host="app.example", method=method, body=body, timeout=10)
    return status, got


@pytest.mark.parametrize("codec", CODECS)
def test_a_refused_server_is_retried_on_the_next_one(tmp_path, codec, good):
    """Round robin over a dead server and a good one: with retry every request is
    answered by the good one, a POST's body included (a failed dial sent nothing)."""
    e = edge_with(tmp_path, codec, lb(dead(), good.url), {"retry": {"retry": {"attempts": 2}}})
    try:
        answers = [request(e) for _ in range(6)]
        assert answers == [(200, b"good 0")] * 6
        assert request(e, "POST", b"x" * 100_000) == (200, b"good 100000")
        assert len(good.seen) == 7
    finally:
        e.stop()


@pytest.mark.parametrize("codec", CODECS)
def test_without_retry_the_dead_server_answers_502(tmp_path, codec, good):
    """The same servers with one attempt: half the answers are 502 (the test above
    fails without the retry)."""
    e = edge_with(tmp_path, codec, lb(dead(), good.url), {"retry": {"retry": {"attempts": 1}}})
    try:
        statuses = sorted(request(e)[0] for _ in range(6))
        assert statuses == [200, 200, 200, 502, 502, 502]
    finally:
        e.stop()


@pytest.mark.parametrize("codec", CODECS)
def test_only_a_replayable_request_without_a_body_goes_again_after_it_was_sent(
    tmp_path, codec, good, dropping
):
    """A server that reads the request and closes: a GET goes to the next server; a
    POST (not replayable) and a PUT with a body (gone once sent) are answered 502
    and reach no other server; ``Idempotency-Key`` makes a POST replayable."""
    e = edge_with(
        tmp_path, codec, lb(dropping.url, good.url), {"retry": {"retry": {"attempts": 2}}}
    )
    try:
        outcomes = [request(e) for _ in range(4)]
        assert outcomes == [(200, b"good 0")] * 4
        # Each request takes two picks (the dropping server, then the good one), so
        # every one of them meets the dropping server first.
        assert len(dropping.seen) == 4 and len(good.seen) == 4
        posts = [request(e, "POST") for _ in range(2)]
        assert sorted(s for s, _ in posts) == [200, 502]
        puts = [request(e, "PUT", b"abc") for _ in range(2)]
        assert sorted(s for s, _ in puts) == [200, 502]
        assert len(dropping.seen) == 6 and len(good.seen) == 6
        status, _, got = get(
            e.port,
            "/",
            host="app.example",
            method="POST",
            headers={"Idempotency-Key": "k1"},
            timeout=10,
        )
        status2, _, got2 = get(
            e.port,
            "/",
            host="app.example",
            method="POST",
            headers={"Idempotency-Key": "k2"},
            timeout=10,
        )
        assert (status, got) == (200, b"good 0") and (status2, got2) == (200, b"good 0")
    finally:
        e.stop()


@pytest.mark.parametrize("codec", CODECS)
def test_attempts_are_counted_and_the_backoff_waits(tmp_path, codec):
    """Three dead servers, 3 attempts, initialInterval 200ms: a 502 after three
    tries, the two waits between them at least 0.1 s and 0.14 s (half of 0.2 s and
    of 0.2 * sqrt(2), the backoff's least), at most 0.3 s and 0.43 s plus slack."""
    e = edge_with(
        tmp_path,
        codec,
        lb(dead(), dead(), dead()),
        {"retry": {"retry": {"attempts": 3, "initialInterval": "200ms"}}},
    )
    e_fast = None
    try:
        took = []
        for _ in range(3):
            began = time.monotonic()
            assert request(e)[0] == 502
            took.append(time.monotonic() - began)
        print(f"\nretry: 3 tries with initialInterval 200ms answered in {took} s")
        assert all(0.24 <= t < 0.73 + 2.0 for t in took)
        (tmp_path / "fast").mkdir()
        e_fast = edge_with(
            tmp_path / "fast",
            codec,
            lb(dead(), dead(), dead()),
            {"retry": {"retry": {"attempts": 3}}},
        )
        began = time.monotonic()
        assert request(e_fast)[0] == 502
        assert time.monotonic() - began < 0.24  # no interval: the tries follow at once
    finally:
        e.stop()
        if e_fast is not None:
            e_fast.stop()


def test_a_bad_attempts_value_disables_the_middleware_naming_the_key(tmp_path, good):
    e = edge_with(tmp_path, "httptools", lb(good.url), {"retry": {"retry": {"attempts": 0}}})
    try:
        assert request(e)[0] == 404  # its router is disabled
        e.wait_for(r"retry\.attempts: 0 is not a positive number of tries", start=0)
    finally:
        e.stop()


@pytest.mark.parametrize("codec", CODECS)
def test_a_body_buffering_holds_goes_again(tmp_path, codec, good, dropping):
    """A replayable request with a body: sent and lost, it goes again only when
    buffering holds its whole body (the body is edge's to send twice)."""
    middlewares = {"retry": {"retry": {"attempts": 2}}, "buf": {"buffering": {}}}
    e = edge_with(tmp_path, codec, lb(dropping.url, good.url), middlewares)
    try:
        for _ in range(2):
            assert request(e, "GET", b"q" * 5000) == (200, b"good 5000")
        assert len(dropping.seen) == 2 and len(good.seen) == 2
    finally:
        e.stop()
    (tmp_path / "plain").mkdir()
    e = edge_with(
        tmp_path / "plain", codec, lb(dropping.url, good.url), {"retry": middlewares["retry"]}
    )
    try:
        statuses = sorted(request(e, "GET", b"q" * 5000)[0] for _ in range(2))
        assert statuses == [200, 502]  # streamed: gone once sent
    finally:
        e.stop()


@pytest.mark.parametrize("codec", CODECS)
def test_a_held_response_cut_short_is_retried_whole(tmp_path, codec, good):
    """buffering holds the response, so one cut in its body reached no client: a GET
    goes again and the client gets the next server's answer alone."""
    partial = Flaky("partial", partial=True)
    middlewares = {"retry": {"retry": {"attempts": 2}}, "buf": {"buffering": {}}}
    e = edge_with(tmp_path, codec, lb(partial.url, good.url), middlewares)
    try:
        for _ in range(2):
            with socket.create_connection(("127.0.0.1", e.port), timeout=10) as s:
                s.sendall(b"GET / HTTP/1.1\r\nHost: app.example\r\nConnection: close\r\n\r\n")
                got = b""
                while chunk := s.recv(65536):
                    got += chunk
            assert got.startswith(b"HTTP/1.1 200") and got.count(b"HTTP/1.1") == 1
            assert got.endswith(b"\r\n\r\ngood 0")
        assert len(partial.seen) == 2 and len(good.seen) == 2
    finally:
        e.stop()
        partial.stop()


# -- Traefik 3.7's keys: status, timeout, maxRequestBodyBytes, disableRetryOnNetworkError,
# retryNonIdempotentMethod.


class Scheduled(ThreadedServer):
    """Answers the statuses of ``schedule`` in turn (counted over every connection),
    then 200, each after ``delay`` seconds; the body says its name, the status and the
    length of the request body it read. ``seen``: (request line, body length)."""

    def __init__(self, name: str, schedule: list[int], delay: float = 0.0) -> None:
        self.name = name
        self.schedule = list(schedule)
        self.delay = delay
        self.seen: list[tuple[bytes, int]] = []
        self.lock = threading.Lock()
        super().__init__()

    def _serve(self, c: socket.socket, n: int) -> None:
        c.settimeout(5.0)
        try:
            request = read_request(c)
            if request is None:
                return
            head, body = request
            with self.lock:
                self.seen.append((head.split(b"\r\n")[0], len(body)))
                status = self.schedule.pop(0) if self.schedule else 200
            if self.delay:
                time.sleep(self.delay)
            answer = b"%s %d %d" % (self.name.encode(), status, len(body))
            c.sendall(
                b"HTTP/1.1 %d X\r\nContent-Length: %d\r\nX-Try: %d\r\nConnection: close\r\n\r\n%s"
                % (status, len(answer), len(self.seen), answer)
            )
        except OSError:
            pass
        finally:
            c.close()


def retry_mw(**config) -> dict:
    return {"retry": {"retry": {"attempts": 3, **config}}}


@pytest.mark.parametrize("codec", CODECS)
def test_a_status_named_is_tried_again_and_the_client_sees_one_answer(tmp_path, codec):
    """Traefik's status key: 503 twice then 200 over three attempts, and the client gets
    the third answer alone (the head of none before it); a status not named goes as it
    is; with attempts spent the last try's answer goes, whatever it is."""
    server = Scheduled("s", [503, 503, 200, 500, 503, 503, 503])
    e = edge_with(tmp_path, codec, lb(server.url), retry_mw(status=["502-503"]))
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=10) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: app.example\r\nConnection: close\r\n\r\n")
            got = b""
            while chunk := s.recv(65536):
                got += chunk
        assert got.startswith(b"HTTP/1.1 200") and got.count(b"HTTP/1.1") == 1
        assert b"X-Try: 3\r\n" in got and got.endswith(b"\r\n\r\ns 200 0")
        assert request(e) == (500, b"s 500 0")  # not named: no retry
        assert request(e) == (503, b"s 503 0")  # three 503s: the third goes
        assert len(server.seen) == 7
    finally:
        e.stop()
        server.stop()


@pytest.mark.parametrize("codec", CODECS)
def test_a_body_goes_again_with_its_request_only_as_the_keys_allow(tmp_path, codec):
    """A retried request's body is held and sent again whole; a POST is retried by
    status only with retryNonIdempotentMethod (or an Idempotency-Key); a body over
    maxRequestBodyBytes is streamed, and its 503 goes to the client."""
    server = Scheduled("s", [503] * 20)
    e = edge_with(
        tmp_path, codec, lb(server.url), retry_mw(status=["503"], maxRequestBodyBytes=4096)
    )
    try:
        assert request(e, "PUT", b"p" * 4096)[0] == 503  # PUT is not replayable
        assert len(server.seen) == 1
        status, _, got = get(
            e.port,
            "/",
            host="app.example",
            method="PUT",
            body=b"p" * 4096,
            headers={"Idempotency-Key": "k"},
            timeout=10,
        )
        assert (status, got) == (503, b"s 503 4096")  # three tries, each with the body
        assert server.seen[1:] == [(b"PUT / HTTP/1.1", 4096)] * 3
        status, _, got = get(
            e.port,
            "/",
            host="app.example",
            method="PUT",
            body=b"p" * 4097,
            headers={"Idempotency-Key": "k"},
            timeout=10,
        )
        assert (status, got) == (503, b"s 503 4097") and len(server.seen) == 5  # one try
    finally:
        e.stop()
    (tmp_path / "any").mkdir()
    server.schedule = [503]
    e = edge_with(
        tmp_path / "any",
        codec,
        lb(server.url),
        retry_mw(status=["503"], retryNonIdempotentMethod=True),
    )
    try:
        assert request(e, "POST", b"x" * 100_000) == (200, b"s 200 100000")
        assert server.seen[5:] == [(b"POST / HTTP/1.1", 100_000)] * 2
    finally:
        e.stop()
        server.stop()


@pytest.mark.parametrize("codec", CODECS)
def test_the_timeout_stops_the_tries_that_would_start_after_it(tmp_path, codec):
    """A server answering 503 after 0.4 s, ten attempts and a timeout of 1 s: the
    third answer comes after the timeout, so it goes to the client (two or three
    tries on a loaded machine, never ten); without the timeout all ten are made."""
    server = Scheduled("s", [503] * 30, delay=0.4)
    e = edge_with(
        tmp_path, codec, lb(server.url), retry_mw(attempts=10, status=["503"], timeout="1s")
    )
    try:
        began = time.monotonic()
        assert request(e)[0] == 503
        took = time.monotonic() - began
        print(f"\nretry timeout 1s: {len(server.seen)} tries in {took:.2f} s")
        assert 2 <= len(server.seen) <= 3 and took < 1.0 + 0.4 + 2.0
    finally:
        e.stop()
    (tmp_path / "none").mkdir()
    server.delay = 0.0
    e = edge_with(tmp_path / "none", codec, lb(server.url), retry_mw(attempts=10, status=["503"]))
    try:
        before = len(server.seen)
        assert request(e)[0] == 503
        assert len(server.seen) - before == 10
    finally:
        e.stop()
        server.stop()


@pytest.mark.parametrize("codec", CODECS)
def test_network_failures_go_again_unless_disabled(tmp_path, codec, good):
    """disableRetryOnNetworkError: a refused server's 502 reaches the client (half the
    answers over a dead and a good server), unless 502 is a status retried, as in
    Traefik, whose status check sees the 502 its proxy writes."""
    off = retry_mw(attempts=2, status=["503"], disableRetryOnNetworkError=True)
    e = edge_with(tmp_path, codec, lb(dead(), good.url), off)
    try:
        assert sorted(request(e)[0] for _ in range(4)) == [200, 200, 502, 502]
    finally:
        e.stop()
    (tmp_path / "502").mkdir()
    by_status = retry_mw(attempts=2, status=["502"], disableRetryOnNetworkError=True)
    e = edge_with(tmp_path / "502", codec, lb(dead(), good.url), by_status)
    try:
        assert [request(e) for _ in range(4)] == [(200, b"good 0")] * 4
    finally:
        e.stop()
