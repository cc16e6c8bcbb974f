"""Review of the HTTP quick paths (issue 12): what one connection learns serves another.

The request parsers of an entrypoint share a ``Memo``: the llhttp parser that checks
quick heads, the last quick head, and the cut of the last varied heads (the field
lines around the one value that changed, ``headers.volatile_line``). A head taken
through that cut gets only llhttp's check, with the framing of the head the cut
was made from. So the cut must be as safe for the next connection, which may be
another client's, as for the connection that made it. These tests arm the cut on
one connection and send the adversarial head on another, or interleave several
connections over one memo, and compare every connection's events with the h11
codec's on the same stream (the differential harness of test_codec_differential).
"""

from __future__ import annotations

import asyncio
import gc

import pytest
import uvloop
from hypothesis import given, settings
from hypothesis import strategies as st

from edge.errors import ProtocolError
from edge.http.codec.httptools import RequestParser
from edge.http.codec.parsers import parser_classes
from edge.http.server.connection import HTTPConnection
from edge.http.server.exchange import Exchange
from loadtest.bench_hotpath import setup
from tests.unit.test_codec_differential import BIG, Events, run, varied_request
from tests.unit.test_express import Recorder

H11_REQUEST, _ = parser_classes("h11")


def events_of(parser_cls, reads: list[bytes], memo=None) -> list:
    events = Events(None)
    parser = parser_cls(events, BIG) if memo is None else parser_cls(events, BIG, 100, memo)
    events.parser = parser
    try:
        for data in reads:
            parser.feed(data)
    except ProtocolError as exc:
        events.events.append(["error", type(exc).__name__])
    return events.events


# Values that would change the head's framing, or its lines, if the cut took them
# without llhttp's check or the line-break check.
SMUGGLED = [
    b"3\r\nTransfer-Encoding: chunked",
    b"3\r\nContent-Length: 5",
    b"3\r\nConnection: close",
    b"3\r\nHost: other.example",
    b"3\r\nUpgrade: websocket\r\nConnection: upgrade",
    b"3\r\nExpect: 100-continue",
    b"3\r\nX-Forwarded-For: 10.0.0.1",
    b"3\nTransfer-Encoding: chunked",
    b"3\rTransfer-Encoding: chunked",
    b"3\r",
    b"\r3",
    b"3\r\n Transfer-Encoding: chunked",  # obs-fold
    b"3\r\n\tchunked",
    b"3\x00",
    b"3\x7f",
    b"3\x0b",
    b"\x1b3",
    b"3\x08",
    b"3\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a",
    b"",
    b" ",
    b"x" * 4000,
]


def request(lines: bytes, start: bytes = b"GET /v HTTP/1.1") -> bytes:
    return start + b"\r\n" + lines + b"\r\n"


# (the trainer's heads, the next connection's, whether the trainer arms a cut),
# each head a read of its own, as quick heads come: the next connection's first
# head may be taken through an armed cut.
CASES = [
    ([varied_request(b"1"), varied_request(b"2")], [varied_request(v), varied_request(b"4")], True)
    for v in SMUGGLED
] + [
    # The varying line is Host: no cut (the next head's Host is its own).
    (
        [request(b"Host: a1\r\nX-Id: 1\r\n"), request(b"Host: a2\r\nX-Id: 1\r\n")],
        [request(b"Host: evil\r\nX-Id: 1\r\n")],
        False,
    ),
    # The varying line is Connection (two spellings of keep-alive): no cut (close closes).
    (
        [
            request(b"Host: a\r\nConnection: keep-alive\r\n"),
            request(b"Host: a\r\nConnection: Keep-Alive\r\n"),
        ],
        [
            request(b"Host: a\r\nConnection: close\r\n"),
            request(b"Host: a\r\nConnection: keep-alive\r\n"),
        ],
        False,
    ),
    # Two values vary with a line between (the cut spans three lines): that line
    # may become another field, never one the framing rules read.
    *(
        (
            [request(b"Host: a\r\nX-A: %d\r\nAccept: */*\r\nX-B: %d\r\n" % (n, n)) for n in (1, 2)],
            [
                request(b"Host: a\r\nX-A: 3\r\n" + between + b"\r\nX-B: 3\r\n"),
                request(b"Host: a\r\nX-A: 4\r\n"),
            ],
            True,
        )
        for between in (
            b"Transfer-Encoding: chunked",
            b"content-length: 5",
            b"Host: evil",
            b"HOST: evil",
            b"Connection: close",
            b"TE: trailers",
            b"X-Forwarded-For: 10.0.0.1",
            b"Upgrade: websocket",
            b"Expect: 100-continue",
            b"Host : evil",
            b"Accept\x00: x",
            b"X-Other: \rTransfer-Encoding: chunked",
            b"Accept: */*\r\nTransfer-Encoding: chunked",  # one line more
        )
    ),
    # Another start line (method, version) around the trainer's field lines.
    (
        [varied_request(b"1"), varied_request(b"2")],
        [
            varied_request(b"3").replace(b"GET /v HTTP/1.1", b"POST /w HTTP/1.0"),
            varied_request(b"4"),
        ],
        True,
    ),
]


