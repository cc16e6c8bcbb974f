"""The ClientHello parser on hellos captured from real clients, re-recorded, broken and random.

Fixtures come from ``tests/fixtures/clienthello/capture.py`` (openssl s_client, curl and
Python's ssl against a recording listener); ``cases.json`` says what each must parse to.
The helpers below read and rebuild TLS records with their own few lines of code, so the
tests do not trust the parser to build their inputs.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge.tls.clienthello import (
    MAX_SIZE,
    NEED_MORE,
    NOT_TLS,
    PEEK_TIMEOUT,
    ClientHello,
    ClientHelloError,
    ClientHelloParser,
    parse_client_hello,
)
from tests import fuzz

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "clienthello"
CASES = json.loads((FIXTURES / "cases.json").read_text())


def fixture(name: str) -> bytes:
    return (FIXTURES / f"{name}.bin").read_bytes()


def records(raw: bytes) -> list[tuple[int, bytes]]:
    """(content type, payload) of each whole record in ``raw``."""
    out = []
    pos = 0
    while pos + 5 <= len(raw):
        end = pos + 5 + int.from_bytes(raw[pos + 3 : pos + 5], "big")
        out.append((raw[pos], raw[pos + 5 : end]))
        pos = end
    return out


def message(raw: bytes) -> bytes:
    """The handshake message carried by the records of ``raw``."""
    return b"".join(payload for _, payload in records(raw))


def rerecord(msg: bytes, size: int) -> bytes:
    """``msg`` cut into handshake records of ``size`` payload bytes."""
    return b"".join(
        b"\x16\x03\x01" + len(chunk).to_bytes(2, "big") + chunk
        for chunk in (msg[i : i + size] for i in range(0, len(msg), size))
    )


def with_extension(msg: bytes, kind: int, body: bytes) -> bytes:
    """``msg`` (a ClientHello message with extensions) with one more extension appended."""
    pos = 4 + 2 + 32
    pos += 1 + msg[pos]  # session id
    pos += 2 + int.from_bytes(msg[pos : pos + 2], "big")  # cipher suites
    pos += 1 + msg[pos]  # compression methods
    extensions = msg[pos + 2 :] + kind.to_bytes(2, "big") + len(body).to_bytes(2, "big") + body
    hello = msg[4:pos] + len(extensions).to_bytes(2, "big") + extensions
    return b"\x01" + len(hello).to_bytes(3, "big") + hello


def extensions_offset(msg: bytes) -> int:
    """Offset in ``msg`` of the first extension header."""
    pos = 4 + 2 + 32
    pos += 1 + msg[pos]
    pos += 2 + int.from_bytes(msg[pos : pos + 2], "big")
    pos += 1 + msg[pos]
    return pos + 2


def answer(data: bytes, max_size: int = MAX_SIZE):
    """The parser's answer, or the error type it raised (for comparing answers)."""
    try:
        return parse_client_hello(data, max_size=max_size)
    except ClientHelloError:
        return ClientHelloError


def fed(chunks: list[bytes]):
    """The answer of one incremental parser fed ``chunks``; stops at the first final answer."""
    parser = ClientHelloParser()
    buffer = bytearray()
    result = NEED_MORE
    try:
        for chunk in chunks:
            buffer += chunk
            result = parser.parse(buffer)
            if result is not NEED_MORE:
                return result
    except ClientHelloError:
        return ClientHelloError
    return result


def big_hello(padding: int, record_size: int) -> bytes:
    """The curl capture with its padding extension ``padding`` bytes long, in small records."""
    msg = with_extension(_without(message(fixture("curl_h2")), 21), 21, bytes(padding))
    return rerecord(msg, record_size)


# --- captured hellos -----------------------------------------------------------


def test_constants():
    assert PEEK_TIMEOUT == 5.0
    assert MAX_SIZE == 64 * 1024


