"""The splice over real sockets on 127.0.0.1 under uvloop.

A tiny proxy written with the splice API (accept, peek a few bytes, park the
client, dial, splice) stands between real asyncio clients and real backends
in the same loop. Every test runs under a timeout, with a loop exception
handler that fails the test on any error raised inside a callback.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import uvloop

from edge.tcp.splice import DialError, Pending, Splice, dial_splice, splice

MIB = 1 << 20


def run(main: Callable[[], Awaitable[None]], timeout: float = 30.0) -> None:
    """Run ``main()`` on a fresh uvloop; any exception a callback raised fails the test."""
    errors: list[dict] = []

    async def bounded() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: errors.append(ctx))
        async with asyncio.timeout(timeout):
            await main()

    uvloop.run(bounded())
    assert not errors, f"errors inside loop callbacks: {errors}"


async def wait_until(cond: Callable[[], bool], timeout: float = 5.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"never happened: {what}")
        await asyncio.sleep(0.005)


async def read_all(reader: asyncio.StreamReader, timeout: float = 10.0) -> bytes:
    """Everything until EOF (a reset counts as the end)."""
    chunks = []
    async with asyncio.timeout(timeout):
        while True:
            try:
                chunk = await reader.read(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


# -- the test proxy -------------------------------------------------------------


class TestProxy:
    """Accepts, reads at least ``peek`` bytes, parks the client, dials ``target``, splices."""

    __test__ = False

    def __init__(
        self, target: int, *, peek: int = 0, first: bytes = b"", termination_delay: float = 5.0
    ) -> None:
        self.target = target
        self.peek = peek
        self.first = first
        self.termination_delay = termination_delay
        self.splices: list[Splice] = []
        self.closed: list[Splice] = []
        self.errors: list[BaseException] = []
        self.tasks: set[asyncio.Task] = set()
        self.server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> TestProxy:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: _Peek(self), "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc) -> None:
        for s in self.splices:
            s.abort()
        self.server.close()
        for t in list(self.tasks):
            t.cancel()

    def start(self, transport: asyncio.Transport, peeked: bytes, eof: bool) -> None:
        held = Pending.attach(transport, eof=eof)
        task = asyncio.get_running_loop().create_task(self._dial(held, peeked))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _dial(self, held: Pending, peeked: bytes) -> None:
        try:
            s = await dial_splice(
                held,
                "127.0.0.1",
                self.target,
                first=self.first + peeked,
                termination_delay=self.termination_delay,
                on_close=self.closed.append,
            )
        except DialError as exc:
            self.errors.append(exc)
            held.transport.close()
            return
        self.splices.append(s)


class _Peek(asyncio.Protocol):
    def __init__(self, proxy: TestProxy) -> None:
        self.proxy = proxy
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        if self.proxy.peek == 0:
            self.proxy.start(transport, b"", False)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) >= self.proxy.peek:
            self.proxy.start(self.transport, self.buf, False)

    def eof_received(self) -> bool:
        self.proxy.start(self.transport, self.buf, True)
        return True


# -- backends ---------------------------------------------------------------------


class Backend:
    """A server on port 0 whose connections run ``factory``'s protocol; keeps them."""

    def __init__(self, factory: Callable[[], asyncio.Protocol]) -> None:
        self.factory = factory
        self.conns: list[asyncio.Protocol] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> Backend:
        def make() -> asyncio.Protocol:
            p = self.factory()
            self.conns.append(p)
            return p

        self.server = await asyncio.get_running_loop().create_server(make, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc) -> None:
        for p in self.conns:
            if p.transport is not None:
                p.transport.abort()
        self.server.close()


