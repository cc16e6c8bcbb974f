"""HTTP/2 to clients: a connection protocol over h2, and each stream as the client
side of one :class:`~edge.http.server.exchange.Exchange`.

:class:`H2Connection` is the asyncio protocol of a client connection that speaks
HTTP/2: ALPN ``h2`` on TLS, or the h2c preface on a plain connection
(:class:`~edge.http.server.connection.HTTPConnection` hands it the transport). It
owns the h2 state machine (:mod:`edge.http.codec.h2`), the streams, the
connection's deadline for the entrypoint's sweep, and the allowances that end
floods. Each request stream is an :class:`H2Stream` and an exchange: the stream is
the exchange's ``conn`` (:class:`~edge.http.server.exchange.ClientSide`), so the
routing, the pipeline, the upstream and the access log are the HTTP/1.1 ones.

The stream's two directions:
- Down. The exchange writes an HTTP/1.1 response, as to any client; the stream
  reads those bytes back with the entrypoint's own sans-IO response parser and
  sends its events as HEADERS (a ``100 Continue`` as an informational one), DATA
  as the stream's and the connection's windows allow, and END_STREAM. A request
  head says HTTP/2.0, so a body of unknown length is not chunked: it ends with
  the exchange (:meth:`H2Stream.exchange_done`).
- Up. DATA frames go to the exchange's request body; their flow-controlled
  length is acknowledged (WINDOW_UPDATE) at once, or, while the exchange has
  reading paused (a full upstream transport, a dial), when it resumes.

Invariants:
- Memory is bounded per stream: at most ``HIGH_WATER`` of response queued before
  its upstream stops being read (plus the read that passed it), and at most a
  stream window (64 KiB) of request body the client may send unacknowledged.
- What one read from either side makes leaves in one write: frames queue in h2
  while a client read is handled (``batching``) or an upstream read's writes are
  held (the exchange's ``hold_writes``), and :meth:`H2Connection.flush` writes
  them; outside a client read, once at the end of the loop turn (the answers of
  many streams, each from its own upstream read, in one write).
- A stream ends once, by END_STREAM after its last DATA or by RST_STREAM; its
  exchange ends once, by ``exchange_done`` or by ``client_gone`` (the client
  reset the stream, edge reset it, or the connection was lost).
- A connection that passes an allowance (:data:`RESETS_PER_SECOND` and the
  others), or breaks the protocol, gets a GOAWAY with the error code and is
  closed; the log names the entrypoint, the client and what it did.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import h2.events
import h2.exceptions
from h2.errors import ErrorCodes
from h2.settings import SettingCodes

from edge.deadlines import BODY, IDLE, NO_DEADLINE
from edge.errors import HTTPError
from edge.http.codec.h2 import (
    Allowance,
    RequestHeads,
    ResponseLists,
    next_data,
    server_connection,
    trailers,
)
from edge.http.server.exchange import CONTINUE, HIGH_WATER, Exchange

if TYPE_CHECKING:
    from edge.http.codec import Header, RequestHead, ResponseHead
    from edge.http.server.connection import HTTPContext

log = logging.getLogger("edge.http")

# Per connection and second: streams the client may reset, or open malformed (at
# least maxConcurrentStreams: a page left cancels all it asked for), and frames it
# may send that edge must answer or weigh but that carry no request.
RESETS_PER_SECOND = 200
SETTINGS_PER_SECOND = 50
PINGS_PER_SECOND = 50
PRIORITIES_PER_SECOND = 500
EMPTY_DATA_PER_SECOND = 200  # DATA frames with no byte and no END_STREAM

LINGER = 2.0  # seconds a connection that sent its GOAWAY reads on before it closes (_close)
LOW_WATER = HIGH_WATER // 4  # queued response bytes under which a paused upstream is read again
CONTINUE_HEADERS = [(b":status", b"100")]


class ResponseReader:
    """A stream's response parser and its handler, which hands the parser's events
    to the stream it reads for now. A reader whose stream's response ended as a
    keep-alive message, nothing left over, serves the connection's next stream
    (:meth:`H2Connection.reader`): no parser made per stream, and the parser's quick
    path knows the answer already when it comes again."""

    __slots__ = ("done", "keep", "parser", "stream")

    def __init__(self, ctx: HTTPContext) -> None:
        self.stream: H2Stream | None = None
        self.done = False  # the response ended (on_end)
        self.keep = False  # ...as a keep-alive message: the parser is ready for another
        self.parser = ctx.response_parser(self, ctx.max_header_bytes)

    def reusable(self) -> bool:
        return self.done and self.keep and not self.parser.held

    def close(self) -> None:
        """Let go of the parser (it and this reader refer to each other) and the stream."""
        self.stream = None
        self.parser.close()

    def on_head(self, head: ResponseHead) -> None:
        self.keep = head.keep_alive
        if self.stream is not None:
            self.stream.on_head(head)

    def on_body(self, data: bytes) -> None:
        if self.stream is not None:
            self.stream.on_body(data)

    def on_end(self) -> None:
        self.done = True
        if self.stream is not None:
            self.stream.on_end()

    def on_interim(self, head: ResponseHead) -> None:
        if self.stream is not None:
            self.stream.on_interim(head)

    def on_upgrade(self, rest: bytes) -> None:
        pass  # an HTTP/2 request is never an upgrade (request_head)


class H2Stream:
    """The client side of one exchange on an HTTP/2 connection (module doc)."""

    __slots__ = (
        "client_ip",
        "client_ip_b",
        "closed",
        "conn",
        "ctx",
        "deadline",
        "end",
        "ex",
        "head_out",
        "id",
        "loop",
        "out",
        "parser",
        "paused",
        "pending",
        "queued",
        "reader",
        "req_open",
        "tail",
        "transport",
        "trusted",
        "unacked",
        "up_out",
        "write_paused",
    )

    # Why reading the request body is paused (the exchange's reasons, as HTTPConnection's).
    PAUSE_UPSTREAM = 1
    PAUSE_BUFFER = 4

    def __init__(self, conn: H2Connection, stream_id: int, method: bytes) -> None:
        ctx = conn.ctx
        self.conn = conn
        self.id = stream_id
        self.ctx = ctx
        self.loop = conn.loop
        self.transport = conn.transport  # the client's (TLS facts); None once the stream is gone
        self.client_ip = conn.client_ip
        self.client_ip_b = conn.client_ip_b
        self.trusted = conn.trusted
        self.ex: Exchange | None = None
        self.out: list[bytes] | None = None  # writes held while an upstream read is parsed
        self.up_out: list[bytes] | None = None  # ...and what goes upstream meanwhile
        self.write_paused = False  # HIGH_WATER queued: the upstream is not read
        self.paused = 0  # why request DATA is not acknowledged (PAUSE_*)
        self.unacked = 0  # flow-controlled bytes received while paused
        reader = self.reader = conn.reader()
        reader.stream = self
        self.parser = reader.parser
        self.parser.expect(method)
        self.head_out: list[tuple[bytes, bytes]] | None = None  # a response head not sent yet
        self.pending: deque[bytes] = deque()  # response data the windows hold back
        self.queued = 0
        self.end = False  # the response ended: END_STREAM follows the data pending
        self.closed = False  # END_STREAM or RST_STREAM sent: nothing more goes out
        self.tail: list[Header] | None = None  # trailers: the HEADERS that end the stream
        self.req_open = True  # the client may still send on the stream
        self.deadline = 0.0  # readTimeout's (body) or writeTimeout's, loop time; 0: none

    # -- what the exchange writes (exchange.ClientSide) ---------------------------

    def send(self, *parts: bytes) -> None:
        if self.out is not None:
            self.out += parts
        elif not self.closed:
            self._write(parts)
            self.conn.flush()

    def flush(self) -> None:
        """What was held: sent; holding goes on."""
        out = self.out
        if out:
            self.out = []
            self._write(out)
            self.conn.flush()

    def flush_batch(self) -> None:
        """What was held: sent; holding ends."""
        out = self.out
        self.out = None
        if out:
            self._write(out)
            self.conn.flush()

    def flush_upstream(self) -> None:
        out = self.up_out
        self.up_out = None
        ex = self.ex
        if out and ex is not None and ex.upstream is not None:
            transport = ex.upstream.transport
            if transport is not None and not transport.is_closing():
                transport.writelines(out)

    def _write(self, parts: list[bytes] | tuple[bytes, ...]) -> None:
        """HTTP/1.1 bytes of the exchange's response, read back into frames. The parts
        between two interim answers are read as one: a whole response written at
        once (a head and its body) is what the parser's quick path recognizes."""
        run: list[bytes] = []
        for part in parts:
            if part is CONTINUE:  # the exchange's interim answer to Expect: 100-continue
                if run and not self._read(run):
                    return
                run = []
                if self.closed:
                    return
                self.conn.h2.send_headers(self.id, CONTINUE_HEADERS)
            else:
                run.append(part)
        if run and not self._read(run):
            return
        self._emit()

    def _read(self, run: list[bytes]) -> bool:
        """``run`` read by the response parser; False when the stream is over (it was,
        or the bytes could not be read)."""
        if self.closed:
            return False
        try:
            self.parser.feed(run[0] if len(run) == 1 else b"".join(run))
        except HTTPError as exc:  # edge's own writers made it: a bug, told as one
            log.error(
                "%s: HTTP/2 stream %d: response not readable: %s", self.ctx.name, self.id, exc
            )
            self.reset(ErrorCodes.INTERNAL_ERROR)
            return False
        return not self.closed

    # Response parser events: what they bring is sent once the bytes are read (_emit),
    # so a response read whole leaves as HEADERS and DATA with END_STREAM on the last.

    def on_head(self, head: ResponseHead) -> None:
        self.head_out = self.conn.responses.of(head)

    def on_body(self, data: bytes) -> None:
        self.pending.append(data)
        self.queued += len(data)

    def on_end(self) -> None:
        self.end = True

    def on_interim(self, head: ResponseHead) -> None:
        """A 1xx the exchange passed on (103 Early Hints): a HEADERS frame of its own."""
        if not self.closed:
            self.conn.h2.send_headers(self.id, self.conn.responses.of(head))

    def trailers(self, fields: list[Header], chunked: bool) -> None:
        """The response's trailer fields: a HEADERS frame with END_STREAM after its data."""
        if not self.closed:
            self.tail = [(name.lower(), value) for name, value in fields]

    def _emit(self) -> None:
        headers = self.head_out
        if headers is not None and not self.closed:
            self.head_out = None
            end = self.end and not self.pending and self.tail is None
            self.conn.h2.send_headers(self.id, headers, end_stream=end)
            self.closed = end
        self._pump()

    def pump(self) -> None:
        """Send what the windows now allow (a WINDOW_UPDATE came, the transport drained)."""
        if self.pending or (self.end and not self.closed):
            self._pump()

    def _pump(self) -> None:
        """Send queued data as the windows and the transport allow, END_STREAM after the
        last; pause the upstream past HIGH_WATER queued, resume it under LOW_WATER."""
        conn = self.conn
        pending = self.pending
        if not self.closed and not conn.write_paused and self.head_out is None:
            machine = conn.h2
            while pending:
                data = next_data(machine, self.id, pending)
                if data is None:
                    break
                self.queued -= len(data)
                last = self.end and not pending and self.tail is None
                machine.send_data(self.id, data, end_stream=last)
                self.closed = last
            if self.end and not pending and not self.closed:
                if self.tail is not None:
                    machine.send_headers(self.id, self.tail, end_stream=True)
                else:
                    machine.end_stream(self.id)
                self.closed = True
        if self.write_paused:
            if self.queued <= LOW_WATER:
                self.write_paused = False
                ex = self.ex
                if ex is not None and ex.upstream is not None:
                    ex.upstream.resume_reading()
        elif self.queued > HIGH_WATER:
            self.write_paused = True
            ex = self.ex
            if ex is not None and ex.upstream is not None:
                ex.upstream.pause_reading()
        if self.closed:
            self._done()

    # -- the exchange's end (exchange.ClientSide) ---------------------------------

    def exchange_done(self, ex: Exchange) -> None:
        """The exchange is over: a response framed by its end ends here; it is logged."""
        if self.out:
            self.flush()
        if not self.end and not self.closed:
            try:
                self.parser.feed_eof()
            except HTTPError:
                self.reset(ErrorCodes.INTERNAL_ERROR)
            else:
                self._emit()
        if self.ctx.timed:  # access log or metrics
            ex.log()
        self.ex = None
        self._done()
        self.conn.flush()

    def _done(self) -> None:
        """Forget the stream once both its response and its exchange are over; a
        request body still coming is not wanted (RST_STREAM NO_ERROR, RFC 9113 8.1)."""
        if not self.closed or self.ex is not None:
            return
        if self.req_open:
            self.req_open = False
            with contextlib.suppress(h2.exceptions.H2Error):  # closed meanwhile
                self.conn.h2.reset_stream(self.id, ErrorCodes.NO_ERROR)
        self.conn.forget(self)

    def reset(self, code: ErrorCodes) -> None:
        """Edge ends the stream (RST_STREAM ``code``); its exchange is the caller's to end."""
        if not self.closed:
            self.closed = True
            with contextlib.suppress(h2.exceptions.H2Error):
                self.conn.h2.reset_stream(self.id, code)
        self.req_open = False
        self.transport = None
        self.pending.clear()
        self.queued = 0
        self.conn.forget(self)

    def abort(self) -> None:
        """The exchange cannot finish its response (its upstream broke in the middle):
        the stream is reset and the exchange told the client is gone, as a closed
        HTTP/1.1 connection tells it (after this call returns)."""
        self.reset(ErrorCodes.INTERNAL_ERROR)
        self.conn.flush()
        ex = self.ex
        if ex is not None:
            self.loop.call_soon(self._gone, ex)

    def _gone(self, ex: Exchange) -> None:
        if self.ex is ex:
            self.ex = None
            ex.client_gone()

    def gone(self, status: int = 499) -> None:
        """The client reset the stream, or the connection is lost."""
        self.closed = True
        self.req_open = False
        self.transport = None
        self.pending.clear()
        ex = self.ex
        if ex is not None:
            self.ex = None
            ex.client_gone(status)

    def tunnel(
        self,
        upstream: asyncio.Transport,
        to_client: bytes,
        to_upstream: bytes,
        on_end: Callable[[], None] | None = None,
    ) -> None:
        """Never asked: an HTTP/2 request is no upgrade (a 101 to it is refused by the exchange)."""
        upstream.close()
        if on_end is not None:
            on_end()
        self.abort()

    # -- the request body ------------------------------------------------------------

    def received(self, data: bytes, size: int) -> None:
        """A DATA frame: to the exchange; ``size`` (its flow-controlled length)
        acknowledged now or when reading resumes."""
        ex = self.ex
        if ex is not None and data:
            ex.request_body(data)
        if not size:
            return
        if self.paused and self.ex is not None:
            self.unacked += size
        else:
            self.conn.h2.acknowledge_received_data(size, self.id)

    def received_trailers(self, headers: list[Header]) -> None:
        """The request's trailer section: to the exchange; a malformed one resets the
        stream (PROTOCOL_ERROR), its exchange ended as by a client gone (400)."""
        try:
            fields = trailers(headers)
        except HTTPError as exc:
            log.debug(
                "%s: HTTP/2 stream %d from %s reset: %s",
                self.ctx.name,
                self.id,
                self.client_ip,
                exc.detail,
            )
            ex = self.ex
            self.reset(ErrorCodes.PROTOCOL_ERROR)
            if ex is not None:
                self.ex = None
                ex.client_gone(400)
            return
        if self.ex is not None:
            self.ex.request_trailers(fields)

    def request_ended(self) -> None:
        self.req_open = False
        ex = self.ex
        if ex is not None:
            ex.request_end()
        else:
            self._done()

    def pause_reading(self, why: int) -> None:
        self.paused |= why

    def resume_reading(self, why: int) -> None:
        if self.paused & why:
            self.paused &= ~why
            if not self.paused and self.unacked:
                size = self.unacked
                self.unacked = 0
                if not self.closed or self.req_open:
                    self.conn.h2.acknowledge_received_data(size, self.id)
                    self.conn.flush()

    def request_read(self) -> None:
        """The request body ended: writeTimeout (if any) bounds the rest."""
        timeout = self.ctx.write_timeout
        self.deadline = self.loop.time() + timeout if timeout > 0 else 0.0

    def host_port(self, authority: bytes) -> tuple[str | None, bytes]:
        return self.ctx.host_port(authority)

    def deadline_passed(self) -> None:
        """readTimeout passed with the body unfinished (408 when no answer began, as
        for HTTP/1.1), or writeTimeout with the response unfinished (reset)."""
        self.deadline = 0.0
        ex = self.ex
        if self.req_open and ex is not None and not ex.resp_started:
            log.info(
                "%s: HTTP/2 request body from %s not complete within readTimeout",
                self.ctx.name,
                self.client_ip,
            )
            ex.abandon()
            ex.keep_alive = False
            ex.answer_error(HTTPError("request body not complete within readTimeout", status=408))
            return
        log.info(
            "%s: HTTP/2 exchange with %s not complete within its timeout",
            self.ctx.name,
            self.client_ip,
        )
        status = 408 if self.req_open else 499
        self.reset(ErrorCodes.CANCEL)
        if ex is not None:
            self.ex = None
            ex.client_gone(status)


