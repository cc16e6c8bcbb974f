"""PROXY protocol v1 and v2 headers: a pure parser and two encoders (HAProxy's spec).

:func:`parse` reads the first bytes of a connection and returns a
:class:`ProxyHeader`, :data:`NEED_MORE` or :data:`NOT_PROXY`, or raises
:class:`ProxyProtocolError` for a malformed header. No I/O; the caller keeps
the bytes and calls again with more.

Invariants:
- NOT_PROXY is decided from the fewest bytes possible: as soon as what arrived
  is no longer a prefix of ``PROXY `` or of the v2 signature (one byte usually).
- A result never reads past its own header: ``length`` is how many bytes it
  took; whatever follows belongs to the proxied stream.
- Bounded: a v1 line must end (CRLF) within 107 bytes; a v2 header may not
  declare more than :data:`MAX_V2_LENGTH` bytes. Past either limit, or on any
  field that is not exactly what the spec allows, :class:`ProxyProtocolError`
  names the field.

Choices where the spec leaves room:
- ``family`` is one name for address family and transport: ``TCP4``, ``TCP6``,
  ``UDP4``, ``UDP6``, ``UNIX_STREAM``, ``UNIX_DGRAM``, or ``UNKNOWN`` (v1's
  UNKNOWN and v2's UNSPEC alike). Only those v2 family bytes are accepted.
- ``source`` / ``destination`` are ``(ip, port)`` for the INET families with the
  PROXY command, else ``None`` (LOCAL and UNKNOWN: use the connection's own
  addresses). UNIX addresses are skipped, not represented (edge has no use for
  a path on another host). IPv6 text is normalised (compressed, lower case; an
  IPv4-mapped one as ``::ffff:a.b.c.d``).
- v2 TLVs are kept raw as ``(type, value)`` pairs, after the address block of
  the family (none for UNSPEC, as HAProxy reads LOCAL headers); they must fill
  the header exactly. ``alpn`` and ``authority`` read the two common ones.
- The encoders turn an IPv4-mapped IPv6 address into IPv4 first; if the two
  addresses still differ in family, the IPv4 one is mapped into IPv6 and the
  header is TCP6, as HAProxy does.
"""

from __future__ import annotations

import enum
import ipaddress
import re
import struct
from typing import Literal

import msgspec

from edge.errors import EdgeError

V1_PREFIX = b"PROXY "
V1_MAX = 107  # bytes, CRLF included
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
V2_HEADER = 16  # signature, version/command, family, length
MAX_V2_LENGTH = 4096  # bytes after the 16-byte v2 header; the wire format allows 65535

TLV_ALPN = 0x01
TLV_AUTHORITY = 0x02

_FAMILIES = {  # v2 family byte -> (name, address block bytes, IP version or 0)
    0x00: ("UNKNOWN", 0, 0),
    0x11: ("TCP4", 12, 4),
    0x12: ("UDP4", 12, 4),
    0x21: ("TCP6", 36, 6),
    0x22: ("UDP6", 36, 6),
    0x31: ("UNIX_STREAM", 216, 0),
    0x32: ("UNIX_DGRAM", 216, 0),
}
_PORT = re.compile(rb"0|[1-9][0-9]{0,4}")


class ProxyProtocolError(EdgeError):
    """A PROXY protocol header is malformed; the message names the field.

    Derives from :class:`EdgeError` (not an HTTP error): the connection is
    closed, nothing is answered.
    """


class Verdict(enum.Enum):
    NEED_MORE = "need more bytes"
    NOT_PROXY = "not a PROXY protocol header"


NEED_MORE = Verdict.NEED_MORE
NOT_PROXY = Verdict.NOT_PROXY


class ProxyHeader(msgspec.Struct, frozen=True):
    version: int  # 1 or 2
    command: str  # "PROXY" or "LOCAL" (v2 only)
    family: str  # see the module docstring
    source: tuple[str, int] | None
    destination: tuple[str, int] | None
    tlvs: tuple[tuple[int, bytes], ...]
    length: int  # bytes of the header

    def tlv(self, kind: int) -> bytes | None:
        """The value of the first TLV of type ``kind``, or None."""
        for t, value in self.tlvs:
            if t == kind:
                return value
        return None

    @property
    def alpn(self) -> bytes | None:
        return self.tlv(TLV_ALPN)

    @property
    def authority(self) -> str | None:
        value = self.tlv(TLV_AUTHORITY)
        return None if value is None else value.decode("utf-8", "replace")


