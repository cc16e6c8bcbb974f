"""PROXY protocol parser and encoders: spec bytes, every split, refusals, random input."""

from __future__ import annotations

import ipaddress
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge.tcp.proxyproto import (
    MAX_V2_LENGTH,
    NEED_MORE,
    NOT_PROXY,
    V2_SIGNATURE,
    ProxyHeader,
    ProxyProtocolError,
    encode_v1,
    encode_v2,
    parse,
)

SIG = bytes.fromhex("0D0A0D0A000D0A515549540A")
HTTP = b"GET / HTTP/1.1\r\nHost: 192.168.0.11\r\n\r\n"
V6MAX = ":".join(["ffff"] * 8)


def v2(ver_cmd: int, fam: int, body: bytes) -> bytes:
    return SIG + struct.pack("!BBH", ver_cmd, fam, len(body)) + body


def tlv(kind: int, value: bytes) -> bytes:
    return struct.pack("!BH", kind, len(value)) + value


# -- the spec's own bytes -------------------------------------------------------------


def test_signature_is_the_specs():
    assert V2_SIGNATURE == SIG


def test_v1_spec_example_before_an_http_request():
    data = b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n" + HTTP
    h = parse(data)
    assert h == ProxyHeader(
        1, "PROXY", "TCP4", ("192.168.0.1", 56324), ("192.168.0.11", 443), (), 47
    )
    assert data[h.length :] == HTTP


@pytest.mark.parametrize(
    ("line", "family"),
    [
        (b"PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n", "TCP4"),  # 56
        (f"PROXY TCP6 {V6MAX} {V6MAX} 65535 65535\r\n".encode(), "TCP6"),  # 104
        (b"PROXY UNKNOWN\r\n", "UNKNOWN"),  # 15
        (f"PROXY UNKNOWN {V6MAX} {V6MAX} 65535 65535\r\n".encode(), "UNKNOWN"),  # 107
    ],
)
def test_v1_longest_lines_of_the_spec(line, family):
    h = parse(line + b"rest")
    assert h.family == family and h.length == len(line)
    if family == "UNKNOWN":
        assert h.source is None and h.destination is None


def test_v1_past_107_bytes_without_crlf_is_refused():
    line = f"PROXY UNKNOWN {V6MAX} {V6MAX} 65535 655350\r\n".encode()  # 108
    assert len(line) == 108
    assert parse(line[:106]) is NEED_MORE
    with pytest.raises(ProxyProtocolError, match="no CRLF within the first 107 bytes"):
        parse(line)


def test_v2_tcp4_from_the_specs_struct():
    # 192.168.0.1:56324 -> 192.168.0.11:443, laid out as struct proxy_hdr_v2 + ipv4_addr
    wire = SIG + bytes.fromhex("2111000CC0A80001C0A8000BDC0401BB")
    assert encode_v2(("192.168.0.1", 56324), ("192.168.0.11", 443)) == wire
    h = parse(wire + HTTP)
    assert h == ProxyHeader(
        2, "PROXY", "TCP4", ("192.168.0.1", 56324), ("192.168.0.11", 443), (), 28
    )


# -- every family and command ----------------------------------------------------------


def test_v2_tcp6_udp4_udp6():
    s6, d6 = ipaddress.IPv6Address("2001:db8::1"), ipaddress.IPv6Address("2001:db8::2")
    h = parse(v2(0x21, 0x21, s6.packed + d6.packed + struct.pack("!HH", 1, 2)))
    assert (h.family, h.source, h.destination) == ("TCP6", ("2001:db8::1", 1), ("2001:db8::2", 2))
    h = parse(v2(0x21, 0x12, bytes([10, 0, 0, 1, 10, 0, 0, 2]) + struct.pack("!HH", 53, 5353)))
    assert (h.family, h.source) == ("UDP4", ("10.0.0.1", 53))
    h = parse(v2(0x21, 0x22, s6.packed + d6.packed + struct.pack("!HH", 3, 4)))
    assert (h.family, h.destination) == ("UDP6", ("2001:db8::2", 4))


