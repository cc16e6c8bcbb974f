"""Traefik v3's ``buffering`` (vulcand/oxy's buffer): whole bodies held before they go on.

The request's body is read in full before the request goes upstream, and sent with
its length (``Content-Length``, a chunked one re-framed); the response's body is read
in full before anything of it goes to the client, and sent with its length. Each
body is held in memory up to ``memRequestBodyBytes`` / ``memResponseBodyBytes`` (1 MiB
when not positive), the rest in a temporary file (:class:`Spool`), and refused over
``maxRequestBodyBytes`` / ``maxResponseBodyBytes`` (no limit when not positive) with
413 ``Request Entity Too Large``: a request at once when its Content-Length says so,
else when the limit is passed; a response when it is passed (the upstream's
connection is dropped), as oxy's size error handler answers both.

The exchange holds the bodies (:attr:`Forward.spool` for the request, a filter with
``Reply.hold`` for the response: :mod:`edge.http.middlewares`); a spooled request is
written upstream as the upstream connection takes it (flow control kept).

``retryExpression`` (oxy's predicate: ``IsNetworkError()``, a 502 or 504;
``Attempts()``, the tries so far; ``ResponseCode()``; ``RequestMethod()``; compared
and joined as circuitBreaker's) is asked after each try whose response is held, or
which failed at the network level: while it holds (and at most 10 tries), the request
goes again, its held body with it, to the server the service picks next
(:attr:`Forward.replay`). Not yet: a response held in a file is read back into memory
at its end, once.

``disableRequestBuffer`` / ``disableResponseBuffer`` (oxy's options, which Traefik's
ingress-nginx provider sets): that body is not held but streams as it comes, with no
limit (``max*BodyBytes`` unchecked); without the response held no try is asked
about, ``retryExpression`` included (oxy's retry loop holds the response). Both: the
middleware does nothing (:func:`buffering` builds an empty step, so the route keeps
the express path).

Invariant: built once per configuration; per request, one spool per body, closed
(its file deleted) when the exchange is done with it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from typing import IO

from edge.config.dynamic import BUFFERING_FUNCTIONS, CBNode, parse_cb_expression
from edge.config.dynamic import Buffering as BufferingConfig
from edge.http.middlewares import Answer, BodyFilter, BodyTooLarge, Forward, Middleware, Reply

__all__ = [
    "DEFAULT_MEM",
    "MAX_TRIES",
    "Buffering",
    "RequestBuffering",
    "ResponseBuffering",
    "Spool",
    "buffering",
    "retry_predicate",
]

MAX_TRIES = 10
"""Tries of one request at most under a retryExpression (oxy's DefaultMaxRetryAttempts)."""

Replay = Callable[[int, int, bytes], bool]
"""A compiled retryExpression: (tries so far, status, method) -> whether to try again."""

_COMPARE: dict[str, Callable[[object, object], bool]] = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,  # type: ignore[operator]
    "<=": lambda a, b: a <= b,  # type: ignore[operator]
    ">": lambda a, b: a > b,  # type: ignore[operator]
    ">=": lambda a, b: a >= b,  # type: ignore[operator]
}


def retry_predicate(text: str) -> Replay:
    """A ``retryExpression`` compiled (a ValueError naming the key when it does not parse)."""
    return _compile(parse_cb_expression(text, BUFFERING_FUNCTIONS, "retryExpression"))


def _value(name: str) -> Callable[[int, int, bytes], object]:
    if name == "Attempts":
        return lambda tries, status, method: tries
    if name == "ResponseCode":
        return lambda tries, status, method: status
    if name == "RequestMethod":
        return lambda tries, status, method: method.decode("latin-1")
    return lambda tries, status, method: status in (502, 504)  # IsNetworkError


def _compile(node: CBNode) -> Replay:
    kind = node[0]
    if kind in ("and", "or"):
        parts = [_compile(n) for n in node[1]]
        if kind == "and":
            return lambda t, s, m: all(p(t, s, m) for p in parts)
        return lambda t, s, m: any(p(t, s, m) for p in parts)
    if kind == "call":
        value = _value(node[1])
        return lambda t, s, m: bool(value(t, s, m))
    _, op, name, _, literal = node
    compare, value = _COMPARE[op], _value(name)
    return lambda t, s, m: compare(value(t, s, m), literal)


DEFAULT_MEM = 1 << 20
"""Bytes of a body held in memory before the rest goes to a file (oxy's default)."""

CHUNK = 64 * 1024
"""Bytes read back from a spool's file at a time."""


