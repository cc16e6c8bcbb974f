"""The compress middleware's pure parts (edge.http.middlewares.compress): the
negotiation on Traefik's own tables (pkg/middlewares/compress/acceptencoding_test.go:
the same inputs, the same outputs), each encoder streamed and read back by the
standard decoders (zlib, brotli, zstandard), what a response head decides, and the
configuration checks naming the key."""

from __future__ import annotations

import zlib

import brotli
import msgspec
import pytest
import zstandard

from edge.config.dynamic import Middleware as MiddlewareConfig
from edge.config.dynamic import media_type
from edge.http.codec import RequestHead
from edge.http.middlewares import Forward, Reply
from edge.http.middlewares.compress import (
    BROTLI,
    COMPRESS,
    DEFAULT_ENCODINGS,
    GZIP,
    IDENTITY,
    NOT_ACCEPTABLE,
    PLAIN,
    UNKNOWN_LENGTH,
    VERDICTS_KEPT,
    WILDCARD,
    ZSTD,
    Compress,
    Encoder,
    Negotiator,
    encoder,
    has_vary,
)

# --- negotiation: Traefik's Test_getCompressionEncoding ------------------------------


@pytest.mark.parametrize(
    ("accept", "default", "encodings", "expected"),
    [
        ([""], "", None, IDENTITY),  # Empty Accept-Encoding
        (["gzip, br"], "", None, GZIP),
        (["gzip, br, zstd"], "", None, GZIP),
        (["compress, gzip"], "", None, GZIP),
        (["compress, rar"], "", None, NOT_ACCEPTABLE),
        (["*"], "", None, GZIP),  # wildcard: the default compression encoding
        (["*"], BROTLI, None, BROTLI),  # wildcard: the custom default
        (["br;q=0.8, gzip;q=1.0, *;q=0.1"], "", None, GZIP),  # follows weight
        (["br;q=0.8, identity;q=1.0"], "", None, IDENTITY),  # identity weighs more
        (["br;q=0.8, identity;q=0.8"], "", None, BROTLI),  # equal weight: not identity
        (["compress;q=1.0, gzip;q=0.5"], "", None, GZIP),
        (["compress;q=1.0, gzip, identity;q=0"], "", None, GZIP),
        (["compress;q=1.0, identity;q=0"], "", None, NOT_ACCEPTABLE),
        (["compress;q=1.0, *;q=0"], "", None, NOT_ACCEPTABLE),
        (["gzip, *;q=0"], "", None, GZIP),  # non-zero is higher than 0
        (["zstd, gzip, br"], "", [BROTLI, GZIP], BROTLI),  # zstd forbidden, brotli first
        (["br;q=0.8, gzip;q=1.0, *;q=0.1"], "", [ZSTD, BROTLI], BROTLI),
        (["gzip, br;q=0.9"], "", [GZIP, BROTLI], GZIP),  # mixed weight
        (["br;q=0, gzip;q=0, zstd;q=0"], "", None, NOT_ACCEPTABLE),
        (["br;q=0, gzip;q=0, zstd;q=0"], BROTLI, None, NOT_ACCEPTABLE),
        (["br;q=1.0, gzip;q=1.0, zstd;q=1.0"], "", None, GZIP),  # same weight: order
        (["br;q=1.0, zstd;q=1.0, gzip;q=1.0"], "", None, GZIP),  # the header's order: none
        (["br;q=1.0, zstd;q=1.0, gzip;q=1.0"], BROTLI, None, GZIP),  # nor defaultEncoding's
    ],
)
def test_negotiation_as_traefik(accept, default, encodings, expected):
    negotiator = Negotiator(encodings or DEFAULT_ENCODINGS, default)
    assert negotiator.choose([a.encode() for a in accept]) == expected


