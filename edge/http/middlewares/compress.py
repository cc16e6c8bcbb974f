"""Traefik v3's ``compress`` middleware (pkg/middlewares/compress): responses
encoded with gzip, brotli or zstd as the client accepts, streamed chunk by chunk.

Three layers, all sans-IO (no socket, no loop):

- **Negotiation** (:class:`Negotiator`), built once per configuration: a request's
  ``Accept-Encoding`` values give one of the configured encodings, ``identity`` or
  :data:`NOT_ACCEPTABLE`, as Traefik's ``getCompressionEncoding``: q-values (0 is
  refused), ``*`` (the ``defaultEncoding``, else the first of ``encodings``), ties
  broken by the order of ``encodings`` (``*`` before them, ``identity`` after), an
  empty value meaning identity. Clients send few distinct values, so each verdict
  is kept by the raw value (up to :data:`VERDICTS_KEPT`): a request pays a dict
  lookup.
- **Encoders** (:class:`Encoder`), one per exchange: ``compress(chunk)`` returns
  what the chunk encodes to, flushed (a sync flush for gzip, a flush for brotli, a
  block flush for zstd), so every chunk the upstream sends reaches the client as
  soon as it came (a server-sent-events stream keeps flowing); ``finish()`` ends the
  stream. Nothing of the body is kept but the codec's own window: memory per
  exchange is bounded (measured: gzip about 110 KiB, brotli quality 6 about
  500 KiB, zstd level 3 about 820 KiB).
- **The decision** (:meth:`Compress.verdict`), on each response head of a request
  that negotiated a coding: :data:`PLAIN` (left as it is), :data:`COMPRESS`
  (``Content-Encoding`` set, ``Content-Length`` and ``Accept-Ranges`` dropped, the
  body re-framed by the writer) or :data:`UNKNOWN_LENGTH` (no Content-Length).

:meth:`Compress.response` is the pipeline's response filter (the hook of
:mod:`edge.http.middlewares`): it negotiates, decides, edits the head and returns
the encoder as the body's filter.

A body of unknown length (chunked, or until close) is compressed from its first
chunk, whatever ``minResponseBodyBytes`` says, as Traefik's proxy does: Go's
ReverseProxy flushes a response without Content-Length after every write, and a
flush before the decision starts compression in Traefik's writers (gzhttp's and
its brotli/zstd one). Holding such a body until the minimum arrived would stall a
server-sent-events stream, which Traefik serves compressed as it comes.

What is never compressed, as Traefik: a HEAD request; a request whose own
Content-Type is excluded (``application/grpc`` always is); a response already
encoded (any ``Content-Encoding``), a range (``Content-Range``: a 206), a 1xx
(101 included: an upgrade's tunnel), 204 or 304, a response whose Content-Type is
excluded, not included, or does not parse; a body shorter than
``minResponseBodyBytes`` (1024 when unset or 0). ``Vary: Accept-Encoding`` is
added to every response of a request that negotiated an encoding, compressed or
not (the answer would differ with another Accept-Encoding); none is added when the
client asked for none. The ETag is kept as it came, as Traefik keeps it (neither
klauspost's gzhttp nor Traefik's brotli/zstd writer touches it by default): a
backend comparing ``If-None-Match`` byte for byte still answers 304. Edge never
sniffs a body, so a response without Content-Type is compressed.

Where edge differs from Traefik on purpose: Traefik's gzip path (klauspost's
gzhttp) looks for ``gzip`` itself and so leaves ``Accept-Encoding: *`` uncompressed
although its negotiation chose gzip (its own test calls it a limitation); edge
follows the negotiation and its documentation (``*`` gives the default
encoding). Content codings are matched case-insensitively (RFC 9110 8.4.1), and
tabs are whitespace like spaces.

Invariant: per-configuration work (content types parsed, the negotiation table)
is done once in :class:`Compress`; a request pays one lookup, a response one
decision on its head, and each chunk one codec call.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Sequence

import brotli
import zstandard

from edge.config.dynamic import COMPRESS_ENCODINGS, MediaType, media_type
from edge.http.codec import RequestHead
from edge.http.codec.base import Header
from edge.http.middlewares import BodyFilter, Forward, Middleware, Reply

__all__ = [
    "BROTLI",
    "COMPRESS",
    "DEFAULT_ENCODINGS",
    "DEFAULT_MIN_BYTES",
    "GZIP",
    "IDENTITY",
    "NOT_ACCEPTABLE",
    "PLAIN",
    "UNKNOWN_LENGTH",
    "WILDCARD",
    "ZSTD",
    "Compress",
    "Encoder",
    "Negotiator",
    "encoder",
    "has_vary",
]

GZIP = "gzip"
BROTLI = "br"
ZSTD = "zstd"
IDENTITY = "identity"
WILDCARD = "*"
NOT_ACCEPTABLE = "not_acceptable"
"""No encoding the client accepts (``identity;q=0`` and nothing known): edge sends the
response as it is, as Traefik does (Traefik's TODO: a 415)."""

DEFAULT_ENCODINGS = COMPRESS_ENCODINGS
"""Traefik's default ``encodings``, in its order of preference."""
DEFAULT_MIN_BYTES = 1024
"""Traefik's (and gzhttp's) ``minResponseBodyBytes`` when unset or not positive."""
ALWAYS_EXCLUDED = ("application/grpc",)
"""Excluded whatever the configuration says (Traefik's ``excludes`` start with it)."""

VERDICTS_KEPT = 256
"""Per middleware, the Accept-Encoding values, and apart the Content-Type values,
whose verdict is kept (clients and backends send few; a flood of made-up ones is
judged each time, never kept)."""

# The levels Traefik's libraries use by default: gzip's DefaultCompression (zlib's
# 6), andybalholm/brotli's DefaultCompression (6), klauspost zstd's SpeedDefault
# (about zstd's level 3).
GZIP_LEVEL = 6
BROTLI_QUALITY = 6
ZSTD_LEVEL = 3


# --- negotiation ---------------------------------------------------------------------


class Negotiator:
    """Traefik's choice of an encoding from a request's Accept-Encoding values."""

    __slots__ = ("_priority", "_verdicts", "default", "encodings")

    def __init__(self, encodings: Sequence[str], default: str = "") -> None:
        self.encodings = tuple(encodings)
        self.default = default
        # The lower, the more preferred at equal weight: * first, identity last.
        self._priority = {WILDCARD: -1, IDENTITY: len(self.encodings)}
        for i, name in enumerate(self.encodings):
            self._priority[name] = i
        self._verdicts: dict[tuple[bytes, ...], str] = {}

    def choose(self, values: Sequence[bytes] | None) -> str:
        """The encoding for a request whose Accept-Encoding lines are ``values``
        (None: no such header): one of ``encodings``, ``identity`` or
        :data:`NOT_ACCEPTABLE`; without the header, the ``defaultEncoding`` or
        identity (Traefik's issue 9734: a client that says nothing gets no coding)."""
        if values is None:
            return self.default or IDENTITY
        key = tuple(values)
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = self._choose(key)
            if len(self._verdicts) < VERDICTS_KEPT:
                self._verdicts[key] = verdict
        return verdict

    def _choose(self, values: tuple[bytes, ...]) -> str:
        if values == (b"",):  # RFC 9110 12.5.3: an empty value asks for no coding
            return IDENTITY
        accepted = self.parse(values)
        if not accepted:
            return NOT_ACCEPTABLE
        priority = self._priority
        # Highest weight first; at equal weight, the configured order.
        best = min(accepted, key=lambda e: (-e[1], priority[e[0]]))[0]
        if best == WILDCARD:
            return self.default or self.encodings[0]
        return best

    def parse(self, values: Iterable[bytes]) -> list[tuple[str, float]]:
        """The codings of ``values`` edge knows (the configured ones, ``*`` and
        ``identity``), in order, with their weights; a weight of 0 (or one that does
        not parse, as Go's ParseFloat gives 0) leaves the coding out."""
        known = self._priority
        found: list[tuple[str, float]] = []
        for line in values:
            text = _OWS.sub("", line.decode("latin-1")).lower()
            for item in text.split(","):
                coding, _, params = item.partition(";")
                if coding not in known:
                    continue
                weight = 1.0
                if params.startswith("q="):
                    weight = _weight(params[2:])
                    if weight == 0:
                        continue
                found.append((coding, weight))
        return found


_OWS = re.compile(r"[ \t]+")
_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?")


def _weight(text: str) -> float:
    # Go's strconv.ParseFloat over what follows "q=" (a further parameter makes it
    # fail, and a failure reads 0).
    if not _FLOAT.fullmatch(text):
        return 0.0
    return float(text)


# --- encoders ------------------------------------------------------------------------


class Encoder(BodyFilter):
    """One response body's encoder: each chunk in, its encoding out, flushed. It is
    the response's body filter as it is (``data`` is ``compress``, ``end`` is
    ``finish``: no call between the exchange and the codec)."""

    __slots__ = ()

    name = ""

    def compress(self, chunk: bytes) -> bytes:
        raise NotImplementedError

    def finish(self) -> bytes:
        raise NotImplementedError


class GzipEncoder(Encoder):
    __slots__ = ("_z",)

    name = GZIP

    def __init__(self) -> None:
        # wbits 31: a gzip member (header and CRC-32 trailer), as RFC 9110 8.4.1.3 names it.
        self._z = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)

    def compress(self, chunk: bytes) -> bytes:
        z = self._z
        return z.compress(chunk) + z.flush(zlib.Z_SYNC_FLUSH)

    def finish(self) -> bytes:
        return self._z.flush(zlib.Z_FINISH)

    data = compress
    end = finish