@pytest.mark.parametrize("name", sorted(CASES))
def test_capture_parses(name):
    data = fixture(name)
    case = CASES[name]
    if "refused" in case:
        with pytest.raises(ClientHelloError) as refused:
            parse_client_hello(data)
        assert refused.value.alert == case["refused"]
        return
    hello = parse_client_hello(data)
    assert isinstance(hello, ClientHello)
    assert hello.server_name == case["server_name"]
    assert hello.alpn == tuple(case["alpn"])
    assert hello.versions == tuple(case["versions"])
    assert hello.length == len(data)


@pytest.mark.parametrize("name", sorted(CASES))
def test_capture_split_at_every_offset(name):
    data = fixture(name)
    whole = answer(data)
    incremental = ClientHelloParser()
    for cut in range(len(data)):
        assert parse_client_hello(data[:cut]) is NEED_MORE, cut
        assert incremental.parse(memoryview(data)[:cut]) is NEED_MORE, cut
        # two reads: the prefix, then the rest
        two = ClientHelloParser()
        assert two.parse(data[:cut]) is NEED_MORE
        assert _outcome(two, data) == whole, cut
    assert _outcome(incremental, data) == whole


def _outcome(parser: ClientHelloParser, data: bytes):
    """``parser``'s answer for ``data``, or the error type it raised (as :func:`answer`)."""
    try:
        return parser.parse(data)
    except ClientHelloError:
        return ClientHelloError


TRAILING_DOT = {
    "one label": b"localhost.",
    "two labels": b"a.test.",
    "mixed case": b"MiXeD.Example.COM.",
    "only a dot": b".",
    "two dots": b"a.test..",
}


@pytest.mark.parametrize("name", sorted(TRAILING_DOT))
def test_a_server_name_with_a_trailing_dot_is_refused_with_unrecognized_name(name):
    """RFC 6066 section 3: a host_name has no trailing dot, and Go's crypto/tls (so
    Traefik) rejects such a hello while parsing it. Edge dropped the dot and routed
    ``a.test.`` as ``a.test``; the hello is now refused with unrecognized_name (112), in
    one record or cut into records of any size, fed whole or a byte at a time."""
    host = TRAILING_DOT[name]
    entry = b"\x00" + len(host).to_bytes(2, "big") + host
    body = (len(entry)).to_bytes(2, "big") + entry
    msg = with_extension(_bare_tls10(), 0, body)
    for size in (16_384, 7, 1):
        data = rerecord(msg, size)
        with pytest.raises(ClientHelloError, match="dot") as refused:
            parse_client_hello(data)
        assert refused.value.alert == 112
        # fed a byte at a time: NEED_MORE until the last byte, which is refused
        parser = ClientHelloParser()
        assert all(parser.parse(data[:end]) is NEED_MORE for end in range(len(data)))
        with pytest.raises(ClientHelloError) as refused:
            parser.parse(data)
        assert refused.value.alert == 112


def test_a_malformed_hello_carries_decode_error_and_a_name_that_is_no_host_name_unrecognized_name():
    msg = _bare_tls10()
    with pytest.raises(ClientHelloError) as refused:
        parse_client_hello(rerecord(with_extension(msg, 0, b"\x00\x05\x00\x00\x01a"), 512))
    assert refused.value.alert == 50  # decode_error: the list length is wrong
    with pytest.raises(ClientHelloError) as refused:
        parse_client_hello(rerecord(with_extension(msg, 0, b"\x00\x06\x00\x00\x03a\x00b"), 512))
    assert refused.value.alert == 112  # a NUL byte: OpenSSL and BoringSSL refuse it so


def test_capture_byte_by_byte_in_a_growing_bytearray():
    data = fixture("openssl_fragmented")
    parser = ClientHelloParser()
    buffer = bytearray()
    answers = []
    for byte in data:
        buffer.append(byte)
        answers.append(parser.parse(buffer))
    assert answers[:-1] == [NEED_MORE] * (len(data) - 1)
    assert answers[-1].server_name == "frag.example.com"


