"""HTTP/2 streams as exchanges (edge.http.server.h2), in process.

The real protocol objects, router and pool of ``loadtest/bench_hotpath.py``'s
wiring on recording transports, under both codecs; the client is h2's own state
machine, so every frame edge sends is read by an independent implementation. What
is checked is what reaches each side: the HTTP/1.1 request upstream, the frames
back, the windows both ways, and the GOAWAY that ends a flood.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import time

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
import uvloop
from h2.errors import ErrorCodes
from hyperframe.frame import PingFrame

from edge.config.static import EntryPointHTTP2
from edge.deadlines import IDLE
from edge.errors import HTTPError
from edge.http.codec.h2 import PREFACE
from edge.http.server.connection import HTTPConnection, PrefaceWait
from edge.http.server.exchange import HIGH_WATER
from edge.http.server.h2 import PINGS_PER_SECOND, SETTINGS_PER_SECOND, H2Connection
from loadtest.bench_hotpath import setup
from tests.unit.http.server.transport import Recorder

OK = b"HTTP/1.1 200 OK\r\nServer: t\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello"


class Switchable(Recorder):
    """A recording transport whose protocol can be replaced (``set_protocol``)."""

    def __init__(self, peer: tuple[str, int]) -> None:
        super().__init__(peer)
        self.protocol = None
        self.paused = False
        self.eof = False  # write_eof: the sending side closed

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    @property
    def ended(self) -> bool:
        """The server is done sending: its side closed, or the whole connection."""
        return self.eof or self.closing

    def set_protocol(self, protocol) -> None:
        self.protocol = protocol

    def get_protocol(self):
        return self.protocol

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


class Client:
    """h2's client state machine on edge's client transport."""

    def __init__(
        self, http: HTTPConnection, settings: dict | None = None, checked: bool = True
    ) -> None:
        """``checked``: h2 checks and normalizes what it sends; False sends any header
        list as it is (malformed ones)."""
        self.http = http
        self.transport: Switchable = http.transport  # type: ignore[assignment]
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(
                client_side=True,
                validate_outbound_headers=checked,
                normalize_outbound_headers=checked,
            )
        )
        self.h2.initiate_connection()
        if settings:
            self.h2.update_settings(settings)
        self.ids = iter(range(1, 1 << 20, 2))

    @property
    def server(self) -> H2Connection:
        assert isinstance(self.transport.protocol, H2Connection)
        return self.transport.protocol

    def send(self) -> None:
        data = self.h2.data_to_send()
        protocol = self.transport.protocol or self.http
        protocol.data_received(data)

    def events(self) -> list[h2.events.Event]:
        """What edge wrote, read. Its writes outside a client read leave at the end of
        the loop turn (H2Connection.flush), which this loop does not run: the write
        is made here, and nothing else the loop holds runs."""
        server = self.transport.protocol
        if isinstance(server, H2Connection) and server.flushing:
            server.write_out()
        data = bytes(self.transport.data)
        self.transport.data.clear()
        return self.h2.receive_data(data) if data else []

    def request(
        self,
        method: bytes = b"GET",
        path: bytes = b"/p",
        extra=(),
        end: bool = True,
        pseudo: list | None = None,
    ) -> int:
        """Open a stream; ``pseudo`` replaces the pseudo-header fields."""
        sid = next(self.ids)
        if pseudo is None:
            pseudo = [
                (b":method", method),
                (b":scheme", b"http"),
                (b":authority", b"a.test"),
                (b":path", path),
            ]
        headers = [*pseudo, *extra]
        self.h2.send_headers(sid, headers, end_stream=end)
        self.send()
        return sid


@pytest.fixture(params=["httptools", "h11"])
def pair(request):
    loop = uvloop.new_event_loop()
    made = []

    def make(**context):
        context.setdefault("http2", EntryPointHTTP2())
        made.append(
            setup(
                loop,
                request.param,
                host="a.test",
                client_ip="10.0.0.7",
                transport=Switchable,
                **context,
            )
        )
        return made[-1]

    yield make
    loop.run_until_complete(asyncio.sleep(0))
    loop.close()


def response(events, sid: int) -> tuple[dict, bytes, bool]:
    """(headers, body, ended) of stream ``sid`` in ``events``."""
    headers: dict = {}
    body = b""
    ended = False
    for e in events:
        if getattr(e, "stream_id", None) != sid:
            continue
        if isinstance(e, h2.events.ResponseReceived):
            headers = dict(e.headers)
        elif isinstance(e, h2.events.DataReceived):
            body += e.data
        elif isinstance(e, h2.events.StreamEnded):
            ended = True
    return headers, body, ended


def goaway(events) -> h2.events.ConnectionTerminated | None:
    return next((e for e in events if isinstance(e, h2.events.ConnectionTerminated)), None)


def test_the_preface_hands_the_connection_to_http2_and_a_stream_goes_upstream_as_http_1_1(
    pair,
):
    http, upstream = pair()
    c = Client(http)
    sid = c.request(
        path=b"/p?q=1",
        extra=[(b"cookie", b"a=1"), (b"cookie", b"b=2"), (b"te", b"trailers"), (b"x-y", b"z")],
    )
    assert isinstance(c.server, H2Connection) and http.transport is None
    assert http not in c.server.ctx.connections and c.server in c.server.ctx.connections
    sent = bytes(upstream.transport.data)
    head, _, rest = sent.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"GET /p?q=1 HTTP/1.1" and lines[1] == b"Host: a.test" and not rest
    assert b"cookie: a=1; b=2" in lines  # joined, as HTTP/1.1 has one
    assert b"x-y: z" in lines and not any(line.lower().startswith(b"te:") for line in lines)
    assert b"X-Forwarded-For: 10.0.0.7" in lines and b"X-Forwarded-Proto: http" in lines
    upstream.data_received(OK)
    headers, body, ended = response(c.events(), sid)
    assert headers == {b":status": b"200", b"server": b"t", b"content-length": b"5"}
    assert body == b"hello" and ended
    assert not c.server.streams
    assert upstream.owner is None and not upstream.transport.closing  # pooled again


def test_a_response_of_unknown_length_ends_with_its_stream(pair):
    http, upstream = pair()
    c = Client(http)
    sid = c.request()
    upstream.data_received(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n"
    )
    headers, body, ended = response(c.events(), sid)
    assert headers == {b":status": b"200"} and body == b"hello world" and not ended
    upstream.data_received(b"0\r\n\r\n")
    headers, body, ended = response(c.events(), sid)
    assert body == b"" and ended


def test_head_and_own_answers(pair):
    http, upstream = pair()
    c = Client(http)
    sid = c.request(method=b"HEAD")
    upstream.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 42\r\n\r\n")
    events = c.events()
    headers, body, ended = response(events, sid)
    assert headers == {b":status": b"200", b"content-length": b"42"} and body == b"" and ended
    # No router for the host: edge's own 404, as HTTP/1.1 gets it.
    sid = next(c.ids)
    c.h2.send_headers(
        sid,
        [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"b.test"), (b":path", b"/")],
        end_stream=True,
    )
    c.send()
    headers, body, ended = response(c.events(), sid)
    assert headers[b":status"] == b"404" and body == b"404 page not found\n" and ended


def test_a_response_reader_serves_the_next_stream_once_its_response_ended(pair):
    """The reader (response parser) of a stream answered in full goes to the next
    stream: a HEAD's answer (no body) then GETs, each read right by the same parser."""
    http, upstream = pair()
    c = Client(http)
    sid = c.request(method=b"HEAD")
    upstream.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 42\r\n\r\n")
    assert response(c.events(), sid)[1:] == (b"", True)
    server = c.server
    assert len(server.readers) == 1 and server.readers[0].stream is None
    reader = server.readers[0]
    for _ in range(2):
        sid = c.request()
        assert server.streams[sid].reader is reader and not server.readers
        upstream.data_received(OK)
        headers, body, ended = response(c.events(), sid)
        assert headers[b":status"] == b"200" and (body, ended) == (b"hello", True)
        assert server.readers == [reader]