# Traefik's Test_parseAcceptEncoding.
@pytest.mark.parametrize(
    ("values", "encodings", "expected"),
    [
        (
            ["br;q=1.0, zstd;q=0.9, gzip;q=0.8, *;q=0.1"],
            None,
            [(BROTLI, 1), (ZSTD, 0.9), (GZIP, 0.8), (WILDCARD, 0.1)],
        ),
        (
            ["br;q=1.0, zstd;q=0.9, gzip;q=0.8, *;q=0.1"],
            [BROTLI, GZIP],
            [(BROTLI, 1), (GZIP, 0.8), (WILDCARD, 0.1)],
        ),
        (["zstd,gzip, br;q=1.0, *;q=0"], None, [(ZSTD, 1), (GZIP, 1), (BROTLI, 1)]),
        (["zstd,gzip, br;q=1.0, *;q=0"], [ZSTD], [(ZSTD, 1)]),
        (["zstd, gzip, br, *"], None, [(ZSTD, 1), (GZIP, 1), (BROTLI, 1), (WILDCARD, 1)]),
        (["zstd, gzip, br, *"], [GZIP], [(GZIP, 1), (WILDCARD, 1)]),
        (["gzip;q=1.0, identity; q=0.5, *;q=0"], None, [(GZIP, 1), (IDENTITY, 0.5)]),
        (["gzip;q=1.0, identity; q=0.5, *;q=0"], [BROTLI], [(IDENTITY, 0.5)]),
    ],
)
def test_accept_encoding_parsed_as_traefik(values, encodings, expected):
    negotiator = Negotiator(encodings or DEFAULT_ENCODINGS)
    assert negotiator.parse(v.encode() for v in values) == expected


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (["gzip;q=abc, br;q=0.1"], BROTLI),  # a weight that does not parse reads 0
        (["GZip;Q=0.5, br;q=0.1"], GZIP),  # codings and q in any case (RFC 9110 8.4.1)
        (["br;q=0.5,\tgzip"], GZIP),  # tabs are whitespace
        (["br;q=0.5", "zstd"], ZSTD),  # several header lines are one list
        (["gzip;level=1"], GZIP),  # a parameter other than q: weight 1
    ],
)
def test_negotiation_beyond_traefiks_table(accept, expected):
    assert Negotiator(DEFAULT_ENCODINGS).choose([a.encode() for a in accept]) == expected


def test_no_accept_encoding_takes_the_default_encoding_or_none():
    assert Negotiator(DEFAULT_ENCODINGS).choose(None) == IDENTITY
    assert Negotiator(DEFAULT_ENCODINGS, ZSTD).choose(None) == ZSTD


def test_verdicts_are_kept_for_a_bounded_number_of_values():
    negotiator = Negotiator(DEFAULT_ENCODINGS)
    for i in range(VERDICTS_KEPT + 50):
        assert negotiator.choose([b"x%d, gzip" % i]) == GZIP
    assert len(negotiator._verdicts) == VERDICTS_KEPT
    assert negotiator.choose([b"x1, gzip"]) == GZIP


# --- negotiation per request -----------------------------------------------------------


def request(
    method: bytes = b"GET", *headers: tuple[bytes, bytes], raw: bool = False
) -> RequestHead:
    """A request head; ``raw``: with its bytes (as the codecs make it), which
    negotiate() reads instead of the header list."""
    lines = [(b"Host", b"a.example"), *headers]
    data = b""
    if raw:
        data = b"%s / HTTP/1.1\r\n%s\r\n" % (
            method,
            b"".join(b"%s:  %s \r\n" % (n, v) for n, v in lines),
        )
    return RequestHead(
        method, b"/", b"1.1", None if raw else lines, True, False, None, False, False, data
    )


