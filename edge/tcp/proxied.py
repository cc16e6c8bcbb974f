"""Entry points behind a proxy: the PROXY protocol header a connection starts with.

Owns :class:`ProxyHeaderReader`, the first protocol of every connection on an
entry point with ``proxyProtocol`` (``trustedIPs`` / ``insecure``). It reads the
first bytes with the pure parser (:func:`edge.tcp.proxyproto.parse`) and then
hands the connection to what it becomes on that entry point (HTTP, or the peek),
told the client's address: the one the header names, else the peer's.

Who may send a header:
- a trusted peer (in ``trustedIPs``, or anyone with ``insecure``) may send a v1 or
  v2 header, or none (then the peer is the client). A v2 ``LOCAL`` header (a
  health check from the proxy itself) or v1 ``UNKNOWN`` keeps the peer's address.
- a peer that sends nothing before the deadline, or ends its side (EOF) before a
  byte, sent no header (go-proxyproto, under Traefik, reads a timeout or an EOF
  before the first byte so): the connection becomes what it would have been, and
  what that is hears the EOF. A TCP router that takes connections at once thus
  still relays a client that waits for the server to speak first (SMTP, SSH,
  MySQL), as it does on an entry point without ``proxyProtocol``; whatever the
  connection becomes bounds it with its own deadlines. Part of a header at the
  deadline or EOF closes the connection.
- anyone else's header is refused: the connection is closed, nothing is sent
  (Traefik ignores such a header and serves the peer; a header from a peer not
  trusted to send it is a spoofing attempt or a misconfigured proxy, and both
  are better seen failing). Connections without a header are served as usual.
- a malformed header closes the connection.

Invariants:
- No byte is lost: whatever followed the header in the read that completed it
  goes to the protocol the connection became, before any later read.
- Bounded: a header must be complete within ``timeout`` (the entry point's peek
  timeout) and within the parser's size caps; the reader is in the entry point's
  ``connections`` with that deadline until it hands over.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from edge.deadlines import NO_DEADLINE, PROXY_HEADER
from edge.tcp.middlewares import client_address, networks
from edge.tcp.proxyproto import NEED_MORE, NOT_PROXY, ProxyProtocolError, parse
from edge.tls.clienthello import PEEK_TIMEOUT

if TYPE_CHECKING:
    from edge.entrypoints.base import Swept

log = logging.getLogger("edge.tcp")

__all__ = ["ProxyContext", "ProxyHeaderReader", "trust"]

Address = tuple[str, int]


class ProxyContext:
    """What every connection of one entry point with ``proxyProtocol`` shares.

    ``trusted(ip)``: may this peer send a header. ``arrive(source, destination)``:
    the protocol the connection becomes, given the client and the address it
    reached as the header names them (both None: the connection's own).
    """

    def __init__(
        self,
        *,
        name: str,
        loop: asyncio.AbstractEventLoop,
        connections: set[Swept],
        trusted: Callable[[str], bool],
        arrive: Callable[[Address | None, Address | None], asyncio.Protocol],
        timeout: float = PEEK_TIMEOUT,
    ) -> None:
        self.name = name
        self.loop = loop
        self.connections = connections
        self.trusted = trusted
        self.arrive = arrive
        self.timeout = timeout


class ProxyHeaderReader(asyncio.Protocol):
    """The protocol of a connection until its PROXY protocol header (or its absence) is known."""

    __slots__ = ("buf", "ctx", "deadline", "deadline_kind", "peer", "transport", "trusted")

    def __init__(self, ctx: ProxyContext) -> None:
        self.ctx = ctx
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.trusted = False
        self.buf = b""
        self.deadline_kind = NO_DEADLINE
        self.deadline = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        ip = peer[0] if peer else ""
        if ip.startswith("::ffff:") and "." in ip:
            ip = ip[7:]
        self.peer = ip
        self.trusted = self.ctx.trusted(ip)
        self.ctx.connections.add(self)
        self.deadline_kind = PROXY_HEADER
        self.deadline = self.ctx.loop.time() + self.ctx.timeout

    def data_received(self, data: bytes) -> None:
        buf = self.buf = self.buf + data if self.buf else data
        try:
            header = parse(buf)
        except ProxyProtocolError as exc:
            log.debug(
                "%s: %s: malformed PROXY protocol header: %s; closed", self.ctx.name, self.peer, exc
            )
            self._close()
            return
        if header is NEED_MORE:
            return
        if header is NOT_PROXY:
            self._hand_over(None, None, buf)
            return
        if not self.trusted:
            log.debug(
                "%s: %s sent a PROXY protocol header but is not in proxyProtocol.trustedIPs; closed",
                self.ctx.name,
                self.peer,
            )
            self._close()
            return
        rest = buf[header.length :]  # type: ignore[union-attr]
        # LOCAL (v2) and UNKNOWN carry no addresses: the connection's own stand.
        self._hand_over(header.source, header.destination, rest)  # type: ignore[union-attr]

    def eof_received(self) -> bool:
        transport = self.transport
        if not self.buf and transport is not None:
            # Done sending before a byte: no header. What the connection becomes hears the EOF.
            self._hand_over(None, None, b"")
            if transport.is_closing():
                return False
            return bool(_holder(transport).eof_received())
        log.debug(
            "%s: %s closed before its PROXY protocol header was complete", self.ctx.name, self.peer
        )
        self._leave()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._leave()
        self.transport = None

    # -- deadlines and drain (read by the entrypoint) -----------------------------------

    def deadline_passed(self) -> None:
        if not self.buf and self.transport is not None:
            # Nothing within the timeout: no header (a client waiting for the server to speak first).
            self._hand_over(None, None, b"")
            return
        log.debug(
            "%s: %s sent no complete PROXY protocol header within %gs; closed",
            self.ctx.name,
            self.peer,
            self.ctx.timeout,
        )
        self._close()

    def shutdown(self) -> None:
        self._close()

    def abort(self) -> None:
        self._leave()
        if self.transport is not None:
            self.transport.abort()

    # -- internals ----------------------------------------------------------------------

    def _leave(self) -> None:
        self.deadline_kind = NO_DEADLINE
        self.ctx.connections.discard(self)

    def _close(self) -> None:
        self._leave()
        if self.transport is not None:
            self.transport.close()

    def _hand_over(self, source: Address | None, destination: Address | None, rest: bytes) -> None:
        """The connection becomes what its entry point makes of it, with ``rest`` replayed."""
        self._leave()
        self.buf = b""
        transport = self.transport
        assert transport is not None
        protocol = self.ctx.arrive(source, destination)
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        # The protocol may have handed the transport on already (a TCP router that
        # takes connections at once parks it for its relay): the bytes go to whoever
        # holds it now.
        if rest and not transport.is_closing():
            _holder(transport).data_received(rest)


def _holder(transport: asyncio.Transport) -> asyncio.Protocol:
    """The protocol holding ``transport`` now: what the connection became, or what that
    handed it on to (every one of them reads: an ``asyncio.Protocol``)."""
    return cast(asyncio.Protocol, transport.get_protocol())


def trust(trusted_ips: list[str], insecure: bool) -> Callable[[str], bool]:
    """``trusted(ip)`` for an entry point's ``proxyProtocol`` (IPs or CIDRs, or everyone)."""
    if insecure:
        return lambda ip: True
    nets = networks(trusted_ips)

    def trusted(ip: str) -> bool:
        addr = client_address(ip)
        return addr is not None and any(addr in net for net in nets)

    return trusted
