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

Invariant: what a route may skip is derived from its pipeline, never from a
list of middleware kinds. A route whose pipeline does nothing
(:attr:`Pipeline.empty`) may forward heads as they came and take the
connection's express path; any middleware that does something, including one
added later, makes the route take the general path, which runs the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from edge.http.codec import RequestHead
from edge.http.codec.forward import HeaderEdits

__all__ = ["Answer", "Forward", "Middleware", "Pipeline", "merge_edits"]

TEXT_PLAIN = b"text/plain; charset=utf-8"


class Forward:
    """The request as it will go upstream: what per-request middlewares may change."""

    __slots__ = (
        "authority",
        "client_ip",
        "delay",
        "ends",
        "head",
        "headers",
        "host",
        "method",
        "path",
        "prefix",
        "query",
        "response",
        "scheme",
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
    ) -> None:
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

    def on_end(self, callback: Callable[[], None]) -> None:
        """Have ``callback`` run once when the exchange ends, however it ends: its
        response complete (edge's own included), the upstream failed, the client
        gone. Registered by a step that holds something for the request (an
        in-flight slot) even when a later step answers instead."""
        if self.ends is None:
            self.ends = []
        self.ends.append(callback)

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


class Middleware:
    """One step of a pipeline; the base does nothing."""

    __slots__ = ("name",)

    request_edits: HeaderEdits | None = None
    response_edits: HeaderEdits | None = None

    def __init__(self, name: str) -> None:
        self.name = name

    def request(self, fwd: Forward) -> Answer | None:
        return None


class Pipeline:
    """A route's middlewares, folded into what the exchange runs."""

    __slots__ = (
        "_answers",
        "_responses",
        "empty",
        "names",
        "request_edits",
        "response_edits",
        "rewrites",
        "steps",
        "vary",
    )

    def __init__(self, middlewares: Sequence[Middleware] = ()) -> None:
        self.names = tuple(m.name for m in middlewares)
        # Only middlewares with per-request work are called per request.
        self.steps = tuple(m for m in middlewares if type(m).request is not Middleware.request)
        self.request_edits = merge_edits(m.request_edits for m in middlewares)
        self.response_edits = merge_edits(m.response_edits for m in middlewares)
        # Per step, the fixed response edits of the middlewares before it: what an
        # answer of that step goes out with (answer_edits).
        before: list[HeaderEdits | None] = []
        answers: list[HeaderEdits | None] = []
        for m in middlewares:
            if type(m).request is not Middleware.request:
                answers.append(merge_edits(before))
            before.append(m.response_edits)
        self._answers = tuple(answers)
        # Origin goes into the response's own Vary (headers.vary_origin).
        self.vary = any(getattr(m, "vary", False) for m in middlewares)
        self._responses: dict[tuple[tuple[bytes, bytes], ...], HeaderEdits] = {}
        # The request head cannot go upstream as its own bytes.
        self.rewrites = bool(self.steps) or self.request_edits is not None
        # Nothing of the exchange changes: both heads may go through as they came.
        self.empty = not self.rewrites and self.response_edits is None

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
