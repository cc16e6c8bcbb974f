"""HTTP middlewares: a route's pipeline, built once per configuration.

A :class:`Middleware` says what it does to an exchange in three ways, and a
:class:`Pipeline` folds a route's middlewares into exactly those three:

- ``request(fwd)``: per-request work on the request as it will be forwarded
  (:class:`Forward`: path, X-Forwarded-Prefix, headers to set, and response
  headers that depend on the request); returning an :class:`Answer` ends the
  exchange with edge's own response instead. The base class does nothing; a
  middleware that overrides it runs on every request. ``fwd.client_ip`` is the
  connection's peer (or the client a trusted PROXY header named);
  :meth:`Forward.on_end` registers what must run when the exchange ends,
  however it ends (answered, the upstream failed, the client gone);
  ``fwd.delay`` holds the request that long before it goes upstream.
- ``request_edits`` / ``response_edits``: header edits fixed by the
  configuration, merged once per pipeline (later middlewares win).

Hooks for what a step cannot decide, or do, at once (each detected once per
pipeline, as ``request`` is: a pipeline that does not use one pays nothing for it):

- **Waiting steps** ``async request_async(fwd) -> Answer | None``: a step that must
  wait for I/O before it decides (forwardAuth asking its server, a rateLimit
  asking Redis). A step that overrides it is awaited in its place in the pipeline
  (its ``request`` is then not called); the steps after it run when it returns.
  Meanwhile the request body is held (buffered up to the exchange's high-water
  mark, then the client is no longer read), nothing goes upstream, and a client
  that leaves cancels the wait (``CancelledError`` in the step: release what it
  holds in ``finally`` or with :meth:`Forward.on_end`). The step bounds its own
  wait: its timeouts and failures are the :class:`Answer` it returns (an exception
  escaping it is logged and answered 500). A waiting step that needs the body
  (forwardAuth's ``forwardBody``) awaits :meth:`Forward.read_body`: the exchange
  reads it to its end past the high-water mark (the entrypoint's readTimeout bounds
  that), holds it, and sends it upstream unchanged after the steps; one over the
  step's limit raises :class:`BodyTooLarge`, for the step to answer.
- **Response filters** ``response(fwd, reply) -> BodyFilter | None``: a step may
  see and change the upstream's response: ``reply`` (:class:`Reply`) is its head
  as the client will get it (status, headers to add, replace or remove, ``length``
  set to None to send the body chunked); a returned :class:`BodyFilter` gets the
  body chunk by chunk (``data``: what it returns goes on, ``b""`` holds nothing
  back for later unless the filter keeps it) and ``end()`` (a last chunk). Filters
  run innermost first (the last middleware of the route sees the upstream's
  response first, as Go's wrapped response writers do), on the general path only,
  for every final response but upgrades (the 101, and any answer to an upgrade
  request) and edge's own answers. A response without a body (to a HEAD, a 204,
  a 304: ``reply.bodiless``) is shown too, as Go's writers see its WriteHeader: a
  filter may change its head (a cookie, a header) or divert it, and one that only
  cares for bodies returns None for it; a BodyFilter returned for it gets no data,
  only ``end()``, and what that returns is dropped (no body may follow). Body
  bytes stream through: a filter must not keep a whole body unless holding it is
  its purpose (``buffering``). Flow control is the connection's as for any
  response: a client that does not read stops the upstream's reads. ``reply.divert(service, target, status)`` replaces the whole
  response with ``service``'s answer to a GET of ``target`` (the ``errors``
  middleware): the upstream's response is dropped, and the other one's head goes
  through the filters again (``reply.diverted`` is then True) with ``status`` in
  place of its own, without its body where the client's response has none (a
  HEAD's, or ``status`` 204 or 304). Once per exchange, and only once the request
  body has ended (before that the response goes as it came).
  A middleware whose class sets ``own_answers = True`` is also shown edge's own
  errors for the route's service (502, 503, 504; ``reply`` with their status, no
  headers), to divert them; what it returns for their body is not used.
- **Outcome**: what runs at the end (:meth:`Forward.on_end`) may read how the
  exchange ended from its ``fwd``: ``fwd.status`` (the status sent, edge's own
  answers included; 499 for a client gone before any answer), ``fwd.network_error``
  (the upstream failed at the network level: refused, reset, timed out, invalid
  bytes, closed before its head) and ``fwd.elapsed`` (seconds from the first
  ``on_end(callback, timed=True)`` call to the response head, -1.0 when none came
  or nothing asked for the time: the clock is read only for those who ask).
- **Client certificate**: :meth:`Forward.client_certs` is the TLS client's
  certificate chain (DER, leaf first) from the connection that terminated TLS,
  read when asked (empty without TLS or without a certificate).
- **Held bodies** (``buffering``): ``fwd.spool`` (an object with ``write(data) ->
  bool``, False past its limit, ``size``, ``chunks()`` and ``close()``), set by a
  step, makes the exchange hold the request body in it until its end (past the limit:
  413), then send the request with ``Content-Length: size`` and the body from
  ``chunks()``, as the upstream connection takes it. A response filter that sets
  ``reply.hold`` holds the response: its head goes with the body, at the end, with
  the length of what the filters emitted (a bodiless one's head as it came; a
  filter's ``data`` raising :class:`BodyTooLarge` answers 413 instead, the
  upstream's connection dropped).
  ``fwd.replay(tries, status, method)`` (buffering's ``retryExpression``) is asked
  after a held response's end and after a network failure: True sends the request
  again (its held body with it) to the server the service picks next, up to 10 tries.
- **Retry**: ``fwd.retry`` (a :class:`Retry`, set by the ``retry`` middleware) lets
  the exchange send the request again, to the server the service picks next,
  after a network failure before any response byte reached the client, when the
  request can be replayed (see :mod:`edge.http.middlewares.retry`).

And one hook for services (:mod:`edge.router.services`): a route's service object
with a ``tee(head, up_head)`` method (``mirroring``) is called once per request when
the request's head for upstream is made (``head``: the client's
:class:`~edge.http.codec.RequestHead`; ``up_head``: the head as it goes upstream),
on the general path; it returns None or a :class:`Tee`, which is given each chunk
of the request body as it goes upstream (``body``: the payload, chunked framing
removed), then ``end()`` once the body is complete, or ``abort()`` if the exchange
ends before that. Tee calls must not block or raise: a mirror sends its copies
from its own task.

Invariant: what a route may skip is derived from its pipeline, never from a
list of middleware kinds. A route whose pipeline does nothing
(:attr:`Pipeline.empty`) may forward heads as they came and take the
connection's express path; any middleware that does something, including one
added later, makes the route take the general path, which runs the pipeline.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from edge.http.codec import RequestHead
from edge.http.codec.forward import HeaderEdits

if TYPE_CHECKING:
    from edge.http.middlewares.retry import Retry

__all__ = [
    "Answer",
    "BodyFilter",
    "BodyTooLarge",
    "Forward",
    "Middleware",
    "Pipeline",
    "Reply",
    "Tee",
    "merge_edits",
]

TEXT_PLAIN = b"text/plain; charset=utf-8"


class Forward:
    """The request as it will go upstream: what per-request middlewares may change."""

    __slots__ = (
        "authority",
        "client_ip",
        "delay",
        "elapsed",
        "ends",
        "head",
        "headers",
        "host",
        "method",
        "network_error",
        "path",
        "prefix",
        "query",
        "reader",
        "replay",
        "response",
        "retry",
        "scheme",
        "spool",
        "started",
        "status",
        "transport",
        "trusted_head",
    )

    def __init__(
        self,
        host: str,
        path: bytes,
        query: bytes,
        method: bytes = b"GET",
        authority: bytes = b"",
        scheme: bytes = b"http",
        trusted_head: RequestHead | None = None,
        head: RequestHead | None = None,
        client_ip: str = "",
        transport: Any = None,
    ) -> None:
        self.transport = transport  # the client connection's (client_certs reads it)
        self.head = head  # the request's head, as the client sent it
        self.client_ip = client_ip  # the connection's client address (IPv4-mapped unmapped)
        self.method = method
        self.authority = authority  # the Host (or absolute-form target's authority) as sent
        self.scheme = scheme  # the entrypoint's: http or https
        self.trusted_head = (
            trusted_head  # the request's head when its client is trusted (X-Forwarded-*)
        )
        self.host = host
        self.path = path
        self.query = query
        self.prefix = b""  # X-Forwarded-Prefix: what stripPrefix took away
        self.headers: list[tuple[bytes, bytes]] | None = (
            None  # set per request (empty value: remove)
        )
        # Response headers set per request, after the pipeline's fixed ones.
        self.response: list[tuple[bytes, bytes]] | None = None
        # Seconds the request is held before it goes on upstream (a rateLimit's wait
        # for its token; the longest a step asks for).
        self.delay = 0.0
        # What runs once when the exchange ends (on_end), in the order registered.
        self.ends: list[Callable[[], None]] | None = None
        # The retry middleware's policy for this request (None: no retry).
        self.retry: Retry | None = None
        # Where the request body is held before it goes (buffering; None: streamed).
        self.spool: Any = None
        # Whether a try goes again: (tries, status, method) -> bool (retryExpression).
        self.replay: Callable[[int, int, bytes], bool] | None = None
        # What read_body asks: the exchange's, for a waiting step (None: no step waits).
        self.reader: Callable[[int], Awaitable[bytes]] | None = None
        # The outcome, written by the exchange before the ends run (module doc).
        self.status = 0
        self.network_error = False
        self.elapsed = -1.0
        self.started = 0.0

    def on_end(self, callback: Callable[[], None], timed: bool = False) -> None:
        """Have ``callback`` run once when the exchange ends, however it ends: its
        response complete (edge's own included), the upstream failed, the client
        gone. Registered by a step that holds something for the request (an
        in-flight slot) even when a later step answers instead. ``timed``: the
        callback reads ``elapsed`` (the first such call starts its clock)."""
        if self.ends is None:
            self.ends = []
        if timed and not self.started:
            self.started = time.perf_counter()
        self.ends.append(callback)

    async def read_body(self, limit: int = -1) -> bytes:
        """The request body (chunked framing removed), read to its end and held: it
        still goes upstream whole and unchanged once the steps let the request on.
        ``limit``: bytes at most (-1: none); a body over it raises
        :class:`BodyTooLarge` (a declared Content-Length over it at once, unread).
        For waiting steps only (``request_async``): elsewhere RuntimeError."""
        reader = self.reader
        if reader is None:
            raise RuntimeError("read_body is for a waiting step (request_async)")
        return await reader(limit)

    def client_certs(self) -> list[bytes]:
        """The TLS client's certificates as it sent them (DER, leaf first: Go's
        ``PeerCertificates``), from
        the connection that terminated TLS; empty without TLS or a certificate.
        Read when asked: a request that never asks costs nothing."""
        transport = self.transport
        ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
        if ssl_object is None:
            return []
        leaf = ssl_object.getpeercert(binary_form=True)
        if not leaf:
            return []
        chain_of = getattr(getattr(ssl_object, "_sslobj", None), "get_unverified_chain", None)
        chain = chain_of() if chain_of is not None else None
        if not chain:
            return [leaf]
        import _ssl  # the Certificate objects' encoding constant (public from 3.13)

        return [cert.public_bytes(_ssl.ENCODING_DER) for cert in chain]

    def set_header(self, name: bytes, value: bytes) -> None:
        if self.headers is None:
            self.headers = []
        self.headers.append((name, value))

    def add_response(self, name: bytes, value: bytes) -> None:
        if self.response is None:
            self.response = []
        self.response.append((name, value))


class Answer:
    """A response of edge's own that ends the exchange (a redirect, a refusal).

    It goes out with the response header edits of the middlewares before the step
    that answered (:meth:`Pipeline.answer_edits`), as Traefik's handlers write
    through the response writers of those that wrap them."""

    __slots__ = ("body", "content_type", "lines", "status")

    def __init__(
        self,
        status: int,
        lines: bytes = b"",
        body: bytes = b"",
        content_type: bytes = TEXT_PLAIN,
    ) -> None:
        self.status = status
        self.lines = lines  # extra header lines, each ending in CRLF
        self.body = body
        self.content_type = content_type  # sent with a body


class Reply:
    """The upstream's response head as the client will get it, for response filters.

    ``headers`` is the list of (name, value) the client gets (framing and hop-by-hop
    ones are edge's to write and are dropped whatever a filter does); ``length`` is
    the body's length, None to send it chunked (a filter that changes the body's
    size sets it so). ``bodiless``: the response has no body (to a HEAD, a 204, a
    304); its Content-Length, if any, stays among ``headers``. ``divert`` (the
    errors middleware) replaces the response."""

    __slots__ = (
        "bodiless",
        "changed",
        "divert_to",
        "diverted",
        "headers",
        "hold",
        "length",
        "reason",
        "status",
    )

    def __init__(
        self,
        status: int,
        reason: bytes,
        headers: list[tuple[bytes, bytes]],
        length: int | None,
        diverted: bool = False,
        bodiless: bool = False,
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.length = length
        self.bodiless = bodiless  # no body follows: a filter's BodyFilter gets none
        self.changed = False
        self.diverted = diverted  # this is the answer a divert asked for
        self.divert_to: tuple[Any, bytes, int] | None = None
        self.hold = False  # the head waits for the body's end (buffering)

    def get(self, name: bytes) -> bytes | None:
        """The first value of header ``name`` (any case), or None."""
        name = name.lower()
        for n, v in self.headers:
            if n.lower() == name:
                return v
        return None

    def set(self, name: bytes, value: bytes) -> None:
        """Replace every ``name`` header with one of ``value``."""
        self.remove(name)
        self.headers.append((name, value))

    def add(self, name: bytes, value: bytes) -> None:
        self.changed = True
        self.headers.append((name, value))

    def remove(self, name: bytes) -> None:
        self.changed = True
        lname = name.lower()
        self.headers = [(n, v) for n, v in self.headers if n.lower() != lname]

    def set_status(self, status: int, reason: bytes = b"") -> None:
        self.changed = True
        self.status = status
        self.reason = reason

    def divert(self, service: Any, target: bytes, status: int) -> None:
        """Answer with ``service``'s response to a GET of ``target`` (origin-form: path
        and query) instead, sent with ``status``; a diverted reply cannot divert."""
        if not self.diverted:
            self.divert_to = (service, target, status)

    def set_length(self, length: int | None) -> None:
        """The body's new length (None: unknown, sent chunked to an HTTP/1.1 client)."""
        self.changed = True
        self.length = length


