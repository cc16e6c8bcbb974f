"""UDP sessions: who talks to which server, and which has been idle longest.

Owns :class:`Session` (one client address and its upstream), :class:`SessionTable`,
:class:`Counters` and :class:`Tally` (a session's own counts, where the access log
wants them). No sockets are touched here: the table only bounds, evicts
and expires, so it is tested without a loop.

Recency is a stamp, not an order kept per datagram: the data plane writes a coarse
clock (``session.last = tick``; the tick is ``time.monotonic()`` at the last sweep,
new session or drain poll) and nothing else, so a datagram costs one attribute
store. The table keeps a heap of (stamp, sequence, session) entries, one per live
session, refreshed lazily: an entry popped with a stamp older than its session's
``last`` is pushed again with the newer one, so the session popped with an unchanged
stamp is the least recently active (at the tick's resolution; among equal stamps,
the one whose entry was pushed first). Every re-push follows
a datagram, so eviction is O(log n) amortized. Entries of sessions that left the
table are skipped when popped, and the heap is rebuilt when they outnumber the live.

Invariants of :class:`SessionTable`:

* at most ``max_sessions`` sessions; adding one more evicts the least recently
  active session first (and hands it back, so its socket is closed and it is counted);
* every live session has exactly one heap entry whose stamp is at most its ``last``;
* a session leaves the table exactly once (evicted, expired or removed), and the
  caller that takes it out closes it.

Expiry is a sweep: nothing is scheduled per session; the entry point calls
:meth:`SessionTable.expire` every quarter of the shortest timeout, with the tick's
lag (``slack``: a stamp is at most that much older than the datagram it records) so
that no session ends before its timeout; it pops only entries old enough to expire.
"""

from __future__ import annotations

import heapq
import itertools
import socket
from collections.abc import Hashable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edge.router.udp import UDPServer

__all__ = ["Counters", "Session", "SessionTable", "Tally"]


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


def _tallied(name: str) -> property:
    """A count a :class:`Tally` keeps for its session and adds to its shared counters."""
    own = "_" + name

    def get(tally: Tally) -> int:
        return getattr(tally, own)

    def set_(tally: Tally, value: int) -> None:
        shared = tally.shared
        setattr(shared, name, getattr(shared, name) + value - getattr(tally, own))
        setattr(tally, own, value)

    return property(get, set_)


def _shared(name: str) -> property:
    """A count a :class:`Tally` leaves to its shared counters."""

    def get(tally: Tally) -> int:
        return getattr(tally.shared, name)

    def set_(tally: Tally, value: int) -> None:
        setattr(tally.shared, name, value)

    return property(get, set_)


class Tally:
    """A session's counters where the access log is on: what the data plane adds to
    ``session.counters`` goes to the (router, service) :class:`Counters` it shares
    (``shared``) and, for the datagrams and bytes each way, to the session's own
    count, which its log line reads. Where the log is off sessions hold the shared
    counters themselves, and a datagram pays nothing for it."""

    __slots__ = (
        "_bytes_to_client",
        "_bytes_to_server",
        "_datagrams_to_client",
        "_datagrams_to_server",
        "shared",
    )

    def __init__(self, shared: Counters) -> None:
        self.shared = shared
        self._datagrams_to_server = self._bytes_to_server = 0
        self._datagrams_to_client = self._bytes_to_client = 0

    datagrams_to_server = _tallied("datagrams_to_server")
    bytes_to_server = _tallied("bytes_to_server")
    datagrams_to_client = _tallied("datagrams_to_client")
    bytes_to_client = _tallied("bytes_to_client")
    dropped = _shared("dropped")
    sessions_opened = _shared("sessions_opened")
    sessions_expired = _shared("sessions_expired")
    sessions_evicted = _shared("sessions_evicted")

    @property
    def router(self) -> str:
        return self.shared.router

    @property
    def service(self) -> str:
        return self.shared.service