def test_v2_unix_addresses_are_skipped_tlvs_after_them_kept():
    body = b"/run/a.sock".ljust(108, b"\0") + b"/run/b.sock".ljust(108, b"\0") + tlv(0x04, b"")
    h = parse(v2(0x21, 0x31, body))
    assert (h.family, h.source, h.destination, h.tlvs) == ("UNIX_STREAM", None, None, ((4, b""),))
    assert parse(v2(0x21, 0x32, body)).family == "UNIX_DGRAM"


def test_v2_local_ignores_addresses_present():
    body = bytes([10, 0, 0, 1, 10, 0, 0, 2]) + struct.pack("!HH", 1, 2) + tlv(0x05, b"id-1")
    h = parse(v2(0x20, 0x11, body) + b"x")
    assert (h.command, h.source, h.destination, h.tlvs) == ("LOCAL", None, None, ((5, b"id-1"),))
    assert h.length == 16 + len(body)


def test_v2_local_unspec_as_haproxy_health_checks_send_it():
    assert encode_v2(None, None, command="LOCAL") == SIG + b"\x20\x00\x00\x00"
    h = parse(SIG + b"\x20\x00\x00\x00")
    assert (h.version, h.command, h.family, h.source, h.length) == (2, "LOCAL", "UNKNOWN", None, 16)
    h = parse(v2(0x20, 0x00, tlv(0x02, b"example.com")))
    assert h.authority == "example.com"


def test_v2_tlvs_raw_in_order_with_alpn_and_authority():
    tlvs = tlv(0x01, b"h2") + tlv(0x02, b"db.example.com") + tlv(0xE0, b"\x00\x01") + tlv(0x04, b"")
    h = parse(encode_v2_with_tlvs(tlvs) + HTTP)
    assert h.tlvs == ((1, b"h2"), (2, b"db.example.com"), (0xE0, b"\x00\x01"), (4, b""))
    assert (h.alpn, h.authority, h.tlv(0xE0), h.tlv(0x30)) == (
        b"h2",
        "db.example.com",
        b"\x00\x01",
        None,
    )


def encode_v2_with_tlvs(tlvs: bytes) -> bytes:
    base = encode_v2(("10.1.2.3", 40000), ("10.9.9.9", 5432))
    size = struct.unpack_from("!H", base, 14)[0] + len(tlvs)
    return base[:14] + struct.pack("!H", size) + base[16:] + tlvs


# -- split at every offset -----------------------------------------------------------------

VALID = [
    b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n",
    b"PROXY TCP6 2001:db8::1 ::1 1 65535\r\n",
    b"PROXY UNKNOWN\r\n",
    encode_v2(("192.168.0.1", 56324), ("192.168.0.11", 443)),
    encode_v2(("2001:db8::1", 1), ("2001:db8::2", 2), transport="udp"),
    encode_v2(None, None, command="LOCAL"),
    encode_v2_with_tlvs(tlv(0x01, b"http/1.1") + tlv(0x02, b"a.example")),
]


@pytest.mark.parametrize("header", VALID, ids=range(len(VALID)))
def test_every_prefix_needs_more_then_the_header(header):
    for i in range(len(header)):
        assert parse(header[:i]) is NEED_MORE, i
        assert parse(bytearray(header[:i])) is NEED_MORE, i
    whole = parse(header)
    assert isinstance(whole, ProxyHeader) and whole.length == len(header)
    assert parse(header + HTTP) == whole


# -- not the PROXY protocol, decided early ---------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"G",
        b"\x16",
        b"p",
        b"P\x00",
        b"PROXX",
        b"PROXY\t",
        b"\r\n\r\n\x01",
        b"\r\nX",
        b"\r\n\r\n\x00\r\nQUIT\r",
    ],
)
def test_not_proxy_from_the_first_differing_byte(data):
    """The last byte of each case is the first that cannot start a header."""
    assert parse(data) is NOT_PROXY
    assert parse(data + b"more bytes") is NOT_PROXY
    assert parse(data[:-1]) is NEED_MORE


