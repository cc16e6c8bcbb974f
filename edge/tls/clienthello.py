"""The TLS ClientHello parser: the first bytes of a connection -> SNI, ALPN, versions (pure).

Owns the decision the TCP entrypoint's peek needs: do these bytes start a TLS handshake,
and if so, what does the client's ClientHello ask for. No I/O: the caller reads, keeps
every byte it read (they are replayed to a backend or fed to the TLS terminator), and
calls :meth:`ClientHelloParser.parse` with everything received so far after each read.
The caller also owns the peek deadline (:data:`PEEK_TIMEOUT`).

Answers:

- :data:`NOT_TLS`: the bytes cannot start a TLS handshake record. Decided from the first
  byte when it is not ``0x16`` (handshake), else from the second when it is not ``0x03``
  (record version major), so plain HTTP and PROXY protocol headers never wait.
  SSLv2-compatible ClientHellos (first byte with the high bit set) are NOT_TLS: no TLS
  version edge speaks accepts them, and the HTTP side refuses them as a bad request.
- :data:`NEED_MORE`: a TLS handshake so far, not yet the whole ClientHello.
- a :class:`ClientHello`, once the records carrying the whole message are in.
- :class:`ClientHelloError` for bytes that started like TLS but are not a well-formed
  ClientHello (bad lengths, another content type between its records, another handshake
  message, bytes after it in its last record, two copies of an extension read here), or
  whose records would exceed ``max_size`` (:data:`MAX_SIZE` unless given), or whose
  server name is not a host name RFC 6066 allows (a trailing dot, a byte outside
  printable ASCII). It derives from :class:`~edge.errors.EdgeError` and carries the
  alert a TLS server answers it with (``alert``); the caller closes the connection.

A server name ending in a dot (``example.com.``) is refused, not routed as
``example.com``: RFC 6066 section 3 says the host_name is "without a trailing dot", and
Go's crypto/tls, hence Traefik, rejects such a ClientHello while parsing it. The alert is
``unrecognized_name`` (112), the one RFC 6066 defines for a server name a server will
not serve, and the one OpenSSL and BoringSSL send for a host_name they refuse to take
(an embedded NUL, over 255 bytes); ``decode_error`` is for bytes that do not parse, and
these do. (Go answers every ClientHello its parser rejects with ``unexpected_message``,
one alert for all, which says nothing of the name.)

The ClientHello may be split across any number of reads and across any number of TLS
records (large post-quantum key shares make 1 to 16+ KB hellos that clients send in
several records). Invariants: the answer for a byte string does not depend on how it
was cut into calls; a prefix of bytes that give a ClientHello gives NEED_MORE; the work
done over all calls is linear in the bytes given, bounded by ``max_size`` (the parser
keeps the offset of the next record header and the payload spans seen, so each call
only reads the new records; a call looks at record headers, and at payload bytes only
once the message is complete).
"""

from __future__ import annotations

import enum
import struct

import msgspec

from edge.errors import EdgeError

__all__ = [
    "ALERT_DECODE_ERROR",
    "ALERT_UNRECOGNIZED_NAME",
    "MAX_SIZE",
    "NEED_MORE",
    "NOT_TLS",
    "PEEK_TIMEOUT",
    "ClientHello",
    "ClientHelloError",
    "ClientHelloParser",
    "Verdict",
    "parse_client_hello",
]

PEEK_TIMEOUT = 5.0
"""Seconds the TCP entrypoint waits for a connection's first bytes to decide (its job)."""

MAX_SIZE = 64 * 1024
"""Largest total size, record headers included, of the records carrying a ClientHello."""

MAX_RECORD = 1 << 14
"""Largest TLSPlaintext fragment (RFC 8446 section 5.1)."""

_HANDSHAKE = 0x16
_CLIENT_HELLO = 0x01
_EXT_SERVER_NAME = 0
_EXT_ALPN = 16
_EXT_SUPPORTED_VERSIONS = 43
_READ = frozenset((_EXT_SERVER_NAME, _EXT_ALPN, _EXT_SUPPORTED_VERSIONS))
_EXTENSION_HEADER = struct.Struct(">HH")  # extension type, length
_NAME_BYTES = bytes(range(0x21, 0x7F))  # printable ASCII: what a host_name may hold
# TLS alert descriptions (RFC 8446 section 6.2) a ClientHello is refused with.
ALERT_DECODE_ERROR = 50
ALERT_UNRECOGNIZED_NAME = 112