def test_a_response_ended_by_its_stream_leaves_no_reader(pair):
    """A body of unknown length ends with the exchange (its head says close): that
    parser takes no other response, so it is let go."""
    http, upstream = pair()
    c = Client(http)
    sid = c.request()
    upstream.data_received(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n")
    upstream.data_received(b"0\r\n\r\n")
    assert response(c.events(), sid)[1:] == (b"a", True)
    assert c.server.readers == []


def test_the_readers_go_with_the_connection(pair):
    http, upstream = pair()
    c = Client(http)
    c.request()
    upstream.data_received(OK)
    c.events()
    server = c.server
    (reader,) = server.readers
    server.connection_lost(None)
    assert server.readers == [] and reader.stream is None
    reader.parser.expect(b"GET")
    # Closed: it parses no response any more (httptools' refuses, h11's has no handler).
    with contextlib.suppress(HTTPError, AttributeError):
        reader.parser.feed(OK)
    assert not reader.done


def test_a_request_body_goes_chunked_and_its_windows_open_as_the_upstream_drains(pair):
    http, upstream = pair()
    c = Client(http)
    sid = c.request(method=b"POST", end=False)
    c.h2.send_data(sid, b"abc")
    c.send()
    assert bytes(upstream.transport.data).endswith(
        b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"
    )
    c.events()  # edge's SETTINGS and its connection window
    before = c.h2.local_flow_control_window(sid)
    # The upstream's transport is full: what comes now is not acknowledged (more than
    # half a window, which h2 would otherwise give back at once).
    upstream.pause_writing()
    for _ in range(4):
        c.h2.send_data(sid, b"x" * 10000)
    c.send()
    assert not [e for e in c.events() if isinstance(e, h2.events.WindowUpdated)]
    assert c.h2.local_flow_control_window(sid) == before - 40000
    upstream.resume_writing()
    updates = [e for e in c.events() if isinstance(e, h2.events.WindowUpdated)]
    assert {e.stream_id for e in updates} >= {sid}
    c.h2.end_stream(sid)
    c.send()
    assert bytes(upstream.transport.data).endswith(b"\r\n0\r\n\r\n")
    upstream.data_received(OK)
    assert response(c.events(), sid)[1:] == (b"hello", True)


def test_a_client_that_opens_no_window_pauses_the_upstream(pair):
    http, upstream = pair()
    c = Client(http, {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1000})
    c.send()
    c.events()
    sid = c.request()
    size = 4 * HIGH_WATER
    upstream.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
    upstream.data_received(b"y" * (HIGH_WATER + 2000))
    _, body, _ = response(c.events(), sid)
    assert len(body) == 1000  # the window's worth
    assert upstream.paused and upstream.transport.paused  # the rest waits upstream
    got = len(body)
    fed = HIGH_WATER + 2000
    ended = False
    for _ in range(500):  # the client reads: windows open, the upstream is read again
        c.h2.increment_flow_control_window(65535, sid)
        c.h2.increment_flow_control_window(65535)
        c.send()
        if not upstream.paused and fed < size:
            n = min(16384, size - fed)
            upstream.data_received(b"y" * n)
            fed += n
        _, body, ended = response(c.events(), sid)
        got += len(body)
        if ended:
            break
    assert ended and got == size


def test_a_preface_in_pieces_waits_for_the_rest(pair):
    http, upstream = pair()
    c = Client(http)
    data = c.h2.data_to_send()
    http.data_received(data[:3])
    assert isinstance(c.transport.protocol, PrefaceWait)
    c.transport.protocol.data_received(data[3:10])
    c.transport.protocol.data_received(data[10:])
    assert isinstance(c.transport.protocol, H2Connection)
    sid = c.request()
    upstream.data_received(OK)
    assert response(c.events(), sid)[1:] == (b"hello", True)


def test_a_p_that_is_no_preface_is_http_1_1(pair):
    http, upstream = pair()
    http.data_received(b"P")
    wait = http.transport.protocol
    assert isinstance(wait, PrefaceWait)
    wait.data_received(b"OST /p HTTP/1.1\r\nHost: a.test\r\nContent-Length: 2\r\n\r\nok")
    assert http.transport.protocol is http
    assert bytes(upstream.transport.data).startswith(b"POST /p HTTP/1.1\r\n")
    upstream.data_received(OK)
    assert bytes(http.transport.data) == OK


def test_a_preface_after_a_request_is_no_switch(pair):
    http, upstream = pair()
    http.data_received(b"GET /p HTTP/1.1\r\nHost: a.test\r\n\r\n")
    upstream.data_received(OK)
    http.data_received(PREFACE)
    assert http.transport.protocol is None
    assert bytes(http.transport.data).startswith(OK + b"HTTP/1.1 400 ")


def test_a_path_that_would_break_the_request_line_resets_its_stream(pair):
    http, upstream = pair()
    c = Client(http)
    sid = c.request(path=b"/a b")
    events = c.events()
    reset = [e for e in events if isinstance(e, h2.events.StreamReset)]
    assert reset and reset[0].stream_id == sid and reset[0].error_code == ErrorCodes.PROTOCOL_ERROR
    assert not upstream.transport.data and goaway(events) is None  # the connection serves on
    sid = c.request()
    upstream.data_received(OK)
    assert response(c.events(), sid)[1:] == (b"hello", True)


GOOD = [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"a.test"), (b":path", b"/p")]


