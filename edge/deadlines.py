"""Deadline kinds: what a connection tells the entrypoints' sweep it is waiting for.

Every connection an entrypoint tracks (the contract is
:class:`edge.entrypoints.base.Swept`) carries a ``deadline_kind`` and a
``deadline`` (loop time); the sweep calls ``deadline_passed()`` on those whose
kind is not :data:`NO_DEADLINE` and whose deadline has passed, and the
connection acts on its kind. One enum for every connection kind, in the bottom
layer so that the HTTP server, the peek, the PROXY header reader and the TLS
terminator all import it.

The members are also module names (``from edge.deadlines import IDLE``): the hot
path sets and compares them per request, and a module global costs less to load
than an attribute of the enum class. They are the same objects, and the hot path
compares them by identity (``kind is IDLE``): ``==`` on an IntEnum member misses
CPython's fast path for exact ints (about 80 instructions more per compare).
"""

from __future__ import annotations

import enum

__all__ = [
    "BODY",
    "FIRST",
    "HANDSHAKE",
    "HEAD",
    "IDLE",
    "NO_DEADLINE",
    "PEEK",
    "PROXY_HEADER",
    "WRITE",
    "DeadlineKind",
]


class DeadlineKind(enum.IntEnum):
    """What passes at a connection's ``deadline``; false (0) for nothing."""

    NONE = 0
    # HTTP (edge.http.server.connection), each with what happens when it passes:
    IDLE = 1  # between requests (idleTimeout), or lingering after a close: closed in silence
    HEAD = 2  # a request's head (readTimeout): 408, closed
    WRITE = 3  # an exchange's response (writeTimeout): aborted
    BODY = 4  # a request's body (readTimeout): 408 before an answer began, else aborted
    FIRST = 5  # a new connection's first bytes (readTimeout from the accept): closed in silence
    # Before a connection is HTTP or a relay:
    PEEK = 6  # the first bytes that decide what it becomes (edge.tcp.peek): closed
    PROXY_HEADER = 7  # its PROXY protocol header (edge.tcp.proxied): no header, or closed
    HANDSHAKE = 8  # a TLS handshake edge terminates (edge.tls.terminate): aborted


NO_DEADLINE = DeadlineKind.NONE
IDLE = DeadlineKind.IDLE
HEAD = DeadlineKind.HEAD
WRITE = DeadlineKind.WRITE
BODY = DeadlineKind.BODY
FIRST = DeadlineKind.FIRST
PEEK = DeadlineKind.PEEK
PROXY_HEADER = DeadlineKind.PROXY_HEADER
HANDSHAKE = DeadlineKind.HANDSHAKE