def test_openssl_fragmented_capture_spans_records():
    kinds = [kind for kind, _ in records(fixture("openssl_fragmented"))]
    assert kinds == [0x16] * 3


def test_bytes_after_the_hello_are_left_to_the_caller():
    data = fixture("curl_h2")
    hello = parse_client_hello(data + b"\x14\x03\x03\x00\x01\x01" + b"\x17\x03\x03\x00\x05hello")
    assert hello.length == len(data)
    assert hello.server_name == "www.example.test"


def test_final_answer_is_repeated():
    parser = ClientHelloParser()
    data = fixture("python_ssl")
    first = parser.parse(data)
    assert parser.parse(data + b"more") is first
    parser = ClientHelloParser()
    assert parser.parse(b"GET /") is NOT_TLS
    assert parser.parse(b"GET / HTTP/1.1") is NOT_TLS
    parser = ClientHelloParser()
    with pytest.raises(ClientHelloError):
        parser.parse(b"\x16\x03\x01\x00\x00")
    with pytest.raises(ClientHelloError):
        parser.parse(b"\x16\x03\x01\x00\x00more")


# --- large and fragmented -------------------------------------------------------


@pytest.mark.parametrize("record_size", [512, 100, 7])
def test_12k_hello_in_small_records(record_size):
    data = big_hello(12_000, record_size)
    assert len(data) > 12 * 1024
    assert len(records(data)) > 12_000 // record_size
    hello = parse_client_hello(data)
    assert hello == ClientHello(
        "www.example.test", ("h2", "http/1.1"), (0x304, 0x303, 0x302, 0x301), len(data)
    )


def test_one_byte_records_count_against_the_cap():
    """Record headers count: 12 KB in 1-byte records is 6 bytes a byte, over 64 KiB."""
    data = big_hello(12_000, 1)
    with pytest.raises(ClientHelloError, match="exceed"):
        parse_client_hello(data)
    assert isinstance(parse_client_hello(data, max_size=len(data)), ClientHello)


def test_12k_fragmented_hello_split_at_every_offset():
    data = big_hello(12_000, 512)
    whole = parse_client_hello(data)
    parser = ClientHelloParser()
    for cut in range(len(data)):
        assert parser.parse(data[:cut]) is NEED_MORE, cut
    assert parser.parse(data) == whole
    for cut in range(0, len(data), 97):  # a sample of one-shot prefixes
        assert parse_client_hello(data[:cut]) is NEED_MORE, cut


def test_hello_larger_than_one_record():
    """A 20 KB hello in records of the TLS maximum (16,384 bytes), as a PQ client sends."""
    data = big_hello(19_500, 16_384)
    assert [len(payload) for _, payload in records(data)][:1] == [16_384]
    assert len(records(data)) == 2
    assert parse_client_hello(data).server_name == "www.example.test"


def test_large_keyshare_capture_fragmented_by_us():
    msg = message(fixture("openssl_large_keyshare"))
    for size in (1, 3, 64, 1000):
        assert parse_client_hello(rerecord(msg, size)).server_name == "big.example.com"


# --- not TLS --------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
        b"G",
        b"\x00",
        b"PROXY TCP4 192.0.2.1 192.0.2.2 40000 443\r\n",
        b"\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c",  # PROXY protocol v2 signature
        # SSLv2-compatible ClientHello: two-byte length with the high bit set
        b"\x80\x2e\x01\x03\x01\x00\x15\x00\x00\x00\x10",
        b"\x16\x02",  # handshake type byte, then not version major 3
        b"\x16\x00\x00",
        b"\x16\x16\x03\x01",
    ],
)
def test_not_tls(data):
    assert parse_client_hello(data) is NOT_TLS
    assert parse_client_hello(data[:2]) is NOT_TLS  # decided from the first two bytes