@pytest.mark.parametrize(
    ("pseudo", "extra"),
    [
        (
            [
                (b":method", b"GET"),
                (b":scheme", b"http"),
                (b":authority", b"a.test"),
                (b":path", b"/a HTTP/1.1\r\nX:"),
            ],
            [],
        ),
        (GOOD, [(b"x-a", b"1\r\nx-b: 2")]),
        (GOOD, [(b"x-a", b"\x00")]),
        (GOOD, [(b"x-a", b" padded")]),
        (GOOD, [(b"X-Upper", b"1")]),
        (GOOD, [(b"x a", b"1")]),
        (GOOD, [(b"connection", b"keep-alive")]),
        (GOOD, [(b"transfer-encoding", b"chunked")]),
        (GOOD, [(b"upgrade", b"h2c")]),
        (GOOD, [(b"keep-alive", b"5")]),
        (GOOD, [(b"te", b"gzip")]),
        (GOOD, [(b"host", b"other.test")]),
        ([*GOOD, (b":status", b"200")], []),
        ([*GOOD, (b":path", b"/q")], []),
        ([*GOOD, (b":custom", b"1")], []),
        (GOOD[:1] + GOOD[2:], []),  # no :scheme
        (GOOD[:3], []),  # no :path
        ([*GOOD[:3], (b":path", b"")], []),
        (GOOD[:2], [(b"x-a", b"1"), *GOOD[2:]]),  # a pseudo-header after a regular field
    ],
)
def test_a_malformed_request_resets_its_stream_and_the_connection_serves_on(pair, pseudo, extra):
    """RFC 9113 8.1.1: a malformed request is a stream error (RST_STREAM PROTOCOL_ERROR,
    as Go's server answers for Traefik), not the connection's end; nothing of it
    reaches the HTTP/1.1 upstream."""
    http, upstream = pair()
    c = Client(http, checked=False)
    sid = c.request(pseudo=pseudo, extra=extra)
    events = c.events()
    reset = [e for e in events if isinstance(e, h2.events.StreamReset)]
    assert [(e.stream_id, e.error_code) for e in reset] == [(sid, ErrorCodes.PROTOCOL_ERROR)]
    assert goaway(events) is None and not c.transport.ended
    assert not upstream.transport.data
    sid = c.request(extra=[(b"te", b"trailers")])
    assert upstream.transport.data.startswith(b"GET /p HTTP/1.1\r\n")
    upstream.data_received(OK)
    assert response(c.events(), sid)[1:] == (b"hello", True)