class ClientHelloError(EdgeError):
    """Bytes that began a TLS handshake are not a well-formed ClientHello, or are too large,
    or name a server no host name can be.

    ``alert``: the TLS alert description to refuse it with: ``decode_error`` (50) for
    bytes that do not parse (RFC 8446 section 6: a message that cannot be parsed "MUST"
    get it), ``unrecognized_name`` (112) for a server name RFC 6066 does not allow.
    """

    def __init__(self, message: str, alert: int = ALERT_DECODE_ERROR) -> None:
        self.alert = alert
        super().__init__(message)


class Verdict(enum.Enum):
    """What :meth:`ClientHelloParser.parse` answers when it has no ClientHello to give."""

    NEED_MORE = "need more bytes"
    NOT_TLS = "not TLS"


NEED_MORE = Verdict.NEED_MORE
NOT_TLS = Verdict.NOT_TLS


class ClientHello(msgspec.Struct, frozen=True):
    """What a ClientHello asks for.

    ``server_name``: the SNI host_name, lowercased (never with a trailing dot: such a
    ClientHello is refused); None without SNI.
    ``alpn``: the ALPN protocol names in the client's order (bytes as latin-1, lossless).
    ``versions``: the versions offered, from supported_versions in the client's order with
    GREASE values left out, else the legacy_version alone (0x0303 is TLS 1.2, 0x0304 1.3).
    ``length``: bytes of the records that carried the ClientHello; what the caller holds
    beyond them came after it.
    """

    server_name: str | None
    alpn: tuple[str, ...]
    versions: tuple[int, ...]
    length: int


