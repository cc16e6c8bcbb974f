"""The upstream HTTP/2 connection and its streams, with no socket: edge's side
(``H2Upstream``) on a recording transport, the server's side an h2 server state
machine fed what edge wrote; the exchange stands in as a recording owner."""

from __future__ import annotations

import asyncio

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
from h2.errors import ErrorCodes

from edge.config.durations import Duration
from edge.config.dynamic import ForwardingTimeouts, ServersTransport
from edge.http.codec.base import RequestHead
from edge.http.codec.h11 import RequestParser as H11RequestParser
from edge.http.codec.httptools import RequestParser as FastRequestParser
from edge.http.server.upstream_h2 import (
    H2Upstream,
    H2UpstreamStream,
    request_headers,
    response_head,
    wants_h2,
)
from edge.transports import ServerURL, Transport
from tests.unit.http.server.transport import Recorder

PARSERS = [FastRequestParser, H11RequestParser]


class Owner:
    """What the exchange hears (UpstreamOwner), in order."""

    express = False

    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.lost_exc: Exception | None = None

    def hold_writes(self) -> None:
        self.events.append(("hold",))

    def release_writes(self) -> None:
        self.events.append(("release",))

    def upstream_head(self, head) -> None:
        self.events.append(("head", head.status, head.content_length, head.has_body))

    def upstream_body(self, data: bytes) -> None:
        self.events.append(("body", data))

    def upstream_trailers(self, fields) -> None:
        self.events.append(("trailers", fields))

    def upstream_end(self, conn) -> None:
        self.events.append(("end",))

    def upstream_lost(self, conn, exc) -> None:
        self.events.append(("lost", conn.withheld))

    def pause_sending(self) -> None:
        self.events.append(("pause",))

    def resume_sending(self) -> None:
        self.events.append(("resume",))

    def kinds(self) -> list[str]:
        return [e[0] for e in self.events if e[0] not in ("hold", "release")]


class Pair:
    """edge's connection and the server's state machine, bytes carried by hand."""

    def __init__(
        self,
        parser: type,
        server_settings: dict | None = None,
        config: ServersTransport | None = None,
    ) -> None:
        self.loop = asyncio.new_event_loop()
        self.pool = Transport("t", config or ServersTransport(), self.loop)
        self.server_url = ServerURL("h2c://10.0.0.1:50051")
        self.conn = H2Upstream(self.pool, self.server_url, parser)
        self.wire = Recorder(("10.0.0.1", 50051))
        self.conn.connection_made(self.wire)
        self.pool.add_shared(self.server_url, self.conn)
        self.server = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        self.server.initiate_connection()
        if server_settings:
            self.server.update_settings(server_settings)
        self.events: list[h2.events.Event] = []
        self.exchange()

    def to_server(self) -> list[h2.events.Event]:
        self.loop.run_until_complete(asyncio.sleep(0))  # edge's writes of now (flush)
        data = bytes(self.wire.data)
        self.wire.data.clear()
        events = self.server.receive_data(data) if data else []
        self.events += events
        return events

    def to_edge(self) -> None:
        data = self.server.data_to_send()
        if data:
            self.conn.data_received(data)

    def exchange(self) -> None:
        for _ in range(4):
            self.to_server()
            self.to_edge()

    def stream(self, owner: Owner) -> H2UpstreamStream:
        stream = self.conn.open_stream()
        assert stream is not None
        stream.owner = owner
        return stream

    def close(self) -> None:
        self.loop.close()


@pytest.fixture(params=PARSERS, ids=["httptools", "h11"])
def pair(request):
    p = Pair(request.param)
    yield p
    p.close()


def received(events, kind) -> list:
    return [e for e in events if isinstance(e, kind)]


def test_request_translated_and_response_delivered(pair):
    owner = Owner()
    stream = pair.stream(owner)
    stream.expect(b"POST")
    stream.transport.write(
        b"POST /svc/M?x=1 HTTP/1.1\r\nHost: g.example\r\nConnection: keep-alive\r\n"
        b"Content-Type: application/grpc\r\nX-Token: abc\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    stream.transport.writelines([b"5\r\nhello\r\n", b"0\r\n\r\n"])
    events = pair.to_server()
    (req,) = received(events, h2.events.RequestReceived)
    headers = list(req.headers)
    assert headers[:4] == [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":authority", b"g.example"),
        (b":path", b"/svc/M?x=1"),
    ]
    names = [n for n, _ in headers]
    assert b"connection" not in names and b"host" not in names
    assert b"transfer-encoding" not in names
    assert (b"te", b"trailers") in headers and (b"x-token", b"abc") in headers
    assert b"".join(e.data for e in received(events, h2.events.DataReceived)) == b"hello"
    assert received(events, h2.events.StreamEnded)
    sid = req.stream_id
    pair.server.send_headers(sid, [(b":status", b"200"), (b"content-type", b"application/grpc")])
    pair.server.send_data(sid, b"world")
    pair.server.send_headers(sid, [(b"grpc-status", b"0")], end_stream=True)
    pair.to_edge()
    assert owner.kinds() == ["head", "body", "trailers", "end"]
    assert owner.events[1] == ("head", 200, None, True)
    assert ("trailers", [(b"grpc-status", b"0")]) in owner.events
    assert owner.events[0] == ("hold",) and owner.events[-1] == ("release",)  # one batch
    stream.close()  # the exchange gives it back: over on both sides, nothing reset
    pair.to_server()
    assert not received(pair.events, h2.events.StreamReset)
    assert pair.conn.taken == 0 and pair.conn.idle_deadline > 0