def test_malformed_request_trailers_reset_the_stream_alone(pair):
    http, upstream = pair()
    c = Client(http, checked=False)
    sid = c.request(method=b"POST", end=False)
    c.h2.send_data(sid, b"abc")
    c.h2.send_headers(sid, [(b":path", b"/x")], end_stream=True)  # a pseudo-header in trailers
    c.send()
    events = c.events()
    reset = [e for e in events if isinstance(e, h2.events.StreamReset)]
    assert [(e.stream_id, e.error_code) for e in reset] == [(sid, ErrorCodes.PROTOCOL_ERROR)]
    assert goaway(events) is None and not c.transport.ended
    assert bytes(upstream.transport.data).endswith(b"3\r\nabc\r\n")  # never ended upstream


def test_expect_100_continue_is_an_informational_response(pair):
    http, upstream = pair()
    c = Client(http)
    sid = c.request(
        method=b"PUT", extra=[(b"content-length", b"2"), (b"expect", b"100-continue")], end=False
    )
    events = c.events()
    informational = [e for e in events if isinstance(e, h2.events.InformationalResponseReceived)]
    assert [dict(e.headers)[b":status"] for e in informational] == [b"100"]
    assert b"expect" not in bytes(upstream.transport.data).lower()
    c.h2.send_data(sid, b"ok", end_stream=True)
    c.send()
    upstream.data_received(OK)
    assert response(c.events(), sid)[1:] == (b"hello", True)


def test_early_hints_and_trailers_frame_the_response(pair):
    """A 103 from upstream: an informational HEADERS before the response's; its trailers
    (framing and hop-by-hop ones gone): a HEADERS frame with END_STREAM after the data."""
    http, upstream = pair()
    c = Client(http)
    sid = c.request()
    upstream.data_received(
        b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
        b"0\r\ngrpc-status: 0\r\nKeep-Alive: 5\r\nGrpc-Message: ok\r\n\r\n"
    )
    events = [e for e in c.events() if getattr(e, "stream_id", None) == sid]
    kinds = [type(e).__name__ for e in events]
    assert kinds == [
        "InformationalResponseReceived",
        "ResponseReceived",
        "DataReceived",
        "TrailersReceived",
        "StreamEnded",
    ]
    assert dict(events[0].headers) == {b":status": b"103", b"link": b"</a.css>; rel=preload"}
    assert events[2].data == b"hello"
    assert events[3].headers == [(b"grpc-status", b"0"), (b"grpc-message", b"ok")]


