"""Traefik v3's ``errors`` middleware (pkg/middlewares/customerrors): a response whose
status is in ``status`` is replaced by the answer of ``service`` to a GET of ``query``.

The page request carries the client's request headers and Host, no body; ``query``
(``/`` when empty) may hold ``{status}`` (the status sent: after ``statusRewrites``),
``{originalStatus}`` (the status caught) and ``{url}`` (the request's URL, escaped as
Go's ``url.QueryEscape``). The page goes out with the caught status, or the one
``statusRewrites`` maps it to (the first range that holds it), and the service's own
headers and body. The upstream's response is caught from its head (a response filter
that diverts it: :meth:`edge.http.middlewares.Reply.divert`), and so are edge's own
errors for the route's service (502, 503, 504: ``own_answers``), as Traefik's
middleware catches what its proxy writes.

A response without a body (to a HEAD, a 204 or 304) is caught as any other, as
Traefik's catcher reads the status whatever the method: the client gets the page's
head with the status, and no body (the page is asked for with GET all the same, and
its body dropped, as Go's server drops a body written to a HEAD). Not caught (passed
as it comes): a response that begins before the request's body has ended. A
``service`` that does not exist (or has no server up) answers the caught status with
its reason phrase.

Invariant: ranges, rewrites and the query's parts are prepared once per configuration;
per caught response, one query string is made.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote_plus

from edge.http.middlewares import BodyFilter, Forward, Middleware, Reply

__all__ = ["ErrorPages"]


def _within(ranges: tuple[tuple[int, int], ...], status: int) -> bool:
    return any(low <= status <= high for low, high in ranges)


class ErrorPages(Middleware):
    """``errors``: catch the statuses of ``ranges``, answer with ``service``'s page."""

    __slots__ = ("query", "ranges", "rewrites", "service")

    own_answers = True  # edge's 502/503/504 for the service are caught too

    def __init__(
        self,
        name: str,
        ranges: tuple[tuple[int, int], ...],
        service: Any,
        query: str = "",
        rewrites: tuple[tuple[tuple[tuple[int, int], ...], int], ...] = (),
    ) -> None:
        super().__init__(name)
        self.ranges = ranges
        self.service = service  # the balancer of the errors service (None: missing)
        self.query = "/" + query.lstrip("/") if query else ""
        self.rewrites = rewrites

    def response(self, fwd: Forward, reply: Reply) -> BodyFilter | None:
        if reply.diverted or not _within(self.ranges, reply.status):
            return None
        original = reply.status
        status = original
        for ranges, to in self.rewrites:
            if _within(ranges, original):
                status = to
                break
        reply.divert(self.service, self._target(fwd, status, original), status)
        return None

    def _target(self, fwd: Forward, status: int, original: int) -> bytes:
        query = self.query
        if not query:
            return b"/"
        query = query.replace("{status}", str(status))
        query = query.replace("{originalStatus}", str(original))
        if "{url}" in query:
            url = (fwd.scheme + b"://" + fwd.authority + fwd.path).decode("latin-1")
            if fwd.query:
                url += "?" + fwd.query.decode("latin-1")
            query = query.replace("{url}", quote_plus(url, safe=""))
        return query.encode("latin-1")
