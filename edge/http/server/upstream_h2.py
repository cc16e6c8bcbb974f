"""HTTP/2 to servers: a pooled connection over h2's client side, and each stream as
the upstream of one exchange.

:class:`H2Upstream` is the asyncio protocol of one connection to an ``h2c://``
server, or to an ``https://`` one whose ALPN chose ``h2``; it owns the h2 state
machine, its streams, and its place in the ServersTransport's ``shared`` list
(:meth:`edge.transports.Transport.take_stream`), where every exchange for that
server takes streams from it while the server's SETTINGS_MAX_CONCURRENT_STREAMS
(at most :data:`MAX_STREAMS`) leaves room. Each stream is an
:class:`H2UpstreamStream`: to its exchange it is what an
:class:`~edge.http.server.upstream.UpstreamConnection` is (the exchange's
``upstream``, the same :class:`~edge.http.server.upstream.UpstreamOwner` calls, its
``transport`` and ``parser`` in one), so the exchange does not fork.

The stream's two directions, as the client side's :mod:`edge.http.server.h2` does
them the other way:
- Up. The exchange writes an HTTP/1.1 request, as to any server; the stream reads
  those bytes back with the entrypoint's own sans-IO request parser and sends its
  events as HEADERS (``:authority`` from Host, hop-by-hop fields gone, ``te:
  trailers`` for gRPC), DATA as the stream's and the connection's send windows
  allow (a chunked body's framing gone), and END_STREAM, or trailers with it.
  Past ``HIGH_WATER`` of request body waiting for window the exchange is told
  (``pause_sending``), which stops reading the client.
- Down. HEADERS become a :class:`~edge.http.codec.base.ResponseHead` (version
  ``2.0``: the exchange frames it for its client), DATA goes to
  ``upstream_body`` and its flow-controlled length is acknowledged only while the
  client side takes it (``pause_reading`` holds the acknowledgements), trailers to
  ``upstream_trailers``, END_STREAM to ``upstream_end``.

Invariants:
- A stream's memory is bounded: at most a stream window (64 KiB) of response
  unacknowledged while its client does not read, and ``HIGH_WATER`` of request
  body queued (plus the read that passed it).
- A stream ends once: END_STREAM both ways, or RST_STREAM (CANCEL when edge drops
  it: the client left, or the exchange gave up on it), and then leaves its
  connection's count, whichever comes first; its owner hears of a loss once.
- A stream the server refused (REFUSED_STREAM, or above a GOAWAY's last stream id)
  was never processed: its owner hears it as lost and ``withheld``, which the
  exchange may send again on a fresh connection.
- What one read from the server makes leaves in one write per client: each owner
  hears ``hold_writes`` before its first event of a read, ``release_writes`` after.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from h2.errors import ErrorCodes

from edge.errors import HTTPError, UpstreamConnectError
from edge.http.codec.base import ResponseHead
from edge.http.codec.h2 import (
    CONNECTION_SPECIFIC,
    LARGEST_WINDOW,
    STREAM_WINDOW,
    next_data,
    remembering_hpack,
)
from edge.http.server.upstream import UpstreamConnection

if TYPE_CHECKING:
    from edge.http.codec import Header, RequestHead
    from edge.http.server.upstream import UpstreamOwner
    from edge.transports import ServerURL, Transport

log = logging.getLogger("edge.http")

MAX_STREAMS = 100  # streams edge opens on one connection at most, whatever the server allows
HIGH_WATER = 64 * 1024  # request body queued for the window before the exchange pauses its client
LOW_WATER = HIGH_WATER // 4
DIAL_ROUNDS = 8  # a request waits for this many dials that left it no room before a 502
SETTINGS_WAIT = 1.0  # seconds a new connection waits for the server's SETTINGS before use
GRPC = b"application/grpc"
NO_BODY = frozenset((204, 304))


def wants_h2(server: ServerURL, head: RequestHead) -> bool:
    """Whether ``head`` goes to ``server`` over HTTP/2: always to an ``h2c://`` server;
    to an ``https://`` one when its client spoke HTTP/2 or it is gRPC, until a
    handshake with that server chose ``http/1.1`` by ALPN (``server.h2`` False)."""
    if server.h2c:
        return True
    if not server.h2:
        return False
    if head.version == b"2.0":
        return True
    return any(n.lower() == b"content-type" and v.startswith(GRPC) for n, v in head.headers)


async def connect(
    transport: Transport,
    server: ServerURL,
    request_parser: type,
    response_parser: type,
) -> H2UpstreamStream | UpstreamConnection:
    """An upstream for one request to ``server`` over HTTP/2: a stream on one of its
    connections with room, else on a new one (one dial per server at a time, which
    the requests that wait meanwhile share); where the server's ALPN chose HTTP/1.1,
    an HTTP/1.1 connection. Raises UpstreamConnectError as ``Transport.dial`` does."""
    key = server.key
    for _ in range(DIAL_ROUNDS):
        if not server.h2:  # ALPN said http/1.1: this server is HTTP/1.1's from now on
            pooled = transport.take_idle(server)
            if isinstance(pooled, UpstreamConnection):
                pooled.reused = True
                return pooled
            conn = await transport.dial(server, lambda: UpstreamConnection(response_parser))
            assert isinstance(conn, UpstreamConnection)
            return conn
        stream = transport.take_stream(server)
        if stream is not None:
            assert isinstance(stream, H2UpstreamStream)
            return stream
        dialing = transport.dialing.get(key)
        if dialing is None:
            dialing = transport.dialing[key] = transport.loop.create_task(
                _dial(transport, server, request_parser, response_parser)
            )
            dialing.add_done_callback(lambda task: _dialed(transport, key, task))
        # Shielded: a request that gives up (its client left) leaves the dial to the others.
        await asyncio.shield(dialing)
    raise UpstreamConnectError(f"dial {server.url}: no HTTP/2 stream after {DIAL_ROUNDS} dials")


def _dialed(transport: Transport, key: tuple, task: asyncio.Task) -> None:
    if transport.dialing.get(key) is task:
        del transport.dialing[key]
    if not task.cancelled():
        task.exception()  # retrieved: each waiter raised it already


async def _dial(
    transport: Transport, server: ServerURL, request_parser: type, response_parser: type
) -> None:
    """One connection to ``server``, into its pool: HTTP/2's shared list, or, where ALPN
    chose HTTP/1.1, the idle pool (and ``server.h2`` False)."""

    def made() -> asyncio.Protocol:
        conn = H2Upstream(transport, server, request_parser)
        if not server.tls:
            return conn
        return Negotiated(conn, lambda: UpstreamConnection(response_parser))

    protocol = await transport.dial(server, made, h2=server.tls)
    chosen = protocol.chosen if isinstance(protocol, Negotiated) else protocol
    if isinstance(chosen, H2Upstream):
        # Published once the server said how many streams it takes (the requests that
        # wait for this dial take theirs at once); a server silent for SETTINGS_WAIT
        # gets them unknowing, as RFC 9113 lets a client.
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(chosen.settled), SETTINGS_WAIT)
        if chosen.usable():
            transport.add_shared(server, chosen)
        return
    log.info("server %s: ALPN chose HTTP/1.1: its requests go over HTTP/1.1", server.url)
    server.h2 = False
    assert isinstance(chosen, UpstreamConnection)
    transport.put_idle(server, chosen)


class Negotiated(asyncio.Protocol):
    """The protocol of a TLS connection that offered ``h2`` and ``http/1.1``: once the
    handshake is done, it hands the transport to the one ALPN chose (``chosen``)."""

    def __init__(self, h2: H2Upstream, http1: Callable[[], UpstreamConnection]) -> None:
        self.h2 = h2
        self.http1 = http1
        self.chosen: asyncio.Protocol | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        ssl_object = transport.get_extra_info("ssl_object")
        alpn = ssl_object.selected_alpn_protocol() if ssl_object is not None else None
        chosen: asyncio.Protocol = self.h2 if alpn == "h2" else self.http1()
        self.chosen = chosen
        transport.set_protocol(chosen)
        chosen.connection_made(transport)


class H2Upstream(asyncio.Protocol):
    """One HTTP/2 connection to a server (module doc)."""

    def __init__(self, pool: Transport, server: ServerURL, request_parser: type) -> None:
        self.pool = pool
        self.server = server
        self.loop = pool.loop
        self.request_parser = request_parser
        self.request_memo = request_parser.memo()  # what its streams' request parsers share
        self.scheme = b"https" if server.tls else b"http"
        self.transport: asyncio.Transport | None = None
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(
                client_side=True,
                header_encoding=None,
                validate_inbound_headers=True,
                normalize_inbound_headers=True,
                # What edge sends was read by its HTTP/1.1 codecs and lowercased here.
                validate_outbound_headers=False,
                normalize_outbound_headers=False,
            )
        )
        remembering_hpack(self.h2)  # a server's same answer is not decoded again
        self.streams: dict[int, H2UpstreamStream] = {}  # by id, once their HEADERS went
        self.taken = 0  # streams handed out and not over (with an id or not yet)
        self.limit = MAX_STREAMS  # the server's SETTINGS_MAX_CONCURRENT_STREAMS, at most
        self.goaway = False  # the server said GOAWAY, or edge is done with the connection
        self.idle_deadline = 0.0  # Multiplexed: when it stayed without a stream long enough
        self.write_paused = False
        self.flushing = False  # a write_out is due (flush)
        self.last_read = 0.0  # loop time of the last read from the server (readIdleTimeout)
        self.ping_sent = 0.0  # when the PING awaiting its ack went; 0: none
        self.held: list[UpstreamOwner] | None = None  # owners whose writes a read holds
        # Done at the server's first SETTINGS (or the connection's end): until then its
        # MAX_CONCURRENT_STREAMS is unknown, and the requests waiting for this dial
        # would open more streams than it allows (a server resets those).
        self.settled: asyncio.Future[None] = self.loop.create_future()

    # -- Multiplexed (edge.transports) ----------------------------------------------

    def usable(self) -> bool:
        t = self.transport
        return t is not None and not t.is_closing() and not self.goaway

    def open_stream(self) -> H2UpstreamStream | None:
        if self.taken >= self.limit or not self.usable():
            return None
        self.taken += 1
        self.idle_deadline = 0.0
        return H2UpstreamStream(self)

    def close(self) -> None:
        """No new stream; the connection ends once its streams in flight did."""
        self.goaway = True
        if not self.taken:
            self._end()

    def _end(self) -> None:
        self.goaway = True
        self.idle_deadline = 0.0
        self.pool.drop_shared(self.server, self)
        t = self.transport
        if t is not None and not t.is_closing():
            with contextlib.suppress(h2.exceptions.H2Error):
                self.h2.close_connection()
            self.write_out()
            t.close()

    def tick(self, now: float) -> None:
        """readIdleTimeout and pingTimeout, as Go's HTTP/2 transport has them for Traefik:
        a connection the server sent nothing on for readIdleTimeout gets a PING; one
        whose PING goes unanswered for pingTimeout is closed, its streams lost."""
        if self.transport is None:
            return
        pool = self.pool
        if self.ping_sent:
            if now - self.ping_sent >= pool.ping_timeout:
                log.warning(
                    "server %s: no answer to a PING within %gs: connection closed",
                    self.server.url,
                    pool.ping_timeout,
                )
                self._lost(TimeoutError(f"no PING answer within {pool.ping_timeout:g}s"))
        elif now - max(self.last_read, self.ping_sent) >= pool.read_idle:
            self.ping_sent = now
            self.h2.ping(b"edge-ka!")
            self.write_out()

    def released(self, stream: H2UpstreamStream) -> None:
        """``stream`` is over on edge's side."""
        if stream.id:
            self.streams.pop(stream.id, None)
        self.taken -= 1
        if self.taken:
            return
        if self.goaway or not self.pool.keep:
            self._end()
        else:
            self.idle_deadline = self.loop.time() + self.pool.idle_timeout

    # -- asyncio callbacks -----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.last_read = self.loop.time()
        machine = self.h2
        machine.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 0,  # no stream the server opens
            },
        )
        machine.initiate_connection()
        # Each stream's window bounds what it holds; the connection's lets every stream use its own.
        extra = min(MAX_STREAMS * STREAM_WINDOW, LARGEST_WINDOW) - STREAM_WINDOW
        machine.increment_flow_control_window(extra)
        self.write_out()

    def data_received(self, data: bytes) -> None:
        if self.pool.read_idle:
            self.last_read = self.loop.time()
            self.ping_sent = 0.0  # any frame says the server is there
        held = self.held = []
        try:
            try:
                events = self.h2.receive_data(data)
            except h2.exceptions.ProtocolError as exc:
                log.warning("server %s: HTTP/2 protocol error: %s", self.server.url, exc)
                self.write_out()
                self._lost(UpstreamConnectError(f"HTTP/2 protocol error: {exc}"))
                return
            for event in events:
                self._event(event)
            self.write_out()
        finally:
            self.held = None
            for owner in held:
                owner.release_writes()

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if not self.settled.done():
            self.settled.set_result(None)
        self._lost(exc)

    def pause_writing(self) -> None:
        self.write_paused = True
        for stream in list(self.streams.values()):
            stream.pause_sending()

    def resume_writing(self) -> None:
        self.write_paused = False
        for stream in list(self.streams.values()):
            stream.pump()

    # -- h2 events ---------------------------------------------------------------------

    def _event(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.DataReceived):
            stream = self.streams.get(event.stream_id or 0)
            size = event.flow_controlled_length or 0
            if stream is None:
                if size:  # a stream edge is done with: its window goes back at once
                    self.h2.acknowledge_received_data(size, event.stream_id or 0)
                return
            stream.received_data(event.data or b"", size)
        elif isinstance(event, h2.events.ResponseReceived):
            stream = self.streams.get(event.stream_id or 0)
            if stream is not None:
                stream.received_head(list(event.headers or ()), event.stream_ended is not None)
        elif isinstance(event, h2.events.TrailersReceived):
            stream = self.streams.get(event.stream_id or 0)
            if stream is not None:
                stream.received_trailers(list(event.headers or ()))
        elif isinstance(event, h2.events.StreamEnded):
            stream = self.streams.get(event.stream_id or 0)
            if stream is not None:
                stream.received_end()
        elif isinstance(event, h2.events.StreamReset):
            stream = self.streams.get(event.stream_id or 0)
            if stream is not None:
                stream.received_reset(event.error_code)
        elif isinstance(event, h2.events.WindowUpdated):
            if event.stream_id:
                stream = self.streams.get(event.stream_id)
                if stream is not None:
                    stream.pump()
            else:
                for stream in list(self.streams.values()):
                    stream.pump()
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            changed = event.changed_settings.get(h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS)
            if changed is not None:
                self.limit = max(0, min(MAX_STREAMS, changed.new_value))
            if not self.settled.done():
                self.settled.set_result(None)
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._goaway(event.last_stream_id or 0, event.error_code)
        elif isinstance(event, h2.events.InformationalResponseReceived):
            stream = self.streams.get(event.stream_id or 0)
            if stream is not None:
                stream.received_interim(list(event.headers or ()))
        # PING (h2 answers it), pushes (disabled), SETTINGS acks: nothing to do.

    def _goaway(self, last: int, code: Any) -> None:
        """GOAWAY: no new stream here; those above ``last`` were never processed
        (withheld: the exchange may send them again); the others go on."""
        log.debug("server %s: GOAWAY %s, last stream %d", self.server.url, code, last)
        self.goaway = True
        if self.streams:
            # h2 takes no frame after a GOAWAY, but the streams up to ``last`` go on
            # (RFC 9113 6.8): its connection state is put back to open for them, and
            # ``goaway`` keeps new streams off this connection.
            self.h2.state_machine.state = h2.connection.ConnectionState.CLIENT_OPEN
        self.pool.drop_shared(self.server, self)
        for sid, stream in list(self.streams.items()):
            if sid > last:
                stream.refused("GOAWAY")
        if not self.taken:
            self._end()

    def _lost(self, exc: Exception | None) -> None:
        self.goaway = True
        self.idle_deadline = 0.0
        self.pool.drop_shared(self.server, self)
        if self.transport is not None:
            self.transport.abort()
            self.transport = None
        for stream in list(self.streams.values()):
            stream.lost(exc)

    # -- writing ---------------------------------------------------------------------

    def hold(self, owner: UpstreamOwner) -> None:
        """``owner`` hears of this read: what it writes leaves after it (module doc)."""
        held = self.held
        if held is not None and owner not in held:
            owner.hold_writes()
            held.append(owner)

    def flush(self) -> None:
        """What h2 queued goes to the server once the loop's callbacks of now ran, in one
        write with what the other streams queue meanwhile (a write per frame cost a
        system call each: 18 per gRPC call); a read from the server writes at its end."""
        if not self.flushing and self.held is None:
            self.flushing = True
            self.loop.call_soon(self.write_out)

    def write_out(self) -> None:
        self.flushing = False
        t = self.transport
        if t is not None and not t.is_closing():
            data = self.h2.data_to_send()
            if data:
                t.write(data)


