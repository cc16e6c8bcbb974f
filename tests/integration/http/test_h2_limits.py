"""HTTP/2's limits and the attacks on them, on real sockets: a raw h2 client
(``h2peers.RawH2``) does what the attack does while another client is served.

- the static keys (``entryPoints.<n>.http2``: maxConcurrentStreams,
  maxDecoderHeaderTableSize, maxEncoderHeaderTableSize) and ``http.maxHeaderBytes``
  are what edge advertises and holds to;
- rapid reset (CVE-2023-44487), a CONTINUATION flood (CVE-2024-27316 class), an
  oversized header list, SETTINGS, PING, PRIORITY and empty DATA floods: each gets
  GOAWAY with its error code and the connection closed;
- a client that opens no window holds no more than bounded buffers.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import hpack
import pytest
from h2.errors import ErrorCodes
from h2.settings import SettingCodes
from hyperframe.frame import ContinuationFrame, DataFrame, HeadersFrame, PriorityFrame

from tests.harness import Edge, Whoami, lb
from tests.integration.http.h2peers import Firehose, RawH2, rss

MIB = 1 << 20
REQUEST = [
    (b":method", b"GET"),
    (b":scheme", b"http"),
    (b":authority", b"app.example"),
    (b":path", b"/"),
]


@pytest.fixture(scope="module")
def whoami():
    w = Whoami("limits")
    yield w
    w.stop()


def edge(tmp_path: Path, whoami: Whoami, http2: dict | None = None, **http) -> Edge:
    dynamic = {
        "http": {
            "routers": {"app": {"rule": "Host(`app.example`)", "service": "app"}},
            "services": {"app": lb(whoami.url)},
        }
    }
    ep: dict = {"address": "127.0.0.1:0", "http": http}
    if http2 is not None:
        ep["http2"] = http2
    return Edge(tmp_path, dynamic, entrypoints={"web": ep})


class Bystander:
    """Another client of the same entrypoint, on a connection of its own, asking for
    a page every 50 ms while the attack runs: each answer is recorded."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.statuses: list[int] = []
        self.errors: list[str] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            with RawH2(self.port) as c:
                for i in range(2000):
                    if self.done.is_set():
                        return
                    r = c.get(b"/bystander/%d" % i, authority=b"app.example", timeout=10)
                    self.statuses.append(r.status)
                    time.sleep(0.05)
        except Exception as exc:  # reported by stop()
            self.errors.append(repr(exc))

    def stop(self) -> None:
        self.done.set()
        self.thread.join(15)
        assert not self.errors, self.errors
        assert self.statuses and set(self.statuses) == {200}, self.statuses


def calmed(c: RawH2, code: ErrorCodes = ErrorCodes.ENHANCE_YOUR_CALM) -> None:
    end = c.goaway(timeout=15)
    assert end is not None, "no GOAWAY"
    assert end.error_code == code, end
    assert c.closed_by_server(timeout=10)


def test_the_static_limits_are_advertised_and_held(tmp_path, whoami):
    e = edge(
        tmp_path,
        whoami,
        {
            "maxConcurrentStreams": 3,
            "maxDecoderHeaderTableSize": 1024,
            "maxEncoderHeaderTableSize": 256,
        },
        maxHeaderBytes=16384,
    )
    try:
        # The client offers a table of 64 KiB for what edge sends: edge keeps 256 bytes.
        with RawH2(e.port, settings={SettingCodes.HEADER_TABLE_SIZE: 65536}) as c:
            r = c.get(b"/first", authority=b"app.example")
            assert r.status == 200
            assert c.remote_settings[SettingCodes.MAX_CONCURRENT_STREAMS] == 3
            assert c.remote_settings[SettingCodes.HEADER_TABLE_SIZE] == 1024
            assert c.remote_settings[SettingCodes.MAX_HEADER_LIST_SIZE] == 16384
            assert c.h2.decoder.header_table.maxsize == 256
            # Four streams at once (this client ignores the limit, as one does that opened
            # them before it read the SETTINGS): the fourth is refused, and may go again.
            c.h2.remote_settings[SettingCodes.MAX_CONCURRENT_STREAMS] = 100
            c.h2.remote_settings.acknowledge()
            sids = [
                c.request(b"/slow?delay=1", authority=b"app.example", flush=False) for _ in range(4)
            ]
            c.flush()
            answers = [c.response(sid) for sid in sids]
            assert [a.status for a in answers[:3]] == [200] * 3
            assert answers[3].reset == ErrorCodes.REFUSED_STREAM
            assert c.terminated is None
            assert c.get(b"/again", authority=b"app.example").status == 200
    finally:
        e.stop()


