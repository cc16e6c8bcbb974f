"""The Python cost of one proxied HTTP/2 request, without sockets.

Drives the real protocol objects (edge's :class:`~edge.http.server.h2.H2Connection`
with its h2 state machine, the exchange, the upstream pool and HTTP/1.1 upstream
connections, the codecs) with fake transports that only record what is written,
as ``bench_hotpath.py`` does for HTTP/1.1 (its ``setup`` wires the router, the
pool and the upstream connections). The client is what ``h2load`` sends in
``bench.py``'s h2c scenarios: a GET of ``/`` with an ``:authority``, its header
block HPACK-indexed after the first, END_STREAM on the HEADERS; the response is
``bench_hotpath``'s 12-byte nginx answer.

    python loadtest/bench_h2.py [--streams 1] [--requests 20000]
                                [--profile | --instructions]

``--streams M``: M requests in flight per round (``h2load -m M``): their HEADERS
frames arrive in one read, each goes to its own pooled upstream connection, whose
answers are read one after the other in one loop turn (edge writes them in one
write to the client). The figure is per request.

Each round ends with a loop turn (``asyncio.sleep(0)``), as edge's writes to the
client leave at the end of one (``H2Connection.flush``); that turn is in the figure.
The warm-up reads edge's output back with h2's client and checks every answer is a
200 with its body.

``--instructions``: instructions per request, counted by callgrind (valgrind) at
two request counts and differenced (``loadtest/callgrind.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import struct
import sys
import time
from pathlib import Path

import hpack
import uvloop
from hyperframe.frame import DataFrame, Frame, HeadersFrame

sys.path.insert(0, str(Path(__file__).parent))
from bench_hotpath import RESPONSE, FakeTransport, setup

from edge.http.codec.h2 import PREFACE
from edge.http.server.h2 import H2Connection
from edge.http.server.upstream import UpstreamConnection

REQUEST_FIELDS = [
    (b":method", b"GET"),
    (b":path", b"/"),
    (b":scheme", b"http"),
    (b":authority", b"bench.local"),
    (b"accept", b"*/*"),
    (b"accept-encoding", b"gzip, deflate"),
    (b"user-agent", b"h2load nghttp2/1.52.0"),
]
"""What h2load -H ':authority: bench.local' http://.../ sends."""

HEADERS, SETTINGS, WINDOW_UPDATE = 0x1, 0x4, 0x8
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1


def frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    return (
        struct.pack(">I", len(payload))[1:] + struct.pack(">BBI", kind, flags, stream_id) + payload
    )


class H2Transport(FakeTransport):
    """A fake client transport an :class:`H2Connection` takes over; ``kept`` keeps
    what was written (the warm-up's check)."""

    def __init__(self, peer: tuple[str, int]) -> None:
        super().__init__(peer)
        self.kept: list[bytes] | None = None

    def write(self, data: bytes) -> None:
        self.written += len(data)
        if self.kept is not None:
            self.kept.append(data)

    def set_protocol(self, protocol: object) -> None:
        self.protocol = protocol

    def can_write_eof(self) -> bool:
        return False


class Client:
    """The h2load side: an H2Connection of edge's on a fake transport, upstream
    connections pooled, and the bytes of each round's requests."""

    def __init__(self, loop: asyncio.AbstractEventLoop, streams: int) -> None:
        http, upstream = setup(loop, "httptools")
        ctx = http.ctx
        self.upstreams = [upstream]
        backend = ctx.router.by_host["bench.local"].service.pick()
        for _ in range(streams - 1):
            extra = UpstreamConnection(ctx.response_parser)
            extra.connection_made(FakeTransport(("127.0.0.1", 9)))
            backend.transport.put_idle(backend.server, extra)
            self.upstreams.append(extra)
        self.transport = H2Transport(("127.0.0.1", 40000))
        self.transport.kept = []  # until the warm-up's check
        self.conn = H2Connection(ctx, self.transport, "127.0.0.1", b"127.0.0.1", False)
        self.streams = streams
        self.next_id = 1
        encoder = hpack.Encoder()
        first = encoder.encode(REQUEST_FIELDS)
        self.block = encoder.encode(REQUEST_FIELDS)  # indexed: every request after the first
        hello = (
            PREFACE
            + frame(SETTINGS, 0, 0, b"")
            + frame(SETTINGS, ACK, 0, b"")
            + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", (1 << 31) - 1 - 65535))
            + frame(HEADERS, END_STREAM | END_HEADERS, self.take_id(), first)
        )
        self.conn.data_received(hello)
        self.answer()

    def take_id(self) -> int:
        stream_id = self.next_id
        self.next_id += 2
        return stream_id

    def answer(self) -> None:
        """Each upstream asked something since the last round answers it."""
        for upstream in self.upstreams:
            transport = upstream.transport
            if transport.written:
                transport.written = 0
                upstream.data_received(RESPONSE)

    def send(self) -> None:
        """One round: ``streams`` requests in one read, their upstreams' answers."""
        block = self.block
        self.conn.data_received(
            b"".join(
                frame(HEADERS, END_STREAM | END_HEADERS, self.take_id(), block)
                for _ in range(self.streams)
            )
        )
        self.answer()