class Spool:
    """A body held: the first ``mem`` bytes in memory, the rest in a temporary file;
    :meth:`write` is False once more than ``limit`` bytes came (``limit`` <= 0: none)."""

    __slots__ = ("file", "limit", "mem", "parts", "size")

    def __init__(self, limit: int, mem: int) -> None:
        self.limit = limit
        self.mem = mem if mem > 0 else DEFAULT_MEM
        self.parts: list[bytes] = []
        self.size = 0
        self.file: IO[bytes] | None = None

    def write(self, data: bytes) -> bool:
        self.size += len(data)
        if 0 < self.limit < self.size:
            return False
        if self.file is None and self.size <= self.mem:
            self.parts.append(data)
        else:
            if self.file is None:
                self.file = tempfile.TemporaryFile(prefix="edge-buffering-")  # noqa: SIM115
            self.file.write(data)
        return True

    def chunks(self) -> Iterator[bytes]:
        """The body, from the start, in pieces (again for each call: a retry sends it
        again); its file goes when the spool does (closed, or freed)."""
        yield from self.parts
        file = self.file
        if file is not None:
            file.seek(0)
            while chunk := file.read(CHUNK):
                yield chunk

    def read(self) -> bytes:
        """The whole body; the spool is closed."""
        body = b"".join(self.chunks())
        self.close()
        return body

    def close(self) -> None:
        self.parts = []
        if self.file is not None:
            self.file.close()
            self.file = None


class _HeldResponse(BodyFilter):
    __slots__ = ("spool",)

    def __init__(self, spool: Spool) -> None:
        self.spool = spool

    def data(self, chunk: bytes) -> bytes:
        if not self.spool.write(chunk):
            self.spool.close()
            raise BodyTooLarge("response body over maxResponseBodyBytes")
        return b""

    def end(self) -> bytes:
        return self.spool.read()


class _Buffering(Middleware):
    """What the three kinds share: the configuration, and each body's holding."""

    __slots__ = ("max_request", "max_response", "mem_request", "mem_response", "replay")

    def __init__(
        self,
        name: str,
        max_request: int = 0,
        mem_request: int = 0,
        max_response: int = 0,
        mem_response: int = 0,
        retry_expression: str = "",
    ) -> None:
        super().__init__(name)
        self.replay = retry_predicate(retry_expression) if retry_expression else None
        self.max_request = max_request
        self.mem_request = mem_request
        self.max_response = max_response
        self.mem_response = mem_response

    def _hold_request(self, fwd: Forward) -> Answer | None:
        head = fwd.head
        if (
            head is not None
            and self.max_request > 0
            and (head.content_length or 0) > self.max_request
        ):
            return Answer(413, body=b"Request Entity Too Large")
        fwd.spool = Spool(self.max_request, self.mem_request)
        return None

    def _hold_response(self, reply: Reply) -> BodyFilter:
        reply.hold = True
        return _HeldResponse(Spool(self.max_response, self.mem_response))


class Buffering(_Buffering):
    """``buffering``: both bodies held in full (module doc)."""

    __slots__ = ()

    def request(self, fwd: Forward) -> Answer | None:
        answer = self._hold_request(fwd)
        if answer is None:
            fwd.replay = self.replay
        return answer

    def response(self, fwd: Forward, reply: Reply) -> BodyFilter | None:
        return self._hold_response(reply)


class RequestBuffering(_Buffering):
    """``disableResponseBuffer``: the request's body held, the response streamed."""

    __slots__ = ()

    def request(self, fwd: Forward) -> Answer | None:
        return self._hold_request(fwd)


class ResponseBuffering(_Buffering):
    """``disableRequestBuffer``: the response held (and asked about by
    ``retryExpression``), the request's body streamed."""

    __slots__ = ()

    def request(self, fwd: Forward) -> Answer | None:
        fwd.replay = self.replay
        return None

    def response(self, fwd: Forward, reply: Reply) -> BodyFilter | None:
        return self._hold_response(reply)


def buffering(name: str, config: BufferingConfig) -> Middleware:
    """The buffering middleware ``config`` (validated) describes: the kind that holds
    what it holds, or one that does nothing when it holds neither body."""
    c = config
    if c.disable_request_buffer and c.disable_response_buffer:
        return Middleware(name)
    kind: type[_Buffering] = (
        RequestBuffering
        if c.disable_response_buffer
        else ResponseBuffering
        if c.disable_request_buffer
        else Buffering
    )
    return kind(
        name,
        c.max_request_body_bytes,
        c.mem_request_body_bytes,
        c.max_response_body_bytes,
        c.mem_response_body_bytes,
        c.retry_expression,
    )
