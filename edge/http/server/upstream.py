"""One connection to an upstream server, pooled between requests.

The protocol is glue: bytes go into the response parser, its events go to the
exchange that currently owns this connection (``owner``), through the explicit
:class:`UpstreamOwner` interface and nothing else. While idle in a pool nobody
owns it; any byte or EOF then makes it unusable and it closes itself. After a
101 the owner hands the transport over to a splice, and this protocol is done.

Invariant: a response answers the one request sent before it. edge sends the
next request on a connection only after the response before it ended, so bytes
that arrive in the same read as the end of a response (other than empty lines)
answer nothing; were they kept, they would be taken as the response to the next
request, maybe another client's (response queue poisoning). Their events are
dropped and the connection is aborted: pooled, it is gone; taken again already,
its new owner sees it lost before any byte of its response (and retries a
request without a body on a fresh connection).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol

from edge.errors import HTTPError, ProtocolError
from edge.http.codec import Header, ResponseHead


class UpstreamOwner(Protocol):
    """What an upstream connection needs of its owner (an exchange)."""

    express: bool  # the response may take the parser's quick path (upstream_quick)

    def upstream_quick(self, conn: UpstreamConnection, head: ResponseHead, data: bytes) -> None:
        """A whole plain response in one read."""

    def upstream_head(self, head: ResponseHead) -> None: ...
    def upstream_body(self, data: bytes) -> None: ...
    def upstream_trailers(self, fields: list[Header]) -> None:
        """The response's trailer fields, before its ``upstream_end``."""

    def upstream_interim(self, head: ResponseHead) -> None:
        """A 1xx but 101 (103 Early Hints) before the response's head."""

    def upstream_end(self, conn: UpstreamConnection) -> None: ...
    def upstream_upgrade(self, rest: bytes) -> None:
        """A 101: ``rest`` are the bytes after its head; the owner takes the transport."""

    def upstream_lost(self, conn: UpstreamConnection, exc: Exception | None) -> None: ...
    def upstream_failed(self, exc: HTTPError, conn: UpstreamConnection) -> None:
        """The upstream sent bytes that are not a valid response; the connection is aborted.

        Called inside ``hold_writes``: what that read wrote to the client is to be dropped."""

    def hold_writes(self) -> None:
        """What the events of one read write to the client (and upstream) is batched..."""

    def release_writes(self) -> None:
        """...and leaves in one write here, after the read's checks (an upstream
        connection aborted by them gets nothing)."""

    def pause_sending(self) -> None:
        """This connection's write buffer is full: stop sending it the request body."""

    def resume_sending(self) -> None: ...


class UpstreamConnection(asyncio.Protocol):
    __slots__ = (
        "ended",
        "idle_deadline",
        "owner",
        "parser",
        "paused",
        "quick",
        "received",
        "reused",
        "stray",
        "transport",
        "withheld",
    )

    def __init__(self, parser_cls: type) -> None:
        self.parser = parser_cls(self)
        self.quick = getattr(self.parser, "quick", None)  # httptools only
        self.transport: asyncio.Transport | None = None
        self.owner: UpstreamOwner | None = None
        self.idle_deadline = 0.0
        self.reused = False
        self.received = False  # a byte of the current response arrived
        self.paused = False
        self.ended = False  # a response ended in the read being parsed
        self.stray = False  # ...and a later message began in it
        # Aborted by edge for bytes after a response: what a next owner wrote in that
        # read was held back (hold_writes) and never sent, so its request may go again.
        self.withheld = False

    # -- pool interface ----------------------------------------------------------

    def is_reusable(self) -> bool:
        t = self.transport
        return t is not None and not t.is_closing() and self.owner is None

    def close(self) -> None:
        self.idle_deadline = 0.0  # not to be taken from a pool (see edge.transports.Pooled)
        t = self.transport
        if t is not None and not t.is_closing():
            t.close()

    def abort(self) -> None:
        self.idle_deadline = 0.0
        t = self.transport
        if t is not None:
            t.abort()

    # -- asyncio callbacks -------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        owner = self.owner
        if owner is None:
            # Bytes on an idle connection: the server broke the protocol.
            self.close()
            return
        if owner.express and self.quick is not None:
            head = self.quick(data)
            if head is not None:
                # The whole response: nothing reads ``received`` before the next take resets it.
                owner.upstream_quick(self, head, data)
                return
        self.received = True
        owner.hold_writes()  # what this parse writes to the client leaves in one call
        try:
            self.parser.feed(data)
        except ProtocolError as exc:
            if self.owner is owner:
                self.owner = None
            self.withheld = self.ended
            self.abort()
            if not self.ended:
                owner.upstream_failed(exc, self)
            # else: what broke came after the response, in the same read: it answers
            # nothing, as valid bytes there would not (below); that exchange is
            # complete, and its client connection goes on.
        else:
            if self.ended and (self.stray or self.parser.held.lstrip(b"\r\n")):
                self.withheld = True
                self.abort()  # more than the response asked for: see the module's invariant
        finally:
            self.ended = self.stray = False
            owner.release_writes()

    def eof_received(self) -> bool | None:
        self.idle_deadline = 0.0  # the transport closes
        owner = self.owner
        if owner is not None:
            # A body cut short is reported by connection_lost, which follows.
            with contextlib.suppress(ProtocolError):
                self.parser.feed_eof()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.idle_deadline = 0.0
        owner = self.owner
        if owner is not None:
            self.owner = None
            owner.upstream_lost(self, exc)

    def pause_writing(self) -> None:
        if self.owner is not None:
            self.owner.pause_sending()

    def resume_writing(self) -> None:
        if self.owner is not None:
            self.owner.resume_sending()

    # -- parser events -----------------------------------------------------------

    # The owner may let go of this connection in the middle of a feed (an
    # error answered, a timeout): later events of that feed are then dropped.

    # Events after the end of a response in the same read answer nothing: dropped.

    def on_head(self, head) -> None:
        if self.ended:
            self.stray = True
        elif self.owner is not None:
            self.owner.upstream_head(head)

    def on_body(self, data: bytes) -> None:
        if not self.ended and self.owner is not None:
            self.owner.upstream_body(data)

    def on_trailers(self, fields: list[Header]) -> None:
        if not self.ended and self.owner is not None:
            self.owner.upstream_trailers(fields)

    def on_interim(self, head: ResponseHead) -> None:
        if not self.ended and self.owner is not None:
            self.owner.upstream_interim(head)

    def on_end(self) -> None:
        if self.ended:
            return
        self.ended = True  # before the owner may give this connection to the next request
        if self.owner is not None:
            self.owner.upstream_end(self)

    def on_upgrade(self, rest: bytes) -> None:
        # Follows the end of its own 101 (unless that 101 was stray).
        if self.stray:
            return
        self.ended = False
        owner = self.owner
        if owner is not None:
            self.owner = None
            owner.upstream_upgrade(rest)

    # -- flow control driven by the client side ---------------------------------

    def pause_reading(self) -> None:
        if not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.paused:
            self.paused = False
            if self.transport is not None:
                self.transport.resume_reading()
