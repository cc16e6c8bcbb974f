"""ingress-nginx's custom errors on the ``errors`` middleware: Traefik's ``nginxHeaders``
(:class:`~edge.config.dynamic.ErrorPage`), which the ingress-nginx source sets for
``custom-http-errors``.

Owns :class:`NginxErrorPages`: what :class:`~edge.http.middlewares.errors.ErrorPages`
catches is answered as ingress-nginx's ``error_page <code> = @custom_<upstream>_<code>``
location answers it. The page request carries the middleware's fixed headers (the
provider's ``X-Namespace``, ``X-Ingress-Name``, ``X-Service-Name``,
``X-Service-Port``) and, per caught response, ``X-Code`` (the status caught, after
``statusRewrites``), ``X-Format`` (the client's ``Accept``; none without one, as
nginx's ``proxy_set_header`` of an empty value), ``X-Original-URI`` (the request
target as the client sent it: nginx's ``$request_uri``) and ``X-Request-ID`` (the
client's, else 32 new hex digits: ingress-nginx's ``$req_id``), each in place of a
client header of that name; and the page goes out with its own status (the ``=`` of
``error_page``), not the one caught. The divert carries them in a :class:`Page`, which
the exchange unwraps (:meth:`edge.http.server.exchange.Exchange._divert`).

Invariant: the fixed headers are encoded once per configuration; a caught response
costs four header lines and, without the client's X-Request-ID, 16 random bytes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from edge.http.middlewares import BodyFilter, Forward, Reply
from edge.http.middlewares.errors import ErrorPages

__all__ = ["NginxErrorPages", "Page"]


class Page(NamedTuple):
    """What a divert asks for when the page request has headers of its own and the
    page keeps its status: the errors service's balancer (None: missing) and the
    headers, each replacing the client's of that name."""

    service: Any
    headers: Sequence[tuple[bytes, bytes]]


class NginxErrorPages(ErrorPages):
    """``errors`` with ``nginxHeaders``: ingress-nginx's custom errors (module doc)."""

    __slots__ = ("fixed",)

    def __init__(
        self,
        name: str,
        ranges: tuple[tuple[int, int], ...],
        service: Any,
        query: str = "",
        rewrites: tuple[tuple[tuple[tuple[int, int], ...], int], ...] = (),
        headers: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        super().__init__(name, ranges, service, query, rewrites)
        self.fixed = tuple(
            (key.encode("latin-1"), value.encode("latin-1"))
            for key, values in (headers or {}).items()
            for value in values
        )

    def response(self, fwd: Forward, reply: Reply) -> BodyFilter | None:
        super().response(fwd, reply)
        divert = reply.divert_to
        if divert is None:
            return None
        service, target, status = divert
        accept = request_id = None
        uri = b"/"
        head = fwd.head
        if head is not None:
            uri = head.target
            for name, value in head.headers:
                lowered = name.lower()
                if lowered == b"accept" and accept is None:
                    accept = value
                elif lowered == b"x-request-id" and request_id is None:
                    request_id = value
        headers = [
            *self.fixed,
            (b"X-Code", b"%d" % status),
            (b"X-Original-URI", uri),
            (b"X-Request-ID", request_id or os.urandom(16).hex().encode()),
        ]
        if accept is not None:
            headers.append((b"X-Format", accept))
        reply.divert_to = (Page(service, headers), target, status)
        return None