@pytest.mark.parametrize(
    ("method", "headers", "default", "expected"),
    [
        (b"GET", [(b"Accept-Encoding", b"gzip")], "", GZIP),
        (b"GET", [(b"accept-encoding", b"br")], "", BROTLI),
        (b"GET", [(b"Accept-Encoding", b"zstd")], "", ZSTD),
        (b"HEAD", [(b"Accept-Encoding", b"gzip")], "", None),  # never a HEAD
        (b"GET", [], "", None),  # no header, no default: Traefik's issue 9734
        (b"GET", [], BROTLI, BROTLI),  # no header: defaultEncoding
        (b"GET", [(b"Accept-Encoding", b"")], BROTLI, None),  # empty: identity
        (b"GET", [(b"Accept-Encoding", b"identity")], "", None),
        (b"GET", [(b"Accept-Encoding", b"br;q=0.5"), (b"ACCEPT-ENCODING", b"zstd")], "", ZSTD),
        (b"GET", [(b"X-Accept-Encoding", b"gzip")], "", None),
        (b"GET", [(b"Accept-Encoding", b"notreal")], "", None),
        # The request's own Content-Type, compared with the exclusions
        (
            b"POST",
            [(b"Accept-Encoding", b"gzip"), (b"Content-Type", b"application/grpc")],
            "",
            None,
        ),
        (
            b"POST",
            [(b"Accept-Encoding", b"gzip"), (b"Content-Type", b"application/grpc+proto")],
            "",
            GZIP,
        ),
        (b"POST", [(b"Accept-Encoding", b"gzip"), (b"Content-Type", b"text/plain")], "", GZIP),
    ],
)
@pytest.mark.parametrize("raw", [False, True], ids=["fields", "bytes"])
def test_negotiate_reads_the_request(method, headers, default, expected, raw):
    mw = Compress("c", default_encoding=default)
    assert mw.negotiate(request(method, *headers, raw=raw)) == expected


def test_negotiate_excluded_request_type():
    """Traefik's "Exclude Request Content-Type": an event-stream request is left alone."""
    mw = Compress("c", excluded_content_types=["text/event-stream"])
    head = request(b"GET", (b"Accept-Encoding", b"gzip"), (b"Content-Type", b"text/event-stream"))
    assert mw.negotiate(head) is None
    assert Compress("c").negotiate(head) == GZIP


# --- the verdict on a response head ---------------------------------------------------

TEXT = [(b"Content-Type", b"text/plain; charset=utf-8")]


@pytest.mark.parametrize(
    ("config", "status", "headers", "length", "expected"),
    [
        ({}, 200, TEXT, 1024, COMPRESS),
        ({}, 201, TEXT, 100000, COMPRESS),
        ({}, 200, TEXT, 1023, PLAIN),  # below minResponseBodyBytes
        ({}, 200, TEXT, 0, PLAIN),
        ({}, 200, TEXT, None, UNKNOWN_LENGTH),  # chunked or until close
        ({}, 200, [], 2048, COMPRESS),  # no Content-Type: edge never sniffs
        ({"min_response_body_bytes": 1}, 200, TEXT, 10, COMPRESS),
        ({"min_response_body_bytes": 100001}, 200, TEXT, 100000, PLAIN),
        ({"min_response_body_bytes": 0}, 200, TEXT, 1023, PLAIN),  # 0: 1024
        ({}, 204, TEXT, 2048, PLAIN),
        ({}, 304, TEXT, 2048, PLAIN),
        ({}, 101, TEXT, 2048, PLAIN),
        ({}, 200, [*TEXT, (b"Content-Encoding", b"gzip")], 2048, PLAIN),
        ({}, 200, [*TEXT, (b"content-encoding", b"identity")], 2048, PLAIN),
        ({}, 206, [*TEXT, (b"Content-Range", b"bytes 0-2047/4096")], 2048, PLAIN),
        ({}, 200, [(b"Content-Type", b"application/grpc")], 2048, PLAIN),
        ({}, 200, [(b"Content-Type", b"application/grpc; x=1")], 2048, PLAIN),
        ({}, 200, [(b"Content-Type", b"not a type")], 2048, PLAIN),  # does not parse
        ({"excluded_content_types": ["text/event-stream"]}, 200, [(b"Content-Type", b"text/event-stream")], 2048, PLAIN),
        ({"excluded_content_types": ["text/plain; charset=ascii"]}, 200, TEXT, 2048, COMPRESS),
        ({"excluded_content_types": ["TEXT/Plain"]}, 200, TEXT, 2048, PLAIN),
        ({"included_content_types": ["text/plain"]}, 200, [(b"Content-Type", b"text/html")], 2048, PLAIN),
        ({"included_content_types": ["text/html"]}, 200, [(b"Content-Type", b"text/html")], 2048, COMPRESS),
        ({"included_content_types": ["text/plain; charset=utf-8"]}, 200, TEXT, 2048, COMPRESS),
        ({"included_content_types": ["text/plain; charset=ascii"]}, 200, TEXT, 2048, PLAIN),
        ({"included_content_types": ["text/html"]}, 200, [], 2048, COMPRESS),
        ({"included_content_types": ["application/grpc"]}, 200, [(b"Content-Type", b"application/grpc")], 2048, PLAIN),
    ],
)  # fmt: skip
def test_verdict_on_the_response_head(config, status, headers, length, expected):
    assert Compress("c", **config).verdict(status, headers, length) == expected


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ([], False),
        ([(b"Vary", b"Origin")], False),
        ([(b"Vary", b"Origin, accept-encoding")], True),
        ([(b"vary", b"*")], True),
        ([(b"Vary", b"Origin"), (b"Vary", b"Accept-Encoding")], True),
    ],
)
def test_has_vary(headers, expected):
    assert has_vary(headers) is expected


