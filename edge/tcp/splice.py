"""The byte relay between two transports: every tunnel in edge is one splice.

It owns two existing ``asyncio.Transport`` objects (sockets, or an adapter such as
the TLS terminator that implements the Transport interface) from the moment
:func:`splice` is called: it installs one small protocol on each with
``set_protocol`` and relays bytes until both are gone. Users: the HTTP upgrade
tunnel after a 101, TLS passthrough and raw TCP (:func:`dial_splice`), a
terminated TLS stream spliced to a TCP backend.

Invariants:
- Order: bytes already read before the splice (``a_to_b`` / ``b_to_a``: peeked
  bytes, the rest after an upgrade, then what a :class:`Pending` holder kept)
  leave first; afterwards each read goes straight to the other side's
  ``write`` (one counter update besides).
- Memory is bounded by flow control both ways: when one side's write buffer
  passes its high-water mark, reading the other side pauses until it drains
  below its low-water mark. Each transport's reading is driven only by the
  write state of the other one. A transport handed over with bytes still
  buffered is normalised so the next drain always resumes the other side.
- Half-close: an EOF from one side goes on as ``write_eof()`` to the other (when
  it ``can_write_eof()``; otherwise both close), and the other direction keeps
  flowing until it ends too or ``termination_delay`` seconds after the first
  EOF (Traefik's terminationDelay: the side still sending gets that long to
  finish; a negative delay waits forever, 0 closes at once). Closing is
  graceful (buffered bytes are flushed); a side lost with an error (a reset)
  aborts the other.
- ``on_close(splice)`` runs exactly once, when both transports are lost.

Dialing (:func:`dial_splice`): a server may speak first (SMTP, SSH, MySQL) and
send bytes before the splice exists, and a client may send more while the dial
is in flight. :class:`Pending` holds a transport between owners: reading
paused, anything that arrives anyway kept, EOF and loss remembered.
``dial_splice`` parks the client on a ``Pending``, dials the upstream with a
``Pending`` as its protocol, and splices the two; :func:`splice` takes over what
a ``Pending`` holds, given as the holder itself or found as a transport's
protocol (its bytes go after ``a_to_b`` / ``b_to_a``, its EOF and loss are
replayed). A peek protocol that already saw the client's EOF says so with
``Pending.attach(transport, eof=True)``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable

from edge.errors import EdgeError

log = logging.getLogger("edge.tcp")

DIAL_TIMEOUT = 30.0  # seconds; Traefik's default tcp dialTimeout
TERMINATION_DELAY = 0.1  # seconds; Traefik's default terminationDelay
DIAL_KEEP_ALIVE = 15.0  # seconds; Traefik's default dialKeepAlive (Go's keep-alive period)
CLIENT_KEEP_ALIVE = 180.0  # seconds; the period Traefik's entrypoints set on accepted connections
KEEP_ALIVE_PROBES = 9  # unanswered probes before the kernel gives up (Go's count, Linux's default)


def keep_alive(transport: asyncio.BaseTransport, period: float) -> None:
    """TCP keep-alive on ``transport``'s socket: a probe after ``period`` idle, then every
    ``period``, the connection reset after 9 unanswered (as Go sets it for Traefik);
    a negative ``period`` leaves keep-alive off.

    A spliced peer that vanishes without a FIN or a reset (powered off, a network
    partition, a NAT that dropped the flow) then ends its splice, and the other side
    with it, after about ten periods; without it the pair, and the counts of the
    middlewares that admitted it, were held for ever. A transport without a socket
    (or an option the system lacks) is left as it is.
    """
    sock = transport.get_extra_info("socket")
    if sock is None or period < 0:  # negative: no keep-alive (Traefik's dialKeepAlive)
        return
    seconds = min(32767, max(1, round(period)))  # Linux's bounds for the two periods
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, seconds)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, seconds)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEP_ALIVE_PROBES)
    except (OSError, AttributeError):  # not TCP, or no such option here
        pass


class DialError(EdgeError):
    """Connecting to a TCP upstream failed or timed out; names the address.

    Derives from :class:`EdgeError`: it is not an HTTP answer (the caller closes
    the client connection, or tries another server).
    """


TCP_CLOSE = 7  # Linux's tcp_states: what a connection is once a reset ended it


def peer_reset(transport: asyncio.BaseTransport) -> bool:
    """Whether ``transport``'s TCP connection was ended by a reset from its peer
    while edge held it (a write to a peer that had closed was answered so).

    Read from the kernel's TCP state (``TCP_INFO``), without reading the socket: a
    connection whose EOF was seen is no longer read, so a reset that follows is
    otherwise noticed only at the next write. False where the system cannot
    tell (no socket, no ``TCP_INFO``).
    """
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    try:
        return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] == TCP_CLOSE
    except (OSError, AttributeError):  # closed under us, or not Linux
        return False


class Pending(asyncio.Protocol):
    """A transport's protocol between owners: reading paused, bytes and EOF kept."""

    __slots__ = ("data", "eof", "exc", "lost", "transport", "waiter")

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.data: list[bytes] = []
        self.eof = False
        self.lost = False
        self.exc: BaseException | None = None
        self.waiter: asyncio.Future | None = None  # set while read() waits

    @classmethod
    def attach(cls, transport: asyncio.Transport, *, eof: bool = False) -> Pending:
        """Park an existing transport; ``eof`` if its previous protocol saw EOF."""
        p = cls()
        p.transport = transport
        p.eof = eof
        transport.set_protocol(p)
        transport.pause_reading()
        return p

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop starts reading after connection_made returns, so pausing here
        # would be undone: the first data_received pauses instead.
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.data.append(data)
        transport = self.transport
        assert transport is not None  # connection_made or attach came first
        transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return True  # stay open: the other direction may still have bytes to send

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.exc = exc
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def read(self, size: int) -> bytes:
        """Wait until ``size`` bytes are held, or EOF or loss; what is held (it stays held)."""
        while sum(map(len, self.data)) < size and not self.eof and not self.lost:
            self.waiter = asyncio.get_running_loop().create_future()
            assert self.transport is not None  # a holder reads once it holds a transport
            self.transport.resume_reading()
            try:
                await self.waiter
            finally:
                self.waiter = None
        return b"".join(self.data)