class BrotliEncoder(Encoder):
    __slots__ = ("_b",)

    name = BROTLI

    def __init__(self) -> None:
        self._b = brotli.Compressor(quality=BROTLI_QUALITY)

    def compress(self, chunk: bytes) -> bytes:
        b = self._b
        return b.process(chunk) + b.flush()

    def finish(self) -> bytes:
        return self._b.finish()

    data = compress
    end = finish


class ZstdEncoder(Encoder):
    __slots__ = ("_z",)

    name = ZSTD

    def __init__(self) -> None:
        # A compressor per exchange: one zstandard compressor drives one stream at a
        # time, and exchanges interleave on the loop.
        self._z = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compressobj()

    def compress(self, chunk: bytes) -> bytes:
        z = self._z
        return z.compress(chunk) + z.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)

    def finish(self) -> bytes:
        return self._z.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH)

    data = compress
    end = finish


_ENCODERS: dict[str, type[Encoder]] = {
    GZIP: GzipEncoder,
    BROTLI: BrotliEncoder,
    ZSTD: ZstdEncoder,
}


_CODINGS = {name: name.encode() for name in _ENCODERS}


def encoder(name: str) -> Encoder:
    """A fresh encoder for the content coding ``name`` (``gzip``, ``br``, ``zstd``)."""
    return _ENCODERS[name]()


