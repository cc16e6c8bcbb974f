"""RouterSet: everything one entrypoint serves, by the kind of connection.

Built whole by the factory for every applied configuration and swapped into
its entrypoint with one assignment. A connection reads the set once when it
arrives (or a request once when it starts) and keeps the router it read, so a
swap never changes a connection or request already routed.

- ``http``: plain HTTP requests (always present; empty when nothing routes).
- ``https``: HTTP requests on TLS connections edge terminates (``None``: no
  HTTPS router on this entrypoint).
- ``tcp``: TCP routers, by SNI and client address (``None``: none).
- ``udp``: the UDP router of a UDP entrypoint (``None`` elsewhere).
"""

from __future__ import annotations

from typing import Any

from edge.router.http import EMPTY_ROUTER, HTTPRouter


class RouterSet:
    __slots__ = ("http", "https", "tcp", "udp")

    def __init__(
        self,
        http: HTTPRouter = EMPTY_ROUTER,
        https: HTTPRouter | None = None,
        tcp: Any = None,
        udp: Any = None,
    ) -> None:
        self.http = http
        self.https = https
        self.tcp = tcp
        self.udp = udp

    def __len__(self) -> int:
        return sum(len(r) for r in (self.http, self.https, self.tcp, self.udp) if r is not None)


EMPTY_SET = RouterSet()