def test_trailers_only_answer_is_an_empty_body(pair):
    owner = Owner()
    stream = pair.stream(owner)
    stream.transport.write(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
    (req,) = received(pair.to_server(), h2.events.RequestReceived)
    pair.server.send_headers(
        req.stream_id, [(b":status", b"200"), (b"grpc-status", b"4")], end_stream=True
    )
    pair.to_edge()
    assert owner.kinds() == ["head", "end"]
    assert owner.events[1] == ("head", 200, 0, True)


def test_response_window_given_back_only_as_the_client_reads(pair):
    owner = Owner()
    stream = pair.stream(owner)
    stream.transport.write(b"GET /big HTTP/1.1\r\nHost: a\r\n\r\n")
    (req,) = received(pair.to_server(), h2.events.RequestReceived)
    sid = req.stream_id
    pair.server.send_headers(sid, [(b":status", b"200")])
    stream.pause_reading()  # the client side is full
    window = pair.server.local_flow_control_window(sid)
    for offset in range(0, window, 16384):
        pair.server.send_data(sid, b"x" * min(16384, window - offset))
    pair.to_edge()
    pair.to_server()
    assert pair.server.local_flow_control_window(sid) == 0  # nothing given back
    stream.resume_reading()
    pair.to_server()
    assert pair.server.local_flow_control_window(sid) == window


def test_request_body_waits_for_the_servers_window_and_pauses_the_client(pair):
    owner = Owner()
    stream = pair.stream(owner)
    stream.transport.write(b"POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 200000\r\n\r\n")
    stream.transport.write(b"y" * 200000)
    events = pair.to_server()
    sent = sum(len(e.data) for e in received(events, h2.events.DataReceived))
    assert sent == 65535  # the stream's initial window
    assert owner.kinds() == ["pause"]  # the rest, over HIGH_WATER, waits: the client is paused
    sid = received(events, h2.events.RequestReceived)[0].stream_id
    for _ in range(10):
        for e in received(pair.events, h2.events.DataReceived):
            if e.flow_controlled_length:
                pair.server.acknowledge_received_data(e.flow_controlled_length, sid)
        pair.events.clear()
        pair.to_edge()
        sent += sum(len(e.data) for e in received(pair.to_server(), h2.events.DataReceived))
    assert sent == 200000
    assert owner.kinds() == ["pause", "resume"]
    assert received(pair.events, h2.events.StreamEnded) or stream.req_sent


def test_abort_resets_the_stream_with_cancel(pair):
    owner = Owner()
    stream = pair.stream(owner)
    stream.transport.write(b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
    pair.to_server()
    stream.abort()  # the client went away
    (reset,) = received(pair.to_server(), h2.events.StreamReset)
    assert reset.error_code == ErrorCodes.CANCEL
    assert pair.conn.taken == 0


def test_server_reset_is_lost_and_refused_is_withheld(pair):
    first, second = Owner(), Owner()
    s1, s2 = pair.stream(first), pair.stream(second)
    s1.transport.write(b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\n")
    s2.transport.write(b"GET /2 HTTP/1.1\r\nHost: a\r\n\r\n")
    id1, id2 = (e.stream_id for e in received(pair.to_server(), h2.events.RequestReceived))
    pair.server.reset_stream(id1, ErrorCodes.INTERNAL_ERROR)
    pair.server.reset_stream(id2, ErrorCodes.REFUSED_STREAM)
    pair.to_edge()
    assert first.events[-1] == ("lost", False)
    assert second.events[-1] == ("lost", True)  # never processed: may go again


def test_goaway_refuses_streams_above_the_last_and_leaves_the_pool(pair):
    owners = [Owner() for _ in range(3)]
    streams = [pair.stream(o) for o in owners]
    for i, s in enumerate(streams):
        s.transport.write(b"GET /%d HTTP/1.1\r\nHost: a\r\n\r\n" % i)
    ids = [e.stream_id for e in received(pair.to_server(), h2.events.RequestReceived)]
    pair.server.close_connection(last_stream_id=ids[0])
    pair.to_edge()
    assert owners[0].kinds() == []  # processed: goes on
    assert [o.kinds() for o in owners[1:]] == [["lost"], ["lost"]]
    assert all(o.events[-1] == ("lost", True) for o in owners[1:])
    assert pair.pool.take_stream(pair.server_url) is None  # no new stream on it
    # The server answers what it processed (h2 sends nothing after its own GOAWAY, which
    # a graceful server does: its state put back by hand, as edge's is).
    pair.server.state_machine.state = h2.connection.ConnectionState.SERVER_OPEN
    pair.server.send_headers(ids[0], [(b":status", b"204")], end_stream=True)
    pair.to_edge()
    assert owners[0].kinds() == ["head", "end"]


def test_max_concurrent_streams_is_honoured(pair):
    pair.server.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 2})
    pair.exchange()
    a = pair.pool.take_stream(pair.server_url)
    b = pair.pool.take_stream(pair.server_url)
    assert a is not None and b is not None
    assert pair.pool.take_stream(pair.server_url) is None  # a third waits for room
    a.abort()
    assert pair.pool.take_stream(pair.server_url) is not None


def test_request_headers_for_grpc_and_not():
    head = RequestHead(
        b"GET",
        b"/p",
        b"1.1",
        [(b"Host", b"h"), (b"TE", b"gzip"), (b"Upgrade", b"x"), (b"Accept", b"*/*")],
        True,
        False,
        None,
        False,
        False,
        host=b"h",
    )
    assert request_headers(head, b"https") == [
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":authority", b"h"),
        (b":path", b"/p"),
        (b"accept", b"*/*"),
    ]