@pytest.mark.parametrize(
    ("trainer", "reads", "armed"), CASES, ids=[repr(r[0])[:60] for _, r, _ in CASES]
)
def test_a_cut_armed_by_one_connection_takes_on_another_only_what_h11_takes(trainer, reads, armed):
    memo = RequestParser.memo()
    assert events_of(RequestParser, trainer, memo) == events_of(H11_REQUEST, trainer)
    assert (
        memo.vary.cut is not None
    ) is armed  # armed: the next connection's head may go through it
    assert events_of(RequestParser, reads, memo) == events_of(H11_REQUEST, reads)
    # The memo still serves: a plain varied head on a third connection.
    assert events_of(RequestParser, [varied_request(b"5")], memo) == events_of(
        H11_REQUEST, [varied_request(b"5")]
    )


_NAMES = st.sampled_from([b"X-Id", b"Accept", b"X-Trace", b"Cookie", b"User-Agent"])
_FRAMING = st.sampled_from(
    [
        b"Connection",
        b"Content-Length",
        b"Transfer-Encoding",
        b"TE",
        b"X-Forwarded-For",
        b"Upgrade",
        b"Expect",
        b"Proxy-Connection",
        b"Host",
    ]
)
_COUNTER = st.integers(0, 10**12).map(b"%d".__mod__)
_VALUE = st.one_of(
    _COUNTER, _COUNTER, _COUNTER, st.sampled_from([*SMUGGLED, b"close", b"keep-alive", b"chunked"])
)


@st.composite
def connections(draw) -> list[list[bytes]]:
    """A few connections' reads: heads built from one template with one value varying
    (now and then another, or the varying line's name), some reads holding two heads."""
    lines = [
        (b"Host", b"a.example"),
        (b"X-Id", b"0"),
        *draw(st.lists(st.tuples(_NAMES, _COUNTER), max_size=2)),
    ]
    if draw(st.integers(0, 3)) == 0:
        lines.append((b"Connection", draw(st.sampled_from([b"keep-alive", b"close"]))))
    lines = draw(st.permutations(lines))
    volatile = draw(st.sampled_from([i for i, (name, _) in enumerate(lines) if name != b"Host"]))
    conns = []
    for _ in range(draw(st.integers(1, 3))):
        reads = []
        for n in range(draw(st.integers(1, 6))):
            now = list(lines)
            name = now[volatile][0] if draw(st.integers(0, 9)) else draw(_FRAMING)
            now[volatile] = (name, draw(_VALUE))
            if draw(st.integers(0, 9)) == 0:
                other = draw(st.integers(0, len(now) - 1))
                now[other] = (now[other][0], draw(_VALUE))
            method = draw(st.sampled_from([b"GET", b"POST", b"HEAD", b"DELETE"]))
            start = b"%s /%d HTTP/1.%d" % (method, n, draw(st.sampled_from([1, 1, 0])))
            reads.append(
                start + b"\r\n" + b"".join(k + b": " + v + b"\r\n" for k, v in now) + b"\r\n"
            )
        if len(reads) > 1 and draw(st.booleans()):
            i = draw(st.integers(0, len(reads) - 2))
            reads[i : i + 2] = [reads[i] + reads[i + 1]]  # pipelined: two heads in one read
        conns.append(reads)
    return conns


@settings(max_examples=300, deadline=None)
@given(conns=connections(), data=st.data())
def test_connections_interleaved_over_one_memo_each_agree_with_h11(conns, data):
    memo = RequestParser.memo()
    logs = [Events(None) for _ in conns]
    parsers = []
    for log in logs:
        log.parser = RequestParser(log, BIG, 100, memo)
        parsers.append(log.parser)
    order = data.draw(st.permutations([i for i, reads in enumerate(conns) for _ in reads]))
    position = [0] * len(conns)
    for i in order:
        read = conns[i][position[i]]
        position[i] += 1
        if logs[i].events and logs[i].events[-1][0] == "error":
            continue
        if logs[i].upgraded:
            logs[i].events[-1][1] += read  # the tunnel's, as run() keeps them
            continue
        try:
            parsers[i].feed(read)
        except ProtocolError as exc:
            logs[i].events.append(["error", type(exc).__name__])
    for reads, log in zip(conns, logs, strict=True):
        stream = b"".join(reads)
        cuts = [sum(map(len, reads[:k])) for k in range(1, len(reads))]
        assert log.events == run("h11", stream, cuts, None, False, BIG)


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
        gc.collect()
        gc.disable()
        try:
            before = [
                o for o in gc.get_objects() if type(o) in kinds
            ]  # alive, so their ids stay theirs
            conn = HTTPConnection(client.ctx)
            conn.connection_made(Recorder(("10.0.0.8", 40001)))
            conn.data_received(sent)
            assert conn.ex is not None  # in the middle of its exchange
            conn.connection_lost(None)
            del conn
            for _ in range(3):  # a cancelled dial or timer lets go once the loop runs it
                loop.run_until_complete(asyncio.sleep(0))
            ids = {id(o) for o in before}
            left = [
                type(o).__name__ for o in gc.get_objects() if type(o) in kinds and id(o) not in ids
            ]
        finally:
            gc.enable()
        assert left == []
    finally:
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
