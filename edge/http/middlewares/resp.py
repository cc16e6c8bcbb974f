"""RESP, the Redis protocol, sans-IO: commands encoded, replies parsed (RESP2 and RESP3).

Owns the bytes of edge's Redis client (:mod:`.redis`) and nothing else: no socket,
no loop. :func:`command` encodes a command as RESP's array of bulk strings;
:class:`Parser` buffers what the server sent (:meth:`Parser.feed`) and hands out
one whole reply at a time (:meth:`Parser.next`), :data:`NEED_DATA` while the next
is incomplete. Replies become Python values:

====================  ===========================  ==========================
RESP                  type byte                    value
====================  ===========================  ==========================
simple string         ``+``                        ``str``
error, blob error     ``-``, ``!``                 :class:`ReplyError` (not raised)
integer, big number   ``:``, ``(``                 ``int``
bulk, verbatim        ``$``, ``=``                 ``bytes`` (verbatim: its text only)
null, nil bulk/array  ``_``, ``$-1``, ``*-1``      ``None``
double, boolean       ``,``, ``#``                 ``float``, ``bool``
array, set            ``*``, ``~``                 ``list``
map                   ``%``                        ``dict`` (aggregate keys as tuples)
push                  ``>``                        :class:`Push` (a ``list``)
attribute             ``|``                        skipped: the reply after it
====================  ===========================  ==========================

Invariants: a reply is handed out only whole, so a split anywhere in the stream
changes nothing; input the protocol does not allow raises :class:`RESPError`
(the connection cannot be read past it); a reply still incomplete past
``max_size`` bytes raises it too, so a peer cannot make edge buffer without end.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "MAX_REPLY",
    "NEED_DATA",
    "Parser",
    "Push",
    "RESPError",
    "ReplyError",
    "bulk",
    "command",
]

MAX_REPLY = 8 * 1024 * 1024
"""Bytes a reply may take before it is whole (edge's replies are a few dozen)."""

MAX_DEPTH = 32
"""Aggregates nested deeper than this are refused (Python's stack stays small)."""


class _NeedData:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = _NeedData()
"""What :meth:`Parser.next` returns while the next reply is incomplete."""


class RESPError(Exception):
    """Bytes that are not RESP (or a reply over the size cap): the stream is lost."""


class ReplyError(Exception):
    """An error reply (``-ERR ...``, ``!``): a value the server answered, one command's.

    ``code`` is its first word (``ERR``, ``NOSCRIPT``, ``WRONGPASS``), as Redis
    prefixes each error with its kind."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = message.split(" ", 1)[0]

    def __eq__(self, other: object) -> bool:
        return type(other) is ReplyError and other.message == self.message

    def __hash__(self) -> int:
        return hash(self.message)


class Push(list):  # type: ignore[type-arg]
    """An out-of-band RESP3 push (``>``): not the reply to a command."""


def command(*args: bytes | str | int | float) -> bytes:
    """One command as RESP's array of bulk strings (numbers as their decimal text)."""
    return b"*%d\r\n" % len(args) + b"".join(bulk(arg) for arg in args)


def bulk(arg: bytes | str | int | float) -> bytes:
    """One argument of a command as a bulk string (a part of :func:`command`'s array)."""
    if isinstance(arg, bytes):
        data = arg
    elif isinstance(arg, str):
        data = arg.encode()
    elif isinstance(arg, bool):
        raise TypeError("a bool is not a Redis argument (write 0 or 1)")
    elif isinstance(arg, int):
        data = b"%d" % arg
    elif isinstance(arg, float):
        data = repr(arg).encode()
    else:
        raise TypeError(f"{type(arg).__name__} is not a Redis argument")
    return b"$%d\r\n%s\r\n" % (len(data), data)


class _Incomplete(Exception):
    """Raised inside a parse that ran out of bytes (caught by :meth:`Parser.next`)."""


_INCOMPLETE = _Incomplete()


class Parser:
    """Replies out of a stream of bytes (module doc)."""

    __slots__ = ("buf", "max_size", "pos")

    def __init__(self, max_size: int = MAX_REPLY) -> None:
        self.buf = bytearray()
        self.pos = 0  # where the next reply starts in buf
        self.max_size = max_size

    def feed(self, data: bytes) -> None:
        """Add bytes as they came (any split)."""
        if self.pos:
            del self.buf[: self.pos]
            self.pos = 0
        self.buf += data

    def next(self) -> object:
        """The next whole reply, or :data:`NEED_DATA`; raises :class:`RESPError`."""
        if self.pos >= len(self.buf):
            return NEED_DATA
        try:
            value, end = self._value(self.pos, 0)
        except _Incomplete:
            if len(self.buf) - self.pos > self.max_size:
                raise RESPError(f"a reply longer than {self.max_size} bytes") from None
            return NEED_DATA
        self.pos = end
        return value

    def _line(self, pos: int) -> tuple[bytes, int]:
        end = self.buf.find(b"\r\n", pos)
        if end < 0:
            if len(self.buf) - pos > 65536:
                raise RESPError("a header line longer than 64 KiB")
            raise _INCOMPLETE
        return bytes(self.buf[pos:end]), end + 2

    def _length(self, line: bytes, kind: str) -> int:
        if not (line.isdigit() or (line[:1] == b"-" and line[1:].isdigit())):
            raise RESPError(f"{kind} length {line[:32]!r} is not a number")
        n = int(line)
        if n < -1:
            raise RESPError(f"{kind} length {n} is negative")
        return n

    def _blob(self, pos: int, n: int) -> tuple[bytes, int]:
        end = pos + n
        if len(self.buf) < end + 2:
            if n > self.max_size:
                raise RESPError(f"a {n}-byte string is over {self.max_size} bytes")
            raise _INCOMPLETE
        if self.buf[end : end + 2] != b"\r\n":
            raise RESPError("a string not ended by CRLF")
        return bytes(self.buf[pos:end]), end + 2

    def _value(self, pos: int, depth: int) -> tuple[object, int]:
        if pos >= len(self.buf):
            raise _INCOMPLETE
        kind = self.buf[pos]
        line, pos = self._line(pos + 1)
        if kind == 0x2B:  # + simple string
            return line.decode("utf-8", "replace"), pos
        if kind == 0x24:  # $ bulk string
            n = self._length(line, "bulk string")
            return (None, pos) if n == -1 else self._blob(pos, n)
        if kind == 0x3A or kind == 0x28:  # : integer, ( big number
            digits = line[1:] if line[:1] in (b"-", b"+") else line
            if not digits.isdigit():
                raise RESPError(f"integer {line[:32]!r} is not a number")
            return int(line), pos
        if kind == 0x2D:  # - error
            return ReplyError(line.decode("utf-8", "replace")), pos
        if kind in _AGGREGATES:
            if depth >= MAX_DEPTH:
                raise RESPError(f"replies nested deeper than {MAX_DEPTH}")
            n = self._length(line, "aggregate")
            if n == -1:
                if kind != 0x2A:  # only RESP2's *-1 is a nil aggregate
                    raise RESPError(f"a {chr(kind)} aggregate of length -1")
                return None, pos
            if kind == 0x25:  # % map
                pairs: dict[object, object] = {}
                for _ in range(n):
                    key, pos = self._value(pos, depth + 1)
                    value, pos = self._value(pos, depth + 1)
                    pairs[_hashable(key)] = value
                return pairs, pos
            if kind == 0x7C:  # | attribute: n pairs, then the reply they describe
                for _ in range(2 * n):
                    _, pos = self._value(pos, depth + 1)
                return self._value(pos, depth)
            items: list[object] = []
            for _ in range(n):
                item, pos = self._value(pos, depth + 1)
                items.append(item)
            return (Push(items) if kind == 0x3E else items), pos
        if kind == 0x5F:  # _ null
            if line:
                raise RESPError(f"a null with data {line[:32]!r}")
            return None, pos
        if kind == 0x2C:  # , double
            text = line.lower()
            try:
                return float(text), pos  # "inf", "-inf", "nan" included
            except ValueError:
                raise RESPError(f"double {line[:32]!r} is not a number") from None
        if kind == 0x23:  # # boolean
            if line not in (b"t", b"f"):
                raise RESPError(f"boolean {line[:32]!r} is not t or f")
            return line == b"t", pos
        if kind == 0x21 or kind == 0x3D:  # ! blob error, = verbatim string
            n = self._length(line, "blob")
            if n < 0:
                raise RESPError("a blob of length -1")
            data, pos = self._blob(pos, n)
            if kind == 0x21:
                return ReplyError(data.decode("utf-8", "replace")), pos
            if len(data) < 4 or data[3:4] != b":":
                raise RESPError("a verbatim string without its format")
            return data[4:], pos
        raise RESPError(f"unknown reply type {bytes((kind,))!r}")


_AGGREGATES = frozenset(b"*~%>|")


def _hashable(value: object) -> object:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _hashable(v)) for k, v in value.items())
    return value