class H2UpstreamStream:
    """One stream: the exchange's upstream, its transport and its parser (module doc)."""

    __slots__ = (
        "conn",
        "ended",
        "id",
        "idle_deadline",
        "method",
        "owner",
        "parser",
        "paused",
        "pending",
        "queued",
        "received",
        "req_end",
        "req_sent",
        "request",
        "resp_end",
        "reused",
        "sending_paused",
        "trailers",
        "transport",
        "unacked",
        "withheld",
    )

    def __init__(self, conn: H2Upstream) -> None:
        self.conn = conn
        self.id = 0  # given when its HEADERS go
        self.owner: UpstreamOwner | None = None
        self.reused = bool(conn.streams) or conn.taken > 1  # on a connection in use
        self.received = False  # a byte of the response arrived
        self.withheld = False  # refused by the server unprocessed: may go again
        self.paused = False  # the client side takes no more: DATA not acknowledged
        self.unacked = 0
        self.idle_deadline = 0.0  # never pooled (edge.transports.Pooled): close() ends it
        self.method = b"GET"
        self.request = conn.request_parser(self, 1 << 24, 1 << 16, conn.request_memo)
        self.pending: deque[bytes] = deque()  # request body waiting for window
        self.queued = 0
        self.trailers: list[Header] | None = None
        self.req_end = False  # the request's end was read: END_STREAM after what is pending
        self.req_sent = False  # ...and sent
        self.resp_end = False
        self.ended = False  # over on edge's side (released from the connection)
        self.sending_paused = False
        # What the exchange reads and writes: this stream, as UpstreamConnection's are.
        self.transport = self
        self.parser = self

    def __repr__(self) -> str:
        return f"H2UpstreamStream({self.conn.server.url!r}, {self.id})"

    # -- the exchange's view: parser and transport -------------------------------------

    def expect(self, method: bytes) -> None:
        self.method = method

    def write(self, data: bytes) -> None:
        if self.ended:
            return
        try:
            self.request.feed(data)
        except HTTPError as exc:  # edge's own writer made it: a bug, told as one
            log.error("%r: request not readable: %s", self, exc.detail)
            self._lose_soon(UpstreamConnectError(f"request not readable: {exc.detail}"))

    def writelines(self, parts: Any) -> None:
        for part in parts:
            self.write(part)

    def get_write_buffer_size(self) -> int:
        return self.queued

    def is_closing(self) -> bool:
        return self.ended

    def is_reusable(self) -> bool:
        return False

    def close(self) -> None:
        """The exchange is done with the stream (its response ended, or it let go):
        a stream still open either way is cancelled."""
        if not self.ended:
            self._reset(None if self.req_sent and self.resp_end else ErrorCodes.CANCEL)

    def abort(self) -> None:
        if not self.ended:
            self._reset(ErrorCodes.CANCEL)

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        if self.paused:
            self.paused = False
            if self.unacked and not self.ended:
                size = self.unacked
                self.unacked = 0
                with contextlib.suppress(h2.exceptions.H2Error):
                    self.conn.h2.acknowledge_received_data(size, self.id)
                self.conn.flush()

    # -- request parser events: the request, as frames -----------------------------------

    def on_head(self, head: RequestHead) -> None:  # type: ignore[override]
        conn = self.conn
        if head.upgrade:
            self._lose_soon(UpstreamConnectError("an upgrade is not sent over HTTP/2"))
            return
        if not conn.usable():
            self.withheld = self.reused = True  # nothing was sent: it may go on a new one
            self._lose_soon(UpstreamConnectError("the HTTP/2 connection went away"))
            return
        body = bool(head.chunked or head.content_length)
        try:
            sid = conn.h2.get_next_available_stream_id()
            conn.h2.send_headers(sid, request_headers(head, conn.scheme), end_stream=not body)
        except h2.exceptions.H2Error as exc:  # the server lowered its stream limit meanwhile
            self.withheld = self.reused = True
            self._lose_soon(UpstreamConnectError(f"no HTTP/2 stream: {exc}"))
            return
        self.id = sid
        conn.streams[sid] = self
        self.req_end = self.req_sent = not body
        conn.flush()

    def on_body(self, data: bytes) -> None:
        if self.ended:
            return
        self.pending.append(data)
        self.queued += len(data)
        self.pump()

    def on_trailers(self, fields: list[Header]) -> None:
        self.trailers = [(n.lower(), v) for n, v in fields]

    def on_end(self) -> None:
        if self.ended or self.req_end:
            return
        self.req_end = True
        self.pump()

    def on_upgrade(self, rest: bytes) -> None:
        pass  # refused at on_head

    def pump(self) -> None:
        """Send the request body the windows and the connection's transport allow;
        END_STREAM (or the trailers) after its last byte. Tells the owner to stop
        sending past HIGH_WATER queued, and to go on under LOW_WATER."""
        if self.ended or not self.id:
            return
        conn = self.conn
        machine = conn.h2
        pending = self.pending
        try:
            while pending and not conn.write_paused:
                data = next_data(machine, self.id, pending)
                if data is None:
                    break
                self.queued -= len(data)
                last = self.req_end and not pending and not self.trailers
                machine.send_data(self.id, data, end_stream=last)
                self.req_sent = last
            if self.req_end and not pending and not self.req_sent:
                if self.trailers:
                    machine.send_headers(self.id, self.trailers, end_stream=True)
                else:
                    machine.end_stream(self.id)
                self.req_sent = True
        except h2.exceptions.H2Error:  # reset meanwhile (by the server): no more to send
            pending.clear()
            self.queued = 0
        conn.flush()
        if self.req_sent and self.resp_end:
            self._release()
            return
        owner = self.owner
        if self.sending_paused:
            if self.queued <= LOW_WATER and not conn.write_paused:
                self.sending_paused = False
                if owner is not None:
                    owner.resume_sending()
        elif self.queued > HIGH_WATER:
            self.pause_sending()

    def pause_sending(self) -> None:
        if not self.sending_paused:
            self.sending_paused = True
            if self.owner is not None:
                self.owner.pause_sending()

    # -- the response, from the connection ------------------------------------------------

    def received_head(self, headers: list[Header], end_stream: bool) -> None:
        owner = self.owner
        self.received = True
        if owner is None:
            return
        self.conn.hold(owner)
        try:
            head = response_head(headers, self.method, end_stream)
        except ValueError as exc:
            self.conn.h2.reset_stream(self.id, ErrorCodes.PROTOCOL_ERROR)
            self.lost(UpstreamConnectError(f"invalid HTTP/2 response: {exc}"))
            return
        owner.upstream_head(head)

    def received_interim(self, headers: list[Header]) -> None:
        """A 1xx (103 Early Hints; the exchange drops a 100: it answers Expect itself)."""
        owner = self.owner
        if owner is not None:
            self.conn.hold(owner)
            fields = [(n, v) for n, v in headers if n[:1] != b":"]
            status = int(dict(headers).get(b":status", b"100"))
            owner.upstream_interim(
                ResponseHead(status, b"", b"2.0", fields, True, False, None, False)
            )

    def received_data(self, data: bytes, size: int) -> None:
        owner = self.owner
        if size:
            if self.paused and owner is not None:
                self.unacked += size
            else:
                self.conn.h2.acknowledge_received_data(size, self.id)
        if owner is not None and data:
            self.conn.hold(owner)
            owner.upstream_body(data)

    def received_trailers(self, fields: list[Header]) -> None:
        owner = self.owner
        if owner is not None:
            self.conn.hold(owner)
            owner.upstream_trailers(fields)

    def received_end(self) -> None:
        self.resp_end = True
        owner = self.owner
        if owner is None:
            return
        self.conn.hold(owner)
        owner.upstream_end(self)  # type: ignore[arg-type]
        if not self.ended and self.req_sent:
            self._release()

    def received_reset(self, code: Any) -> None:
        """The server reset the stream: REFUSED_STREAM is a stream it never processed."""
        if code == ErrorCodes.REFUSED_STREAM:
            self.refused("REFUSED_STREAM")
            return
        try:
            name = ErrorCodes(code).name
        except ValueError:
            name = str(code)
        self.lost(ConnectionResetError(f"HTTP/2 stream reset by the server ({name})"))

    def refused(self, why: str) -> None:
        if not self.received:
            self.withheld = self.reused = True
        self.lost(ConnectionResetError(f"HTTP/2 stream refused by the server ({why})"))

    def lost(self, exc: Exception | None) -> None:
        """The stream cannot go on (reset, connection gone): its owner hears it once."""
        owner = self.owner
        self._release()
        if owner is not None:
            self.owner = None
            owner.upstream_lost(self, exc)  # type: ignore[arg-type]

    def _lose_soon(self, exc: Exception) -> None:
        """A loss found while the exchange writes: it hears of it after its call."""
        self._release()
        self.conn.loop.call_soon(self._tell_lost, self.owner, exc)

    def _tell_lost(self, owner: UpstreamOwner | None, exc: Exception) -> None:
        if owner is not None and self.owner is owner:
            self.owner = None
            owner.upstream_lost(self, exc)  # type: ignore[arg-type]

    # -- ending -------------------------------------------------------------------------

    def _reset(self, code: ErrorCodes | None) -> None:
        if code is not None and self.id:
            with contextlib.suppress(h2.exceptions.H2Error):
                self.conn.h2.reset_stream(self.id, code)
            self.conn.flush()
        self._release()

    def _release(self) -> None:
        if self.ended:
            return
        self.ended = True
        self.pending.clear()
        self.queued = 0
        if self.unacked and self.id:
            with contextlib.suppress(h2.exceptions.H2Error):
                self.conn.h2.acknowledge_received_data(self.unacked, self.id)
            self.unacked = 0
        self.request.close()
        self.conn.released(self)


