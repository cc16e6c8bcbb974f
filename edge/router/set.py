"""RouterSet: everything one entrypoint serves, by the kind of connection.

Built whole by the factory for every applied configuration and swapped into
its entrypoint with one assignment. A connection reads the set once when it
arrives (or a request once when it starts) and keeps the router it read, so a
swap never changes a connection or request already routed.

- ``http``: plain HTTP requests (always present; empty when nothing routes).
- ``https``: HTTP requests on TLS connections edge terminates: the routers
  with ``tls`` (``None``: no HTTPS router on this entrypoint). A router with
  ``tls`` is never in ``http``: it must not answer without TLS.
- ``tcp``: the connection-level router (:class:`~edge.router.tcp.TCPRouter`):
  TCP routers by SNI, client address and ALPN, the names HTTPS routers claim,
  and the configuration's certificate snapshot. Present whenever the entrypoint
  has a TCP router or an HTTPS router; ``None`` means plain HTTP only, served
  with no peek.
- ``udp``: the UDP router of a UDP entrypoint (``None`` elsewhere).
"""

from __future__ import annotations

from typing import Any

from edge.router.http import EMPTY_ROUTER, HTTPRouter
from edge.router.tcp import TCPRouter


class RouterSet:
    __slots__ = ("http", "https", "tcp", "udp")

    def __init__(
        self,
        http: HTTPRouter = EMPTY_ROUTER,
        https: HTTPRouter | None = None,
        tcp: TCPRouter | None = None,
        udp: Any = None,
    ) -> None:
        self.http = http
        self.https = https
        self.tcp = tcp
        self.udp = udp

    def __len__(self) -> int:
        return sum(len(r) for r in (self.http, self.https, self.tcp, self.udp) if r is not None)


EMPTY_SET = RouterSet()