class Session:
    """One client address of an entry point and its upstream.

    ``server`` and ``sock`` are None between a refusal and the client's next
    datagram (which picks another server). ``reply`` is the ancillary data that makes
    replies leave from ``local``, the address the client wrote to (wildcard
    listeners); ``header`` the PROXY protocol header still to prepend to the first
    datagram sent to ``server``. ``ready`` is ``sock`` while a client's datagram can
    go to it as it is (no header to prepend, no server to pick), else None: the one
    check the hot path makes. ``last`` is the tick of the session's latest datagram
    (either way). ``key`` is what the table files it under: ``client`` itself, or the
    raw sockaddr bytes the listener's recvmmsg gives (edge.udp.mmsg). ``counters``: the
    (router, service) :class:`Counters`, or a :class:`Tally` of them where the access
    log is on. ``opened``: when it began (``time.monotonic``).
    """

    __slots__ = (
        "budget",
        "client",
        "counters",
        "fills",
        "header",
        "key",
        "last",
        "local",
        "opened",
        "ready",
        "reply",
        "server",
        "sock",
        "timeout",
    )

    def __init__(
        self,
        client: tuple[Any, ...],
        counters: Counters | Tally,
        *,
        timeout: float,
        local: tuple[Any, ...] | None = None,
        reply: list[tuple[int, int, bytes]] | None = None,
        key: Hashable | None = None,
    ) -> None:
        self.client = client
        self.key: Hashable = client if key is None else key
        self.counters = counters
        self.timeout = timeout
        self.local = local
        self.reply = reply
        self.server: UDPServer | None = None
        self.sock: socket.socket | None = None
        self.ready: socket.socket | None = None
        self.header: bytes | None = None
        self.last = 0.0
        self.opened = 0.0
        self.budget = 1  # datagrams the upstream socket's next callback reads
        self.fills = 0

    def __repr__(self) -> str:
        return f"Session({self.client!r}, server={getattr(self.server, 'address', None)!r})"


class SessionTable:
    """Live sessions by key (the client's address), at most ``max_sessions``, least recently active
    evicted first (see the module docstring)."""

    __slots__ = ("_heap", "_seq", "max_sessions", "sessions")

    def __init__(self, max_sessions: int) -> None:
        if max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        self.max_sessions = max_sessions
        # The data plane reads this directly (get) on its hot path.
        self.sessions: dict[Hashable, Session] = {}
        self._heap: list[tuple[float, int, Session]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self.sessions)

    def __iter__(self) -> Iterator[Session]:
        return iter(list(self.sessions.values()))

    def get(self, client: Hashable) -> Session | None:
        return self.sessions.get(client)

    def touch(self, session: Session, now: float) -> None:
        """``session`` was active at ``now`` (what the data plane writes inline)."""
        session.last = now

    def add(self, session: Session, now: float) -> Session | None:
        """Insert ``session``, active at ``now``; returns the session evicted for it."""
        if session.key in self.sessions:
            raise KeyError(f"a session for {session.client!r} exists")
        evicted = self._pop_oldest() if len(self.sessions) >= self.max_sessions else None
        session.last = now
        self.sessions[session.key] = session
        heapq.heappush(self._heap, (now, next(self._seq), session))
        if len(self._heap) > 2 * len(self.sessions) + 64:
            self._rebuild()
        return evicted

    def _live(self, session: Session) -> bool:
        return self.sessions.get(session.key) is session

    def _pop_oldest(self) -> Session | None:
        """Take out the least recently active session."""
        heap = self._heap
        while heap:
            stamp, _, session = heapq.heappop(heap)
            if not self._live(session):
                continue  # it left the table
            if session.last != stamp:  # active since: back in, at its newer stamp
                heapq.heappush(heap, (session.last, next(self._seq), session))
                continue
            del self.sessions[session.key]
            return session
        return None

    def _rebuild(self) -> None:
        self._heap = [(s.last, next(self._seq), s) for s in self.sessions.values()]
        heapq.heapify(self._heap)

    def remove(self, session: Session) -> bool:
        """Take ``session`` out; False when it was not in the table (already gone)."""
        if self._live(session):
            del self.sessions[session.key]
            return True
        return False

    def expire(self, now: float, shortest: float, slack: float = 0.0) -> list[Session]:
        """Take out and return every session idle for at least its timeout at ``now``.

        ``shortest`` is at most every live session's timeout; ``slack`` bounds how much
        older a stamp may be than the datagram it records (0: stamps are exact). Only
        entries stamped at least ``shortest + slack`` ago are popped.
        """
        heap = self._heap
        limit = now - slack  # the latest a stamp's datagram can have been before ``now``
        gone: list[Session] = []
        keep: list[tuple[float, int, Session]] = []
        while heap and limit - heap[0][0] >= shortest:
            entry = heapq.heappop(heap)
            stamp, _, session = entry
            if not self._live(session):
                continue
            if session.last != stamp:
                heapq.heappush(heap, (session.last, next(self._seq), session))
            elif limit - stamp >= session.timeout:
                del self.sessions[session.key]
                gone.append(session)
            else:
                keep.append(entry)  # a longer timeout than the shortest: not yet
        for entry in keep:
            heapq.heappush(heap, entry)
        if len(heap) > 2 * len(self.sessions) + 64:
            self._rebuild()
        return gone

    def clear(self) -> list[Session]:
        """Take out and return every session."""
        gone = list(self.sessions.values())
        self.sessions.clear()
        self._heap = []
        return gone