class Recorder(asyncio.Protocol):
    """Keeps what it receives and how the connection ended; optionally echoes."""

    def __init__(self, *, echo: bool = False, greeting: bytes = b"") -> None:
        self.echo = echo
        self.greeting = greeting
        self.transport: asyncio.Transport | None = None
        self.data = bytearray()
        self.eof = False
        self.lost: asyncio.Future = asyncio.get_running_loop().create_future()

    def connection_made(self, transport) -> None:
        self.transport = transport
        if self.greeting:
            transport.write(self.greeting)

    def data_received(self, data: bytes) -> None:
        self.data += data
        if self.echo:
            self.transport.write(data)

    def eof_received(self) -> bool:
        self.eof = True
        if self.echo:
            self.transport.write_eof()
        return True

    def connection_lost(self, exc) -> None:
        self.transport = None
        if not self.lost.done():
            self.lost.set_result(exc)


def reset(transport: asyncio.BaseTransport) -> None:
    """Close with a TCP RST: SO_LINGER 0 on the socket, then close it."""
    transport.get_extra_info("socket").setsockopt(
        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
    )
    transport.abort()


# -- relaying ---------------------------------------------------------------------


def test_echo_both_ways_and_counters():
    async def main():
        async with Backend(lambda: Recorder(echo=True)) as be, TestProxy(be.port) as px:
            r, w = await asyncio.open_connection("127.0.0.1", px.port)
            for msg in (b"one", b"two" * 1000, b"three" * 100_000):
                w.write(msg)
                assert await r.readexactly(len(msg)) == msg
            w.write_eof()
            assert await read_all(r) == b""
            w.close()
            await wait_until(lambda: px.closed, what="on_close")
            (s,) = px.splices
            assert px.closed == [s]
            total = 3 + 3000 + 500_000
            assert (s.bytes_a_to_b, s.bytes_b_to_a) == (total, total)
            assert s.closed

    run(main)


def test_peeked_bytes_and_first_bytes_go_first_in_order():
    async def main():
        async with (
            Backend(lambda: Recorder(echo=True)) as be,
            TestProxy(be.port, peek=5, first=b"PREFIX|") as px,
        ):
            r, w = await asyncio.open_connection("127.0.0.1", px.port)
            w.write(b"HEL")
            await w.drain()
            await asyncio.sleep(0.05)  # the peek sees "HEL" alone first
            tail = b"".join(b"%06d," % i for i in range(20_000))
            w.write(b"LO ")  # peek complete: the client is parked, dial starts
            w.write(tail)  # arrives while dialing or after the splice
            w.write_eof()
            got = await read_all(r)
            assert got == b"PREFIX|HELLO " + tail
            await wait_until(lambda: px.closed, what="on_close")
            assert px.splices[0].bytes_a_to_b == len(got)

    run(main)


def test_existing_transports_with_leftovers_both_ways():
    """The upgrade case: both transports exist and both have bytes read already."""

    async def main():
        loop = asyncio.get_running_loop()
        async with Backend(lambda: Recorder(echo=True, greeting=b"101 switched|")) as be:
            accepted: asyncio.Future = loop.create_future()

            class Head(asyncio.Protocol):
                def connection_made(self, t):
                    self.t, self.buf = t, b""

                def data_received(self, data):
                    self.buf += data
                    if b"\n" in self.buf and not accepted.done():
                        self.t.pause_reading()
                        accepted.set_result((self.t, self.buf))

            server = await loop.create_server(Head, "127.0.0.1", 0)
            r, w = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
            w.write(b"upgrade please\nrest-from-client|")
            client_t, head = await accepted
            up = Recorder()
            up_t, _ = await loop.create_connection(lambda: up, "127.0.0.1", be.port)
            await wait_until(lambda: bytes(up.data) == b"101 switched|", what="greeting")
            rest = head.split(b"\n", 1)[1]
            done: list[Splice] = []
            splice(client_t, up_t, a_to_b=rest, b_to_a=b"rest-from-upstream|", on_close=done.append)
            w.write(b"live")
            w.write_eof()
            got = await read_all(r)
            # the backend echoes what reached it: the client's rest, then live bytes
            assert got == b"rest-from-upstream|rest-from-client|live"
            await wait_until(lambda: done, what="on_close")
            server.close()

    run(main)


