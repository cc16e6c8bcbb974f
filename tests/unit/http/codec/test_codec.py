"""The HTTP/1.1 codecs: one suite, run against both (httptools and h11).

Every test gets the (RequestParser, ResponseParser) pair of one codec through the
``codec`` fixture, so each behaviour is checked on both parsers.
"""

from __future__ import annotations

import pytest

from edge.errors import HeadersTooLarge, ProtocolError
from edge.http.codec import RequestHead, ResponseHead
from edge.http.codec.parsers import parser_classes
from tests.unit.http.codec.support import GET, Hearing, Recorder, ResponseRecorder


@pytest.fixture(params=["httptools", "h11"])
def codec(request: pytest.FixtureRequest) -> tuple[type, type]:
    return parser_classes(request.param)


def requests(codec: tuple[type, type], *chunks: bytes, max_header_bytes: int = 1 << 20) -> Recorder:
    rec = Recorder()
    parser = codec[0](rec, max_header_bytes)
    for chunk in chunks:
        parser.feed(chunk)
    return rec


def responses(
    codec: tuple[type, type],
    methods: list[bytes],
    *chunks: bytes,
    eof: bool = False,
    max_header_bytes: int = 1 << 20,
) -> ResponseRecorder:
    rec = ResponseRecorder(methods)
    parser = codec[1](rec, max_header_bytes)
    rec.parser = parser
    parser.expect(rec.methods.pop(0))
    for chunk in chunks:
        parser.feed(chunk)
    if eof:
        parser.feed_eof()
    return rec