def check(kept: list[bytes], requests: int) -> None:
    """Edge's output read back frame by frame: its SETTINGS, then ``requests`` answers,
    each a 200 HEADERS and its body with END_STREAM."""
    data = b"".join(kept)
    decoder = hpack.Decoder()
    status: dict[int, bytes] = {}
    bodies: dict[int, bytes] = {}
    ended = 0
    at = 0
    while at < len(data):
        head, length = Frame.parse_frame_header(memoryview(data[at : at + 9]))
        head.parse_body(memoryview(data[at + 9 : at + 9 + length]))
        at += 9 + length
        if isinstance(head, HeadersFrame):
            status[head.stream_id] = dict(decoder.decode(head.data, raw=True))[b":status"]
        elif isinstance(head, DataFrame):
            bodies[head.stream_id] = bodies.get(head.stream_id, b"") + head.data
        if "END_STREAM" in head.flags:
            ended += 1
    assert ended == requests, f"{ended} streams ended of {requests}"
    assert set(status.values()) == {b"200"}, status
    assert set(bodies.values()) == {RESPONSE.split(b"\r\n\r\n", 1)[1]}, bodies


async def load(client: Client, rounds: int, profile: bool) -> float:
    warm = 1000 // client.streams
    for _ in range(warm):  # warm-up, and a check that edge really answers
        client.send()
        await asyncio.sleep(0)
    kept, client.transport.kept = client.transport.kept or [], None
    check(kept, 1 + warm * client.streams)
    prof = cProfile.Profile() if profile else None
    if prof:
        prof.enable()
    start = time.perf_counter()
    for _ in range(rounds):
        client.send()
        await asyncio.sleep(0)
    elapsed = time.perf_counter() - start
    if prof:
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
    assert client.conn.streams == {}, "streams left open"
    return elapsed


def run(streams: int, requests: int, profile: bool) -> float:
    """Microseconds of Python per request."""
    loop = uvloop.new_event_loop()
    try:
        client = Client(loop, streams)
        rounds = max(1, requests // streams)
        elapsed = loop.run_until_complete(load(client, rounds, profile))
        return elapsed / (rounds * streams) * 1e6
    finally:
        loop.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=int, default=1, help="requests in flight per round")
    p.add_argument("--requests", type=int, default=20_000)
    p.add_argument("--profile", action="store_true")
    p.add_argument(
        "--instructions", action="store_true", help="count instructions per request with callgrind"
    )
    args = p.parse_args()
    if args.streams < 1:
        p.error("--streams is at least 1")
    if args.instructions:
        import callgrind  # beside this script

        flags = ["--streams", str(args.streams)]
        small = 200
        per = callgrind.per_unit(__file__, "--requests", flags, small, small * 6)
        print(
            f"HTTP/2, {args.streams} stream(s) in flight: "
            f"{per:,.0f} instructions per proxied GET (callgrind)"
        )
        return
    us = run(args.streams, args.requests, args.profile)
    print(
        f"HTTP/2, {args.streams} stream(s) in flight: "
        f"{us:.2f} us of Python per proxied GET ({args.requests} requests)"
    )


if __name__ == "__main__":
    main()