# -- half-close and terminationDelay ---------------------------------------------


class AnswerAfterEOF(Recorder):
    """Reads a request until EOF, then sends a large answer and closes."""

    ANSWER = b"x" * (4 * MIB)

    def eof_received(self) -> bool:
        self.eof = True
        self.transport.write(b"got %d|" % len(self.data) + self.ANSWER)
        self.transport.close()
        return True


def test_client_half_close_still_receives_the_answer():
    async def main():
        async with Backend(AnswerAfterEOF) as be, TestProxy(be.port) as px:
            r, w = await asyncio.open_connection("127.0.0.1", px.port)
            w.write(b"q" * 1000)
            w.write_eof()
            got = await read_all(r)
            assert got == b"got 1000|" + AnswerAfterEOF.ANSWER
            await wait_until(lambda: px.closed, what="on_close")

    run(main)


class SayThenListen(Recorder):
    """Sends a greeting and its EOF at once, then keeps reading until the client's EOF."""

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        transport.write(b"bye for now")
        transport.write_eof()

    def eof_received(self) -> bool:
        self.eof = True
        self.transport.close()
        return True


def test_server_half_close_still_receives_the_client():
    async def main():
        async with Backend(SayThenListen) as be, TestProxy(be.port) as px:
            r, w = await asyncio.open_connection("127.0.0.1", px.port)
            assert await read_all(r) == b"bye for now"  # EOF forwarded to the client
            late = b"late data " * 50_000
            w.write(late)
            w.write_eof()
            (conn,) = be.conns
            await asyncio.wait_for(conn.lost, 10)
            assert bytes(conn.data) == late and conn.eof
            await wait_until(lambda: px.closed, what="on_close")

    run(main)


def test_termination_delay_closes_a_half_open_pair():
    async def main():
        loop = asyncio.get_running_loop()
        async with Backend(Recorder) as be, TestProxy(be.port, termination_delay=0.3) as px:
            r, w = await asyncio.open_connection("127.0.0.1", px.port)
            w.write(b"hello")
            await wait_until(lambda: be.conns and be.conns[0].data == b"hello", what="data")
            start = loop.time()
            w.write_eof()  # the backend never answers nor closes
            await wait_until(lambda: be.conns[0].eof, what="EOF forwarded")
            assert await read_all(r) == b""
            elapsed = loop.time() - start
            assert 0.25 <= elapsed < 5, elapsed
            await wait_until(lambda: px.closed, what="on_close")
            # The backend already had its EOF; its socket on the proxy is gone,
            # so what it writes now is answered by a reset.
            conn = be.conns[0]
            for _ in range(100):
                if conn.lost.done():
                    break
                conn.transport.write(b"too late")
                await asyncio.sleep(0.02)
            assert isinstance(conn.lost.result(), OSError)

    run(main)


def test_negative_termination_delay_waits_for_the_other_side():
    async def main():
        async with Backend(Recorder) as be, TestProxy(be.port, termination_delay=-1) as px:
            r, w = await asyncio.open_connection("127.0.0.1", px.port)
            w.write_eof()
            await wait_until(lambda: be.conns and be.conns[0].eof, what="EOF forwarded")
            await asyncio.sleep(0.5)
            conn = be.conns[0]
            assert conn.transport is not None and not px.closed
            conn.transport.write(b"still here")
            assert await r.readexactly(10) == b"still here"
            conn.transport.close()
            assert await read_all(r) == b""
            await wait_until(lambda: px.closed, what="on_close")

    run(main)


