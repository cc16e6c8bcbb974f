"""Differential test: the httptools and h11 codecs agree on every stream, however split.

Each stream of the corpus below is fed to both codecs whole, in two pieces at every
offset, cut after every head, in a sample of three-piece splits and byte by byte. The normalized event
list (heads as tuples, body bytes joined between heads and ends, bytes after an
upgrade appended to its ``rest``, and the class of the error that ended parsing)
must be the same for every split and both codecs.
"""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.http.codec.streams import BIG, H, run, varied_request, varied_response

GET = b"GET / HTTP/1.1\r\n" + H + b"\r\n"


CHUNKED = b"POST /up HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"


# (id, bytes, max_header_bytes)
REQUESTS = [
    (
        "get",
        b"GET /a/b?c=d HTTP/1.1\r\nHost: example.com\r\nUser-Agent: t/1\r\nAccept: */*\r\n\r\n",
        BIG,
    ),
    ("get-http10", b"GET / HTTP/1.0\r\n\r\n" + GET, BIG),
    ("http10-keep-alive", b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n" + GET, BIG),
    ("pipelined", GET + b"GET /2 HTTP/1.1\r\n" + H + b"Connection: close\r\n\r\n" + GET, BIG),
    ("empty-lines-first", b"\r\n\r\n" + GET + b"\r\n" + GET, BIG),
    (
        "content-length",
        b"POST /f HTTP/1.1\r\n" + H + b"Content-Length: 13\r\n\r\nhello, world!" + GET,
        BIG,
    ),
    (
        "content-length-crlfs",
        b"PUT / HTTP/1.1\r\n" + H + b"Content-Length: 8\r\n\r\n\r\n\r\n\r\n\r\n" + GET,
        BIG,
    ),
    ("chunked", CHUNKED + b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n" + GET, BIG),
    (
        "chunked-ext-trailers",
        CHUNKED
        + b'5;a=b;c;d="e f";;=v;t=tok"q\\"x"\r\nhello\r\n0;last\r\nX-T: 1\r\nX-U: 2\r\n\r\n'
        + GET,
        BIG,
    ),
    (
        "chunked-crlf-data",
        CHUNKED + b"8\r\n\r\n\r\n\r\n\r\n\r\n4\r\n\r\n\r\n\r\n0\r\n\r\n" + GET,
        BIG,
    ),
    # Framing values spelt otherwise than edge writes them: valid, but rebuilt
    # (passthrough None) so that the next hop sees "chunked" and plain digits.
    (
        "content-length-zeros",
        b"POST /f HTTP/1.1\r\n"
        + H
        + b"Content-Length: 02\r\n\r\nok"
        + b"POST /g HTTP/1.1\r\n"
        + H
        + b"Content-Length: 0\r\n\r\n",
        BIG,
    ),
    (
        "chunked-capital-te",
        b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: Chunked\r\n\r\n0\r\n\r\n",
        BIG,
    ),
    (
        "chunked-upper-te",
        b"POST / HTTP/1.1\r\n"
        + H
        + b"Transfer-Encoding:  CHUNKED  \r\n\r\n00A\r\n0123456789\r\n0\r\n\r\n",
        BIG,
    ),
    (
        "expect-continue",
        b"POST / HTTP/1.1\r\n" + H + b"Expect: 100-continue\r\nContent-Length: 2\r\n\r\nok",
        BIG,
    ),
    (
        "upgrade",
        b"GET /ws HTTP/1.1\r\n"
        + H
        + b"Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n\x81\x05hello",
        BIG,
    ),
    (
        "upgrade-with-cl-0",
        b"GET /ws HTTP/1.1\r\n"
        + H
        + b"Connection: keep-alive, upgrade\r\nUpgrade: h2c\r\nContent-Length: 0\r\n\r\nabGET",
        BIG,
    ),
    ("upgrade-header-only", b"GET / HTTP/1.1\r\n" + H + b"Upgrade: websocket\r\n\r\n" + GET, BIG),
    (
        "absolute-form",
        b"GET http://user@example.com:8080/a%20b?x=1 HTTP/1.1\r\n"
        + H
        + b"\r\nOPTIONS * HTTP/1.1\r\n"
        + H
        + b"\r\n",
        BIG,
    ),
    (
        "headers-kept",
        b"GET / HTTP/1.1\r\nhost: a\r\nX-Dup: 1\r\nX-Dup:   2\t \r\nX-E:\r\nX-Obs: \xe9\r\n\r\n",
        BIG,
    ),
    (
        "connection-close-then-junk",
        b"GET / HTTP/1.1\r\n" + H + b"Connection: x, close\r\n\r\nnot http at all\r\n\r\n",
        BIG,
    ),
    (
        "proxy-connection-close",
        b"GET / HTTP/1.1\r\n" + H + b"Proxy-Connection: close\r\n\r\n" + GET,
        BIG,
    ),
    ("close-in-trailers", CHUNKED + b"0\r\nConnection: close\r\n\r\n" + GET, BIG),
    # refused
    (
        "cl-te",
        b"POST / HTTP/1.1\r\n"
        + H
        + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        BIG,
    ),
    (
        "two-cl",
        b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 1\r\nContent-Length: 1\r\n\r\nxx",
        BIG,
    ),
    ("cl-list", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 1,1\r\n\r\nx", BIG),
    ("cl-not-digits", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 1x\r\n\r\nx", BIG),
    (
        "te-gzip-chunked",
        b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        BIG,
    ),
    ("te-http10", b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", BIG),
    ("bad-chunk-size", CHUNKED + b"5\r\nhello\r\n5x\r\nworld\r\n0\r\n\r\n", BIG),
    ("bad-chunk-end", CHUNKED + b"5\r\nhelloXX0\r\n\r\n", BIG),
    ("bad-chunk-ext", CHUNKED + b"5;a b\r\nhello\r\n0\r\n\r\n", BIG),
    # Chunk sizes stop at 2**63 - 1, as nginx's do (llhttp takes up to 2**64 - 1).
    ("chunk-size-2**63", CHUNKED + b"5\r\nhello\r\n8000000000000000\r\nabc", BIG),
    ("chunk-size-2**64-1", CHUNKED + b"5\r\nhello\r\nffffffffffffffff;x=y\r\nabc", BIG),
    ("chunk-size-2**63-1", CHUNKED + b"5\r\nhello\r\n7fffffffffffffff\r\nabc", BIG),
    ("chunk-size-zeros-2**63", CHUNKED + b"0000000000008000000000000000\r\n", BIG),
    (
        "chunk-size-zeros",
        CHUNKED + b'00000000000000000000005\r\nhello\r\n000;a="\\""\r\n\r\n' + GET,
        BIG,
    ),
    # A huge size spelt in chunk data, and after a chunk whose data overruns: not a size line.
    ("chunk-data-like-a-size", CHUNKED + b"14\r\n\r\nffffffffffffffff\r\n\r\n0\r\n\r\n" + GET, BIG),
    ("chunk-overrun-then-huge", CHUNKED + b"5\r\nhelloXXffffffffffffffff\r\nabc", BIG),
    ("bad-trailer", CHUNKED + b"0\r\nX-T\r\n\r\n", BIG),
    ("obs-fold", GET[:-2] + b"X-A: 1\r\n 2\r\n\r\n", BIG),
    ("bare-lf", b"GET / HTTP/1.1\nHost: a\n\n", BIG),
    ("bare-lf-late", GET + b"GET / HTTP/1.1\r\nHost: a\r\nX: y\n\r\n", BIG),
    ("bare-cr", b"GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", BIG),
    ("http09", b"GET /\r\n\r\n", BIG),
    ("http20", b"GET / HTTP/2.0\r\n" + H + b"\r\n", BIG),
    ("no-host", b"GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", BIG),
    ("two-hosts", b"GET / HTTP/1.1\r\n" + H + H + b"\r\n", BIG),
    ("connect", b"CONNECT example.com:443 HTTP/1.1\r\n" + H + b"\r\n", BIG),
    ("nul-in-value", GET[:-2] + b"X: a\x00b\r\n\r\n", BIG),
    ("space-before-colon", GET[:-2] + b"X : b\r\n\r\n", BIG),
    ("double-space", b"GET  / HTTP/1.1\r\n" + H + b"\r\n", BIG),
    # A valid request, then a broken one in the same bytes: the first is delivered.
    ("valid-then-garbage", GET + b"GARBAGE\r\n\r\n", BIG),
    ("valid-then-no-host", GET + b"GET /2 HTTP/1.1\r\n\r\n", BIG),
    (
        "valid-then-cl-te",
        GET
        + b"POST / HTTP/1.1\r\n"
        + H
        + b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        BIG,
    ),
    (
        "body-then-garbage",
        b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 2\r\n\r\nokGARBAGE\r\n\r\n",
        BIG,
    ),
    ("chunked-then-ctl", CHUNKED + b"2\r\nok\r\n0\r\n\r\n\x00\x01\r\n\r\n", BIG),
    ("bad-name-char", GET[:-2] + b"X(A): 1\r\n\r\n", BIG),
    ("lowercase-method", b"get / HTTP/1.1\r\n" + H + b"\r\n", BIG),
    ("nul-in-target", b"GET /a\x00b HTTP/1.1\r\n" + H + b"\r\n", BIG),
    ("cl-plus-sign", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: +1\r\n\r\nx", BIG),
    # An upgrade request with a body: the bytes after the head go to the tunnel,
    # so the body would never be sent as one (the next hop would read the next
    # request on that connection as it).
    (
        "upgrade-with-cl",
        b"GET /ws HTTP/1.1\r\n"
        + H
        + b"Connection: keep-alive, upgrade\r\nUpgrade: h2c\r\nContent-Length: 2\r\n\r\nabGET",
        BIG,
    ),
    # h2c asked by upgrade is ignored (a plain request; the next one is parsed),
    # with a body refused as any upgrade request's.
    (
        "upgrade-h2c-ignored",
        b"GET /p HTTP/1.1\r\n" + H + b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
        b"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\nGET /secret HTTP/1.1\r\n"
        + H
        + b"\r\n"
        + GET,
        BIG,
    ),
    (
        "upgrade-h2c-listed",
        b"GET /p HTTP/1.1\r\n"
        + H
        + b"Connection: upgrade\r\nUpgrade: websocket, H2C\r\n\r\n"
        + GET,
        BIG,
    ),
    (
        "upgrade-h2c-body",
        b"POST /p HTTP/1.1\r\n"
        + H
        + b"Connection: upgrade\r\nUpgrade: h2c\r\nContent-Length: 2\r\n\r\nok"
        + GET,
        BIG,
    ),
    (
        "upgrade-http10-ignored",
        b"GET /p HTTP/1.0\r\n"
        + H
        + b"Connection: upgrade, keep-alive\r\nUpgrade: websocket\r\n\r\n"
        + GET,
        BIG,
    ),
    (
        "upgrade-http10-body",
        b"POST /p HTTP/1.0\r\nConnection: upgrade\r\nUpgrade: websocket\r\nContent-Length: 2\r\n\r\nok",
        BIG,
    ),
    (
        "upgrade-h2-not-h2c",
        b"GET /p HTTP/1.1\r\n" + H + b"Connection: upgrade\r\nUpgrade: h2, x-h2c\r\n\r\nrest",
        BIG,
    ),
    (
        "upgrade-chunked",
        b"POST /ws HTTP/1.1\r\n"
        + H
        + b"Connection: Upgrade\r\nUpgrade: websocket\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        BIG,
    ),
    (
        "valid-then-upgrade-cl",
        GET
        + b"GET /ws HTTP/1.1\r\n"
        + H
        + b"Upgrade: websocket\r\nConnection: upgrade\r\nContent-Length: 05\r\n\r\nGET /",
        BIG,
    ),
    (
        "te-chunked-twice",
        b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n",
        BIG,
    ),
    # maxHeaderCount (100, the parsers' default): 100 fields pass, 101 are refused (431)
    # unless the scan finds a defect first (400), whichever way the bytes arrive.
    (
        "header-count-at-limit",
        b"GET / HTTP/1.1\r\n" + H + b"".join(b"x%d:\r\n" % i for i in range(99)) + b"\r\n",
        BIG,
    ),
    (
        "header-count-over",
        GET + b"GET / HTTP/1.1\r\n" + H + b"".join(b"x%d:\r\n" % i for i in range(100)) + b"\r\n",
        BIG,
    ),
    (
        "header-count-over-defect",
        b"GET / HTTP/1.1\r\n"
        + H
        + b"".join(b"x%d:\r\n" % i for i in range(100))
        + b"y: \x01\r\n\r\n",
        BIG,
    ),
    # 431
    (
        "head-too-large",
        GET + b"GET / HTTP/1.1\r\n" + H + b"X-Big: " + b"b" * 120 + b"\r\n\r\n",
        100,
    ),
    ("head-too-large-incomplete", b"GET / HTTP/1.1\r\n" + H + b"X-Big: " + b"b" * 150, 100),
    ("defect-within-limit", b"GET / HTTP/1.1\r\nHost: a\nX-Big: " + b"b" * 150 + b"\r\n\r\n", 100),
    ("defect-beyond-limit", b"GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + b"b" * 150 + b"\n\r\n", 100),
    # Heads at the edge of the httptools quick path (one plain head per feed).
    ("quick-keep-alive", b"GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\n\r\n" + GET, BIG),
    ("quick-close-first", b"GET / HTTP/1.1\r\nconnection:\tClose \r\nHost: a\r\n\r\n" + GET, BIG),
    (
        "quick-http10-keep-alive",
        b"GET /x HTTP/1.0\r\nConnection: Keep-Alive\r\nHost: a\r\n\r\n" + GET,
        BIG,
    ),
    ("quick-http10-no-host", b"GET /x HTTP/1.0\r\n\r\n" + GET, BIG),
    (
        "quick-host-whitespace",
        b"GET / HTTP/1.1\r\nHost:\t a.example \t\r\nTe-X: 1\r\nX-Te: 2\r\n\r\n",
        BIG,
    ),
    ("quick-host-space-before-colon", b"GET / HTTP/1.1\r\nHost : a\r\n\r\n", BIG),
    ("quick-two-hosts", b"GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n", BIG),
    ("quick-hostname-only", b"GET / HTTP/1.1\r\nHostname: a\r\n\r\n", BIG),
    (
        "quick-connection-list",
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, x-a\r\nX-A: 1\r\n\r\n",
        BIG,
    ),
    (
        "quick-two-connections",
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\nConnection: close\r\n\r\n",
        BIG,
    ),
    ("quick-space-after-target", b"GET /a  HTTP/1.1\r\nHost: a\r\n\r\n", BIG),
    ("quick-space-in-target", b"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", BIG),
    ("quick-forwarded", b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 1.2.3.4\r\n\r\n", BIG),
    # X- headers a Traefik-style proxy manages, in any spelling with underscores:
    # never passed through as they came (headers.FORWARDED_KEPT).
    (
        "quick-forwarded-kept",
        b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-Server: b\r\n\r\n" + GET,
        BIG,
    ),
    (
        "quick-forwarded-underscore",
        b"GET / HTTP/1.1\r\nHost: a\r\nx_FORWARDED-for: 1.2.3.4\r\n\r\n" + GET,
        BIG,
    ),
    (
        "quick-varied-forwarded-underscore",
        varied_request(b"1")
        + varied_request(b"2")
        + varied_request(b"3\r\nX_Forwarded_For: 1.2.3.4")
        + varied_request(b"4\r\nX-Forwarded-Tls-Client-Cert: x"),
        BIG,
    ),
    ("quick-head-method", b"HEAD /h HTTP/1.1\r\nHost: a\r\n\r\n" + GET, BIG),
    ("quick-unknown-method", b"FETCH / HTTP/1.1\r\nHost: a\r\n\r\n", BIG),
    ("quick-http11-lowercase", b"GET / http/1.1\r\nHost: a\r\n\r\n", BIG),
    ("quick-ctl-in-host", b"GET / HTTP/1.1\r\nHost: a\x01b\r\n\r\n", BIG),
    # The same header lines again: the quick path reads only the new request line.
    (
        "quick-repeated-lines",
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nX: 1\r\n\r\n"
        b"POST /p?q HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\nX: 1\r\n\r\n"
        b"GET /"
        + bytes(range(0x21, 0x7F))
        + b" HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nX: 1\r\n\r\n"
        b"DELETE /d HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nX: 1\r\n\r\n",
        BIG,
    ),
    (
        "quick-repeated-http10",
        b"GET / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n"
        b"GET /2 HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n"
        b"GET /3 HTTP/1.1\r\nHost: b\r\n\r\n"
        b"GET /4 HTTP/1.0\r\nHost: b\r\n\r\n"
        b"GET /5 HTTP/1.1\r\nHost: b\r\n\r\n",
        BIG,
    ),
    (
        "quick-repeated-close",
        b"GET / HTTP/1.1\r\nConnection: close\r\nHost: a\r\n\r\n"
        b"GET /again HTTP/1.1\r\nConnection: close\r\nHost: a\r\n\r\n",
        BIG,
    ),
    ("quick-repeated-bad-line", GET + b"GET  / HTTP/1.1\r\n" + H + b"\r\n", BIG),
    ("quick-repeated-del-in-target", GET + b"GET /\x7f HTTP/1.1\r\n" + H + b"\r\n", BIG),
    ("quick-repeated-fragment", GET + b"GET /a#b HTTP/1.1\r\n" + H + b"\r\n", BIG),
    ("quick-repeated-http2", GET + b"GET / HTTP/2.0\r\n" + H + b"\r\n", BIG),
    # Heads that differ in one value: after two, the quick path checks only the
    # lines around it (headers.volatile_line); what lies between must be a value.
    (
        "quick-varied-values",
        b"".join(map(varied_request, [b"1", b"2", b"33", b"", b" 4 \t", b"5"])),
        BIG,
    ),
    (
        "quick-varied-http10",
        varied_request(b"1") + varied_request(b"2") + varied_request(b"3").replace(b"1.1", b"1.0"),
        BIG,
    ),
    (
        "quick-varied-chunked",
        varied_request(b"1")
        + varied_request(b"2")
        + varied_request(b"3\r\nTransfer-Encoding: chunked")
        + b"0\r\n\r\n"
        + GET,
        BIG,
    ),
    (
        "quick-varied-length",
        varied_request(b"1")
        + varied_request(b"2")
        + varied_request(b"3\r\nContent-Length: 2")
        + b"ok"
        + GET,
        BIG,
    ),
    (
        "quick-varied-close",
        varied_request(b"1")
        + varied_request(b"2")
        + varied_request(b"3\r\nConnection: close")
        + GET,
        BIG,
    ),
    (
        "quick-varied-forwarded",
        varied_request(b"1")
        + varied_request(b"2")
        + varied_request(b"3\r\nX-Forwarded-For: 1.2.3.4"),
        BIG,
    ),
    (
        "quick-varied-bare-lf",
        varied_request(b"1")
        + varied_request(b"2")
        + varied_request(b"3\nContent-Length: 2")
        + b"ok",
        BIG,
    ),
    (
        "quick-varied-bare-cr",
        varied_request(b"1") + varied_request(b"2") + varied_request(b"3\rX"),
        BIG,
    ),
    (
        "quick-varied-ctl",
        varied_request(b"1") + varied_request(b"2") + varied_request(b"3\x01"),
        BIG,
    ),
    (
        "quick-varied-te-tab",
        varied_request(b"1")
        + varied_request(b"2")
        + varied_request(b"3\r\nTransfer-Encoding: chunked\t"),
        BIG,
    ),
    (
        "quick-varied-host",
        b"".join(
            varied_request(b"1").replace(b"Host: a", b"Host: a" + v) for v in (b"1", b"2", b"3")
        ),
        BIG,
    ),
    (
        "quick-varied-name",
        varied_request(b"1") + varied_request(b"2") + varied_request(b"3").replace(b"X-Id", b"Te"),
        BIG,
    ),
    # Two values vary: the lines between them are checked too (a framing header there
    # in place of another line is not a varied head).
    (
        "quick-varied-two-lines",
        b"".join(varied_request(b"%d\r\nAccept: %d" % (i, i)) for i in range(4))
        + varied_request(b"4\r\nTransfer-Encoding: chunked")
        + b"0\r\n\r\n"
        + varied_request(b"5\r\nAccept: 5")
        + varied_request(b"6\r\nContent-Length: 2")
        + b"ok"
        + varied_request(b"7\r\nX-Forwarded-For: a"),
        BIG,
    ),
]


# (id, bytes, methods, feed_eof, max_header_bytes)
RESPONSES = [
    (
        "content-length",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nServer: t\r\n\r\nhello",
        [b"GET"],
        False,
        BIG,
    ),
    (
        "chunked",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=1\r\nabc\r\n0\r\nT: 1\r\n\r\n",
        [b"GET"],
        False,
        BIG,
    ),
    ("until-close", b"HTTP/1.1 200 OK\r\nServer: t\r\n\r\nall of\r\n\r\nthis", [b"GET"], True, BIG),
    ("http10", b"HTTP/1.0 200 OK\r\n\r\nbody", [b"GET"], True, BIG),
    (
        "head-then-get",
        b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        [b"HEAD", b"GET"],
        False,
        BIG,
    ),
    (
        "head-chunked",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nHTTP/1.1 404 NF\r\nContent-Length: 0\r\n\r\n",
        [b"HEAD", b"GET"],
        False,
        BIG,
    ),
    (
        "204-304",
        b"HTTP/1.1 204 NC\r\nContent-Length: 4\r\n\r\nHTTP/1.1 304 NM\r\nContent-Length: 4\r\n\r\n",
        [b"GET", b"GET"],
        False,
        BIG,
    ),
    (
        "interim",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 EH\r\nLink: <a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx",
        [b"POST"],
        False,
        BIG,
    ),
    (
        "interim-trailers",
        b"HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 103 EH\r\nLink: <a>\r\nLink: <b>\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: grpc-status\r\n\r\n"
        b"2\r\nok\r\n0\r\ngrpc-status: 0\r\nGrpc-Message:  a b \r\n\r\n"
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        [b"GET", b"GET"],
        False,
        BIG,
    ),
    (
        "101",
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n\x81\x00rest",
        [b"GET"],
        False,
        BIG,
    ),
    ("101-bare", b"HTTP/1.1 101 SP\r\n\r\nrest", [b"GET"], False, BIG),
    (
        "keep-alive-flags",
        b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nxHTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nyjunk",
        [b"GET", b"GET"],
        False,
        BIG,
    ),
    ("cut-body", b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", [b"GET"], True, BIG),
    (
        "chunk-size-2**63",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n8000000000000000\r\nxyz",
        [b"GET"],
        False,
        BIG,
    ),
    (
        "chunk-size-2**63-1",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n7fffffffffffffff;q\r\nxyz",
        [b"GET"],
        True,
        BIG,
    ),
    (
        "cut-chunked",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
        [b"GET"],
        True,
        BIG,
    ),
    (
        "cl-te",
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        [b"GET"],
        False,
        BIG,
    ),
    ("bad-status", b"HTTP/1.1 099 X\r\nContent-Length: 0\r\n\r\n", [b"GET"], False, BIG),
    # Responses at the edge of the httptools quick path (one plain response per feed).
    (
        "quick-keep-alive",
        b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok"
        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nconnection: CLOSE\r\n\r\n",
        [b"GET", b"GET"],
        False,
        BIG,
    ),
    (
        "quick-ctl-in-reason",
        b"HTTP/1.1 200 O\x01K\r\nContent-Length: 0\r\n\r\n",
        [b"GET"],
        False,
        BIG,
    ),
    ("quick-empty-reason", b"HTTP/1.1 200 \r\nContent-Length: 1\r\n\r\nx", [b"GET"], False, BIG),
    ("quick-no-reason", b"HTTP/1.1 200\r\nContent-Length: 1\r\n\r\nx", [b"GET"], False, BIG),
    (
        "quick-length-zeros",
        b"HTTP/1.1 200 OK\r\nContent-Length:  007 \r\n\r\n1234567",
        [b"GET"],
        False,
        BIG,
    ),
    ("quick-stray-byte", b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxy", [b"GET"], False, BIG),
    (
        "quick-two-lengths",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
        [b"GET"],
        False,
        BIG,
    ),
    ("quick-status-999", b"HTTP/1.1 999 X\r\nContent-Length: 0\r\n\r\n", [b"GET"], False, BIG),
    ("quick-head-answer", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", [b"HEAD"], False, BIG),
    (
        "quick-connection-token",
        b"HTTP/1.1 200 OK\r\nConnection: x-a\r\nX-A: 1\r\nContent-Length: 1\r\n\r\nx",
        [b"GET"],
        False,
        BIG,
    ),
    (
        "quick-big-length",
        b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
        [b"GET"],
        False,
        BIG,
    ),
    # Responses that differ in one value (see the requests' quick-varied cases).
    (
        "quick-varied-values",
        b"".join(map(varied_response, [b"1", b"2", b"33", b"", b"5"])),
        [b"GET"] * 5,
        False,
        BIG,
    ),
    (
        "quick-varied-chunked",
        varied_response(b"1")
        + varied_response(b"2")
        + varied_response(b"3\r\nTransfer-Encoding: chunked")
        + b"0\r\n\r\n",
        [b"GET"] * 3,
        False,
        BIG,
    ),
    (
        "quick-varied-length",
        varied_response(b"1")
        + varied_response(b"2")
        + varied_response(b"3\r\nContent-Length: 2")
        + b"ok",
        [b"GET"] * 3,
        False,
        BIG,
    ),
    (
        "quick-varied-close",
        varied_response(b"1") + varied_response(b"2") + varied_response(b"3\r\nConnection: close"),
        [b"GET"] * 3,
        False,
        BIG,
    ),
    (
        "quick-varied-bare-lf",
        varied_response(b"1") + varied_response(b"2") + varied_response(b"3\nX: y"),
        [b"GET"] * 3,
        False,
        BIG,
    ),
    (
        "quick-varied-two-lines",
        b"".join(varied_response(b"%d\r\nETag: %d" % (i, i)) for i in range(4))
        + varied_response(b"4\r\nConnection: close")
        + varied_response(b"5\r\nETag: 5"),
        [b"GET"] * 6,
        False,
        BIG,
    ),
    (
        "quick-varied-ctl",
        varied_response(b"1")
        + varied_response(b"2")
        + varied_response(b"3\x7f")
        + varied_response(b"4\r5"),
        [b"GET"] * 4,
        False,
        BIG,
    ),
    (
        "quick-varied-head-answer",
        varied_response(b"1") + varied_response(b"2") + varied_response(b"3", b"5"),
        [b"GET", b"GET", b"HEAD"],
        False,
        BIG,
    ),
    (
        "head-too-large",
        b"HTTP/1.1 200 OK\r\nX-Big: " + b"b" * 150 + b"\r\n\r\n",
        [b"GET"],
        False,
        100,
    ),
]


CASES = [
    pytest.param(data, None, False, mx, id="request-" + name) for name, data, mx in REQUESTS
] + [
    pytest.param(data, methods, eof, mx, id="response-" + name)
    for name, data, methods, eof, mx in RESPONSES
]


def splits(data: bytes) -> list[list[int]]:
    n = len(data)
    rng = random.Random(n)
    # After every CRLF CRLF: each head (and each bodiless message) arrives alone,
    # as keep-alive traffic does, which is what the httptools quick path takes.
    heads = [m.end() for m in re.finditer(rb"\r\n\r\n", data)]
    result = [[], list(range(1, n)), heads]
    result += [[i] for i in range(n + 1)]
    result += [sorted(rng.sample(range(n + 1), 2)) for _ in range(25)]
    return result


@pytest.mark.parametrize(("data", "methods", "eof", "max_bytes"), CASES)
def test_codecs_agree_however_split(data, methods, eof, max_bytes):
    expected = run("h11", data, [], methods, eof, max_bytes)
    assert expected, "every stream produces at least one event"
    for cuts in splits(data):
        for codec in ("httptools", "h11"):
            got = run(codec, data, cuts, methods, eof, max_bytes)
            assert got == expected, f"{codec} split at {cuts}"


def test_corpus_covers_both_outcomes():
    outcomes = {run("h11", d, [], None, False, m)[-1][-1] for _, d, m in REQUESTS}
    assert {"ProtocolError", "HeadersTooLarge"} <= outcomes
    assert any(o not in ("ProtocolError", "HeadersTooLarge") for o in outcomes)


# Varied heads (hypothesis): one field's value changes from head to head, as a
# request id or an ETag does, now and then to a value holding a line break (a
# line smuggled into it), a bare CR or LF, or a framing header's value; now and
# then another field changes too, or the head holds a framing header.
_NAMES = st.sampled_from([b"X-Id", b"ETag", b"Accept", b"User-Agent"])


_FRAMING = st.sampled_from(
    [
        b"Connection",
        b"Content-Length",
        b"Transfer-Encoding",
        b"TE",
        b"X-Forwarded-For",
        b"Forwarded",
        b"Keep-Alive",
        b"Trailer",
        b"Host",
    ]
)


_ODD_VALUES = [
    b"",
    b" 3 \t",
    b"keep-alive",
    b"close",
    b"chunked",
    b"0",
    b"2",
    b"a\r\nContent-Length: 2",
    b"a\r\nTransfer-Encoding: chunked",
    b"a\r\nConnection: close",
    b"a\r\nX-Forwarded-For: b",
    b"a\r\nHost: b",
    b"a\r\nConnection: keep-alive",
    b"x\ny",
    b"x\rz",
    b"\x01",
    b"chunked\t",
    b"\x7f",
    b"a\x00",
    b"\x80\xff\t",
    b"\x1b[0m",
]


_COUNTER = st.integers(0, 10**9).map(b"%d".__mod__)


_VALUE = st.one_of(_COUNTER, _COUNTER, _COUNTER, st.sampled_from(_ODD_VALUES))


@st.composite
def varied_messages(draw, response: bool) -> list[bytes]:
    framing = [(b"Content-Length", b"0")] if response else [(b"Host", b"a.example")]
    if draw(st.integers(0, 3)) == 0:
        framing.append(
            (draw(_FRAMING), draw(st.sampled_from([b"keep-alive", b"close", b"0", b"chunked"])))
        )
    lines = draw(st.lists(st.tuples(_NAMES, _COUNTER), min_size=1, max_size=3))
    for line in framing:
        lines.insert(draw(st.integers(0, len(lines))), line)
    volatile = draw(st.integers(0, len(lines) - 1))
    messages = []
    for n in range(draw(st.integers(3, 8))):
        now = list(lines)
        now[volatile] = (now[volatile][0], draw(_VALUE))
        if draw(st.integers(0, 5)) == 0:
            other = draw(st.integers(0, len(lines) - 1))
            now[other] = (now[other][0], draw(_VALUE))
        if response:
            start = draw(st.sampled_from([b"HTTP/1.1 200 OK", b"HTTP/1.1 404 Not Found"]))
        else:
            method = draw(st.sampled_from([b"GET", b"POST", b"HEAD"]))
            start = b"%s /%d HTTP/1.%d" % (method, n, draw(st.integers(0, 1)) or n > 2)
        messages.append(
            start + b"\r\n" + b"".join(k + b": " + v + b"\r\n" for k, v in now) + b"\r\n"
        )
    return messages


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_codecs_agree_on_varied_heads(data):
    response = data.draw(st.booleans())
    messages = data.draw(varied_messages(response))
    stream = b"".join(messages)
    cuts = [sum(map(len, messages[:i])) for i in range(1, len(messages))]
    methods = [b"GET"] * len(messages) if response else None
    expected = run("h11", stream, cuts, methods, False, BIG)
    assert run("httptools", stream, cuts, methods, False, BIG) == expected


# Chunked bodies (hypothesis): chunk sizes of any spelling (leading zeros, either
# case, now and then one above 2**63 - 1 or one whose data is too long or short),
# extensions, and data that may spell a chunk-size line itself, split anywhere.
_HUGE = st.sampled_from(
    [b"8000000000000000", b"ffffffffffffffff", b"0008000000000000000", b"10000000000000000"]
)


_EXT = st.sampled_from([b"", b"", b";a", b";a=b", b';a="x;y"', b";a=b;c", b" ;a"])


_CHUNK_DATA = st.one_of(
    st.binary(max_size=24),
    st.sampled_from([b"\r\nffffffffffffffff\r\n", b"8000000000000000\r\n", b"\r\n\r\n0\r\n\r\n"]),
)


@st.composite
def chunked_body(draw) -> bytes:
    out = []
    for _ in range(draw(st.integers(0, 4))):
        data = draw(_CHUNK_DATA)
        kind = draw(st.integers(0, 12))
        if kind == 0:
            out.append(draw(_HUGE) + draw(_EXT) + b"\r\n" + data)
            continue
        size = len(data) + (kind == 1) - (kind == 2 and len(data) > 0)
        digits = b"%x" % size
        if kind == 3:
            digits = digits.upper()
        out.append(b"0" * draw(st.integers(0, 20)) + digits + draw(_EXT) + b"\r\n" + data + b"\r\n")
    out.append(b"0" + draw(_EXT) + b"\r\n" + draw(st.sampled_from([b"", b"T: 1\r\n"])) + b"\r\n")
    return b"".join(out)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_codecs_agree_on_chunked_bodies(data):
    response = data.draw(st.booleans())
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" if response else CHUNKED
    stream = head + data.draw(chunked_body()) + (b"" if response else GET)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(stream) - 1), max_size=4))))
    methods = [b"GET"] if response else None
    expected = run("h11", stream, cuts, methods, False, BIG)
    assert run("httptools", stream, cuts, methods, False, BIG) == expected
    assert run("httptools", stream, [], methods, False, BIG) == run(
        "h11", stream, [], methods, False, BIG
    )