def parse(data: bytes | bytearray) -> ProxyHeader | Verdict:
    """The PROXY header at the start of ``data``, NEED_MORE, or NOT_PROXY."""
    if data[:12] == V2_SIGNATURE:
        return _parse_v2(data)
    if data[:6] == V1_PREFIX:
        return _parse_v1(data)
    n = len(data)
    if (n < 12 and V2_SIGNATURE.startswith(data)) or (n < 6 and V1_PREFIX.startswith(data)):
        return NEED_MORE
    return NOT_PROXY


def _parse_v1(data: bytes | bytearray) -> ProxyHeader | Verdict:
    end = data.find(b"\r\n", 0, V1_MAX)
    if end < 0:
        lf = data.find(b"\n", 0, V1_MAX)
        if lf >= 0:
            raise ProxyProtocolError(f"PROXY v1 header: bare LF at byte {lf}, CRLF expected")
        if len(data) >= V1_MAX:
            raise ProxyProtocolError(f"PROXY v1 header: no CRLF within the first {V1_MAX} bytes")
        return NEED_MORE
    fields = bytes(data[6:end]).split(b" ")
    proto = fields[0]
    if proto == b"UNKNOWN":  # the rest of the line is ignored, as the spec says
        return ProxyHeader(1, "PROXY", "UNKNOWN", None, None, (), end + 2)
    if proto not in (b"TCP4", b"TCP6"):
        raise ProxyProtocolError(
            f"PROXY v1 header: protocol {proto[:16]!r} is not TCP4, TCP6 or UNKNOWN"
        )
    if len(fields) != 5:
        raise ProxyProtocolError(
            f"PROXY v1 header: {proto.decode()} takes 4 fields after it, each after one space;"
            f" got {len(fields) - 1}"
        )
    version = 4 if proto == b"TCP4" else 6
    src = _v1_ip(fields[1], version, "source address")
    dst = _v1_ip(fields[2], version, "destination address")
    sport = _v1_port(fields[3], "source port")
    dport = _v1_port(fields[4], "destination port")
    return ProxyHeader(1, "PROXY", proto.decode(), (src, sport), (dst, dport), (), end + 2)


def _v1_ip(field: bytes, version: int, what: str) -> str:
    try:
        text = field.decode("ascii")
        if version == 4:
            return str(ipaddress.IPv4Address(text))
        if "%" in text:
            raise ValueError("a scope is not an address")
        return _text(ipaddress.IPv6Address(text))
    except ValueError:  # UnicodeDecodeError is one
        raise ProxyProtocolError(
            f"PROXY v1 header: {what} {field[:46]!r} is not an IPv{version} address"
        ) from None


def _v1_port(field: bytes, what: str) -> int:
    if not _PORT.fullmatch(field) or int(field) > 65535:
        raise ProxyProtocolError(
            f"PROXY v1 header: {what} {field[:16]!r} is not a port (0-65535, no leading zero)"
        )
    return int(field)


