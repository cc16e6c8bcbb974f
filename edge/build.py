"""Which build of edge runs: pure Python, or its per-request modules compiled by mypyc.

:data:`COMPILED` is the one list of the modules the compiled build turns into C
extensions (``setup.py`` reads it from this file when ``EDGE_COMPILE=1`` asks for that
build; ``scripts/build-compiled`` makes it). The pure build is the same source with no
extension, and runs everywhere python3 does. :func:`describe` says which build this
interpreter loads, for ``edge --version`` and the startup log line; it looks modules up
without importing them, so it costs a few ``stat`` calls.
"""

from __future__ import annotations

import importlib.util
from importlib.machinery import EXTENSION_SUFFIXES
from typing import Final

# The modules a request or datagram runs through, in dependency order. Not here
# (docs/performance.md, issue 29): edge.http.codec.base, whose quick heads shadow a
# slot with a class attribute; edge.router.http, whose LoadBalancer an interpreted
# class extends (router.services' P2CLoadBalancer) and whose Service union lacks
# router.services' Mirroring; edge.udp.sessions, whose Tally makes its properties at
# run time and whose Counters read __slots__ as data. A native class can do none.
COMPILED: Final[tuple[str, ...]] = (
    "edge.balancer",
    "edge.rules.hosts",
    "edge.rules.request",
    "edge.rules.table",
    "edge.http.codec.headers",
    "edge.http.codec.httptools",
    "edge.http.codec.forward",
    "edge.tcp.splice",
    "edge.tls.terminate",
    "edge.http.server.upstream",
    "edge.http.server.exchange",
    "edge.http.server.connection",
    "edge.udp.server",
)


def extensions() -> list[str]:
    """The modules of :data:`COMPILED` that an import here loads as C extensions."""
    found = []
    for name in COMPILED:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        if origin is not None and origin.endswith(tuple(EXTENSION_SUFFIXES)):
            found.append(name)
    return found


def describe() -> str:
    """``pure Python``, or ``compiled (mypyc): <n> modules`` and which ones."""
    found = extensions()
    if not found:
        return "pure Python"
    which = "all" if len(found) == len(COMPILED) else f"{len(found)} of {len(COMPILED)}"
    return f"compiled (mypyc), {which} hot-path modules: {', '.join(found)}"