# --- the middleware and its decision per response -------------------------------------

PLAIN = 0
"""The response goes as it came (with Vary: Accept-Encoding added)."""
COMPRESS = 1
"""The response is compressed: Content-Encoding set, Content-Length and Accept-Ranges
dropped, the body sent chunked (close-delimited to an HTTP/1.0 client)."""
UNKNOWN_LENGTH = 2
"""Compressible, and no Content-Length says whether the body reaches
``minResponseBodyBytes`` (chunked, or until close): compressed from its first
chunk, as Traefik's proxy compresses it (the module's doc)."""

# The request fields negotiate() reads, found in a head's bytes (a value without the
# whitespace around it, as the codecs give it).
_REQUEST_FIELDS = re.compile(
    rb"\r\n(accept-encoding|content-type)[ \t]*:[ \t]*([^\r\n]*?)[ \t]*(?=\r\n)",
    re.IGNORECASE,
)


class Compress(Middleware):
    """A route's compress middleware: the negotiation and the content-type filter,
    built once; :meth:`negotiate` per request, :meth:`verdict` per response."""

    __slots__ = ("_types", "excluded", "included", "min_bytes", "negotiator")

    def __init__(
        self,
        name: str,
        encodings: Sequence[str] = DEFAULT_ENCODINGS,
        default_encoding: str = "",
        min_response_body_bytes: int = DEFAULT_MIN_BYTES,
        included_content_types: Sequence[str] = (),
        excluded_content_types: Sequence[str] = (),
    ) -> None:
        super().__init__(name)
        self.negotiator = Negotiator(encodings, default_encoding)
        self.min_bytes = (
            min_response_body_bytes if min_response_body_bytes > 0 else DEFAULT_MIN_BYTES
        )
        self.included = tuple(_parsed(t) for t in included_content_types)
        self.excluded = tuple(_parsed(t) for t in (*ALWAYS_EXCLUDED, *excluded_content_types))
        self._types: dict[bytes, bool] = {}  # Content-Type value -> compressible

    def negotiate(self, head: RequestHead) -> str | None:
        """The content coding for the response to ``head``, or None when it is to
        be left alone (no Vary either): a HEAD, an excluded request Content-Type
        (Traefik's guard for gRPC and event streams), a client asking for
        identity, or for nothing edge knows."""
        if head.method == b"HEAD":
            return None
        values: list[bytes] | None = None
        content_type = None
        raw = head.raw
        if raw:  # the two fields found in the head's bytes, not its whole list cut
            for m in _REQUEST_FIELDS.finditer(raw):
                if m.group(1)[0] in b"aA":
                    if values is None:
                        values = []
                    values.append(m.group(2))
                elif content_type is None:
                    content_type = m.group(2)
        else:
            for name, value in head.headers:
                lower = name.lower()
                if lower == b"accept-encoding":
                    if values is None:
                        values = []
                    values.append(value)
                elif lower == b"content-type" and content_type is None:
                    content_type = value
        if content_type is not None and self._excluded_request(content_type):
            return None
        chosen = self.negotiator.choose(values)
        return chosen if chosen in _ENCODERS else None

    def _excluded_request(self, value: bytes) -> bool:
        # Traefik compares the request's media type alone with the exclusions.
        parsed = media_type(value.decode("latin-1"))
        return parsed is not None and any(parsed.type == e.type for e in self.excluded)

    def compressible(self, content_type: bytes | None) -> bool:
        """Whether a response of this Content-Type (None: none sent) may be
        compressed: included (when ``includedContentTypes`` is set), not excluded;
        one that does not parse is not, as in Traefik. A route's responses carry few
        Content-Type values: each verdict is kept (up to :data:`VERDICTS_KEPT`)."""
        if content_type is None:
            return True
        verdict = self._types.get(content_type)
        if verdict is None:
            verdict = self._compressible(content_type)
            if len(self._types) < VERDICTS_KEPT:
                self._types[content_type] = verdict
        return verdict

    def _compressible(self, content_type: bytes) -> bool:
        parsed = media_type(content_type.decode("latin-1"))
        if parsed is None:
            return False
        if self.included and not any(i.matches(parsed) for i in self.included):
            return False
        return not any(e.matches(parsed) for e in self.excluded)

    def response(self, fwd: Forward, reply: Reply) -> BodyFilter | None:
        """The response filter (edge.http.middlewares' hook): ``Vary`` for a request
        that negotiated a coding; for a response the verdict lets through, the head
        made a compressed one's and an encoder as the body's filter."""
        head = fwd.head
        encoding = self.negotiate(head) if head is not None else None
        if encoding is None:
            return None
        headers = reply.headers
        if not has_vary(headers):
            reply.add(b"Vary", b"Accept-Encoding")
        if self.verdict(reply.status, headers, reply.length) == PLAIN:
            return None
        # UNKNOWN_LENGTH too: compressed from its first chunk (the module's doc).
        reply.remove(b"Accept-Ranges")  # ranges of the encoded body are not served
        reply.add(b"Content-Encoding", _CODINGS[encoding])
        reply.set_length(None)  # chunked (HTTP/1.1), else until close
        return _ENCODERS[encoding]()

    def verdict(self, status: int, headers: Iterable[Header], length: int | None) -> int:
        """PLAIN, COMPRESS or UNKNOWN_LENGTH for a response with a body of
        ``length`` bytes (None: not known) to a request that negotiated a coding."""
        if status < 200 or status in (204, 304):
            return PLAIN
        content_type: bytes | None = None
        for name, value in headers:
            lower = name.lower()
            if lower == b"content-encoding" or lower == b"content-range":
                if value:  # already encoded; or a part of the representation
                    return PLAIN
            elif lower == b"content-type" and content_type is None:
                content_type = value
        if not self.compressible(content_type):
            return PLAIN
        if length is None:
            return UNKNOWN_LENGTH
        return COMPRESS if length >= self.min_bytes else PLAIN


def _parsed(text: str) -> MediaType:
    parsed = media_type(text)
    if parsed is None:  # judged by the model's check()
        raise ValueError(f"invalid media type {text!r}")
    return parsed


def has_vary(headers: Iterable[Header]) -> bool:
    """Whether a Vary line of ``headers`` names Accept-Encoding (or ``*``)."""
    for name, value in headers:
        if name.lower() == b"vary":
            for token in value.split(b","):
                token = token.strip().lower()
                if token == b"accept-encoding" or token == b"*":
                    return True
    return False