def test_request_trailers_go_upstream_in_the_last_chunk(pair):
    http, upstream = pair()
    c = Client(http)
    sid = c.request(method=b"POST", end=False)
    c.h2.send_data(sid, b"abc")
    c.h2.send_headers(sid, [(b"x-sum", b"9"), (b"host", b"evil.test")], end_stream=True)
    c.send()
    assert bytes(upstream.transport.data).endswith(
        b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nx-sum: 9\r\n\r\n"
    )


def test_streams_leave_no_cycle_for_the_gc(pair):
    """A stream and its response parser refer to each other (and llhttp's parser to
    that one): each ended stream lets go of them, so a request leaves nothing for the
    cyclic GC, however its stream ended."""
    http, upstream = pair()
    c = Client(http)
    c.request()  # the connection is HTTP/2 from here on
    upstream.data_received(OK)
    c.events()
    gc.collect()  # what is alive now moves to the oldest generation
    gc.disable()  # and what is made from here on stays in the youngest
    try:
        for _ in range(3):
            c.request()  # answered
            upstream.data_received(OK)
            c.events()
            sid = c.request(method=b"POST", end=False)  # reset by the client
            c.h2.reset_stream(sid)
            c.send()
            c.events()
        garbage = gc.collect(0)  # all made since gc.disable() is in the youngest
    finally:
        gc.enable()
    assert garbage == 0


def test_a_stream_the_client_resets_takes_its_upstream_request_with_it(pair):
    http, upstream = pair()
    c = Client(http)
    sid = c.request()
    assert upstream.owner is not None
    c.h2.reset_stream(sid, ErrorCodes.CANCEL)
    c.send()
    assert upstream.transport.closing and upstream.owner is None  # aborted, not pooled
    assert not c.server.streams