# --- encoders -------------------------------------------------------------------------

CHUNKS = [
    b"",
    b"data: first event\n\n",
    b"x" * 5000,
    bytes(range(256)) * 40,
    b"data: last event\n\n",
]


def stream_decoder(name: str):
    """A decoder of ``name`` fed piece by piece: what each piece decodes to."""
    if name == GZIP:
        return zlib.decompressobj(31).decompress
    if name == BROTLI:
        return brotli.Decompressor().process
    return zstandard.ZstdDecompressor().decompressobj().decompress


@pytest.mark.parametrize("name", [GZIP, BROTLI, ZSTD])
def test_each_chunk_decodes_as_soon_as_it_is_encoded(name):
    """Streaming: the bytes out for a chunk decode to that chunk, before the end."""
    enc = encoder(name)
    decode = stream_decoder(name)
    whole = []
    for chunk in CHUNKS:
        out = enc.compress(chunk)
        assert decode(out) == chunk
        whole.append(out)
    tail = enc.finish()
    decode(tail)
    whole.append(tail)
    body = b"".join(whole)
    expected = b"".join(CHUNKS)
    if name == GZIP:
        assert zlib.decompress(body, 31) == expected
        import gzip

        assert gzip.decompress(body) == expected
    elif name == BROTLI:
        assert brotli.decompress(body) == expected
    else:
        reader = zstandard.ZstdDecompressor().stream_reader(body)
        assert reader.read() == expected


@pytest.mark.parametrize("name", [GZIP, BROTLI, ZSTD])
def test_an_empty_body_is_a_valid_stream(name):
    body = encoder(name).finish()
    if name == GZIP:
        assert zlib.decompress(body, 31) == b""
    elif name == BROTLI:
        assert brotli.decompress(body) == b""
    else:
        assert zstandard.ZstdDecompressor().stream_reader(body).read() == b""


@pytest.mark.parametrize("name", [GZIP, BROTLI, ZSTD])
def test_text_gets_smaller(name):
    enc = encoder(name)
    text = b"<p>Hello, world: a paragraph of text repeated.</p>\n" * 80
    assert len(enc.compress(text) + enc.finish()) < len(text) // 10


# --- configuration --------------------------------------------------------------------


def config(**compress) -> MiddlewareConfig:
    return msgspec.convert({"compress": compress}, MiddlewareConfig)