class _Side(asyncio.Protocol):
    """The protocol installed on one transport of a splice."""

    __slots__ = ("eof", "lost", "nbytes", "peer", "splice", "transport", "write")

    def __init__(self, splice: Splice, transport: asyncio.Transport) -> None:
        self.splice = splice
        self.transport = transport
        self.peer: _Side = self
        self.write: Callable[[bytes], None] = transport.write  # replaced by the peer's
        self.nbytes = 0  # bytes read from this side and written to the peer
        self.eof = False  # this side sent EOF
        self.lost = False

    def data_received(self, data: bytes) -> None:
        self.nbytes += len(data)
        self.write(data)

    def eof_received(self) -> bool:
        self.eof = True
        self.splice._eof(self)
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.splice._lost(self, exc)

    def pause_writing(self) -> None:
        # This side's write buffer is full: stop reading what fills it.
        self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        peer = self.peer
        if not peer.eof:  # a stream past its EOF cannot read again (libuv: ENOTCONN)
            peer.transport.resume_reading()


class Splice:
    """Two transports relaying to each other; see the module docstring.

    ``bytes_a_to_b`` / ``bytes_b_to_a``: bytes relayed each way so far (the
    replayed ones included). ``closed`` once both transports are gone.
    """

    __slots__ = ("a", "b", "closed", "on_close", "termination_delay", "timer")

    def __init__(
        self,
        a: asyncio.Transport,
        b: asyncio.Transport,
        termination_delay: float,
        on_close: Callable[[Splice], None] | None,
    ) -> None:
        self.a = _Side(self, a)
        self.b = _Side(self, b)
        self.a.peer, self.b.peer = self.b, self.a
        self.a.write, self.b.write = b.write, a.write
        self.termination_delay = termination_delay
        self.on_close = on_close
        self.timer: asyncio.TimerHandle | None = None
        self.closed = False

    @property
    def bytes_a_to_b(self) -> int:
        return self.a.nbytes

    @property
    def bytes_b_to_a(self) -> int:
        return self.b.nbytes

    def close(self) -> None:
        """Close both transports after their buffered bytes are written."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        for side in (self.a, self.b):
            if not side.lost:
                side.transport.close()

    def abort(self) -> None:
        """Drop both transports now, buffered bytes with them."""
        for side in (self.a, self.b):
            if not side.lost:
                side.transport.abort()

    def _eof(self, side: _Side) -> None:
        peer = side.peer
        t = peer.transport
        if peer.eof or peer.lost or t.is_closing() or not t.can_write_eof():
            # Both directions are done, or the end cannot be passed on alone.
            self.close()
            return
        t.write_eof()
        if self.timer is None:
            if self.termination_delay == 0:
                self.close()
            elif self.termination_delay > 0:
                loop = asyncio.get_running_loop()
                self.timer = loop.call_later(self.termination_delay, self.close)

    def _lost(self, side: _Side, exc: BaseException | None) -> None:
        side.lost = True
        peer = side.peer
        if not peer.lost:
            if exc is None:
                peer.transport.close()
            else:
                peer.transport.abort()
            return
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.closed = True
        if self.on_close is not None:
            self.on_close(self)


def splice(
    a: asyncio.Transport | Pending,
    b: asyncio.Transport | Pending,
    *,
    a_to_b: bytes = b"",
    b_to_a: bytes = b"",
    termination_delay: float = TERMINATION_DELAY,
    on_close: Callable[[Splice], None] | None = None,
) -> Splice:
    """Relay ``a`` <-> ``b`` from now on; returns the :class:`Splice`.

    ``a`` and ``b`` are transports, or the :class:`Pending` holding one (pass the
    holder itself when the transport may be lost already: a lost transport
    forgets its protocol). ``a_to_b`` / ``b_to_a`` are bytes already read from
    one side, written to the other first; a holder's own bytes follow them.
    Must be called on the loop's thread.
    """
    held: list[Pending | None] = []
    transports: list[asyncio.Transport] = []
    for x in (a, b):
        if isinstance(x, Pending):
            assert x.transport is not None  # a holder keeps its transport, lost or not
            held.append(x)
            transports.append(x.transport)
        else:
            old = x.get_protocol()
            held.append(old if isinstance(old, Pending) else None)
            transports.append(x)
    s = Splice(transports[0], transports[1], termination_delay, on_close)
    sides = (s.a, s.b)
    for side, pending in zip(sides, held, strict=True):
        if pending is not None and pending.lost:
            side.lost = True  # its transport is gone; keep the Pending's view
        else:
            side.transport.set_protocol(side)
    for side, first, pending in zip(sides, (a_to_b, b_to_a), held, strict=True):
        data = first + b"".join(pending.data) if pending is not None else first
        if data:
            side.nbytes += len(data)
            if not side.peer.lost:
                side.write(data)
    if s.a.lost or s.b.lost:
        # Lost while parked: act now as its connection_lost would have.
        lost = [
            (side, pending)
            for side, pending in zip(sides, held, strict=True)
            if side.lost and pending is not None  # (only a holder's side is lost here)
        ]
        for side, _ in lost:
            side.lost = False
        for side, pending in lost:
            s._lost(side, pending.exc)
        return s
    for side in sides:
        _normalise_flow(side)
    for side, pending in zip(sides, held, strict=True):
        eof = pending is not None and pending.eof
        if not eof and not side.peer.transport.get_write_buffer_size():
            side.transport.resume_reading()
    for side, pending in zip(sides, held, strict=True):
        if pending is not None and pending.eof and not side.eof:
            side.eof_received()
    return s


def _normalise_flow(side: _Side) -> None:
    """Make the next drain of ``side``'s buffer resume reading its peer.

    A transport handed over with bytes buffered may have told its previous
    protocol ``pause_writing`` already and would then not tell ours. With the
    high-water mark briefly at 0, a non-empty buffer marks the transport paused
    (documented asyncio behaviour); ``resume_writing`` then follows the drain.
    """
    t = side.transport
    if not t.get_write_buffer_size():
        return
    side.pause_writing()
    low, high = t.get_write_buffer_limits()
    t.set_write_buffer_limits(high=0)
    t.set_write_buffer_limits(high=high, low=low)


async def _exchange(upstream: Pending, request: bytes, reply: bytes) -> None:
    """Write ``request`` to a server just dialled and take its ``reply`` off what it sent."""
    upstream.transport.write(request)  # type: ignore[union-attr]
    got = await upstream.read(len(reply))
    if got[: len(reply)] != reply:
        if not got:
            raise DialError(f"closed before answering the STARTTLS request (expected {reply!r})")
        raise DialError(f"answered {got[:16]!r} to the STARTTLS request, not {reply!r}")
    upstream.data = [got[len(reply) :]] if len(got) > len(reply) else []


def unresolvable(exc: ValueError) -> str:
    """Why a host name cannot even be asked for: Python's IDNA encoding refused it (a
    label empty or over 63 bytes), raising UnicodeError, a ValueError, not an OSError."""
    return f"not a host name that can be resolved ({exc})"


async def dial_splice(
    client: asyncio.Transport | Pending,
    host: str,
    port: int,
    *,
    first: bytes = b"",
    timeout: float = DIAL_TIMEOUT,
    termination_delay: float = TERMINATION_DELAY,
    on_close: Callable[[Splice], None] | None = None,
    preamble: tuple[bytes, bytes] | None = None,
    keep_alive_period: float = DIAL_KEEP_ALIVE,
) -> Splice:
    """Dial ``host:port`` and splice it to ``client`` (``a``: client, ``b``: upstream).

    ``preamble`` (``request``, ``reply``): an exchange the server must complete
    before ``first`` goes (PostgreSQL's STARTTLS: the SSLRequest, then ``S``): the
    request is written, the server's reply awaited within ``timeout`` and dropped;
    another reply is a :class:`DialError`. The upstream connection keeps alive
    with ``keep_alive_period`` (see :func:`keep_alive`).

    ``client`` is a transport (parked on a :class:`Pending` here) or its holder.
    ``first`` goes upstream before anything else (a PROXY protocol header, the
    peeked bytes). Bytes the server sends before the splice is installed are
    kept. Raises :class:`DialError` if the dial fails (a host name the resolver
    refuses included) or exceeds ``timeout``;
    the client is then left parked on a :class:`Pending` for the caller to close.
    A client lost during the dial closes the new upstream connection (through
    the splice, so ``on_close`` still runs once).
    """
    loop = asyncio.get_running_loop()
    if isinstance(client, Pending):
        held = client
    else:
        old = client.get_protocol()
        held = old if isinstance(old, Pending) else Pending.attach(client)
    upstream: Pending | None = None
    try:
        async with asyncio.timeout(timeout):
            _, upstream = await loop.create_connection(Pending, host, port)
            keep_alive(upstream.transport, keep_alive_period)  # type: ignore[arg-type]
            if preamble is not None:
                await _exchange(upstream, *preamble)
    except TimeoutError:
        if upstream is not None and upstream.transport is not None:
            upstream.transport.abort()
        raise DialError(f"dial {host}:{port}: no connection within {timeout:g}s") from None
    except OSError as exc:
        raise DialError(f"dial {host}:{port}: {exc.strerror or exc}") from exc
    except ValueError as exc:  # UnicodeError: a name the resolver refuses (empty or long label)
        raise DialError(f"dial {host}:{port}: {unresolvable(exc)}") from exc
    except DialError as exc:  # the preamble's reply
        upstream.transport.abort()  # type: ignore[union-attr]
        raise DialError(f"dial {host}:{port}: {exc}") from None
    return splice(
        held, upstream, a_to_b=first, termination_delay=termination_delay, on_close=on_close
    )
