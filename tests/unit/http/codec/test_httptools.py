"""The httptools codec's own paths (edge.http.codec.httptools): the quick parses of plain
and varied heads, and what one connection's memo may lend another.

The request parsers of an entrypoint share a ``Memo``: the llhttp parser that checks
quick heads, the last quick head, and the cut of the last varied heads (the field
lines around the one value that changed, ``headers.volatile_line``). A head taken
through that cut gets only llhttp's check, with the framing of the head the cut
was made from. So the cut must be as safe for the next connection, which may be
another client's, as for the connection that made it (the review of issue 12). The
memo tests arm the cut on one connection and send the adversarial head on another,
or interleave several connections over one memo, and compare every connection's
events with the h11 codec's on the same stream (the harness of ``streams``).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge.errors import ProtocolError
from edge.http.codec.httptools import RequestParser
from edge.http.codec.parsers import parser_classes
from tests.unit.http.codec.streams import BIG, Events, run, varied_request
from tests.unit.http.codec.support import GET, Recorder, ResponseRecorder

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


def test_httptools_parses_plain_keep_alive_traffic_without_header_callbacks():
    """Plain heads, one per feed, take the quick path: the full llhttp parser is never fed."""
    from edge.http.codec import httptools as codec_httptools

    rec = Recorder()
    parser = codec_httptools.RequestParser(rec)
    parser._feed = None  # the full path would fail on its first feed
    for head in (
        GET,
        b"GET / HTTP/1.1\r\nHost: example.com\r\nConnection: keep-alive\r\n\r\n",
        b"HEAD /x HTTP/1.1\r\nUser-Agent: t\r\nhost: Example.com:8080\r\n\r\n",
    ):
        parser.feed(head)
    assert rec.kinds() == ["head", "end"] * 3
    assert [h.host for h in rec.heads] == [b"example.com", b"example.com", b"Example.com:8080"]
    assert rec.heads[1].passthrough == ((b"Connection", b"keep-alive"),)
    assert rec.heads[2].headers == [(b"User-Agent", b"t"), (b"host", b"Example.com:8080")]

    rec = ResponseRecorder([b"GET", b"GET"])
    parser = codec_httptools.ResponseParser(rec)
    rec.parser = parser
    parser._parser = None
    parser.expect(b"GET")
    parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok")
    parser.feed(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
    assert rec.kinds() == ["head", "body", "end", "head", "end"]
    assert [h.status for h in rec.heads] == [200, 404]
    assert (
        rec.heads[0].raw
        == b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n"
    )


def test_httptools_quick_path_refusal_leaves_the_full_path_to_explain():
    """A head llhttp refuses in the quick path is refused by the full path, with its reason."""
    from edge.http.codec import httptools as codec_httptools

    rec = Recorder()
    parser = codec_httptools.RequestParser(rec)
    parser.feed(GET)
    with pytest.raises(ProtocolError):
        parser.feed(b"GET / HTTP/1.1\r\nHost: a\x01b\r\n\r\n")
    assert rec.kinds() == ["head", "end"]


def test_httptools_a_repeated_request_is_the_same_head_and_keeps_its_framing():
    """The very bytes of the last quick head give that head again, on the same connection
    or the next one of the entrypoint; a closing one still closes its parser."""
    from edge.http.codec import httptools as codec_httptools

    memo = codec_httptools.RequestParser.memo()
    rec = Recorder()
    parser = codec_httptools.RequestParser(rec, memo=memo)
    parser.feed(GET)
    parser.feed(GET)
    assert rec.kinds() == ["head", "end"] * 2
    assert rec.heads[0] is rec.heads[1]
    assert rec.heads[1].keep_alive and rec.heads[1].host == b"example.com"

    close = b"GET /c HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n"
    for _ in range(2):  # a connection per request, as a closing client makes them
        rec = Recorder()
        parser = codec_httptools.RequestParser(rec, memo=memo)
        parser.feed(close)
        parser.feed(GET)  # after a closing request: ignored
        assert rec.kinds() == ["head", "end"]
        assert not rec.heads[0].keep_alive and rec.heads[0].target == b"/c"
        assert rec.heads[0].cut == b"GET /c HTTP/1.1\r\nHost: example.com\r\n\r\n"

    # The same bytes after a refused head are still judged afresh when they differ by one byte.
    rec = Recorder()
    parser = codec_httptools.RequestParser(rec, memo=memo)
    with pytest.raises(ProtocolError):
        parser.feed(close.replace(b"/c", b"/\x01"))
    assert rec.kinds() == []


def test_httptools_heads_that_differ_in_one_value_are_quick_and_nothing_else_is():
    """After two quick heads that differ in one field value, a head with the same
    lines but another value there is quick through the lines around it alone (the
    full parser is never fed); one where that value holds a line break, or whose
    changed line is a framing header, is not quick."""
    from edge.http.codec import QuickRequestHead, QuickResponseHead
    from edge.http.codec import httptools as codec_httptools

    def request(value: bytes, line: bytes = b"GET /%d HTTP/1.1") -> bytes:
        return line + b"\r\nHost: Example.com\r\nX-Trace: " + value + b"\r\nAccept: */*\r\n\r\n"

    rec = Recorder()
    parser = codec_httptools.RequestParser(rec)
    parser._feed = None  # the full path would fail on its first feed
    for i in range(1, 13):
        parser.feed(request(b"%d" % i, b"GET /%d HTTP/1.%d" % (i, i < 12)))
    assert rec.kinds() == ["head", "end"] * 12
    assert [(h.target, h.version, h.keep_alive, h.host) for h in rec.heads[-2:]] == [
        (b"/11", b"1.1", True, b"Example.com"),
        (b"/12", b"1.0", False, b"Example.com"),
    ]
    assert all(
        h.raw == h.cut == request(b"%d" % i, h.raw[: h.raw.index(b"\r\n")])
        for i, h in enumerate(rec.heads, 1)
    )
    assert parser._vary.cut is not None and parser._vary.misses == 0
    for smuggled in (
        b"1\r\nX-Forwarded-For: 1.2.3.4",
        b"1\r\nForwarded: for=1.2.3.4;host=evil",
        b"1\r\nTransfer-Encoding: chunked",
        b"1\r\nConnection: close",
    ):
        parser = codec_httptools.RequestParser(Recorder())
        for i in range(2, 5):
            assert type(parser.quick(request(b"%d" % i, b"GET / HTTP/1.1"))) is QuickRequestHead
        head = parser.quick(request(smuggled, b"GET / HTTP/1.1"))
        if b"close" in smuggled:  # plain, read whole: the line is cut, the connection closes
            assert not head.keep_alive and head.cut == request(b"1", b"GET / HTTP/1.1")
        else:
            assert head is None
    # A varied head is remembered as any quick head is: the same bytes again are that head.
    parser = codec_httptools.RequestParser(Recorder())
    heads = [parser.quick(request(b"%d" % i, b"GET / HTTP/1.1")) for i in (1, 2, 3, 3)]
    assert heads[3] is heads[2] and parser._vary.cut is not None
    # The changed line is Host: nothing is remembered, each head is read whole.
    parser = codec_httptools.RequestParser(Recorder())
    hosts = [parser.quick(request(b"1").replace(b"Example.com", b"h%d" % i)).host for i in range(4)]
    assert hosts == [b"h0", b"h1", b"h2", b"h3"] and parser._vary.cut is None

    def response(value: bytes, body: bytes = b"hello") -> bytes:
        return (
            b"HTTP/1.1 201 Made\r\nServer: s\r\nETag: "
            + value
            + b"\r\nContent-Length: %d\r\nConnection: keep-alive\r\n\r\n" % len(body)
            + body
        )

    rec = ResponseRecorder([b"GET"] * 10)
    parser = codec_httptools.ResponseParser(rec)
    rec.parser = parser
    parser.expect(b"GET")
    parser._parser = None  # the full path would fail on its first feed
    for i in range(10):
        parser.feed(response(b'"%d"' % (i * 7)))
    assert rec.kinds() == ["head", "body", "end"] * 10
    assert {(h.status, h.reason, h.content_length, h.keep_alive) for h in rec.heads} == {
        (201, b"Made", 5, True)
    }
    assert [h.raw for h in rec.heads] == [response(b'"%d"' % (i * 7))[:-5] for i in range(10)]
    assert parser._vary.cut is not None
    parser = codec_httptools.ResponseParser(Recorder())
    heads = []
    for i in (1, 2, 3, 3):  # the last again: the same head, as for requests
        parser.expect(b"GET")
        heads.append(parser.quick(response(b"%d" % i)))
    assert heads[3] is heads[2] and parser._vary.cut is not None
    for data, expected in (
        (response(b"1", b"hello!"), (6, True)),  # another length: read whole
        (response(b"1\r\nConnection: close"), None),  # two Connection lines
        (response(b"1\r\nKeep-Alive: timeout=5"), None),
        (response(b"1\r\nTrailer: x"), None),
    ):
        parser = codec_httptools.ResponseParser(Recorder())
        for i in range(2, 5):
            parser.expect(b"GET")
            assert type(parser.quick(response(b"%d" % i))) is QuickResponseHead
        parser.expect(b"GET")
        head = parser.quick(data)
        assert (head and (head.content_length, head.keep_alive)) == expected


def test_httptools_large_heads_are_not_cut():
    """Heads over 16 KiB are parsed whole every time (the search for changed values is
    linear in their size, and such heads are not keep-alive traffic's)."""
    from edge.http.codec import QuickRequestHead
    from edge.http.codec import httptools as codec_httptools

    for size, cut in ((16_000, True), (17_000, False)):
        parser = codec_httptools.RequestParser(Recorder())
        pad = b"X-Pad: " + b"p" * size + b"\r\n"
        heads = [
            parser.quick(b"GET / HTTP/1.1\r\nHost: a\r\n" + pad + b"X-Id: %d\r\n\r\n" % i)
            for i in range(3)
        ]
        assert all(type(h) is QuickRequestHead for h in heads)
        assert (parser._vary.cut is not None) == cut