def test_not_tls_from_one_byte_and_need_more_before():
    assert parse_client_hello(b"") is NEED_MORE
    assert parse_client_hello(b"\x16") is NEED_MORE
    assert parse_client_hello(b"\x16\x03") is NEED_MORE
    for first in range(256):
        if first != 0x16:
            assert parse_client_hello(bytes([first])) is NOT_TLS


# --- errors ---------------------------------------------------------------------


def test_oversize_is_refused_from_the_declared_length():
    """A hello declaring more than the cap is refused from its first record alone."""
    body = message(fixture("curl_h2"))[4:]
    body += bytes(100_000 - len(body))
    data = rerecord(b"\x01" + len(body).to_bytes(3, "big") + body, 16_384)
    first = data[: 5 + 16_384]
    with pytest.raises(ClientHelloError, match="exceeds the limit"):
        parse_client_hello(first)
    with pytest.raises(ClientHelloError, match="exceeds the limit"):
        parse_client_hello(data[:9])  # record header and handshake header are enough


def test_max_size_per_call():
    data = big_hello(12_000, 512)
    with pytest.raises(ClientHelloError, match="8192"):
        parse_client_hello(data, max_size=8192)
    assert isinstance(parse_client_hello(data, max_size=len(data)), ClientHello)
    with pytest.raises(ClientHelloError):
        parse_client_hello(data, max_size=len(data) - 1)


def _damaged(msg: bytes, at: int, value: bytes) -> bytes:
    return rerecord(msg[:at] + value + msg[at + len(value) :], 16_384)


BAD_EXTENSIONS = {
    "sni list length": (0, b"\x00\x05\x00\x00\x01a", "list length 5"),
    "sni entry length": (0, b"\x00\x04\x00\x00\x05a", "entry of 5 bytes"),
    "sni empty name": (0, b"\x00\x03\x00\x00\x00", "is empty"),
    "sni only a dot": (0, b"\x00\x04\x00\x00\x01.", "ends with a dot"),
    "sni control byte": (0, b"\x00\x06\x00\x00\x03a\x00b", "not a host name"),
    "sni two host names": (0, b"\x00\x08\x00\x00\x01a\x00\x00\x01b", "two host_name"),
    "sni empty list": (0, b"\x00\x00", "list length 0"),
    "alpn empty name": (16, b"\x00\x04\x02h2\x00", "name of 0 bytes"),
    "alpn list length": (16, b"\x00\x09\x02h2", "list length 9"),
    "alpn name length": (16, b"\x00\x03\x05h2", "name of 5 bytes"),
    "alpn empty list": (16, b"\x00\x00", "list length 0"),
    "versions odd": (43, b"\x03\x03\x04\x03", "list of 3 bytes"),
    "versions empty": (43, b"", "is empty"),
    "versions length": (43, b"\x04\x03\x04", "list of 4 bytes"),
}


@pytest.mark.parametrize("name", sorted(BAD_EXTENSIONS))
def test_bad_extension(name):
    """Each broken extension body, alone in an otherwise clean hello, is an error."""
    kind, body, match = BAD_EXTENSIONS[name]
    msg = _bare_tls10()
    data = rerecord(with_extension(msg, kind, body), 512)
    with pytest.raises(ClientHelloError, match=match):
        parse_client_hello(data)


def _without(msg: bytes, kind: int) -> bytes:
    """``msg`` without its extension of type ``kind``."""
    pos = extensions_offset(msg)
    kept = b""
    while pos < len(msg):
        size = int.from_bytes(msg[pos + 2 : pos + 4], "big")
        if int.from_bytes(msg[pos : pos + 2], "big") != kind:
            kept += msg[pos : pos + 4 + size]
        pos += 4 + size
    head = msg[4 : extensions_offset(msg) - 2]
    hello = head + len(kept).to_bytes(2, "big") + kept
    return b"\x01" + len(hello).to_bytes(3, "big") + hello


def _bare_tls10() -> bytes:
    """The TLS 1.0 capture without its SNI: no SNI, ALPN or supported_versions left."""
    return _without(message(fixture("openssl_tls10")), 0)


