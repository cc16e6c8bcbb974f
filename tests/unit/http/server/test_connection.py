"""Client and upstream connections refusing what they must, in process.

The real protocol objects, routers and pools of ``loadtest/bench_hotpath.py``'s
wiring, on transports that record what is written (``transport.Recorder``),
under both codecs. What is checked is what reaches each side:

- a valid request followed in the same read by a broken one is forwarded and
  answered, then the broken one gets its 400 (or 431) and the connection closes;
- a request head past ``maxHeaderCount`` fields is refused with 431;
- bytes an upstream sends beyond the response it was asked for answer nothing:
  the connection is aborted and never lends them to the next request;
- a head that began during an exchange is bounded by readTimeout once it ends.
"""

from __future__ import annotations

import asyncio
import gc

import pytest
import uvloop

from edge.deadlines import HEAD, IDLE
from edge.http.server.connection import HTTPConnection
from edge.http.server.exchange import Exchange
from loadtest.bench_hotpath import setup
from tests.unit.http.server.transport import Recorder

OK = b"HTTP/1.1 200 OK\r\nServer: t\r\nContent-Length: 5\r\n\r\nhello"
EVIL = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil"


def get(path: bytes = b"/1", extra: bytes = b"") -> bytes:
    return b"GET " + path + b" HTTP/1.1\r\nHost: a.test\r\n" + extra + b"\r\n"


@pytest.fixture(params=["httptools", "h11"])
def pair(request):
    loop = uvloop.new_event_loop()
    made = []

    def make(**context):
        made.append(
            setup(
                loop,
                request.param,
                host="a.test",
                client_ip="10.0.0.7",
                transport=Recorder,
                **context,
            )
        )
        return made[-1]

    yield make
    for client, _ in made:
        if client.ex is not None:
            client.ex.abandon()  # cancels a dial: let it end
    loop.run_until_complete(asyncio.sleep(0))
    loop.close()


BROKEN = {
    "garbage": (b"GARBAGE\r\n\r\n", 400),
    "no host": (b"GET /2 HTTP/1.1\r\n\r\n", 400),
    "bare LF": (b"GET /2 HTTP/1.1\r\nHost: a.test\nX: y\r\n\r\n", 400),
    "cl+te": (
        b"POST /2 HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        400,
    ),
    "control bytes": (b"\x00\x01", 400),
    "too many fields": (get(b"/2", b"".join(b"X-%d: 1\r\n" % i for i in range(120))), 431),
}


@pytest.mark.parametrize(
    "first", [get(), b"POST /p HTTP/1.1\r\nHost: a.test\r\nContent-Length: 2\r\n\r\nok"]
)
@pytest.mark.parametrize("broken", BROKEN.values(), ids=BROKEN.keys())
def test_a_valid_request_then_a_broken_one_in_the_same_read(pair, first, broken):
    bad, status = broken
    client, upstream = pair()
    client.data_received(first + bad)
    assert bytes(upstream.transport.data).startswith(first.partition(b"\r\n")[0])  # forwarded
    assert not client.transport.data  # nothing answered before the first response
    upstream.data_received(OK)
    sent = bytes(client.transport.data)
    assert sent.startswith(OK)  # the first, answered as if alone
    assert sent[len(OK) :].startswith(b"HTTP/1.1 %d " % status)
    assert sent.endswith(
        b"\r\n\r\n%d %s\n"
        % (status, b"Bad Request" if status == 400 else b"Request Header Fields Too Large")
    )
    assert b"Connection: close" in sent[len(OK) :] and client.transport.closing


def test_the_refusal_waits_for_every_request_before_it(pair):
    client, upstream = pair()
    client.data_received(get(b"/1") + get(b"/2") + get(b"/3") + b"GARBAGE\r\n\r\n")
    for _ in range(3):
        assert not client.transport.closing
        upstream.data_received(OK)
    sent = bytes(client.transport.data)
    assert sent.count(b"hello") == 3 and sent.endswith(b"400 Bad Request\n")
    assert bytes(upstream.transport.data).count(b"GET /") == 3
    assert client.transport.closing


def test_max_header_count_from_the_entrypoint(pair):
    client, upstream = pair(max_header_count=3)
    client.data_received(get(b"/1", b"A: 1\r\nB: 2\r\n"))  # Host and two more: 3
    upstream.data_received(OK)
    client.data_received(get(b"/2", b"A: 1\r\nB: 2\r\nC: 3\r\n"))
    sent = bytes(client.transport.data)
    assert sent.startswith(OK) and sent[len(OK) :].startswith(b"HTTP/1.1 431 ")
    assert bytes(upstream.transport.data).count(b"GET /") == 1 and client.transport.closing


def test_ten_thousand_fields_are_refused_not_forwarded(pair):
    client, upstream = pair()
    client.data_received(get(b"/", b"X: 1\r\n" * 10_000))
    assert bytes(client.transport.data).startswith(b"HTTP/1.1 431 ")
    assert not upstream.transport.data


@pytest.mark.parametrize("stray", [EVIL, b"HTTP/1.1 2", b"junk"])
def test_bytes_beyond_the_response_close_the_upstream_connection(pair, stray):
    client, upstream = pair()
    client.data_received(get())
    upstream.data_received(OK + stray)
    assert bytes(client.transport.data) == OK
    assert upstream.transport.closing  # aborted: the pool will not lend it again
    client.data_received(get(b"/2"))
    assert client.ex.upstream is not upstream and client.ex.dial_task is not None


def test_empty_lines_after_a_response_are_harmless(pair):
    client, upstream = pair()
    client.data_received(get())
    upstream.data_received(OK + b"\r\n")
    assert not upstream.transport.closing
    client.data_received(get(b"/2"))
    assert client.ex.upstream is upstream
    upstream.data_received(OK)
    assert bytes(client.transport.data) == OK + OK