def test_response_head_from_headers():
    head = response_head([(b":status", b"204")], b"GET", True)
    assert (head.status, head.has_body, head.content_length) == (204, False, None)
    head = response_head([(b":status", b"200"), (b"content-length", b"7")], b"HEAD", False)
    assert (head.has_body, head.content_length) == (False, 7)
    with pytest.raises(ValueError):
        response_head([(b"content-type", b"x")], b"GET", False)


def test_wants_h2():
    grpc = RequestHead(
        b"POST",
        b"/",
        b"1.1",
        [(b"Content-Type", b"application/grpc")],
        True,
        True,
        None,
        False,
        False,
        host=b"h",
    )
    plain = RequestHead(b"GET", b"/", b"1.1", [], True, False, None, False, False, host=b"h")
    over_h2 = RequestHead(b"GET", b"/", b"2.0", [], True, False, None, False, False, host=b"h")
    tls = ServerURL("https://10.0.0.1:443")
    assert wants_h2(ServerURL("h2c://10.0.0.1:80"), plain)
    assert not wants_h2(ServerURL("http://10.0.0.1:80"), grpc)
    assert wants_h2(tls, grpc) and wants_h2(tls, over_h2) and not wants_h2(tls, plain)
    tls.h2 = False  # its ALPN chose http/1.1
    assert not wants_h2(tls, over_h2)


def test_keepalive_ping_after_read_idle_and_close_without_its_ack():
    timeouts = ForwardingTimeouts(read_idle_timeout=Duration(5.0), ping_timeout=Duration(3.0))
    pair = Pair(FastRequestParser, config=ServersTransport(forwarding_timeouts=timeouts))
    try:
        owner = Owner()
        stream = pair.stream(owner)
        stream.transport.write(b"GET /long HTTP/1.1\r\nHost: a\r\n\r\n")
        pair.to_server()
        start = pair.conn.last_read
        pair.pool.sweep(start + 4.0)
        assert not received(pair.to_server(), h2.events.PingReceived)  # read lately: no PING
        pair.pool.sweep(start + 5.5)
        assert received(pair.to_server(), h2.events.PingReceived)
        pair.to_edge()  # h2 acknowledged it
        assert pair.conn.ping_sent == 0.0
        last = pair.conn.last_read
        pair.pool.sweep(last + 5.5)  # idle again: another PING, left unanswered
        assert received(pair.to_server(), h2.events.PingReceived)
        pair.server.data_to_send()  # the ack never goes
        pair.pool.sweep(last + 7.0)
        assert owner.kinds() == []
        pair.pool.sweep(last + 8.6)
        assert owner.kinds() == ["lost"]
        assert not pair.conn.usable() and pair.pool.take_stream(pair.server_url) is None
    finally:
        pair.close()