def test_good_extensions_built_by_the_helpers():
    """The helpers build what the parser reads, so the failures above are the bodies'."""
    msg = _bare_tls10()
    assert parse_client_hello(rerecord(msg, 512)) == ClientHello(None, (), (0x301,), 5 + len(msg))
    msg = with_extension(msg, 0, b"\x00\x08\x00\x00\x05a.B.c")
    msg = with_extension(msg, 16, b"\x00\x08\x02h2\x04\xffxyz")
    msg = with_extension(msg, 43, b"\x04\x7a\x7a\x03\x04")
    hello = parse_client_hello(rerecord(msg, 100))
    assert hello.server_name == "a.b.c"
    assert hello.alpn == ("h2", "\xffxyz")  # latin-1: every byte string has a name
    assert hello.versions == (0x304,)  # GREASE 0x7a7a left out


def test_sni_of_other_name_types_is_skipped():
    msg = with_extension(message(fixture("openssl_no_sni")), 0, b"\x00\x07\x05\x00\x04abcd")
    assert parse_client_hello(rerecord(msg, 512)).server_name is None


def test_duplicate_extension():
    msg = message(fixture("openssl_sni_alpn"))
    with pytest.raises(ClientHelloError, match="twice"):
        parse_client_hello(rerecord(with_extension(msg, 16, b"\x00\x03\x02h2"), 512))


def test_hello_without_extensions():
    """Before TLS 1.3 a ClientHello may end after its compression methods."""
    msg = message(fixture("openssl_tls10"))
    cut = extensions_offset(msg) - 2
    hello = msg[4:cut]
    bare = b"\x01" + len(hello).to_bytes(3, "big") + hello
    assert parse_client_hello(rerecord(bare, 512)) == ClientHello(None, (), (0x301,), 5 + len(bare))


def _long_session_id(msg: bytes) -> bytes:
    """``msg`` with a 33-byte legacy_session_id, every length consistent."""
    hello = msg[4:38] + b"\x21" + bytes(33) + msg[39 + msg[38] :]
    return b"\x01" + len(hello).to_bytes(3, "big") + hello


@pytest.mark.parametrize(
    "mutate, match",
    [
        (_long_session_id, "legacy_session_id of 33 bytes"),
        (lambda m: _set_u16(m, extensions_offset(m) - 2, +1), "extensions length"),
        (lambda m: _set_u16(m, extensions_offset(m) - 2, -1), "extensions length"),
        (lambda m: _set_u16(m, extensions_offset(m) + 2, +9999), "runs past the extensions"),
        (lambda m: _set_u16(m, 39 + m[38], +1), "cipher_suites length"),
        (lambda m: m[:1] + (len(m) - 5).to_bytes(3, "big") + m[4:], "1 bytes follow"),
        (lambda m: b"\x02" + m[1:], "not ClientHello"),
        (lambda m: b"\x01\x00\x00\x10" + m[4:20], "too short for its random"),
    ],
    ids=[
        "session id over 32",
        "extensions longer",
        "extensions shorter",
        "extension size",
        "cipher suites odd",
        "handshake length short",
        "not a ClientHello",
        "truncated hello",
    ],
)
def test_bad_lengths(mutate, match):
    msg = mutate(message(fixture("curl_h2")))
    with pytest.raises(ClientHelloError, match=match):
        parse_client_hello(rerecord(msg, 200))


def test_long_session_id_helper_is_otherwise_valid():
    msg = message(fixture("curl_h2"))
    hello = msg[4:38] + b"\x20" + bytes(32) + msg[39 + msg[38] :]
    msg = b"\x01" + len(hello).to_bytes(3, "big") + hello
    assert parse_client_hello(rerecord(msg, 200)).server_name == "www.example.test"


def _set_u16(msg: bytes, at: int, delta: int) -> bytes:
    value = (int.from_bytes(msg[at : at + 2], "big") + delta) % 65536
    return msg[:at] + value.to_bytes(2, "big") + msg[at + 2 :]