def test_not_proxy_on_an_http_request_and_a_tls_hello():
    assert parse(HTTP) is NOT_PROXY
    assert parse(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03") is NOT_PROXY


# -- refusals name what is wrong ----------------------------------------------------------

MALFORMED_V1 = [
    (b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n", r"protocol b'TCP5' is not TCP4, TCP6 or UNKNOWN"),
    (b"PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n", r"takes 4 fields .* got 5"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n", r"takes 4 fields .* got 5"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", r"takes 4 fields .* got 3"),
    (b"PROXY  TCP4 1.2.3.4 5.6.7.8 1 2\r\n", r"protocol b'' is not"),
    (b"PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n", r"source address b'01.2.3.4' is not an IPv4"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.256 1 2\r\n", r"destination address b'5.6.7.256' is not an IPv4"),
    (b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n", r"source address b'::1' is not an IPv4"),
    (b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n", r"source address b'1.2.3.4' is not an IPv6"),
    (b"PROXY TCP6 fe80::1%eth0 ::1 1 2\r\n", r"source address b'fe80::1%eth0' is not an IPv6"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 080 2\r\n", r"source port b'080' is not a port"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 65536\r\n", r"destination port b'65536' is not a port"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n", r"source port b'\+1' is not a port"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1_0 2\r\n", r"source port b'1_0' is not a port"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 \xd9\xa1\r\n", r"destination port .* is not a port"),
    (b"PROXY TCP4 1.2.3.\xc3\xa9 5.6.7.8 1 2\r\n", r"source address .* is not an IPv4"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", r"bare LF at byte 30, CRLF expected"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\r\n", r"destination port b'2\\r' is not a port"),
    (b"PROXY " + b"A" * 120, r"no CRLF within the first 107 bytes"),
]


@pytest.mark.parametrize(("data", "message"), MALFORMED_V1, ids=range(len(MALFORMED_V1)))
def test_malformed_v1_is_refused_naming_the_field(data, message):
    with pytest.raises(ProxyProtocolError, match=message):
        parse(data)


INET4 = bytes([10, 0, 0, 1, 10, 0, 0, 2]) + struct.pack("!HH", 1, 2)
MALFORMED_V2 = [
    (v2(0x11, 0x11, INET4), r"version 1, only 2 is defined"),
    (v2(0x31, 0x11, INET4), r"version 3, only 2 is defined"),
    (v2(0x22, 0x11, INET4), r"command 2 is not LOCAL \(0\) or PROXY \(1\)"),
    (v2(0x21, 0x13, INET4), r"family/transport byte 0x13"),
    (v2(0x21, 0x41, INET4), r"family/transport byte 0x41"),
    (v2(0x21, 0x10, INET4), r"family/transport byte 0x10"),
    (v2(0x21, 0x11, INET4[:8]), r"TCP4 needs 12 address bytes, the header holds 8"),
    (v2(0x21, 0x21, INET4), r"TCP6 needs 36 address bytes, the header holds 12"),
    (v2(0x21, 0x11, INET4 + b"\x01\x00"), r"2 stray bytes at offset 28"),
    (
        v2(0x21, 0x11, INET4 + b"\x02\x00\x09abc"),
        r"TLV 0x02 at offset 28 declares 9 bytes, 3 are left",
    ),
    (SIG + struct.pack("!BBH", 0x21, 0x11, MAX_V2_LENGTH + 1), r"declares 4097 bytes"),
]


@pytest.mark.parametrize(("data", "message"), MALFORMED_V2, ids=range(len(MALFORMED_V2)))
def test_malformed_v2_is_refused_naming_the_field(data, message):
    with pytest.raises(ProxyProtocolError, match=message):
        parse(data)


def test_v2_over_the_cap_is_refused_from_its_16_bytes():
    with pytest.raises(ProxyProtocolError, match="more than the 4096 accepted"):
        parse(SIG + struct.pack("!BBH", 0x21, 0x11, 0xFFFF))
    assert isinstance(
        parse(v2(0x21, 0x11, INET4 + tlv(0x04, bytes(MAX_V2_LENGTH - 15)))), ProxyHeader
    )


# -- encoders ---------------------------------------------------------------------------------

ipv4 = st.ip_addresses(v=4).map(str)
ipv6 = st.ip_addresses(v=6).filter(lambda ip: ip.ipv4_mapped is None).map(str)
port = st.integers(0, 65535)


@given(st.one_of(st.tuples(ipv4, ipv4), st.tuples(ipv6, ipv6)), port, port)
def test_round_trips_same_family(ips, sport, dport):
    src, dst = (ips[0], sport), (ips[1], dport)
    want_src = (str(ipaddress.ip_address(ips[0])), sport)
    want_dst = (str(ipaddress.ip_address(ips[1])), dport)
    family = "TCP4" if ":" not in ips[0] else "TCP6"
    for wire in (encode_v1(src, dst), encode_v2(src, dst)):
        h = parse(wire + b"payload")
        assert (h.family, h.source, h.destination, h.length) == (
            family,
            want_src,
            want_dst,
            len(wire),
        )
    h = parse(encode_v2(src, dst, transport="udp"))
    assert h.family == family.replace("TCP", "UDP") and h.source == want_src


def test_ipv4_mapped_becomes_ipv4():
    src, dst = ("::ffff:192.0.2.7", 1234), ("::FFFF:198.51.100.1", 443)
    assert encode_v1(src, dst) == b"PROXY TCP4 192.0.2.7 198.51.100.1 1234 443\r\n"
    assert encode_v2(src, dst) == encode_v2(("192.0.2.7", 1234), ("198.51.100.1", 443))


def test_mixed_families_map_the_ipv4_one_into_ipv6():
    line = encode_v1(("192.0.2.7", 1), ("2001:db8::5", 2))
    assert line == b"PROXY TCP6 ::ffff:192.0.2.7 2001:db8::5 1 2\r\n"
    h = parse(encode_v2(("2001:db8::5", 1), ("192.0.2.7", 2)))
    assert (h.family, h.destination) == ("TCP6", ("::ffff:192.0.2.7", 2))


def test_encoders_refuse_bad_arguments():
    with pytest.raises(ValueError, match=r"port 70000 of 1\.2\.3\.4"):
        encode_v1(("1.2.3.4", 70000), ("1.2.3.5", 1))
    with pytest.raises(ValueError):
        encode_v2(("not-an-ip", 1), ("1.2.3.5", 1))
    with pytest.raises(ValueError, match="needs both addresses"):
        encode_v2(None, ("1.2.3.5", 1))
    with pytest.raises(ValueError, match="transport 'sctp'"):
        encode_v2(("1.2.3.4", 1), ("1.2.3.5", 1), transport="sctp")


# -- random input: a header, a verdict, or the typed error; nothing else ------------------------


def _check(data: bytes) -> None:
    try:
        result = parse(data)
    except ProxyProtocolError:
        return
    if isinstance(result, ProxyHeader):
        assert 0 < result.length <= len(data)
        assert result.length <= 16 + MAX_V2_LENGTH
        assert parse(data[: result.length]) == result
    else:
        assert result in (NEED_MORE, NOT_PROXY)


@settings(max_examples=1000)
@given(st.binary(max_size=300))
def test_random_bytes(data):
    _check(data)


@settings(max_examples=1000)
@given(
    st.sampled_from([b"PROXY ", b"PROXY TCP4 ", b"PROXY TCP6 ", b"PROXY UNKNOWN", SIG]),
    st.binary(max_size=200),
)
def test_random_bytes_after_a_valid_start(start, rest):
    _check(start + rest)


@settings(max_examples=1000)
@given(
    st.integers(0, 255),
    st.sampled_from([0x00, 0x11, 0x12, 0x21, 0x22, 0x31, 0x32, 0x13, 0x40]),
    st.binary(max_size=400),
)
def test_random_v2_bodies(ver_cmd, fam, body):
    _check(v2(ver_cmd, fam, body))