def test_rapid_reset_is_calmed_while_another_client_is_served(tmp_path, whoami):
    e = edge(tmp_path, whoami)
    try:
        bystander = Bystander(e.port)
        with RawH2(e.port) as c:
            opened = 0
            for _ in range(20_000):
                # Streams that go upstream (a slow page) and are reset at once, in
                # batches of 50 (2,500 a second at most: edge is not outrun).
                sid = c.request(b"/slow?delay=5", authority=b"app.example", flush=False)
                c.h2.reset_stream(sid, ErrorCodes.CANCEL)
                opened += 1
                if opened % 50 == 0:
                    if not c.flush():
                        break
                    c.read(0.02)
                    if c.terminated is not None or c.closed:
                        break
            assert opened < 20_000  # the GOAWAY ended it, not the loop
            calmed(c)
        bystander.stop()
    finally:
        e.stop()


def test_a_continuation_flood_is_calmed(tmp_path, whoami):
    e = edge(tmp_path, whoami)
    try:
        bystander = Bystander(e.port)
        with RawH2(e.port) as c:
            block = hpack.Encoder().encode(REQUEST + [(b"x-pad", b"p" * 64)] * 50)
            first = HeadersFrame(1, data=block[:10], flags=["END_STREAM"])
            c.send_raw(first.serialize())
            for i in range(10, 10_000):  # a byte per frame, the header block never ends
                if not c.send_raw(ContinuationFrame(1, data=block[i : i + 1]).serialize()):
                    break
                if c.closed:
                    break
            calmed(c)
        bystander.stop()
    finally:
        e.stop()


def test_an_oversized_header_list_is_calmed(tmp_path, whoami):
    e = edge(tmp_path, whoami, maxHeaderBytes=16384)
    try:
        bystander = Bystander(e.port)
        with RawH2(e.port) as c:
            c.read(1)  # edge's SETTINGS
            c.request(b"/", authority=b"app.example", headers=[(b"x-big", b"b" * 40000)])
            calmed(c)
        # An HPACK bomb: one large field in the table, then referenced again and again.
        with RawH2(e.port) as c:
            c.read(1)
            encoder = hpack.Encoder()
            block = encoder.encode([*REQUEST, (b"x-bomb", b"b" * 3000)])
            block += encoder.encode([(b"x-bomb", b"b" * 3000)] * 500)  # indexed: 1 byte each
            assert len(block) < 16384
            c.send_raw(HeadersFrame(1, data=block, flags=["END_HEADERS", "END_STREAM"]).serialize())
            calmed(c)
        bystander.stop()
    finally:
        e.stop()


@pytest.mark.parametrize("flood", ["settings", "ping", "priority", "empty-data"])
def test_a_flood_of_frames_is_calmed(tmp_path, whoami, flood):
    e = edge(tmp_path, whoami)
    try:
        bystander = Bystander(e.port)
        with RawH2(e.port) as c:
            if flood == "empty-data":
                sid = c.request(b"/up", authority=b"app.example", method=b"POST", end=False)
            for i in range(10_000):
                if flood == "settings":
                    c.h2.update_settings({SettingCodes.MAX_FRAME_SIZE: 16384 + i % 100})
                elif flood == "ping":
                    c.h2.ping(b"%08d" % i)
                elif flood == "priority":
                    c.send_raw(PriorityFrame(1 + 2 * (i % 1000), depends_on=0).serialize())
                else:
                    c.send_raw(DataFrame(sid, data=b"").serialize())
                if i % 100 == 99 and (not c.flush() or c.closed):
                    break
            calmed(c)
        bystander.stop()
    finally:
        e.stop()


def test_clients_that_open_no_window_hold_bounded_memory(tmp_path, whoami):
    hose = Firehose(64 * MIB)
    e = Edge(
        tmp_path,
        {
            "http": {
                "routers": {
                    "app": {"rule": "Host(`app.example`)", "service": "app"},
                    "hose": {"rule": "Host(`hose.example`)", "service": "hose"},
                },
                "services": {"app": lb(whoami.url), "hose": lb(hose.url)},
            }
        },
    )
    try:
        before = rss(e.proc.pid)
        bystander = Bystander(e.port)
        with RawH2(e.port, settings={SettingCodes.INITIAL_WINDOW_SIZE: 0}, auto_ack=False) as c:
            sids = [
                c.request(b"/big/%d" % i, authority=b"hose.example", flush=False) for i in range(40)
            ]
            c.flush()
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:  # every response head comes, no byte of body
                c.read(0.5)
                if all(c.responses[sid].headers for sid in sids):
                    break
            assert all(c.responses[sid].status == 200 for sid in sids)
            assert not any(c.responses[sid].body for sid in sids)
            held = hose.settled()
            # Per stream: socket buffers and HIGH_WATER, not its 64 MiB.
            assert held < 40 * 6 * MIB, held
            assert rss(e.proc.pid) - before < 40 * MIB
        # The client gone, its upstream requests go with it: nothing more is read.
        assert hose.settled() < 40 * 6 * MIB
        bystander.stop()
    finally:
        e.stop()
        hose.stop()