def test_bytes_after_the_hello_in_its_record():
    msg = message(fixture("curl_h2"))
    with pytest.raises(ClientHelloError, match="follow the ClientHello"):
        parse_client_hello(rerecord(msg + b"\x0f\x00\x00\x00", 16_384))


@pytest.mark.parametrize(
    "between",
    [
        b"\x15\x03\x03\x00\x02\x01\x00",  # alert
        b"\x14\x03\x03\x00\x01\x01",  # change_cipher_spec
        b"\x17\x03\x03\x00\x01x",  # application data
    ],
)
def test_other_records_between_fragments(between):
    data = big_hello(2000, 512)
    cut = 5 + 512
    assert parse_client_hello(data[:cut]) is NEED_MORE
    with pytest.raises(ClientHelloError, match="content type"):
        parse_client_hello(data[:cut] + between + data[cut:])


@pytest.mark.parametrize(
    "data, match",
    [
        (b"\x16\x03\x01\x00\x00", "empty"),
        (b"\x16\x03\x01\x40\x01" + bytes(16_385), "over the TLS limit"),
        (b"\x16\x03\x01\x00\x04\x01\x00\x01\x00" + b"\x16\x02\x01\x00\x01\x00", "major"),
    ],
)
def test_bad_records(data, match):
    with pytest.raises(ClientHelloError, match=match):
        parse_client_hello(data)


# --- random and mutated input ---------------------------------------------------

SEEDS = [fixture(name) for name in sorted(CASES)]


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


def _check(data: bytes, cuts: list[int]) -> None:
    whole = answer(data)
    assert (
        whole is NEED_MORE
        or whole is NOT_TLS
        or whole is ClientHelloError
        or isinstance(whole, ClientHello)
    )
    assert fed(_chunks(data, cuts)) == whole
    if isinstance(whole, ClientHello):
        assert whole.length <= len(data)
        assert answer(data[: whole.length]) == whole


@settings(
    max_examples=fuzz.examples(full=400, quick=100),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.binary(max_size=2000), st.lists(st.integers(0, 4000), max_size=8))
def test_random_bytes(data, cuts):
    _check(data, cuts)
    _check(b"\x16\x03" + data, cuts)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(SEEDS),
    st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(0, 1 << 16),
    st.lists(st.integers(0, 4000), max_size=8),
)
def test_mutated_captures(seed, flips, truncate, cuts):
    data = bytearray(seed)
    for at, value in flips:
        data[at % len(data)] = value
    data = bytes(data[: max(1, truncate % (len(data) + 1))])
    _check(data, cuts)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(SEEDS),
    st.integers(1, 600),
    st.integers(0, 1 << 16),
    st.binary(min_size=1, max_size=8),
    st.lists(st.integers(0, 4000), max_size=8),
)
def test_mutated_messages_rerecorded(seed, size, at, insert, cuts):
    """Mutations inside the handshake message, with the records' framing kept valid."""
    msg = message(seed)
    at %= len(msg)
    _check(rerecord(msg[:at] + insert + msg[at:], size), cuts)
    _check(rerecord(msg[:at] + msg[at + len(insert) :], size), cuts)


@pytest.mark.timeout(60)
def test_ten_thousand_random_strings():
    rng = random.Random(8)
    prefixes = [b"", b"\x16\x03\x01", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"]
    counts = {"hello": 0, "need": 0, "not": 0, "error": 0}
    for i in range(10_000):
        data = prefixes[i % 3] + rng.randbytes(rng.randrange(0, 700))
        result = answer(data)
        if isinstance(result, ClientHello):
            counts["hello"] += 1
        elif result is NEED_MORE:
            counts["need"] += 1
        elif result is NOT_TLS:
            counts["not"] += 1
        else:
            assert result is ClientHelloError
            counts["error"] += 1
    # every path was taken: the strings reached past the first bytes
    assert counts["not"] > 3000 and counts["need"] > 0 and counts["error"] > 0
