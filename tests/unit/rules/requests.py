"""Requests as the rule tests write them: ``req(**fields)``, a RequestView with defaults;
``Req``, a request as a client sends it, viewed as the HTTP server hands it to the rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edge.rules import (
    RequestView,
    canonical_host,
)


def req(**kw: Any) -> RequestView:
    kw.setdefault("host", "a.com")
    kw.setdefault("path", "/")
    kw.setdefault("method", "GET")
    return RequestView(**kw)


@dataclass(frozen=True)
class Req:
    target: str = "/"
    host: str = "example.com"
    method: str = "GET"
    headers: tuple[tuple[str, str], ...] = ()

    def view(self) -> RequestView:
        """The request as the HTTP server hands it to the rules."""
        path, _, query = self.target.partition("?")
        return RequestView(
            host=canonical_host(self.host),
            path=path,
            query=query,
            method=self.method,
            client_ip="127.0.0.1",
            headers=[(k.encode(), v.encode("utf-8")) for k, v in self.headers],
        )