def request_headers(head: RequestHead, scheme: bytes) -> list[Header]:
    """The HTTP/2 header list of a request head edge wrote for HTTP/1.1: pseudo-header
    fields first, Host as ``:authority``, connection-specific fields and ``te`` gone
    (``te: trailers`` for gRPC, whose servers need it), names lowercased."""
    out: list[Header] = [
        (b":method", head.method),
        (b":scheme", scheme),
        (b":authority", head.host),
        (b":path", head.target),
    ]
    grpc = False
    for name, value in head.headers:
        lname = name.lower()
        if lname in CONNECTION_SPECIFIC or lname == b"host" or lname == b"te":
            continue
        if lname == b"content-type" and value.startswith(GRPC):
            grpc = True
        out.append((lname, value))
    if grpc:
        out.append((b"te", b"trailers"))
    return out


def response_head(headers: list[Header], method: bytes, end_stream: bool) -> ResponseHead:
    """The head of a response that arrived as HTTP/2 ``headers`` (h2 validated them);
    ``end_stream``: it has no body (a gRPC trailers-only answer), framed as an empty one."""
    status = 0
    length: int | None = None
    fields: list[Header] = []
    for name, value in headers:
        if name == b":status":
            status = int(value)
            continue
        if name[:1] == b":":
            continue
        if name == b"content-length":
            length = int(value)
        fields.append((name, value))
    if not 200 <= status <= 599:
        raise ValueError(f":status {status}")
    has_body = method != b"HEAD" and status not in NO_BODY
    if has_body and length is None and end_stream:
        length = 0
    return ResponseHead(status, b"", b"2.0", fields, True, False, length, has_body)