class BodyTooLarge(Exception):
    """Raised by a holding filter's ``data`` past its limit (the exchange answers 413),
    and by :meth:`Forward.read_body` past the step's (the step answers)."""


class BodyFilter:
    """What a response filter does to a body (module doc); the base passes it through."""

    __slots__ = ()

    def data(self, chunk: bytes) -> bytes:
        return chunk

    def end(self) -> bytes:
        return b""


class Tee(Protocol):
    """A service's copy of a request body (module doc: ``tee``)."""

    def body(self, data: bytes) -> None: ...
    def end(self) -> None: ...
    def abort(self) -> None: ...


class Middleware:
    """One step of a pipeline; the base does nothing (module doc: what each hook does)."""

    __slots__ = ("name",)

    request_edits: HeaderEdits | None = None
    response_edits: HeaderEdits | None = None

    def __init__(self, name: str) -> None:
        self.name = name

    def request(self, fwd: Forward) -> Answer | None:
        return None

    async def request_async(self, fwd: Forward) -> Answer | None:
        return None

    def response(self, fwd: Forward, reply: Reply) -> BodyFilter | None:
        return None


def _overrides(m: Middleware, hook: str) -> bool:
    return getattr(type(m), hook) is not getattr(Middleware, hook)


class Pipeline:
    """A route's middlewares, folded into what the exchange runs."""

    __slots__ = (
        "_answers",
        "_responses",
        "empty",
        "forwards",
        "names",
        "request_edits",
        "responders",
        "response_edits",
        "rewrites",
        "steps",
        "vary",
        "waits",
    )

    def __init__(self, middlewares: Sequence[Middleware] = ()) -> None:
        self.names = tuple(m.name for m in middlewares)
        # Only middlewares with per-request work are called per request.
        steps = [
            m for m in middlewares if _overrides(m, "request") or _overrides(m, "request_async")
        ]
        self.steps = tuple(steps)
        # Per step, whether it is awaited (request_async); None when none is.
        waits = tuple(_overrides(m, "request_async") for m in steps)
        self.waits = waits if any(waits) else None
        # Response filters, innermost first.
        self.responders = tuple(m for m in reversed(middlewares) if _overrides(m, "response"))
        # A Forward is made per request (steps run, or filters read it).
        self.forwards = bool(self.steps or self.responders)
        self.request_edits = merge_edits(m.request_edits for m in middlewares)
        self.response_edits = merge_edits(m.response_edits for m in middlewares)
        # Per step, the fixed response edits of the middlewares before it: what an
        # answer of that step goes out with (answer_edits).
        before: list[HeaderEdits | None] = []
        answers: list[HeaderEdits | None] = []
        for m in middlewares:
            if m in steps:
                answers.append(merge_edits(before))
            before.append(m.response_edits)
        self._answers = tuple(answers)
        # Origin goes into the response's own Vary (headers.vary_origin).
        self.vary = any(getattr(m, "vary", False) for m in middlewares)
        self._responses: dict[tuple[tuple[bytes, bytes], ...], HeaderEdits] = {}
        # The request head cannot go upstream as its own bytes.
        self.rewrites = bool(self.steps) or self.request_edits is not None
        # Nothing of the exchange changes: both heads may go through as they came.
        self.empty = not self.rewrites and self.response_edits is None and not self.responders

    def respond(self, fwd: Forward) -> HeaderEdits | None:
        """The response header edits for the request ``fwd`` went through: the fixed
        ones, then those the steps set for it (:meth:`Forward.add_response`). The
        few combinations a route sees (an allowed origin, HSTS or not) are made once
        and kept, up to :data:`RESPONSES_KEPT` of them."""
        if fwd.response is None:
            return self.response_edits
        key = tuple(fwd.response)
        edits = self._responses.get(key)
        if edits is None:
            edits = merge_edits((self.response_edits, HeaderEdits(fwd.response)))
            assert edits is not None
            if len(self._responses) < RESPONSES_KEPT:
                self._responses[key] = edits
        return edits

    def answer_edits(self, step: int, fwd: Forward) -> HeaderEdits | None:
        """The response header edits for an :class:`Answer` of ``steps[step]``: those
        of the middlewares before it (a ``headers`` middleware after it never ran,
        as in Traefik), then those the earlier steps set for this request."""
        edits = self._answers[step]
        if fwd.response is None:
            return edits
        return merge_edits((edits, HeaderEdits(fwd.response)))

    def __len__(self) -> int:
        return len(self.names)


def merge_edits(edits: Iterable[HeaderEdits | None]) -> HeaderEdits | None:
    """One HeaderEdits applying ``edits`` in order (a later value for a name wins)."""
    merged: dict[bytes, tuple[bytes, bytes]] = {}
    for edit in edits:
        if edit is not None:
            for name, value in edit.pairs:
                merged.pop(name.lower(), None)  # keep the later one's place
                merged[name.lower()] = (name, value)
    return HeaderEdits(list(merged.values())) if merged else None


RESPONSES_KEPT = 64
"""Per pipeline, the response header edits kept made (an origin echoed from a
regexp or ``*`` with credentials can take any value: the rest are made per request)."""

EMPTY_PIPELINE = Pipeline()