def test_zero_termination_delay_closes_at_the_first_eof():
    async def main():
        async with Backend(Recorder) as be, TestProxy(be.port, termination_delay=0) as px:
            r, w = await asyncio.open_connection("127.0.0.1", px.port)
            w.write(b"last words")
            w.write_eof()
            assert await read_all(r) == b""
            await wait_until(lambda: px.closed, what="on_close")
            await wait_until(lambda: be.conns[0].eof, what="EOF at the backend")
            assert bytes(be.conns[0].data) == b"last words"  # flushed before the close

    run(main)


# -- resets -------------------------------------------------------------------------


def test_client_reset_aborts_the_upstream():
    async def main():
        loop = asyncio.get_running_loop()
        async with Backend(Recorder) as be, TestProxy(be.port, termination_delay=-1) as px:
            sock = socket.socket()
            sock.setblocking(False)
            await loop.sock_connect(sock, ("127.0.0.1", px.port))
            await loop.sock_sendall(sock, b"hi")
            await wait_until(lambda: be.conns and be.conns[0].data == b"hi", what="data")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()  # RST
            conn = be.conns[0]
            await wait_until(lambda: conn.eof or conn.lost.done(), what="upstream closed")
            await wait_until(lambda: px.closed, what="on_close")
            assert len(px.closed) == 1

    run(main)


def test_upstream_reset_aborts_the_client():
    async def main():
        async with Backend(Recorder) as be, TestProxy(be.port, termination_delay=-1) as px:
            r, w = await asyncio.open_connection("127.0.0.1", px.port)
            w.write(b"hi")
            await wait_until(lambda: be.conns and be.conns[0].data == b"hi", what="data")
            reset(be.conns[0].transport)
            assert await read_all(r, timeout=5) == b""
            await wait_until(lambda: px.closed, what="on_close")

    run(main)


# -- server speaks first, dialing ---------------------------------------------------


def test_server_greeting_sent_before_the_splice_is_kept():
    async def main():
        loop = asyncio.get_running_loop()
        greeting = b"220 smtp.test ESMTP ready\r\n"
        async with Backend(lambda: Recorder(echo=True, greeting=greeting)) as be:
            got_client: asyncio.Future = loop.create_future()
            server = await loop.create_server(lambda: _Hold(got_client), "127.0.0.1", 0)
            r, w = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
            client_t = await got_client
            Pending.attach(client_t)
            up_t, pending = await loop.create_connection(Pending, "127.0.0.1", be.port)
            # the greeting lands in the holder long before the splice exists
            await wait_until(lambda: pending.data, what="greeting held")
            s = splice(client_t, up_t)
            assert await r.readexactly(len(greeting)) == greeting
            w.write(b"EHLO me\r\n")
            assert await r.readexactly(9) == b"EHLO me\r\n"
            assert s.bytes_b_to_a == len(greeting) + 9
            s.close()
            server.close()

    run(main)


class _Hold(asyncio.Protocol):
    def __init__(self, fut: asyncio.Future) -> None:
        self.fut = fut

    def connection_made(self, transport) -> None:
        self.fut.set_result(transport)


def test_dial_splice_to_a_server_that_speaks_first():
    async def main():
        greeting = b"SSH-2.0-test\r\n"
        async with (
            Backend(lambda: Recorder(echo=True, greeting=greeting)) as be,
            TestProxy(be.port) as px,
        ):
            for _ in range(20):
                r, w = await asyncio.open_connection("127.0.0.1", px.port)
                assert await r.readexactly(len(greeting)) == greeting
                w.write(b"ping")
                assert await r.readexactly(4) == b"ping"
                w.close()

    run(main)


def test_dial_refused_raises_dial_error_naming_the_address():
    async def main():
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()  # nothing listens there now
        async with TestProxy(port) as px:
            r, _w = await asyncio.open_connection("127.0.0.1", px.port)
            assert await read_all(r) == b""
            (err,) = px.errors
            assert isinstance(err, DialError) and f"127.0.0.1:{port}" in str(err)

    run(main)