class H2Connection(asyncio.Protocol):
    """One client connection that speaks HTTP/2 (module doc); ``Swept`` for the
    entrypoint's sweep and drain."""

    __slots__ = (
        "batching",
        "client_ip",
        "client_ip_b",
        "closing",
        "ctx",
        "deadline",
        "deadline_kind",
        "draining",
        "empty_data",
        "encoder_cap",
        "flushing",
        "h2",
        "heads",
        "loop",
        "max_streams",
        "pings",
        "priorities",
        "readers",
        "resets",
        "responses",
        "settings",
        "streams",
        "transport",
        "trusted",
        "write_paused",
    )

    def __init__(
        self,
        ctx: HTTPContext,
        transport: asyncio.Transport,
        client_ip: str,
        client_ip_b: bytes,
        trusted: bool,
    ) -> None:
        """Takes ``transport`` over (its protocol from now on) and queues edge's SETTINGS."""
        limits = ctx.http2
        assert limits is not None
        self.ctx = ctx
        self.loop = ctx.loop
        self.transport: asyncio.Transport | None = transport
        self.client_ip = client_ip
        self.client_ip_b = client_ip_b
        self.trusted = trusted
        self.h2 = server_connection(
            max_concurrent_streams=limits.max_concurrent_streams,
            decoder_table_size=limits.max_decoder_header_table_size,
            max_header_list_size=ctx.max_header_bytes,
        )
        self.encoder_cap = limits.max_encoder_header_table_size
        self.max_streams = limits.max_concurrent_streams
        self._cap_encoder()
        self.streams: dict[int, H2Stream] = {}
        self.heads = RequestHeads()
        self.responses = ResponseLists()
        self.readers: list[ResponseReader] = []  # idle ones, of streams that ended (forget)
        self.batching = False
        self.flushing = False  # a write_out is scheduled (flush)
        self.write_paused = False
        self.draining = False
        self.closing = False  # GOAWAY sent: lingering until the client closes (_close)
        self.resets = Allowance(max(RESETS_PER_SECOND, limits.max_concurrent_streams))
        self.settings = Allowance(SETTINGS_PER_SECOND)
        self.pings = Allowance(PINGS_PER_SECOND)
        self.priorities = Allowance(PRIORITIES_PER_SECOND)
        self.empty_data = Allowance(EMPTY_DATA_PER_SECOND)
        self.deadline_kind = NO_DEADLINE
        self.deadline = 0.0
        self._idle()
        transport.set_protocol(self)
        ctx.connections.add(self)
        self.flush()
        if ctx.closing:
            self.shutdown()

    # -- asyncio callbacks -------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self.transport is None or self.closing:
            return  # lingering after a GOAWAY: dropped
        self.batching = True
        try:
            try:
                events = self.h2.receive_data(data)
            except h2.exceptions.ProtocolError as exc:
                # h2 queued a GOAWAY with the error's code; a header block in more frames
                # than h2 keeps (CONTINUATION_BACKLOG) is a flood, not a malformed block.
                code = None
                if "continuation frames" in str(exc):
                    self.h2.data_to_send()  # h2's PROTOCOL_ERROR: not sent
                    code = ErrorCodes.ENHANCE_YOUR_CALM
                self._close(f"{type(exc).__name__}: {exc}", code)
                return
            for event in events:
                self._event(event)
                if self.transport is None or self.closing:
                    return
        finally:
            self.batching = False
            self.write_out()

    def eof_received(self) -> bool | None:
        return None  # HTTP/2 needs both directions: the transport closes

    def connection_lost(self, exc: Exception | None) -> None:
        self.ctx.connections.discard(self)
        self.transport = None
        streams = list(self.streams.values())
        self.streams.clear()
        for stream in streams:
            stream.gone()
            stream.reader.close()
        self._drop_readers()

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        self.batching = True
        try:
            for stream in list(self.streams.values()):
                stream.pump()
        finally:
            self.batching = False
        self.write_out()

    # -- frames ---------------------------------------------------------------------------

    def _event(self, event: h2.events.Event) -> None:
        kind = type(event)
        if kind is h2.events.DataReceived:
            assert isinstance(event, h2.events.DataReceived)
            if (
                not event.data
                and event.stream_ended is None
                and not self.empty_data.spend(self.loop.time())
            ):
                self._calm("empty DATA frames")
                return
            stream = self.streams.get(event.stream_id)
            size = event.flow_controlled_length or 0
            if stream is not None:
                stream.received(event.data or b"", size)
            elif size:
                self.h2.acknowledge_received_data(size, event.stream_id)
        elif kind is h2.events.RequestReceived:
            assert isinstance(event, h2.events.RequestReceived)
            self._open(event)
        elif kind is h2.events.StreamEnded:
            stream = self.streams.get(event.stream_id)
            if stream is not None:
                stream.request_ended()
        elif kind is h2.events.TrailersReceived:
            assert isinstance(event, h2.events.TrailersReceived)
            stream = self.streams.get(event.stream_id)
            if stream is not None:  # (StreamEnded follows)
                stream.received_trailers(list(event.headers or ()))
        elif kind is h2.events.WindowUpdated:
            assert isinstance(event, h2.events.WindowUpdated)
            if event.stream_id:
                stream = self.streams.get(event.stream_id)
                if stream is not None:
                    stream.pump()
            else:
                for stream in list(self.streams.values()):
                    stream.pump()
        elif kind is h2.events.StreamReset:
            assert isinstance(event, h2.events.StreamReset)
            if event.remote_reset and not self.resets.spend(self.loop.time()):
                self._calm("streams reset (rapid reset)")
                return
            stream = self.streams.pop(event.stream_id, None)
            if stream is not None:
                stream.gone()
                stream.reader.close()
                self._settle()
        elif kind is h2.events.RemoteSettingsChanged:
            assert isinstance(event, h2.events.RemoteSettingsChanged)
            if not self.settings.spend(self.loop.time()):
                self._calm("SETTINGS frames")
                return
            changed = event.changed_settings
            if SettingCodes.HEADER_TABLE_SIZE in changed:
                self._cap_encoder()
            if SettingCodes.INITIAL_WINDOW_SIZE in changed:
                for stream in list(self.streams.values()):
                    stream.pump()
        elif kind is h2.events.PingReceived:
            if not self.pings.spend(self.loop.time()):
                self._calm("PING frames")
        elif kind is h2.events.PriorityUpdated:
            if not self.priorities.spend(self.loop.time()):
                self._calm("PRIORITY frames")
        elif kind is h2.events.ConnectionTerminated:
            assert isinstance(event, h2.events.ConnectionTerminated)
            # The client's GOAWAY: no new stream comes; one with an error ends all.
            self.draining = True
            if event.error_code:
                self._close(f"GOAWAY {event.error_code!r} from the client", None, send=False)
            elif not self.streams:
                self._close("", None, send=False)
        # SettingsAcknowledged and the rest: nothing.

    def _open(self, event: h2.events.RequestReceived) -> None:
        stream_id = event.stream_id
        assert stream_id is not None
        if self.draining or len(self.streams) >= self.max_streams:
            # Draining, or past maxConcurrentStreams (codec.h2.server_connection): a
            # stream the client may send again.
            self.h2.reset_stream(stream_id, ErrorCodes.REFUSED_STREAM)
            return
        try:
            head: RequestHead = self.heads.head_of(
                event.headers or [],
                event.stream_ended is not None,
            )
        except HTTPError as exc:
            log.debug(
                "%s: HTTP/2 stream %d from %s refused: %s",
                self.ctx.name,
                stream_id,
                self.client_ip,
                exc.detail,
            )
            self.h2.reset_stream(stream_id, ErrorCodes.PROTOCOL_ERROR)
            if not self.resets.spend(self.loop.time()):  # work and a frame, as a reset
                self._calm("malformed requests")
            return
        stream = H2Stream(self, stream_id, head.method)
        self.streams[stream_id] = stream
        ctx = self.ctx
        now = self.loop.time()
        if head.chunked or head.content_length:
            if ctx.read_timeout > 0:
                stream.deadline = now + ctx.read_timeout
        elif ctx.write_timeout > 0:
            stream.deadline = now + ctx.write_timeout
        if stream.deadline and (self.deadline_kind is not BODY or stream.deadline < self.deadline):
            self.deadline_kind = BODY
            self.deadline = stream.deadline
        elif self.deadline_kind is IDLE:
            self.deadline_kind = NO_DEADLINE
        ex = stream.ex = Exchange(stream, head)
        ex.begin()

    def forget(self, stream: H2Stream) -> None:
        """``stream`` is over on edge's side: its reader serves the next stream, or
        lets go of its parser (they refer to each other), so that neither waits for
        the cyclic GC."""
        if self.streams.pop(stream.id, None) is not None:
            reader = stream.reader
            if reader.reusable() and len(self.readers) < self.max_streams:
                reader.stream = None
                reader.done = reader.keep = False
                self.readers.append(reader)
            else:
                reader.close()
            self._settle()

    def reader(self) -> ResponseReader:
        """A response reader for a new stream: one a stream left (forget), or a new one."""
        readers = self.readers
        return readers.pop() if readers else ResponseReader(self.ctx)

    def _drop_readers(self) -> None:
        for reader in self.readers:
            reader.close()
        self.readers.clear()

    def _settle(self) -> None:
        """After a stream ended: with none left, the connection idles or, draining, ends."""
        if self.streams:
            return
        if self.draining:
            self._close("", ErrorCodes.NO_ERROR)
        else:
            self._idle()

    def _idle(self) -> None:
        timeout = self.ctx.idle_timeout
        if timeout > 0:
            self.deadline_kind = IDLE
            self.deadline = self.loop.time() + timeout
        else:
            self.deadline_kind = NO_DEADLINE

    def _cap_encoder(self) -> None:
        """The HPACK table for what edge sends: the client's offer, at most maxEncoderHeaderTableSize."""
        encoder = self.h2.encoder
        if encoder.header_table_size > self.encoder_cap:
            encoder.header_table_size = self.encoder_cap

    # -- writing ----------------------------------------------------------------------------

    def flush(self) -> None:
        """What h2 queued goes to the client: at the end of the client read being
        handled, else once at the end of this loop turn, so that the answers of many
        streams (each from its own upstream read) leave in one write."""
        if self.batching or self.flushing:
            return
        self.flushing = True
        self.loop.call_soon(self.write_out)

    def write_out(self) -> None:
        """What h2 queued goes to the client now."""
        self.flushing = False
        transport = self.transport
        if transport is not None and not transport.is_closing():
            data = self.h2.data_to_send()
            if data:
                transport.write(data)

    # -- ending ------------------------------------------------------------------------------

    def _calm(self, what: str) -> None:
        log.info(
            "%s: HTTP/2 client %s sent too many %s: GOAWAY ENHANCE_YOUR_CALM",
            self.ctx.name,
            self.client_ip,
            what,
        )
        self._close("", ErrorCodes.ENHANCE_YOUR_CALM)

    def _close(self, why: str, code: ErrorCodes | None, send: bool = True) -> None:
        """End the connection: GOAWAY ``code`` (None: h2 queued one already) and what
        is queued written, every stream's exchange ended, then the sending side closed
        and what still comes read and dropped until the client closes or ``LINGER``
        passes. Closed at once, the client's kernel would get a reset for the bytes
        still coming, and may drop the GOAWAY it had not read yet."""
        transport = self.transport
        if transport is None or self.closing:
            return
        if why:
            log.info("%s: HTTP/2 connection from %s closed: %s", self.ctx.name, self.client_ip, why)
        self.closing = True
        if code is not None and send:
            with contextlib.suppress(h2.exceptions.H2Error):  # closed already
                self.h2.close_connection(code)
        self.batching = False
        self.write_out()
        streams = list(self.streams.values())
        self.streams.clear()
        for stream in streams:
            stream.gone()
            stream.reader.close()
        self._drop_readers()
        if transport.can_write_eof():
            transport.write_eof()
            self.deadline_kind = IDLE  # deadline_passed closes it
            self.deadline = self.loop.time() + LINGER
        else:
            self.deadline_kind = NO_DEADLINE
            transport.close()

    # -- the sweep and the drain (entrypoints.base.Swept) -------------------------------------

    def deadline_passed(self) -> None:
        kind = self.deadline_kind
        self.deadline_kind = NO_DEADLINE
        if self.transport is None:
            return
        if self.closing:  # lingering (_close) is over
            self.transport.close()
            return
        if kind is IDLE:
            self._close("", ErrorCodes.NO_ERROR)
            return
        now = self.loop.time()
        for stream in list(self.streams.values()):
            if stream.deadline and stream.deadline <= now:
                stream.deadline_passed()
        self.flush()
        if self.transport is None or self.deadline_kind is not NO_DEADLINE:
            return
        deadlines = [s.deadline for s in self.streams.values() if s.deadline]
        if deadlines:
            self.deadline_kind = BODY
            self.deadline = min(deadlines)
        elif not self.streams:
            self._idle()

    def shutdown(self) -> None:
        """The entrypoint drains: no new stream (REFUSED_STREAM), GOAWAY once the last ends."""
        self.draining = True
        if not self.streams:
            self._close("", ErrorCodes.NO_ERROR)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