def test_an_answer_before_the_body_ends_resets_the_rest_of_it(pair):
    http, upstream = pair()
    c = Client(http)
    sid = c.request(method=b"POST", extra=[(b"content-length", b"1000000")], end=False)
    c.h2.send_data(sid, b"x" * 1000)
    c.send()
    upstream.data_received(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\n\r\n")
    events = c.events()
    headers, _, ended = response(events, sid)
    assert headers[b":status"] == b"413" and ended
    reset = [e for e in events if isinstance(e, h2.events.StreamReset)]
    assert [(e.stream_id, e.error_code) for e in reset] == [(sid, ErrorCodes.NO_ERROR)]


@pytest.mark.parametrize(
    ("flood", "limit"),
    [("ping", PINGS_PER_SECOND), ("settings", SETTINGS_PER_SECOND)],
)
def test_a_flood_of_control_frames_is_calmed(pair, flood, limit):
    http, _ = pair()
    c = Client(http)
    c.send()
    c.events()
    for i in range(limit + 1):
        if flood == "ping":
            c.h2.ping(b"%08d" % i)
        else:
            c.h2.update_settings({h2.settings.SettingCodes.MAX_FRAME_SIZE: 16384 + i})
    c.send()
    end = goaway(c.events())
    assert end is not None and end.error_code == ErrorCodes.ENHANCE_YOUR_CALM
    assert c.transport.ended


def test_streams_reset_in_a_loop_are_calmed(pair):
    """Rapid reset (CVE-2023-44487): each stream goes upstream (the first takes the
    pooled connection, the next ones a dial) and is reset before its answer."""
    http, upstream = pair()
    c = Client(http)
    server = None
    sid = 0
    for _ in range(1000):
        sid = c.request(end=False)
        if server is None:
            server = c.server
            # One second as long as the loop takes: on a loaded machine 200 streams
            # may take longer, and the count would start again.
            server.resets.start = math.inf
        c.h2.reset_stream(sid, ErrorCodes.CANCEL)
        c.send()
        if c.transport.ended:
            break
    assert server is not None and c.transport.ended
    assert (sid + 1) // 2 == server.resets.limit + 1  # the first reset past the allowance
    assert upstream.transport.closing  # the first stream's upstream request went with it
    end = goaway(c.events())
    assert end is not None and end.error_code == ErrorCodes.ENHANCE_YOUR_CALM


def test_a_stream_past_max_concurrent_streams_is_refused_not_the_connection(pair):
    http, upstream = pair(http2=EntryPointHTTP2(max_concurrent_streams=2))
    c = Client(http)
    first = c.request()
    second = c.request()  # waits for a dial: open still
    third = c.request()
    events = c.events()
    changed = next(e for e in events if isinstance(e, h2.events.RemoteSettingsChanged))
    assert changed.changed_settings[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS].new_value == 2
    reset = [e for e in events if isinstance(e, h2.events.StreamReset)]
    assert [(e.stream_id, e.error_code) for e in reset] == [(third, ErrorCodes.REFUSED_STREAM)]
    assert goaway(events) is None and set(c.server.streams) == {first, second}
    upstream.data_received(OK)
    assert response(c.events(), first)[1:] == (b"hello", True)
    fourth = c.request()  # room again
    assert set(c.server.streams) == {second, fourth}


def test_a_draining_connection_refuses_new_streams_and_ends_after_the_last(pair):
    http, upstream = pair()
    c = Client(http)
    first = c.request()
    c.server.shutdown()
    second = c.request()
    events = c.events()
    reset = [e for e in events if isinstance(e, h2.events.StreamReset)]
    assert [(e.stream_id, e.error_code) for e in reset] == [(second, ErrorCodes.REFUSED_STREAM)]
    assert not c.transport.ended
    upstream.data_received(OK)
    events = c.events()
    assert response(events, first)[1:] == (b"hello", True)
    end = goaway(events)
    assert end is not None and end.error_code == ErrorCodes.NO_ERROR and c.transport.ended


def test_the_connection_lost_ends_every_exchange(pair):
    http, upstream = pair()
    c = Client(http)
    c.request()
    server = c.server
    stream = next(iter(server.streams.values()))
    ex = stream.ex
    server.connection_lost(None)
    assert ex is not None and ex.status == 499 and upstream.transport.closing
    assert server not in server.ctx.connections


def test_after_its_goaway_a_connection_reads_on_then_closes(pair):
    """The GOAWAY is followed by the sending side's close; what the client still sends
    is dropped until the linger passes (a reset would lose the GOAWAY in flight)."""
    http, _ = pair()
    c = Client(http)
    c.send()
    server = c.server
    for i in range(PINGS_PER_SECOND + 1):
        c.h2.ping(b"%08d" % i)
    c.send()
    assert goaway(c.events()) is not None and c.transport.eof and not c.transport.closing
    assert server in server.ctx.connections and server.deadline_kind
    server.data_received(PingFrame(0, opaque_data=b"after!!!").serialize())  # dropped
    assert not c.transport.data
    server.deadline_passed()
    assert c.transport.closing


def test_a_request_body_that_stalls_past_read_timeout_is_answered_408(pair):
    http, upstream = pair(read_timeout=0.05)
    c = Client(http)
    sid = c.request(method=b"POST", end=False)
    c.h2.send_data(sid, b"part")
    c.send()
    server = c.server
    assert server.deadline_kind and server.deadline <= server.loop.time() + 0.05
    time.sleep(0.1)
    server.deadline_passed()
    headers, _, ended = response(c.events(), sid)
    assert headers[b":status"] == b"408" and ended
    assert upstream.transport.closing  # the upstream request went with it
    assert not server.streams and server.deadline_kind is IDLE


def test_an_idle_connection_says_goaway_after_idle_timeout(pair):
    http, upstream = pair(idle_timeout=0.05)
    c = Client(http)
    sid = c.request()
    upstream.data_received(OK)
    assert response(c.events(), sid)[1:] == (b"hello", True)
    server = c.server
    assert server.deadline_kind is IDLE
    time.sleep(0.1)
    server.deadline_passed()
    end = goaway(c.events())
    assert end is not None and end.error_code == ErrorCodes.NO_ERROR and c.transport.ended


def test_malformed_streams_in_a_loop_are_calmed(pair):
    http, upstream = pair()
    c = Client(http)
    c.send()
    server = c.server
    for _ in range(server.resets.limit + 1):
        c.request(path=b"/a b")  # each refused alone (PROTOCOL_ERROR)
        if c.transport.ended:
            break
    end = goaway(c.events())
    assert end is not None and end.error_code == ErrorCodes.ENHANCE_YOUR_CALM
    assert not upstream.transport.data