def test_dial_timeout_raises_dial_error():
    async def main():
        loop = asyncio.get_running_loop()
        # A listener that never accepts: once its queue is full, SYNs are dropped.
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(0)
        port = lsock.getsockname()[1]
        fillers = []
        got_client: asyncio.Future = loop.create_future()
        server = await loop.create_server(lambda: _Hold(got_client), "127.0.0.1", 0)
        try:
            for _ in range(8):
                f = socket.socket()
                f.setblocking(False)
                fillers.append(f)
                try:
                    await asyncio.wait_for(loop.sock_connect(f, ("127.0.0.1", port)), 0.2)
                except TimeoutError:
                    break
            else:
                pytest.skip("the kernel kept accepting connections into a full queue")
            _r, _w = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
            client_t = await got_client
            t0 = loop.time()
            with pytest.raises(
                DialError, match=rf"127\.0\.0\.1:{port}: no connection within 0\.3s"
            ):
                await dial_splice(client_t, "127.0.0.1", port, timeout=0.3)
            assert 0.25 <= loop.time() - t0 < 5
            assert isinstance(client_t.get_protocol(), Pending)  # left parked for the caller
            client_t.close()
        finally:
            server.close()
            for f in fillers:
                f.close()
            lsock.close()

    run(main)


def test_client_lost_while_parked_closes_the_upstream():
    async def main():
        loop = asyncio.get_running_loop()
        async with Backend(Recorder) as be:
            got_client: asyncio.Future = loop.create_future()
            server = await loop.create_server(lambda: _Hold(got_client), "127.0.0.1", 0)
            sock = socket.socket()
            sock.setblocking(False)
            await loop.sock_connect(sock, ("127.0.0.1", server.sockets[0].getsockname()[1]))
            client_t = await got_client
            pending = Pending.attach(client_t)
            client_t.abort()  # the client side is gone before the dial finished
            await wait_until(lambda: pending.lost, what="loss seen by the holder")
            up_t, _ = await loop.create_connection(Pending, "127.0.0.1", be.port)
            done: list[Splice] = []
            splice(pending, up_t, a_to_b=b"peeked", on_close=done.append)
            await wait_until(lambda: be.conns[0].eof, what="upstream closed")
            assert bytes(be.conns[0].data) == b"peeked"
            await wait_until(lambda: done, what="on_close")
            await asyncio.sleep(0.05)
            assert len(done) == 1
            sock.close()
            server.close()

    run(main)


# -- flow control -----------------------------------------------------------------------


def rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


class Source(asyncio.Protocol):
    """Sends ``total`` bytes as fast as its transport accepts them, then closes."""

    CHUNK = b"s" * (256 * 1024)

    def __init__(self, total: int) -> None:
        self.left = total
        self.transport: asyncio.Transport | None = None
        self.lost: asyncio.Future = asyncio.get_running_loop().create_future()
        self.paused = False

    def connection_made(self, transport) -> None:
        self.transport = transport
        self._fill()

    def _fill(self) -> None:
        while self.left > 0 and not self.paused:
            chunk = self.CHUNK[: self.left]
            self.left -= len(chunk)
            self.transport.write(chunk)
        if self.left <= 0:
            self.transport.close()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._fill()

    def data_received(self, data: bytes) -> None:
        pass

    def connection_lost(self, exc) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)


class SlowSink(asyncio.Protocol):
    """Reads at ``rate`` bytes per second by pausing its transport; counts."""

    def __init__(self, rate: float, on_read: Callable[[], None]) -> None:
        self.rate = rate
        self.on_read = on_read
        self.got = 0
        self.start = 0.0
        self.done: asyncio.Future = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.start = time.monotonic()

    def data_received(self, data: bytes) -> None:
        self.got += len(data)
        self.on_read()
        ahead = self.got / self.rate - (time.monotonic() - self.start)
        if ahead > 0:
            self.transport.pause_reading()
            asyncio.get_running_loop().call_later(ahead, self.transport.resume_reading)

    def eof_received(self) -> None:
        if not self.done.done():
            self.done.set_result(self.got)

    def connection_lost(self, exc) -> None:
        if not self.done.done():
            self.done.set_result(self.got)