def split_all(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def test_simple_get(codec):
    rec = requests(codec, GET)
    assert rec.kinds() == ["head", "end"]
    head = rec.heads[0]
    assert isinstance(head, RequestHead)
    assert head.method == b"GET"
    assert head.target == b"/index.html?q=1"
    assert head.version == b"1.1"
    assert head.headers == [(b"Host", b"example.com"), (b"Accept", b"*/*")]
    assert (head.keep_alive, head.chunked, head.content_length) == (True, False, None)
    assert (head.upgrade, head.expect_continue) == (False, False)


def test_header_names_keep_case_and_order_values_are_stripped(codec):
    rec = requests(
        codec,
        b"GET / HTTP/1.1\r\nhOsT: a\r\nX-Dup: 1\r\nx-dup:  2 \t\r\nX-Empty:\r\n"
        b"X-Inner: a  b\r\nX-Obs: caf\xc3\xa9\r\n\r\n",
    )
    assert rec.heads[0].headers == [
        (b"hOsT", b"a"),
        (b"X-Dup", b"1"),
        (b"x-dup", b"2"),
        (b"X-Empty", b""),
        (b"X-Inner", b"a  b"),
        (b"X-Obs", b"caf\xc3\xa9"),
    ]


@pytest.mark.parametrize(
    ("version", "connection", "keep_alive"),
    [
        (b"1.1", [], True),
        (b"1.1", [b"close"], False),
        (b"1.1", [b"Keep-Alive, CLOSE"], False),
        (b"1.1", [b"foo", b"close"], False),
        (b"1.1", [b"closed"], True),
        (b"1.1", [b"keep-alive"], True),
        (b"1.0", [], False),
        (b"1.0", [b"keep-alive"], True),
        (b"1.0", [b"Keep-Alive"], True),
        (b"1.0", [b"foo ,\tkeep-alive"], True),
        (b"1.0", [b"keep-alive, close"], False),
    ],
)
def test_keep_alive_from_version_and_connection_tokens(codec, version, connection, keep_alive):
    lines = b"".join(b"Connection: " + c + b"\r\n" for c in connection)
    rec = requests(codec, b"GET / HTTP/" + version + b"\r\nHost: a\r\n" + lines + b"\r\n")
    assert rec.heads[0].keep_alive is keep_alive


def test_pipelined_requests_in_one_feed(codec):
    data = (
        b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\n"
        b"POST /2 HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc"
        b"POST /3 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nxy\r\n0\r\n\r\n"
        b"GET /4 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
    )
    rec = requests(codec, data)
    assert [h.target for h in rec.heads] == [b"/1", b"/2", b"/3", b"/4"]
    assert rec.kinds() == [
        "head",
        "end",
        "head",
        "body",
        "end",
        "head",
        "body",
        "end",
        "head",
        "end",
    ]
    assert rec.bodies() == [b"abc", b"xy"]


def test_bytes_after_a_closing_request_are_ignored(codec):
    rec = Recorder()
    parser = codec[0](rec)
    parser.feed(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\nGET /next HTTP/1.1\r\n")
    parser.feed(b"garbage that is not HTTP\r\n\r\n")
    assert rec.kinds() == ["head", "end"]
    assert rec.heads[0].keep_alive is False


def test_empty_lines_before_a_request_are_ignored(codec):
    rec = requests(
        codec, b"\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n"
    )
    assert [h.target for h in rec.heads] == [b"/", b"/2"]


def test_content_length_body(codec):
    rec = requests(codec, b"PUT /f HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nhello world")
    assert rec.heads[0].content_length == 11
    assert rec.kinds() == ["head", "body", "end"]
    assert rec.bodies() == [b"hello world"]


def test_zero_content_length_has_no_body_event(codec):
    rec = requests(codec, b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n")
    assert rec.heads[0].content_length == 0
    assert rec.kinds() == ["head", "end"]


def test_chunked_body_with_extensions_and_trailers(codec):
    data = (
        b"POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked \r\n\r\n"
        b'5;name=value;flag;;=v;t=tok"q"\r\nhello\r\n'
        b'0006;q="a \\"quoted\\" ext"\r\n world\r\n'
        b"0\r\nX-Checksum: abc\r\nX-Other: 1\r\n\r\n"
    )
    rec = requests(codec, data)
    head = rec.heads[0]
    assert (head.chunked, head.content_length) == (True, None)
    assert head.headers[-1] == (b"Transfer-Encoding", b"Chunked")
    assert rec.kinds() == ["head", "body", "end"]
    assert rec.bodies() == [b"hello world"]  # trailers: dropped (no on_trailers)


@pytest.mark.parametrize("split", [False, True])
def test_trailers_go_to_a_handler_that_takes_them_both_ways(codec, split):
    request = (
        b"POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n0\r\nX-Checksum: abc\r\ngrpc-status:  0 \r\n\r\n" + GET
    )
    rec = Hearing()
    parser = codec[0](rec)
    for piece in split_all(request) if split else [request]:
        parser.feed(piece)
    assert rec.kinds() == ["head", "body", "trailers", "end", "head", "end"]
    assert rec.events[2] == ("trailers", [(b"X-Checksum", b"abc"), (b"grpc-status", b"0")])
    response = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: Grpc-Status\r\n\r\n"
        b"2\r\nok\r\n0\r\nGrpc-Status: 7\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    )
    rec = Hearing()
    parser = codec[1](rec)
    parser.expect(b"GET")
    for piece in split_all(response) if split else [response]:
        parser.feed(piece)
        if rec.kinds()[-1:] == ["end"] and rec.kinds().count("end") == 1:
            parser.expect(b"GET")
    # An empty trailer section is no event.
    assert rec.kinds() == ["head", "body", "trailers", "end", "head", "end"]
    assert rec.events[2] == ("trailers", [(b"Grpc-Status", b"7")])


def test_chunk_sizes_up_to_2_63_minus_1_are_taken(codec):
    """2**63 - 1 is the largest chunk size (nginx's): its data is streamed as it comes,
    whereas one more is refused (test_refused_with_400, test_response_refused)."""
    for size in (b"7fffffffffffffff", b"0000007FFFFFFFFFFFFFFF"):
        request = (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n"
            + size
            + b";x\r\ncd"
        )
        response = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + size + b"\r\nefg"
        for pieces in ([request], split_all(request)):
            rec = requests(codec, *pieces)
            assert rec.kinds() == ["head", "body"]
            assert rec.bodies() == [b"abcd"]
        for pieces in ([response], split_all(response)):
            rec = responses(codec, [b"GET"], *pieces)
            assert rec.kinds() == ["head", "body"]
            assert rec.bodies() == [b"efg"]


@pytest.mark.parametrize(
    "data",
    [
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n0123456789",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n0123\r\n6\r\n456789\r\n0\r\n\r\n",
        # chunk data that contains CRLF CRLF
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n01\r\n\r\n89\r\n2\r\n\r\n\r\n0\r\n\r\n",
    ],
)
def test_body_split_across_feeds(codec, data):
    whole = requests(codec, data)
    for pieces in (split_all(data), [data[:40], data[40:41], data[41:]]):
        rec = requests(codec, *pieces)
        assert [h.as_tuple() for h in rec.heads] == [h.as_tuple() for h in whole.heads]
        assert b"".join(rec.bodies()) == b"".join(whole.bodies())
        assert rec.kinds()[-1] == "end"


@pytest.mark.parametrize(
    ("request_bytes", "expect"),
    [
        (b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n", True),
        (b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n", True),
        (b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n", False),
        (b"POST / HTTP/1.1\r\nHost: a\r\nExpect: something\r\nContent-Length: 1\r\n\r\n", False),
    ],
)
def test_expect_continue_flag(codec, request_bytes, expect):
    rec = requests(codec, request_bytes)
    assert rec.heads[0].expect_continue is expect
    assert rec.kinds() == ["head"]  # the body has not arrived


def test_upgrade_reports_the_bytes_after_the_head(codec):
    rec = Recorder()
    parser = codec[0](rec)
    parser.feed(
        b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Upgrade\r\n"
        b"Upgrade: websocket\r\nContent-Length: 0\r\n\r\n\x81\x05hello"
    )
    parser.feed(b"more bytes for the tunnel")  # ignored: they belong to the new protocol
    assert rec.kinds() == ["head", "end", "upgrade"]
    assert rec.heads[0].upgrade is True
    assert rec.events[-1] == ("upgrade", b"\x81\x05hello")


@pytest.mark.parametrize("framing", [b"Content-Length: 3\r\n", b"Transfer-Encoding: chunked\r\n"])
def test_upgrade_request_with_a_body_is_refused(codec, framing):
    # The bytes after an upgrade request's head go to the tunnel whole, so its
    # body would never be sent as one: the next hop would take the next request
    # on that connection for it.
    rec = Recorder()
    parser = codec[0](rec)
    with pytest.raises(ProtocolError, match="upgrade request with a body"):
        parser.feed(
            b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
            + framing
            + b"\r\nabc"
        )
    assert rec.kinds() == []


@pytest.mark.parametrize(
    "headers",
    [
        b"Connection: upgrade\r\n",
        b"Upgrade: websocket\r\n",
        b"Connection: upgrade\r\nUpgrade: \r\n",
    ],
)
def test_no_upgrade_without_both_headers(codec, headers):
    rec = requests(
        codec,
        b"GET / HTTP/1.1\r\nHost: a\r\n" + headers + b"\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n",
    )
    assert [h.upgrade for h in rec.heads] == [False, False]


@pytest.mark.parametrize(
    "target",
    [
        b"http://Example.COM:8080/a%20b/../c?d=e&f",
        b"https://user@host/x",
        b"http://h?q",
        b"*",
        b"/a?b?c#frag",
        b"//double",
    ],
)
def test_request_target_kept_raw(codec, target):
    method = b"OPTIONS" if target == b"*" else b"GET"
    rec = requests(codec, method + b" " + target + b" HTTP/1.1\r\nHost: a\r\n\r\n")
    assert rec.heads[0].target == target


def test_every_known_method_but_connect(codec):
    for method in (b"DELETE", b"PATCH", b"PROPFIND", b"M-SEARCH", b"PURGE", b"QUERY"):
        rec = requests(codec, method + b" / HTTP/1.1\r\nHost: a\r\n\r\n")
        assert rec.heads[0].method == method


H = b"Host: a\r\n"


REFUSED = [
    (
        "cl-and-te",
        b"POST / HTTP/1.1\r\n"
        + H
        + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ),
    (
        "te-and-cl",
        b"POST / HTTP/1.1\r\n"
        + H
        + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
    ),
    (
        "two-equal-cl",
        b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
    ),
    ("two-cl", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"),
    ("cl-list", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 3, 3\r\n\r\nabc"),
    ("cl-sign", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: +3\r\n\r\nabc"),
    ("cl-hex", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 0x3\r\n\r\nabc"),
    ("cl-empty", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: \r\n\r\n"),
    ("cl-huge", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 99999999999999999999999\r\n\r\n"),
    ("te-gzip", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: gzip\r\n\r\n"),
    (
        "te-gzip-chunked",
        b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    ),
    ("te-identity", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: identity\r\n\r\n"),
    (
        "te-twice",
        b"POST / HTTP/1.1\r\n"
        + H
        + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ),
    (
        "te-list",
        b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n",
    ),
    ("te-tab", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\t\r\n\r\n0\r\n\r\n"),
    ("te-http10", b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    ("chunk-size-x", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\nx\r\n\r\n"),
    (
        "chunk-size-space",
        b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n5 \r\nhello\r\n0\r\n\r\n",
    ),
    (
        "chunk-size-negative",
        b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n",
    ),
    (
        "chunk-size-overflow",
        b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n10000000000000000\r\n",
    ),
    # Above 2**63 - 1, as nginx refuses (llhttp takes up to 2**64 - 1).
    (
        "chunk-size-2**63",
        b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n8000000000000000\r\nabc",
    ),
    (
        "chunk-size-2**64-1",
        b"POST / HTTP/1.1\r\n"
        + H
        + b"Transfer-Encoding: chunked\r\n\r\n1\r\nx\r\nffffffffffffffff;a=b\r\nabc",
    ),
    (
        "chunk-size-2**63-zeros",
        b"POST / HTTP/1.1\r\n"
        + H
        + b"Transfer-Encoding: chunked\r\n\r\n00000008000000000000000\r\n",
    ),
    (
        "chunk-data-too-long",
        b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhelloX\r\n0\r\n\r\n",
    ),
    (
        "chunk-size-bare-lf",
        b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n",
    ),
    (
        "chunk-ext-space",
        b"POST / HTTP/1.1\r\n"
        + H
        + b"Transfer-Encoding: chunked\r\n\r\n5; a=b\r\nhello\r\n0\r\n\r\n",
    ),
    (
        "chunk-ext-empty",
        b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n5;\r\nhello\r\n0\r\n\r\n",
    ),
    (
        "trailer-cl",
        b"POST / HTTP/1.1\r\n"
        + H
        + b"Transfer-Encoding: chunked\r\n\r\n0\r\nContent-Length: 5\r\n\r\n",
    ),
    (
        "trailer-bare-lf",
        b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n0\r\nX: y\n\r\n",
    ),
    (
        "trailer-fold",
        b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n0\r\nX: y\r\n z\r\n\r\n",
    ),
    ("obs-fold", b"GET / HTTP/1.1\r\n" + H + b"X-A: b\r\n  c\r\n\r\n"),
    ("obs-fold-tab", b"GET / HTTP/1.1\r\n" + H + b"X-A: b\r\n\tc\r\n\r\n"),
    ("obs-fold-first", b"GET / HTTP/1.1\r\n Host: a\r\n\r\n"),
    ("bare-lf-request-line", b"GET / HTTP/1.1\n" + H + b"\r\n"),
    ("bare-lf-header", b"GET / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n"),
    ("bare-lf-everywhere", b"GET / HTTP/1.1\nHost: a\n\n"),
    ("bare-lf-end", b"GET / HTTP/1.1\r\nHost: a\r\n\n"),
    ("bare-cr", b"GET / HTTP/1.1\r\nHost: a\rX: y\r\n\r\n"),
    ("http09", b"GET /\r\n\r\n"),
    ("http20", b"GET / HTTP/2.0\r\n" + H + b"\r\n"),
    ("http12", b"GET / HTTP/1.2\r\n" + H + b"\r\n"),
    ("http-lowercase", b"GET / http/1.1\r\n" + H + b"\r\n"),
    ("h2-preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
    ("no-host", b"GET / HTTP/1.1\r\nAccept: */*\r\n\r\n"),
    ("two-hosts", b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
    ("two-hosts-http10", b"GET / HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n"),
    ("connect", b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"),
    ("unknown-method", b"BREW /pot HTTP/1.1\r\n" + H + b"\r\n"),
    ("lowercase-method", b"get / HTTP/1.1\r\n" + H + b"\r\n"),
    ("double-space", b"GET  / HTTP/1.1\r\n" + H + b"\r\n"),
    ("space-before-version", b"GET /  HTTP/1.1\r\n" + H + b"\r\n"),
    ("tab-separator", b"GET\t/ HTTP/1.1\r\n" + H + b"\r\n"),
    ("target-authority-form", b"GET example.com:80 HTTP/1.1\r\n" + H + b"\r\n"),
    ("target-star-suffix", b"OPTIONS *x HTTP/1.1\r\n" + H + b"\r\n"),
    ("target-bad-scheme", b"GET h2c+x://h/ HTTP/1.1\r\n" + H + b"\r\n"),
    ("target-obs-text", b"GET /caf\xc3\xa9 HTTP/1.1\r\n" + H + b"\r\n"),
    ("nul-in-value", b"GET / HTTP/1.1\r\n" + H + b"X: a\x00b\r\n\r\n"),
    ("ctl-in-value", b"GET / HTTP/1.1\r\n" + H + b"X: a\x01b\r\n\r\n"),
    ("del-in-value", b"GET / HTTP/1.1\r\n" + H + b"X: a\x7fb\r\n\r\n"),
    ("space-before-colon", b"GET / HTTP/1.1\r\n" + H + b"X-A : b\r\n\r\n"),
    ("empty-name", b"GET / HTTP/1.1\r\n" + H + b": b\r\n\r\n"),
    ("no-colon", b"GET / HTTP/1.1\r\n" + H + b"X-A\r\n\r\n"),
    ("bad-name-char", b"GET / HTTP/1.1\r\n" + H + b"X(A): b\r\n\r\n"),
]


@pytest.mark.parametrize("data", [d for _, d in REFUSED], ids=[i for i, _ in REFUSED])
def test_refused_with_400(codec, data):
    for pieces in ([data], split_all(data)):
        rec = Recorder()
        parser = codec[0](rec)
        with pytest.raises(ProtocolError) as info:
            for piece in pieces:
                parser.feed(piece)
        assert type(info.value) is ProtocolError
        assert info.value.status == 400


def test_parser_is_dead_after_an_error(codec):
    rec = Recorder()
    parser = codec[0](rec)
    with pytest.raises(ProtocolError):
        parser.feed(b"GET / HTTP/1.1\r\n\r\n")  # no Host
    with pytest.raises(ProtocolError):
        parser.feed(GET)
    assert rec.events == []


def test_events_before_an_error_are_delivered(codec):
    rec = Recorder()
    parser = codec[0](rec)
    with pytest.raises(ProtocolError):
        parser.feed(GET + b"GET / HTTP/2.0\r\nHost: a\r\n\r\n")
    assert rec.kinds() == ["head", "end"]


def test_head_of_exactly_the_limit_is_accepted(codec):
    rec = requests(codec, GET, max_header_bytes=len(GET))
    assert rec.kinds() == ["head", "end"]


def test_431_for_a_complete_head_over_the_limit(codec):
    with pytest.raises(HeadersTooLarge) as info:
        requests(codec, GET, max_header_bytes=len(GET) - 1)
    assert info.value.status == 431


def test_431_while_the_head_is_still_incomplete(codec):
    rec = Recorder()
    parser = codec[0](rec, 1024)
    parser.feed(b"GET / HTTP/1.1\r\nHost: a\r\n")
    with pytest.raises(HeadersTooLarge):
        for _ in range(200):  # no end of head ever arrives
            parser.feed(b"X-Filler: " + b"x" * 20 + b"\r\n")
    assert rec.events == []


def test_431_for_an_oversize_head_after_pipelined_requests(codec):
    rec = Recorder()
    parser = codec[0](rec, 200)
    with pytest.raises(HeadersTooLarge):
        parser.feed(GET + b"GET / HTTP/1.1\r\nHost: a\r\nX: " + b"y" * 300 + b"\r\n\r\n")
    assert rec.kinds() == ["head", "end"]


def test_a_defect_within_the_limit_wins_over_431(codec):
    # The bare LF lies within the first max_header_bytes: 400, however the bytes arrive.
    data = b"GET / HTTP/1.1\r\nHost: a\nX: " + b"y" * 300 + b"\r\n\r\n"
    for pieces in ([data], [data[:20], data[20:]], split_all(data)):
        rec = Recorder()
        parser = codec[0](rec, 100)
        with pytest.raises(ProtocolError) as info:
            for piece in pieces:
                parser.feed(piece)
        assert type(info.value) is ProtocolError


def fields(n: int) -> bytes:
    return b"".join(b"X-%d: v\r\n" % i for i in range(n))


def test_header_count_at_the_limit_is_accepted(codec):
    data = b"GET / HTTP/1.1\r\nHost: a\r\n" + fields(99) + b"\r\n"  # 100 fields with Host
    for pieces in ([data], [data[:50], data[50:]]):
        rec = requests(codec, *pieces)
        assert rec.kinds() == ["head", "end"]
        assert len(rec.heads[0].headers) == 100


@pytest.mark.parametrize("count", [101, 10_000])
def test_431_past_the_header_count(codec, count):
    data = b"GET / HTTP/1.1\r\nHost: a\r\n" + fields(count - 1) + b"\r\n"
    for pieces in ([data], [data[:50], data[50:]], [data[:-1], data[-1:]]):
        with pytest.raises(HeadersTooLarge) as info:
            requests(codec, *pieces)
        assert info.value.status == 431


def test_header_count_is_the_parser_argument(codec):
    three = b"GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\n\r\n"
    rec = Recorder()
    codec[0](rec, 1 << 20, 3).feed(three)
    assert rec.kinds() == ["head", "end"]
    rec = Recorder()
    parser = codec[0](rec, 1 << 20, 2)
    with pytest.raises(HeadersTooLarge):
        parser.feed(GET + three)  # after a request within the limit: that one is delivered
    assert rec.kinds() == ["head", "end"]


def test_a_defect_wins_over_the_header_count(codec):
    data = b"GET / HTTP/1.1\r\nHost: a\r\nX: a\nb\r\n" + fields(200) + b"\r\n"
    with pytest.raises(ProtocolError) as info:
        requests(codec, data)
    assert type(info.value) is ProtocolError


def test_head_started_tells_a_partial_head(codec):
    rec = Recorder()
    parser = codec[0](rec)
    assert not parser.head_started
    parser.feed(GET + b"GET / HT")
    assert rec.kinds() == ["head", "end"] and parser.head_started
    parser.feed(b"TP/1.1\r\nHost: a\r\n\r\n\r\n")
    assert rec.kinds() == ["head", "end", "head", "end"] and not parser.head_started


def test_huge_trailers_are_refused(codec):
    data = (
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n"
        + b"X-T: "
        + b"t" * 5000
        + b"\r\n\r\n"
    )
    with pytest.raises(HeadersTooLarge):
        requests(
            codec, *[data[i : i + 512] for i in range(0, len(data), 512)], max_header_bytes=1024
        )


def test_handler_exceptions_propagate_unchanged(codec):
    class Boom(Exception):
        pass

    class Failing(Recorder):
        def on_head(self, head):
            raise Boom

    parser = codec[0](Failing())
    with pytest.raises(Boom):
        parser.feed(GET)


def test_response_with_content_length(codec):
    rec = responses(
        codec, [b"GET"], b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nServer: x\r\n\r\nhello"
    )
    head = rec.heads[0]
    assert isinstance(head, ResponseHead)
    assert (head.status, head.reason, head.version) == (200, b"OK", b"1.1")
    assert head.headers == [(b"Content-Length", b"5"), (b"Server", b"x")]
    assert (head.keep_alive, head.chunked, head.content_length, head.has_body) == (
        True,
        False,
        5,
        True,
    )
    assert rec.kinds() == ["head", "body", "end"]
    assert rec.bodies() == [b"hello"]


def test_chunked_response(codec):
    rec = responses(
        codec,
        [b"GET"],
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"3\r\nabc\r\n",
        b"2;x=y\r\nde\r\n0\r\nX-Trailer: 1\r\n\r\n",
    )
    head = rec.heads[0]
    assert (head.chunked, head.content_length, head.has_body, head.keep_alive) == (
        True,
        None,
        True,
        True,
    )
    assert rec.bodies() == [b"abcde"]
    assert rec.kinds()[-1] == "end"


def test_response_body_until_close(codec):
    rec = responses(
        codec, [b"GET"], b"HTTP/1.1 200 OK\r\nServer: x\r\n\r\nsome ", b"bytes", eof=True
    )
    head = rec.heads[0]
    assert (head.keep_alive, head.chunked, head.content_length, head.has_body) == (
        False,
        False,
        None,
        True,
    )
    assert rec.kinds() == ["head", "body", "end"]
    assert rec.bodies() == [b"some bytes"]


def test_head_response_has_no_body_and_the_next_response_follows(codec):
    rec = responses(
        codec,
        [b"HEAD", b"GET"],
        b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    )
    first, second = rec.heads
    assert (first.has_body, first.content_length, first.chunked) == (False, None, False)
    assert first.headers == [(b"Content-Length", b"1234")]
    assert second.content_length == 2
    assert rec.kinds() == ["head", "end", "head", "body", "end"]


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n\r\n",
    ],
)
def test_head_response_without_content_length(codec, head):
    rec = responses(codec, [b"HEAD", b"GET"], head + b"HTTP/1.1 204 No Content\r\n\r\n")
    assert [h.status for h in rec.heads] == [200, 204]
    assert rec.kinds() == ["head", "end", "head", "end"]


@pytest.mark.parametrize("status", [204, 304])
def test_no_body_statuses(codec, status):
    rec = responses(
        codec,
        [b"GET", b"GET"],
        b"HTTP/1.1 %d Nothing\r\nContent-Length: 10\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
        % status,
    )
    assert rec.heads[0].has_body is False
    assert rec.kinds() == ["head", "end", "head", "end"]


def test_interim_responses_are_consumed(codec):
    rec = responses(
        codec,
        [b"POST"],
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n"
        b"HTTP/1.1 199 Odd\r\nContent-Length: 5\r\n\r\n"
        b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok",
    )
    assert [h.status for h in rec.heads] == [201]
    assert rec.kinds() == ["head", "body", "end"]


def test_interim_responses_go_to_a_handler_that_takes_them(codec):
    rec = Hearing()
    parser = codec[1](rec)
    parser.expect(b"POST")
    for piece in split_all(
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\nLink: </a.js>\r\n\r\n"
        b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok"
    ):
        parser.feed(piece)
    assert rec.kinds() == ["interim", "interim", "head", "body", "end"]
    hints = rec.events[1][1]
    assert (hints.status, hints.reason, hints.has_body) == (103, b"Early Hints", False)
    assert hints.headers == [(b"Link", b"</s.css>; rel=preload"), (b"Link", b"</a.js>")]
    assert rec.heads[0].status == 201


def test_101_switches_protocols(codec):
    rec = Recorder()
    parser = codec[1](rec)
    parser.expect(b"GET")
    parser.feed(
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n\x81\x02hi"
    )
    parser.feed(b"ignored")
    assert rec.kinds() == ["head", "end", "upgrade"]
    assert rec.heads[0].status == 101
    assert rec.heads[0].has_body is False
    assert rec.events[-1] == ("upgrade", b"\x81\x02hi")


@pytest.mark.parametrize(
    ("response", "keep_alive"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", True),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", False),
        (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", True),
        (b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n", False),
        (b"HTTP/1.1 200 OK\r\n\r\n", False),  # delimited by close
    ],
)
def test_response_keep_alive(codec, response, keep_alive):
    rec = responses(codec, [b"GET"], response)
    assert rec.heads[0].keep_alive is keep_alive


def test_bytes_after_a_response_wait_for_the_next_expect(codec):
    rec = Recorder()
    parser = codec[1](rec)
    parser.expect(b"GET")
    parser.feed(
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\ny"
    )
    assert rec.kinds() == ["head", "body", "end"]
    parser.expect(b"HEAD")
    assert rec.kinds() == ["head", "body", "end", "head", "end"]
    assert rec.heads[1].has_body is False


@pytest.mark.parametrize(
    "after, held",
    [
        (b"", False),
        (b"\r\n", False),  # an empty line: ignored before a response
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\ny", True),
        (b"HTTP/1.1 2", True),
        (b"junk", True),
    ],
)
def test_held_shows_bytes_beyond_the_response(codec, after, held):
    """What an upstream connection reads to refuse a response to nothing (see UpstreamConnection)."""
    rec = Recorder()
    parser = codec[1](rec)
    parser.expect(b"GET")
    parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx" + after)
    assert rec.kinds() == ["head", "body", "end"]
    assert bool(bytes(parser.held).lstrip(b"\r\n")) is held


@pytest.mark.parametrize(
    "cut",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
        b"HTTP/1.1 200 OK\r\nContent-",
        b"HTTP/1.1 100 Continue\r\n\r\n",
    ],
)
def test_eof_in_the_middle_of_a_response_is_refused(codec, cut):
    rec = Recorder()
    parser = codec[1](rec)
    parser.expect(b"GET")
    parser.feed(cut)
    with pytest.raises(ProtocolError):
        parser.feed_eof()


def test_eof_between_responses_is_fine(codec):
    rec = responses(codec, [b"GET"], b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx", eof=True)
    assert rec.kinds() == ["head", "body", "end"]


RESPONSES_REFUSED = [
    (
        "cl-and-te",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ),
    ("two-cl", b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx"),
    ("te-gzip", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nx"),
    ("te-tab", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\t\r\n\r\n0\r\n\r\n"),
    ("http20", b"HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n"),
    ("status-099", b"HTTP/1.1 099 Odd\r\nContent-Length: 0\r\n\r\n"),
    ("status-2-digits", b"HTTP/1.1 20 OK\r\nContent-Length: 0\r\n\r\n"),
    ("reason-ctl", b"HTTP/1.1 200 O\x01K\r\nContent-Length: 0\r\n\r\n"),
    ("obs-fold", b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 0\r\n\r\n"),
    ("bare-lf", b"HTTP/1.1 200 OK\nContent-Length: 0\n\n"),
    ("bad-chunk", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
    (
        "chunk-size-2**63",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8000000000000000\r\nabc",
    ),
    (
        "chunk-size-2**64-1",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\nFFFFFFFFFFFFFFFF\r\nabc",
    ),
]


@pytest.mark.parametrize(
    "data", [d for _, d in RESPONSES_REFUSED], ids=[i for i, _ in RESPONSES_REFUSED]
)
def test_response_refused(codec, data):
    with pytest.raises(ProtocolError) as info:
        responses(codec, [b"GET"], data)
    assert type(info.value) is ProtocolError


def test_response_head_over_the_limit(codec):
    head = b"HTTP/1.1 200 OK\r\nX: " + b"z" * 200 + b"\r\nContent-Length: 0\r\n\r\n"
    with pytest.raises(HeadersTooLarge):
        responses(codec, [b"GET"], head, max_header_bytes=100)
    with pytest.raises(HeadersTooLarge):
        responses(codec, [b"GET"], *split_all(head[:150]), max_header_bytes=100)
