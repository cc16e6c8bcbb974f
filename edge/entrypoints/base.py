"""What the entrypoint collection needs of an entrypoint, what an entrypoint needs of
the connections it tracks (:class:`Swept`), and helpers they share."""

from __future__ import annotations

from typing import Protocol

from edge.config.static import EntryPoint as EntryPointConfig
from edge.deadlines import DeadlineKind
from edge.router.set import RouterSet

SWEEP_MAX = 1.0
SWEEP_MIN = 0.05


class EntryPoint(Protocol):
    """A TCP or UDP entrypoint as :class:`~edge.entrypoints.EntryPoints` drives it."""

    name: str
    config: EntryPointConfig

    @property
    def port(self) -> int: ...

    async def start(self) -> None:
        """Bind; raises ``OSError`` when the address cannot be bound."""

    def switch(self, routers: RouterSet) -> None:
        """Serve ``routers`` from now on: one assignment."""

    def bound(self, ports: dict[str, int]) -> None:
        """Every entry point of the process is bound; ``ports``: name -> bound port."""

    def sweep(self, now: float) -> None:
        """Enforce deadlines that passed by ``now`` (loop time)."""

    def sweep_interval(self) -> float:
        """How often :meth:`sweep` should run, in seconds."""

    def stop_accepting(self) -> None: ...

    async def drain(self, grace: float) -> None:
        """Finish what is in flight within ``grace`` seconds, then close the rest."""


class Swept(Protocol):
    """A connection in a TCP entrypoint's ``connections``: the sweep's and the drain's contract.

    Implemented by every kind of connection an entrypoint tracks:
    :class:`~edge.http.server.connection.HTTPConnection` and its
    :class:`~edge.http.server.connection.Tunnel` after a 101,
    :class:`~edge.tcp.peek.Peek` and :class:`~edge.tcp.peek.Relay`,
    :class:`~edge.tcp.proxied.ProxyHeaderReader`, and
    :class:`~edge.tls.terminate.TLSTransport` (with
    :class:`~edge.tls.terminate.TLSAccept`) while its handshake runs. (UDP
    sessions are swept by their own table, :mod:`edge.udp.sessions`.)

    Membership: a connection adds itself to the set when it starts (its
    ``connection_made``, or when it takes over from the stage before it) and
    discards itself when it ends or hands over to the next stage, which adds
    itself in turn; at any moment one object stands for the connection. The set
    is the entrypoint's only list of live connections: the drain waits for it to
    empty.

    Deadlines are two plain attributes the connection sets on its own
    transitions, so that no connection needs a timer: ``deadline_kind`` (a
    :class:`~edge.deadlines.DeadlineKind`; ``NO_DEADLINE``, which is false, for
    none) says what is awaited, ``deadline`` (loop time, ``loop.time()``) when
    it passes; ``deadline`` is meaningless while the kind is ``NO_DEADLINE``.

    Who calls what, always on the loop's thread, and none of them may raise (a
    raise ends that sweep of the entrypoint early):

    - ``deadline_passed()``: the periodic sweep (:meth:`EntryPoint.sweep`, every
      :meth:`EntryPoint.sweep_interval`: a quarter of the shortest timeout,
      between ``SWEEP_MIN`` and ``SWEEP_MAX`` seconds, so a deadline is enforced
      that late at most), for a connection whose kind is set and whose
      ``deadline <= now``. The connection acts on its kind (an HTTP 408, a close,
      an abort, a handover) and sets a new kind or ``NO_DEADLINE``; it may leave
      the set.
    - ``shutdown()``: the drain, once per connection, when the entrypoint stops:
      take nothing new and finish what is in flight (an idle HTTP connection
      closes now, a busy one after its response; a peek or a handshake closes; a
      tunnel or a relay does nothing, its peers end it).
    - ``abort()``: the drain, after its grace period, for every connection still
      in the set: close now (``transport.abort()``), dropping what is buffered.
      The connection leaves the set when its transport reports the loss.
    """

    deadline: float
    deadline_kind: DeadlineKind

    def deadline_passed(self) -> None: ...

    def shutdown(self) -> None: ...

    def abort(self) -> None: ...


def format_address(addr: tuple) -> str:
    """A socket address as ``host:port`` or ``[v6]:port``."""
    host, port = addr[0], addr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
