"""One connection to an upstream server, pooled between requests.

The protocol is glue: bytes go into the response parser, its events go to the
client connection that currently owns this one (``owner``). While idle in a pool
nobody owns it; any byte or EOF then makes it unusable and it closes itself. In
tunnel mode (after a 101) bytes are relayed as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from edge.errors import ProtocolError

if TYPE_CHECKING:
    from edge.http.server import HTTPConnection


class UpstreamConnection(asyncio.Protocol):
    __slots__ = (
        "idle_deadline",
        "owner",
        "parser",
        "paused",
        "quick",
        "received",
        "reused",
        "transport",
        "tunnel",
    )

    def __init__(self, parser_cls: type) -> None:
        self.parser = parser_cls(self)
        self.quick = getattr(self.parser, "quick", None)  # httptools only
        self.transport: asyncio.Transport | None = None
        self.owner: HTTPConnection | None = None
        self.idle_deadline = 0.0
        self.reused = False
        self.received = False  # a byte of the current response arrived
        self.tunnel = False
        self.paused = False

    # -- pool interface ----------------------------------------------------------

    def is_reusable(self) -> bool:
        t = self.transport
        return t is not None and not t.is_closing() and self.owner is None and not self.tunnel

    def close(self) -> None:
        t = self.transport
        if t is not None and not t.is_closing():
            t.close()

    def abort(self) -> None:
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
        if self.tunnel:
            owner.transport.write(data)
            return
        self.received = True
        if owner.express and self.quick is not None:
            head = self.quick(data)
            if head is not None:
                owner.upstream_quick(self, head, data)
                return
        owner.out = []  # what this parse writes to the client leaves in one call
        try:
            self.parser.feed(data)
        except ProtocolError as exc:
            if self.owner is owner:
                self.owner = None
            self.abort()
            owner.out = None
            owner.upstream_failed(exc, self)
        finally:
            out = owner.out
            owner.out = None
            t = owner.transport
            if out and t is not None and not t.is_closing():
                t.writelines(out)

    def eof_received(self) -> bool | None:
        owner = self.owner
        if owner is not None and self.tunnel:
            return owner.tunnel_eof(from_upstream=True)
        if owner is not None:
            # A body cut short is reported by connection_lost, which follows.
            with contextlib.suppress(ProtocolError):
                self.parser.feed_eof()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        owner = self.owner
        if owner is not None:
            self.owner = None
            owner.upstream_lost(self, exc)

    def pause_writing(self) -> None:
        if self.owner is not None:
            self.owner.pause_reading(self.owner.PAUSE_UPSTREAM)

    def resume_writing(self) -> None:
        if self.owner is not None:
            self.owner.resume_reading(self.owner.PAUSE_UPSTREAM)

    # -- parser events -----------------------------------------------------------

    # The owner may let go of this connection in the middle of a feed (an
    # error answered, a timeout): later events of that feed are then dropped.

    def on_head(self, head) -> None:
        if self.owner is not None:
            self.owner.upstream_head(head)

    def on_body(self, data: bytes) -> None:
        if self.owner is not None:
            self.owner.upstream_body(data)

    def on_end(self) -> None:
        if self.owner is not None:
            self.owner.upstream_end(self)

    def on_upgrade(self, rest: bytes) -> None:
        if self.owner is not None:
            self.tunnel = True
            self.owner.upstream_upgrade(rest)

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