def test_a_pipelined_request_never_gets_a_response_sent_before_it(pair):
    """The next request takes the pooled connection while the read that ended the
    response before it is still parsed: the stray response must not become its own."""
    client, upstream = pair()
    client.data_received(get(b"/1") + get(b"/2"))
    upstream.data_received(OK + EVIL)
    assert client.ex is not None and client.ex.upstream is upstream  # /2 took it during the read
    assert upstream.transport.closing
    upstream.connection_lost(None)  # what the abort brings
    assert b"evil" not in client.transport.data
    assert client.ex.dial_task is not None  # /2 goes again on a fresh connection


def test_a_head_begun_during_an_exchange_is_bounded_by_read_timeout(pair):
    client, upstream = pair()
    client.data_received(get(b"/1") + b"GET /2 HTT")
    upstream.data_received(OK)
    assert client.ex is None and client.deadline_kind == HEAD
    client.data_received(b"P/1.1\r\nHost: a.test\r\n\r\n")
    upstream.data_received(OK)
    assert client.deadline_kind == IDLE
    assert bytes(client.transport.data) == OK + OK


@pytest.mark.parametrize("ends", ["eof", "bytes", "lost"])
def test_an_upstream_connection_that_ends_while_pooled_is_not_lent_again(pair, ends):
    """The pool takes a connection by its idle deadline alone: one that its server
    closed (or broke) while pooled has zeroed it, so the next request dials."""
    client, upstream = pair()
    client.data_received(get())
    upstream.data_received(OK)
    assert client.ex is None and upstream.idle_deadline > 0  # back in the pool
    if ends == "eof":
        upstream.eof_received()
    elif ends == "bytes":
        upstream.data_received(b"HTTP/1.1 200 OK\r\n")
    else:
        upstream.connection_lost(None)
    assert upstream.idle_deadline == 0
    client.data_received(get(b"/2"))
    assert client.ex.upstream is None and client.ex.dial_task is not None


def test_forwarding_lines_are_each_client_s_own_for_each_host(pair):
    """What an entrypoint remembers of the forwarding lines (per client and Host)
    never lends one client's address, or one Host, to another."""
    from edge.http.server.connection import HTTPConnection

    client, upstream = pair()
    cases = [
        ("10.0.0.7", b"a.test"),
        ("10.0.0.8", b"a.test"),
        ("10.0.0.7", b"A.test:80"),
        ("10.0.0.8", b"a.test"),
    ]
    sent = []
    for ip, host in cases:
        conn = HTTPConnection(client.ctx)
        conn.connection_made(Recorder((ip, 40001)))
        before = len(upstream.transport.data)
        conn.data_received(b"GET / HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n\r\n")
        sent.append(bytes(upstream.transport.data[before:]))
        upstream.data_received(OK)
        assert conn.transport.closing
        conn.connection_lost(None)
    for (ip, host), out in zip(cases, sent, strict=True):
        assert b"X-Forwarded-For: %s\r\n" % ip.encode() in out, out
        assert b"X-Real-Ip: %s\r\n" % ip.encode() in out
        assert b"X-Forwarded-Host: %s\r\n" % host in out
    assert sent[1] == sent[3]


def test_a_closed_connection_is_freed_at_once(pair):
    """connection_lost lets go of the request parser, which refers back to the
    connection: a connection that served a quick request and closed is freed by
    reference counting at once, with its parser and exchange, not left in a cycle
    for the cyclic GC (whose passes over its youngest generation every new
    connection would pay for)."""
    from edge.http.server.connection import HTTPConnection
    from edge.http.server.exchange import Exchange

    client, upstream = pair()
    kinds = (HTTPConnection, Exchange, type(client.parser))
    gc.collect()  # what is alive now moves to the oldest generation
    gc.disable()  # and what is made from here on stays in the youngest
    try:
        for ip in ("10.0.0.8", "10.0.0.9"):
            conn = HTTPConnection(client.ctx)
            conn.connection_made(Recorder((ip, 40001)))
            conn.data_received(get(b"/", b"Connection: close\r\n"))
            upstream.data_received(OK)
            assert conn.transport.closing
            conn.connection_lost(None)
        del conn
        left = [o for o in gc.get_objects(generation=0) if type(o) in kinds]
    finally:
        gc.enable()
    assert left == []


@pytest.mark.parametrize("codec", ["httptools", "h11"])
@pytest.mark.parametrize(
    "sent",
    [
        b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 10\r\n\r\nab",
    ],
    ids=["awaiting-response", "mid-body"],
)
def test_a_connection_lost_in_the_middle_of_an_exchange_is_freed_at_once(codec, sent):
    loop = uvloop.new_event_loop()
    try:
        client, _ = setup(loop, codec, host="a.test", client_ip="10.0.0.7", transport=Recorder)
        kinds = (HTTPConnection, Exchange, type(client.parser))
        gc.collect()  # what is alive now moves to the oldest generation
        gc.disable()  # and what is made from here on stays in the youngest
        try:
            conn = HTTPConnection(client.ctx)
            conn.connection_made(Recorder(("10.0.0.8", 40001)))
            conn.data_received(sent)
            assert conn.ex is not None  # in the middle of its exchange
            conn.connection_lost(None)
            del conn
            for _ in range(3):  # a cancelled dial or timer lets go once the loop runs it
                loop.run_until_complete(asyncio.sleep(0))
            left = [type(o).__name__ for o in gc.get_objects(generation=0) if type(o) in kinds]
        finally:
            gc.enable()
        assert left == []
    finally:
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