def _parse_v2(data: bytes | bytearray) -> ProxyHeader | Verdict:
    if len(data) < V2_HEADER:
        return NEED_MORE
    ver_cmd, fam, size = struct.unpack_from("!BBH", data, 12)
    if ver_cmd >> 4 != 2:
        raise ProxyProtocolError(f"PROXY v2 header: version {ver_cmd >> 4}, only 2 is defined")
    command = ver_cmd & 0x0F
    if command > 1:
        raise ProxyProtocolError(
            f"PROXY v2 header: command {command} is not LOCAL (0) or PROXY (1)"
        )
    if fam not in _FAMILIES:
        raise ProxyProtocolError(f"PROXY v2 header: address family/transport byte 0x{fam:02x}")
    if size > MAX_V2_LENGTH:
        raise ProxyProtocolError(
            f"PROXY v2 header: declares {size} bytes, more than the {MAX_V2_LENGTH} accepted"
        )
    total = V2_HEADER + size
    if len(data) < total:
        return NEED_MORE
    family, addr_len, ip = _FAMILIES[fam]
    if size < addr_len:
        raise ProxyProtocolError(
            f"PROXY v2 header: {family} needs {addr_len} address bytes, the header holds {size}"
        )
    src = dst = None
    if command == 1 and ip:
        n = 4 if ip == 4 else 16
        at = V2_HEADER
        make = ipaddress.IPv4Address if ip == 4 else ipaddress.IPv6Address
        src_ip = _text(make(bytes(data[at : at + n])))
        dst_ip = _text(make(bytes(data[at + n : at + 2 * n])))
        sport, dport = struct.unpack_from("!HH", data, at + 2 * n)
        src, dst = (src_ip, sport), (dst_ip, dport)
    tlvs = _tlvs(data, V2_HEADER + addr_len, total)
    return ProxyHeader(2, "PROXY" if command else "LOCAL", family, src, dst, tlvs, total)


def _tlvs(data: bytes | bytearray, at: int, end: int) -> tuple[tuple[int, bytes], ...]:
    out = []
    while at < end:
        if at + 3 > end:
            raise ProxyProtocolError(
                f"PROXY v2 header: {end - at} stray bytes at offset {at}, a TLV takes at least 3"
            )
        kind, n = data[at], int.from_bytes(data[at + 1 : at + 3], "big")
        if at + 3 + n > end:
            raise ProxyProtocolError(
                f"PROXY v2 header: TLV 0x{kind:02x} at offset {at} declares {n} bytes,"
                f" {end - at - 3} are left"
            )
        out.append((kind, bytes(data[at + 3 : at + 3 + n])))
        at += 3 + n
    return tuple(out)


# -- encoding ---------------------------------------------------------------------------

Address = tuple[str, int]
IP = ipaddress.IPv4Address | ipaddress.IPv6Address


def _text(ip: IP) -> str:
    """An address as text; IPv4-mapped IPv6 as ``::ffff:a.b.c.d`` on every Python."""
    mapped = getattr(ip, "ipv4_mapped", None)
    return f"::ffff:{mapped}" if mapped is not None else str(ip)


def _pair(src: Address, dst: Address) -> tuple[IP, IP]:
    ips = []
    for host, port in (src, dst):
        ip = ipaddress.ip_address(host)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if not 0 <= port <= 65535:
            raise ValueError(f"port {port} of {host} is out of 0-65535")
        ips.append(ip)
    if ips[0].version != ips[1].version:  # HAProxy: map the IPv4 one into IPv6
        ips = [ipaddress.IPv6Address(f"::ffff:{ip}") if ip.version == 4 else ip for ip in ips]
    return ips[0], ips[1]


def encode_v1(src: Address, dst: Address) -> bytes:
    """``PROXY TCP4|TCP6 <src> <dst> <sport> <dport>\\r\\n`` for a TCP connection."""
    s, d = _pair(src, dst)
    proto = "TCP4" if s.version == 4 else "TCP6"
    return f"PROXY {proto} {_text(s)} {_text(d)} {src[1]} {dst[1]}\r\n".encode("ascii")


def encode_v2(
    src: Address | None,
    dst: Address | None,
    *,
    transport: Literal["tcp", "udp"] = "tcp",
    command: Literal["PROXY", "LOCAL"] = "PROXY",
) -> bytes:
    """A binary v2 header; LOCAL carries no address (``src``/``dst`` are ignored)."""
    if command == "LOCAL":
        return V2_SIGNATURE + b"\x20\x00\x00\x00"
    if command != "PROXY":
        raise ValueError(f"command {command!r} is not PROXY or LOCAL")
    if transport not in ("tcp", "udp"):
        raise ValueError(f"transport {transport!r} is not tcp or udp")
    if src is None or dst is None:
        raise ValueError("the PROXY command needs both addresses")
    s, d = _pair(src, dst)
    fam = (0x10 if s.version == 4 else 0x20) | (1 if transport == "tcp" else 2)
    body = s.packed + d.packed + struct.pack("!HH", src[1], dst[1])
    return V2_SIGNATURE + struct.pack("!BBH", 0x21, fam, len(body)) + body