def flow(total: int, rate: float, direction: str, timeout: float) -> None:
    """``total`` bytes through the splice to a reader at ``rate``; the proxy's buffers stay bounded."""

    async def main():
        loop = asyncio.get_running_loop()
        peak = {"buffer": 0, "rss": 0}
        px_holder: list[TestProxy] = []

        def sample() -> None:
            for s in px_holder[0].splices if px_holder else ():
                size = s.a.transport.get_write_buffer_size() + s.b.transport.get_write_buffer_size()
                peak["buffer"] = max(peak["buffer"], size)

        base = rss()
        if direction == "download":  # backend sends, client reads slowly
            sink_holder: list[SlowSink] = []
            async with Backend(lambda: Source(total)) as be, TestProxy(be.port) as px:
                px_holder.append(px)
                _t, sink = await loop.create_connection(
                    lambda: SlowSink(rate, sample), "127.0.0.1", px.port
                )
                sink_holder.append(sink)
                got = await asyncio.wait_for(sink.done, timeout)
                peak["rss"] = rss()
        else:  # client sends, backend reads slowly
            async with Backend(lambda: SlowSink(rate, sample)) as be, TestProxy(be.port) as px:
                px_holder.append(px)
                await loop.create_connection(lambda: Source(total), "127.0.0.1", px.port)
                await wait_until(lambda: be.conns, what="backend connection")
                got = await asyncio.wait_for(be.conns[0].done, timeout)
                peak["rss"] = rss()
        assert got == total
        # Without flow control the proxy would buffer most of the transfer.
        assert peak["buffer"] < 2 * MIB, peak
        assert peak["rss"] - base < 64 * MIB, (peak, base)

    run(main, timeout=timeout + 30)


@pytest.mark.parametrize("direction", ["download", "upload"])
def test_flow_control_bounds_the_buffers(direction):
    flow(32 * MIB, 16 * MIB, direction, timeout=30)


@pytest.mark.slow
@pytest.mark.parametrize("direction", ["download", "upload"])
def test_flow_control_256_mib_to_a_slow_reader(direction):
    flow(256 * MIB, 64 * MIB, direction, timeout=60)


def test_transport_handed_over_while_paused_stays_bounded():
    """A transport whose previous protocol was told pause_writing keeps flow control."""

    async def main():
        loop = asyncio.get_running_loop()
        backlog = 16 * MIB
        total = 32 * MIB
        async with Backend(lambda: Source(total)) as be:
            got_client: asyncio.Future = loop.create_future()
            server = await loop.create_server(lambda: _Hold(got_client), "127.0.0.1", 0)
            r, w = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
            client_t = await got_client
            client_t.write(b"b" * backlog)  # the client is not reading: _Hold is paused
            initial = client_t.get_write_buffer_size()
            assert initial > 1 * MIB  # past the high-water mark: pause_writing went to _Hold
            # The upstream is read actively up to the splice (as in the upgrade case).
            up_t, up = await loop.create_connection(Recorder, "127.0.0.1", be.port)
            splice(client_t, up_t, b_to_a=bytes(up.data))
            peak = got = 0
            start = time.monotonic()
            async with asyncio.timeout(20):
                while True:
                    chunk = await r.read(65536)
                    if not chunk:
                        break
                    got += len(chunk)
                    peak = max(peak, client_t.get_write_buffer_size())
                    ahead = got / (32 * MIB) - (time.monotonic() - start)
                    if ahead > 0:
                        await asyncio.sleep(ahead)
            assert got == backlog + total
            # Without the hand-over fix the buffer takes most of the 32 MiB.
            assert peak < initial + 1 * MIB, (peak, initial)
            w.close()
            server.close()

    run(main)
