"""UDP sessions: who talks to which server, kept in least-recently-active order.

Owns :class:`Session` (one client address and its upstream), :class:`SessionTable`
and :class:`Counters`. No sockets are touched here: the table only orders, bounds
and expires, so it is tested without a loop.

Invariants of :class:`SessionTable`:

* at most ``max_sessions`` sessions; adding one more evicts the least recently
  active session first (and hands it back, so its socket is closed and it is counted);
* the table's order is the order of last activity, oldest first: :meth:`touch` moves
  a session to the end in O(1), so eviction is O(1) and expiry stops at the first
  session younger than the shortest timeout in use, not scanning the whole table;
* a session leaves the table exactly once (evicted, expired or removed), and the
  caller that takes it out closes it.

Expiry is a sweep: nothing is scheduled per session; the entry point calls
:meth:`SessionTable.expire` every quarter of the shortest timeout.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

__all__ = ["Counters", "Session", "SessionTable"]


class Counters:
    """Plain integers for one (router, service) pair of an entry point.

    ``*_to_server``: datagrams and bytes received from clients and sent on;
    ``*_to_client``: received from servers and sent back. ``dropped``: datagrams that
    could not be forwarded (no server, a full socket buffer, a send error).
    """

    __slots__ = (
        "bytes_to_client",
        "bytes_to_server",
        "datagrams_to_client",
        "datagrams_to_server",
        "dropped",
        "router",
        "service",
        "sessions_evicted",
        "sessions_expired",
        "sessions_opened",
    )

    def __init__(self, router: str, service: str) -> None:
        self.router = router
        self.service = service
        self.datagrams_to_server = 0
        self.bytes_to_server = 0
        self.datagrams_to_client = 0
        self.bytes_to_client = 0
        self.sessions_opened = 0
        self.sessions_expired = 0
        self.sessions_evicted = 0
        self.dropped = 0

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.__slots__ if k not in ("router", "service")}

    def add(self, other: Counters) -> None:
        for key in self.__slots__:
            if key not in ("router", "service"):
                setattr(self, key, getattr(self, key) + getattr(other, key))


class Session:
    """One client address of an entry point and its upstream.

    ``server`` and ``sock`` are None between a refusal and the client's next
    datagram (which picks another server). ``reply`` is the ancillary data that makes
    replies leave from ``local``, the address the client wrote to (wildcard
    listeners); ``header`` the PROXY protocol header still to prepend to the first
    datagram sent to ``server``.
    """

    __slots__ = (
        "budget",
        "client",
        "counters",
        "fills",
        "header",
        "last",
        "local",
        "reply",
        "server",
        "sock",
        "timeout",
    )

    def __init__(
        self,
        client: Hashable,
        counters: Counters,
        *,
        timeout: float,
        local: tuple | None = None,
        reply: list | None = None,
    ) -> None:
        self.client = client
        self.counters = counters
        self.timeout = timeout
        self.local = local
        self.reply = reply
        self.server: Any = None
        self.sock: Any = None
        self.header: bytes | None = None
        self.last = 0.0
        self.budget = 1  # datagrams the upstream socket's next callback reads
        self.fills = 0

    def __repr__(self) -> str:
        return f"Session({self.client!r}, server={getattr(self.server, 'address', None)!r})"


class SessionTable:
    """Live sessions by client address, least recently active first, at most ``max_sessions``."""

    __slots__ = ("max_sessions", "sessions")

    def __init__(self, max_sessions: int) -> None:
        if max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        self.max_sessions = max_sessions
        # The data plane reads this directly (get, move_to_end) on its hot path.
        self.sessions: OrderedDict[Hashable, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self.sessions)

    def __iter__(self):
        return iter(list(self.sessions.values()))

    def get(self, client: Hashable) -> Session | None:
        return self.sessions.get(client)

    def touch(self, session: Session, now: float) -> None:
        """``session`` was active at ``now``: it becomes the most recently active."""
        session.last = now
        self.sessions.move_to_end(session.client)

    def add(self, session: Session, now: float) -> Session | None:
        """Insert ``session`` as the most recently active; returns the session evicted for it."""
        if session.client in self.sessions:
            raise KeyError(f"a session for {session.client!r} exists")
        evicted = None
        if len(self.sessions) >= self.max_sessions:
            _, evicted = self.sessions.popitem(last=False)
        session.last = now
        self.sessions[session.client] = session
        return evicted

    def remove(self, session: Session) -> bool:
        """Take ``session`` out; False when it was not in the table (already gone)."""
        if self.sessions.get(session.client) is session:
            del self.sessions[session.client]
            return True
        return False

    def expire(self, now: float, shortest: float) -> list[Session]:
        """Take out and return every session idle for at least its timeout at ``now``.

        ``shortest`` is at most every live session's timeout: the scan stops at the
        first session idle for less than that (all later ones are younger).
        """
        gone: list[Session] = []
        for session in self.sessions.values():
            idle = now - session.last
            if idle < shortest:
                break
            if idle >= session.timeout:
                gone.append(session)
        for session in gone:
            del self.sessions[session.client]
        return gone

    def clear(self) -> list[Session]:
        """Take out and return every session."""
        gone = list(self.sessions.values())
        self.sessions.clear()
        return gone