@pytest.mark.parametrize(
    ("compress", "problem"),
    [
        ({}, None),
        ({"encodings": ["zstd"], "defaultEncoding": "zstd"}, None),
        ({"excludedContentTypes": ["text/event-stream"]}, None),
        ({"includedContentTypes": ["text/html; charset=utf-8"]}, None),
        (
            {"excludedContentTypes": ["a/b"], "includedContentTypes": ["c/d"]},
            "excludedContentTypes, includedContentTypes: mutually exclusive, set one",
        ),
        (
            {"excludedContentTypes": ["text/html", "text/html; charset"]},
            "excludedContentTypes[1]: 'text/html; charset' is not a media type",
        ),
        (
            {"includedContentTypes": [""]},
            "includedContentTypes[0]: '' is not a media type",
        ),
        ({"encodings": []}, "encodings: at least one encoding must be given"),
        (
            {"encodings": ["gzip", "deflate"]},
            "encodings[1]: unsupported encoding 'deflate' (gzip, br, zstd)",
        ),
        (
            {"encodings": ["gzip"], "defaultEncoding": "br"},
            "defaultEncoding: 'br' is not one of encodings",
        ),
    ],
)
def test_configuration_checked_naming_the_key(compress, problem):
    problems = [f"compress.{problem}"] if problem else []
    assert config(**compress).check() == problems


def test_configuration_defaults_are_traefiks():
    assert config().kind == "compress"
    c = config().compress
    assert c is not None
    assert c.encodings == ["gzip", "br", "zstd"]
    assert c.min_response_body_bytes == 1024
    assert c.default_encoding == ""


def test_media_types_read_as_go_reads_them():
    parsed = media_type('Text/HTML; Charset="utf-8"')
    assert parsed is not None
    assert (parsed.type, parsed.params) == ("text/html", {"charset": "utf-8"})
    assert media_type("text/html; charset") is None
    assert media_type("a/b; x=1; X=2") is None  # a parameter given twice


# --- the response filter ----------------------------------------------------------------


def forward(*headers: tuple[bytes, bytes], method: bytes = b"GET") -> Forward:
    head = request(method, *headers)
    return Forward("a.example", b"/", b"", method, b"a.example", b"http", None, head)


def reply(length: int | None, *headers: tuple[bytes, bytes]) -> Reply:
    lines = [*TEXT, (b"Accept-Ranges", b"bytes"), (b"ETag", b'"v1"'), *headers]
    if length is not None:
        lines.append((b"Content-Length", b"%d" % length))
    return Reply(200, b"OK", lines, length)


def names(r: Reply) -> list[bytes]:
    return [n.lower() for n, _ in r.headers]


GZIP_ACCEPT = (b"Accept-Encoding", b"gzip")


def test_response_compresses_a_known_length():
    r = reply(4096)
    body = Compress("c").response(forward(GZIP_ACCEPT), r)
    assert body is not None
    assert r.get(b"content-encoding") == b"gzip" and r.get(b"vary") == b"Accept-Encoding"
    assert r.get(b"accept-ranges") is None and r.get(b"etag") == b'"v1"'
    assert r.length is None  # chunked: the writer drops the Content-Length line
    assert zlib.decompress(body.data(TEXT_BODY) + body.end(), 31) == TEXT_BODY


TEXT_BODY = b"a line of text to compress\n" * 200


@pytest.mark.parametrize(
    ("headers", "length", "vary"),
    [
        ([GZIP_ACCEPT], 100, True),  # small
        ([GZIP_ACCEPT, (b"Content-Type", b"application/grpc")], 4096, False),  # gRPC request
        ([], 4096, False),  # no Accept-Encoding
        ([(b"Accept-Encoding", b"identity")], 4096, False),
    ],
)
def test_response_left_alone(headers, length, vary):
    r = reply(length)
    before = list(r.headers)
    assert Compress("c").response(forward(*headers), r) is None
    added = [(b"Vary", b"Accept-Encoding")] if vary else []
    assert r.headers == before + added and r.length == length


def test_unknown_length_compressed_from_its_first_chunk():
    """As Traefik's proxy: a response without Content-Length is flushed after each
    write, which starts compression whatever its size."""
    r = reply(None)
    body = Compress("c").response(forward(GZIP_ACCEPT), r)
    assert isinstance(body, Encoder) and r.get(b"content-encoding") == b"gzip"
    assert zlib.decompressobj(31).decompress(body.data(b"data: 1\n\n")) == b"data: 1\n\n"