class ClientHelloParser:
    """Incremental parse of one connection's first bytes; see the module docstring.

    Call :meth:`parse` with all bytes received so far, each call with the previous bytes
    plus what arrived since (the buffer only grows). The first answer other than NEED_MORE
    is final: later calls repeat it (or raise the same error again).
    """

    __slots__ = ("_answer", "_error", "_have", "_need", "_pos", "_spans", "max_size")

    def __init__(self, max_size: int = MAX_SIZE) -> None:
        self.max_size = max_size
        self._pos = 0  # offset of the next record header
        self._spans: list[tuple[int, int]] = []  # handshake payload of each record seen
        self._have = 0  # handshake payload bytes seen
        self._need = 0  # handshake message size (header included) once known, else 0
        self._answer: ClientHello | Verdict | None = None
        self._error: ClientHelloError | None = None

    def parse(self, data: bytes | bytearray | memoryview) -> ClientHello | Verdict:
        """Answer for ``data``, everything the client sent so far."""
        if self._answer is not None:
            return self._answer
        if self._error is not None:
            raise self._error
        answer: ClientHello | Verdict
        try:
            if (
                self._pos == 0
                and len(data) > 8
                and data[0] == _HANDSHAKE
                and data[1] == 3
                and data[5] == _CLIENT_HELLO
            ):
                # The common case, decided without the record walk: the first read holds
                # one record that is exactly the whole ClientHello (what _parse would find).
                end = 5 + ((data[3] << 8) | data[4])
                if (
                    end <= len(data)
                    and end - 5 <= MAX_RECORD
                    and end <= self.max_size
                    and int.from_bytes(data[6:9], "big") + 9 == end
                ):
                    answer = self._answer = _parse_message(bytes(data[5:end]), end)
                    return answer
            answer = self._parse(data)
        except ClientHelloError as e:
            self._error = e
            raise
        if answer is not NEED_MORE:
            self._answer = answer
        return answer

    def _parse(self, data: bytes | bytearray | memoryview) -> ClientHello | Verdict:
        size = len(data)
        pos = self._pos
        if pos == 0:
            if size == 0:
                return NEED_MORE
            if data[0] != _HANDSHAKE:
                return NOT_TLS
            if size == 1:
                return NEED_MORE
            if data[1] != 3:
                return NOT_TLS
        while pos + 5 <= size:
            kind = data[pos]
            if kind != _HANDSHAKE:
                raise ClientHelloError(
                    f"record at byte {pos} has content type {kind}, not handshake (22),"
                    " before the ClientHello is complete"
                )
            if data[pos + 1] != 3:
                raise ClientHelloError(
                    f"record at byte {pos} has version major {data[pos + 1]}, not 3"
                )
            length = (data[pos + 3] << 8) | data[pos + 4]
            if length == 0:
                raise ClientHelloError(f"record at byte {pos} is an empty handshake record")
            if length > MAX_RECORD:
                raise ClientHelloError(
                    f"record at byte {pos} is {length} bytes long, over the TLS limit of"
                    f" {MAX_RECORD}"
                )
            end = pos + 5 + length
            if end > self.max_size:
                raise ClientHelloError(
                    f"ClientHello records exceed {self.max_size} bytes (record at byte {pos}"
                    f" ends at {end})"
                )
            if end > size:
                if not self._need and not self._spans and length >= 4 and pos + 9 <= size:
                    # the first record is still arriving but its first 4 bytes are the
                    # handshake header: a wrong type or an oversize hello is refused now
                    self._declare(data[pos + 5 : pos + 9], end, length)
                return NEED_MORE
            self._spans.append((pos + 5, end))
            self._have += length
            self._pos = pos = end
            if not self._need and self._have >= 4:
                self._declare(self._payload(data)[:4], end, self._have)
            if self._need and self._have >= self._need:
                if self._have > self._need:
                    raise ClientHelloError(
                        f"{self._have - self._need} bytes follow the ClientHello in its last record"
                    )
                return _parse_message(self._payload(data), end)
        return NEED_MORE

    def _declare(self, head: bytes | bytearray | memoryview, end: int, have: int) -> None:
        """Read the handshake header ``head``; ``have`` payload bytes end at offset ``end``."""
        if head[0] != _CLIENT_HELLO:
            raise ClientHelloError(
                f"first handshake message has type {head[0]}, not ClientHello (1)"
            )
        self._need = 4 + int.from_bytes(head[1:4], "big")
        # Each further record carries at most MAX_RECORD bytes behind a 5-byte header.
        rest = max(0, self._need - have)
        least = end + rest + 5 * -(-rest // MAX_RECORD)
        if least > self.max_size:
            raise ClientHelloError(
                f"ClientHello of {self._need} bytes exceeds the limit of"
                f" {self.max_size} bytes of records"
            )

    def _payload(self, data: bytes | bytearray | memoryview) -> bytes:
        """The handshake bytes of the records seen, joined."""
        spans = self._spans
        if len(spans) == 1:
            start, end = spans[0]
            return bytes(data[start:end])
        return b"".join([data[start:end] for start, end in spans])


def parse_client_hello(
    data: bytes | bytearray | memoryview, *, max_size: int = MAX_SIZE
) -> ClientHello | Verdict:
    """One-shot :meth:`ClientHelloParser.parse` of ``data`` (no state kept between calls)."""
    return ClientHelloParser(max_size).parse(data)


def _parse_message(msg: bytes, length: int) -> ClientHello:
    """Parse a whole ClientHello handshake message (``msg``, 4-byte header included)."""
    end = len(msg)
    pos = 4 + 2 + 32  # header, legacy_version, random
    if pos + 1 > end:
        raise ClientHelloError(f"ClientHello of {end - 4} bytes is too short for its random")
    legacy_version = (msg[4] << 8) | msg[5]
    session_id = msg[pos]
    if session_id > 32:
        raise ClientHelloError(f"legacy_session_id of {session_id} bytes, over 32")
    pos += 1 + session_id
    suites = _u16(msg, pos, end, "cipher_suites")
    if suites < 2 or suites % 2:
        raise ClientHelloError(f"cipher_suites length {suites} is not a positive even number")
    pos += 2 + suites
    if pos + 1 > end:
        raise ClientHelloError("ClientHello ends before legacy_compression_methods")
    methods = msg[pos]
    if methods < 1:
        raise ClientHelloError("legacy_compression_methods is empty")
    pos += 1 + methods
    if pos > end:
        raise ClientHelloError("legacy_compression_methods runs past the ClientHello")
    server_name: str | None = None
    alpn: tuple[str, ...] = ()
    versions: tuple[int, ...] = (legacy_version,)
    if pos == end:  # no extensions at all (allowed before TLS 1.3)
        return ClientHello(server_name, alpn, versions, length)
    total = _u16(msg, pos, end, "extensions")
    pos += 2
    if pos + total != end:
        raise ClientHelloError(
            f"extensions length {total} does not match the {end - pos} bytes left"
        )
    seen = set()  # the extensions read here: a second copy would make the answer ambiguous
    unpack = _EXTENSION_HEADER.unpack_from
    while pos < end:
        if pos + 4 > end:
            raise ClientHelloError(f"extension header at byte {pos} runs past the extensions")
        kind, size = unpack(msg, pos)
        pos += 4
        stop = pos + size
        if stop > end:
            raise ClientHelloError(f"extension {kind} of {size} bytes runs past the extensions")
        if kind in _READ:
            if kind in seen:
                raise ClientHelloError(f"extension {kind} appears twice")
            seen.add(kind)
            if kind == _EXT_SERVER_NAME:
                server_name = _server_name(msg, pos, stop)
            elif kind == _EXT_ALPN:
                alpn = _alpn(msg, pos, stop)
            else:
                versions = _versions(msg, pos, stop)
        pos = stop
    return ClientHello(server_name, alpn, versions, length)


def _u16(msg: bytes, pos: int, end: int, what: str) -> int:
    if pos + 2 > end:
        raise ClientHelloError(f"ClientHello ends inside the length of {what}")
    return (msg[pos] << 8) | msg[pos + 1]


def _server_name(msg: bytes, pos: int, end: int) -> str | None:
    """The host_name of a server_name extension (RFC 6066 section 3)."""
    size = _u16(msg, pos, end, "server_name_list")
    pos += 2
    if size == 0 or pos + size != end:
        raise ClientHelloError(f"server_name list length {size} does not fill its extension")
    name: str | None = None
    while pos < end:
        if pos + 3 > end:
            raise ClientHelloError("server_name entry header runs past its extension")
        kind = msg[pos]
        length = (msg[pos + 1] << 8) | msg[pos + 2]
        pos += 3
        if pos + length > end:
            raise ClientHelloError(f"server_name entry of {length} bytes runs past its list")
        if kind == 0:
            if name is not None:
                raise ClientHelloError("server_name holds two host_name entries")
            raw = msg[pos : pos + length]
            if not raw:
                raise ClientHelloError("server_name host_name is empty")
            if raw.translate(None, _NAME_BYTES):  # a byte outside 0x21..0x7e
                raise ClientHelloError(
                    f"server_name host_name {raw!r} is not a host name", ALERT_UNRECOGNIZED_NAME
                )
            if raw[-1] == 0x2E:  # "."
                raise ClientHelloError(
                    f"server_name host_name {raw.decode('ascii')!r} ends with a dot (RFC 6066 section 3)",
                    ALERT_UNRECOGNIZED_NAME,
                )
            name = raw.decode("ascii").lower()
        pos += length
    return name


def _alpn(msg: bytes, pos: int, end: int) -> tuple[str, ...]:
    """The protocol names of an ALPN extension (RFC 7301 section 3.1)."""
    size = _u16(msg, pos, end, "protocol_name_list")
    pos += 2
    if size == 0 or pos + size != end:
        raise ClientHelloError(f"ALPN list length {size} does not fill its extension")
    names = []
    while pos < end:
        length = msg[pos]
        pos += 1
        if length == 0 or pos + length > end:
            raise ClientHelloError(f"ALPN protocol name of {length} bytes is empty or too long")
        names.append(msg[pos : pos + length].decode("latin-1"))
        pos += length
    return tuple(names)


def _versions(msg: bytes, pos: int, end: int) -> tuple[int, ...]:
    """The versions of a supported_versions extension (RFC 8446 section 4.2.1), no GREASE."""
    if pos == end:
        raise ClientHelloError("supported_versions is empty")
    size = msg[pos]
    pos += 1
    if size < 2 or size % 2 or pos + size != end:
        raise ClientHelloError(
            f"supported_versions list of {size} bytes is not an even length filling its extension"
        )
    versions = []
    for i in range(pos, end, 2):
        hi, lo = msg[i], msg[i + 1]
        if hi == lo and lo & 0x0F == 0x0A:  # GREASE (RFC 8701): 0x0A0A, 0x1A1A, ...
            continue
        versions.append((hi << 8) | lo)
    return tuple(versions)
