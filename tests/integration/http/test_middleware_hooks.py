"""The exchange's middleware hooks over real sockets, under both codecs: waiting
steps (``request_async``), response filters, the outcome ``Forward.on_end`` reads,
the TLS client certificate and a service's request tee.

The middlewares here are purpose-built (no configuration names them), so edge's
HTTP server runs in the test's own loop: a real listening socket serving
:class:`HTTPConnection` with the routers a configuration builds, the route's
pipeline replaced by the test's; the upstream is a scripted asyncio server and the
client a socket. Every wait is bounded by ``TIMEOUT``.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable

import msgspec
import pytest
import uvloop

from edge.config.dynamic import Configuration
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.http.codec.parsers import parser_classes
from edge.http.middlewares import (
    Answer,
    BodyFilter,
    BodyTooLarge,
    Forward,
    Middleware,
    Pipeline,
    Reply,
)
from edge.http.server.connection import HTTPConnection, HTTPContext
from edge.router.factory import build_http_routers
from edge.router.http import Route
from edge.transports import TransportRegistry
from tests.fixtures.tls.pki import PKI

TIMEOUT = 10.0
BIG = 32 << 20  # a body larger than what loopback sockets buffer
CODECS = ["httptools", "h11"]

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_head(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT)


async def read_response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """(head, body) of one response: Content-Length or chunked (decoded)."""
    head = await read_head(reader)
    lower = head.lower()
    if b"transfer-encoding: chunked" in lower:
        body = b""
        while True:
            size = int((await asyncio.wait_for(reader.readline(), TIMEOUT)).strip(), 16)
            chunk = await asyncio.wait_for(reader.readexactly(size + 2), TIMEOUT)
            if size == 0:
                return head, body
            body += chunk[:-2]
    length = 0
    for line in lower.split(b"\r\n"):
        if line.startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head, await asyncio.wait_for(reader.readexactly(length), TIMEOUT)


class Upstream:
    """A scripted upstream: each connection runs ``handler``; requests are recorded."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.heads: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self.handler, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


def ok(body: bytes = b"hello", extra: bytes = b"") -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await read_head(reader)
                length = 0
                for line in head.lower().split(b"\r\n"):
                    if line.startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                if length:
                    await reader.readexactly(length)
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)
                )
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    return handler


async def serve(
    codec: str,
    upstream_port: int,
    steps,
    ssl_context=None,
    service=None,
    pages_port: int | None = None,
):
    """Edge's HTTP server on a port of its own, its route to the upstream with ``steps``.

    ``pages_port``: a second service, ``pages`` (routed by Host ``pages.test``) on that
    port; ``steps`` is then a function of its balancer (errors middlewares name it)."""
    loop = asyncio.get_running_loop()
    http: dict = {
        "routers": {"r": {"rule": "Host(`a.test`)", "service": "s"}},
        "services": {
            "s": {"loadBalancer": {"servers": [{"url": f"http://127.0.0.1:{upstream_port}"}]}}
        },
    }
    if pages_port is not None:
        http["routers"]["p"] = {"rule": "Host(`pages.test`)", "service": "pages"}
        http["services"]["pages"] = {
            "loadBalancer": {"servers": [{"url": f"http://127.0.0.1:{pages_port}"}]}
        }
    conf = msgspec.convert({"http": http}, Configuration)
    runtime = build_runtime(merge({"file": conf}), {"web": "tcp"})
    transports = TransportRegistry(loop)
    transports.update(runtime.servers_transports)
    router = build_http_routers(runtime, transports, ["web"])["web"]
    route = router.by_host["a.test"]
    if pages_port is not None:
        steps = steps(router.by_host["pages.test"].service)
    router.by_host["a.test"] = Route(route.name, service or route.service, Pipeline(steps))
    request_parser, response_parser = parser_classes(codec)
    ctx = HTTPContext(
        name="web",
        port=0,
        loop=loop,
        request_parser=request_parser,
        response_parser=response_parser,
        scheme=b"https" if ssl_context else b"http",
    )
    ctx.router = router
    server = await loop.create_server(lambda: HTTPConnection(ctx), "127.0.0.1", 0, ssl=ssl_context)
    return server, server.sockets[0].getsockname()[1], route.service


def run(coro) -> None:
    loop = uvloop.new_event_loop()
    try:
        loop.run_until_complete(asyncio.wait_for(coro, 4 * TIMEOUT))
    finally:
        loop.close()


GET = b"GET /x HTTP/1.1\r\nHost: a.test\r\n\r\n"


# -- waiting steps ----------------------------------------------------------------------


class Gate(Middleware):
    """Waits for its event, then lets through, answers, fails or ends with the client."""

    __slots__ = ("cancelled", "ended", "entered", "event", "outcome")

    def __init__(self, name: str, outcome: str = "pass") -> None:
        super().__init__(name)
        self.event = asyncio.Event()
        self.entered = asyncio.Event()
        self.outcome = outcome
        self.cancelled = 0
        self.ended = 0

    async def request_async(self, fwd: Forward) -> Answer | None:
        fwd.on_end(self.end)
        self.entered.set()
        try:
            await self.event.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if self.outcome == "answer":
            return Answer(401, body=b"denied")
        if self.outcome == "fail":
            raise RuntimeError("the auth server said nonsense")
        fwd.set_header(b"X-Gate", b"passed")
        return None

    def end(self) -> None:
        self.ended += 1


class Tag(Middleware):
    """A synchronous step after the waiting one: it runs only once the wait is over."""

    __slots__ = ("seen",)

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.seen = 0

    def request(self, fwd: Forward) -> Answer | None:
        self.seen += 1
        fwd.set_header(b"X-Tag", b"1")
        return None


@pytest.mark.parametrize("codec", CODECS)
def test_a_waiting_step_holds_the_request_and_its_body_until_it_decides(codec):
    """Nothing reaches the upstream while the step waits, 1 MiB of body included
    (edge stops reading the client); the steps after it run once it lets through."""
    received: list[bytes] = []

    async def handler(reader, writer):
        head = await read_head(reader)
        received.append(head)
        body = await asyncio.wait_for(reader.readexactly(BIG), TIMEOUT)
        received.append(body)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    async def main():
        up = Upstream(handler)
        port_up = await up.start()
        gate, tag = Gate("gate"), Tag("tag")
        server, port, _ = await serve(codec, port_up, [gate, tag])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /x HTTP/1.1\r\nHost: a.test\r\nContent-Length: %d\r\n\r\n" % (BIG))
        writer.write(b"b" * (BIG))
        await asyncio.wait_for(gate.entered.wait(), TIMEOUT)
        await asyncio.sleep(0.3)
        assert received == [] and tag.seen == 0
        # The client could not hand the whole body to the kernel: edge paused reading.
        assert writer.transport.get_write_buffer_size() > 0
        gate.event.set()
        head, body = await read_response(reader)
        assert head.startswith(b"HTTP/1.1 200") and body == b"ok"
        assert b"x-gate: passed" in received[0].lower() and b"x-tag: 1" in received[0].lower()
        assert received[1] == b"b" * (BIG)
        assert tag.seen == 1 and gate.ended == 1
        writer.close()
        server.close()
        up.close()

    run(main())


@pytest.mark.parametrize("codec", CODECS)
def test_a_waiting_step_answers_or_fails_with_an_answer(codec):
    async def main():
        up = Upstream(ok())
        port_up = await up.start()
        for outcome, status, body in (("answer", b"401", b"denied"), ("fail", b"500", None)):
            gate, tag = Gate("gate", outcome), Tag("tag")
            gate.event.set()
            server, port, _ = await serve(codec, port_up, [gate, tag])
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(GET)
            head, got = await read_response(reader)
            assert head.startswith(b"HTTP/1.1 " + status), head
            if body is not None:
                assert got == body
            assert tag.seen == 0 and gate.ended == 1
            # The connection serves the next request.
            writer.write(GET)
            head, _ = await read_response(reader)
            assert head.startswith(b"HTTP/1.1 " + status)
            writer.close()
            server.close()
        up.close()

    run(main())


class BodyReader(Middleware):
    """A waiting step that reads the request body (Forward.read_body) up to ``limit``
    bytes: it says its size upstream, or answers 413 past the limit."""

    __slots__ = ("bodies", "limit")

    def __init__(self, name: str, limit: int) -> None:
        super().__init__(name)
        self.limit = limit
        self.bodies: list[bytes] = []

    async def request_async(self, fwd: Forward) -> Answer | None:
        try:
            body = await fwd.read_body(self.limit)
        except BodyTooLarge:
            return Answer(413, body=b"too large")
        self.bodies.append(body)
        fwd.set_header(b"X-Read", b"%d" % len(body))
        return None


def echo() -> Handler:
    """An upstream answering with the request's X-Read and body (Content-Length or
    chunked, de-chunked), as it received them."""

    async def handler(reader, writer):
        try:
            while True:
                head = await read_head(reader)
                lower = head.lower()
                body = b""
                if b"transfer-encoding: chunked" in lower:
                    while True:
                        size = int((await asyncio.wait_for(reader.readline(), TIMEOUT)), 16)
                        data = await asyncio.wait_for(reader.readexactly(size + 2), TIMEOUT)
                        if not size:
                            break
                        body += data[:-2]
                else:
                    for line in lower.split(b"\r\n"):
                        if line.startswith(b"content-length:"):
                            length = int(line.split(b":")[1])
                            body = await asyncio.wait_for(reader.readexactly(length), TIMEOUT)
                read = [ln for ln in lower.split(b"\r\n") if ln.startswith(b"x-read:")]
                out = b"%s|%s" % (read[0] if read else b"-", body)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(out), out))
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    return handler


@pytest.mark.parametrize("codec", CODECS)
def test_a_waiting_step_reads_the_body_and_the_upstream_gets_it_whole(codec):
    """Forward.read_body: the step gets the payload (chunked framing removed) of a body
    still coming when it asks, past the high-water mark (256 KiB); the upstream then
    gets the same body, framed as it came. Past the step's limit: its answer; a step
    that is not a waiting one cannot read the body."""
    big = bytes(range(256)) * 1024

    async def main():
        up = Upstream(echo())
        port_up = await up.start()
        step = BodyReader("reader", 300_000)
        server, port, _ = await serve(codec, port_up, [step, Tag("tag")])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        # Content-Length, the body's second half sent once the step waits for it.
        writer.write(b"POST /x HTTP/1.1\r\nHost: a.test\r\nContent-Length: %d\r\n\r\n" % len(big))
        writer.write(big[:1000])
        await asyncio.sleep(0.2)
        writer.write(big[1000:])
        head, body = await read_response(reader)
        assert head.startswith(b"HTTP/1.1 200") and body == b"x-read: %d|%s" % (len(big), big)
        # Chunked, in pieces.
        writer.write(b"POST /x HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n")
        for i in range(0, len(big), 50_000):
            piece = big[i : i + 50_000]
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await asyncio.sleep(0.01)
        writer.write(b"0\r\n\r\n")
        head, body = await read_response(reader)
        assert head.startswith(b"HTTP/1.1 200") and body == b"x-read: %d|%s" % (len(big), big)
        assert step.bodies == [big, big]
        # Over the limit: the step's answer (the connection then closes: a chunked body).
        step.limit = 1000
        writer.write(b"POST /x HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n")
        writer.write(b"%x\r\n%s\r\n" % (len(big), big))
        head, body = await read_response(reader)
        assert head.startswith(b"HTTP/1.1 413") and body == b"too large"
        writer.close()
        with pytest.raises(RuntimeError, match="read_body is for a waiting step"):
            await Forward("a.test", b"/", b"").read_body()
        server.close()
        up.close()

    run(main())


@pytest.mark.parametrize("codec", CODECS)
def test_a_client_leaving_cancels_the_wait(codec):
    async def main():
        up = Upstream(ok())
        port_up = await up.start()
        gate = Gate("gate")
        server, port, _ = await serve(codec, port_up, [gate])
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(GET)
        await asyncio.wait_for(gate.entered.wait(), TIMEOUT)
        writer.transport.abort()
        for _ in range(100):
            if gate.cancelled:
                break
            await asyncio.sleep(0.02)
        assert gate.cancelled == 1 and gate.ended == 1
        server.close()
        up.close()

    run(main())


# -- response filters -------------------------------------------------------------------


class Upper(Middleware):
    """Upper-cases the body chunk by chunk, ends it with a mark, says so in a header."""

    __slots__ = ("chunks",)

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.chunks = 0

    def response(self, fwd: Forward, reply: Reply) -> BodyFilter | None:
        reply.set(b"X-Upper", reply.get(b"X-Inner") or b"yes")
        reply.remove(b"X-Drop")
        reply.set_length(None)  # the mark changes the length: chunked
        outer = self

        class Filter(BodyFilter):
            def data(self, chunk: bytes) -> bytes:
                outer.chunks += 1
                return chunk.upper()

            def end(self) -> bytes:
                return b"|END"

        return Filter()


class Inner(Middleware):
    """The inner filter (later in the route): sees the upstream's response first."""

    __slots__ = ()

    def response(self, fwd: Forward, reply: Reply) -> BodyFilter | None:
        reply.add(b"X-Inner", b"first")
        reply.set_status(203)

        class Filter(BodyFilter):
            def data(self, chunk: bytes) -> bytes:
                return chunk.replace(b"a", b"[a]")

            def end(self) -> bytes:
                return b"-tail-a"

        return Filter()


def streamed(parts: int, bodiless: bool = False) -> Handler:
    """A chunked response in ``parts`` writes, a pause between them (or a 204/304/HEAD)."""

    async def handler(reader, writer):
        try:
            while True:
                head = await read_head(reader)
                if bodiless or head.startswith(b"HEAD"):
                    status = b"204 No Content" if b"/204" in head else b"304 Not Modified"
                    if head.startswith(b"HEAD"):
                        status = b"200 OK"
                    writer.write(
                        b"HTTP/1.1 %s\r\nX-Drop: 1\r\nContent-Length: 0\r\n\r\n" % status
                        if not head.startswith(b"HEAD")
                        else b"HTTP/1.1 200 OK\r\nX-Drop: 1\r\nContent-Length: 9\r\n\r\n"
                    )
                    continue
                writer.write(b"HTTP/1.1 200 OK\r\nX-Drop: 1\r\nTransfer-Encoding: chunked\r\n\r\n")
                for i in range(parts):
                    writer.write(b"%x\r\nabc%d\r\n" % (4, i))
                    await writer.drain()
                    await asyncio.sleep(0.02)
                writer.write(b"0\r\n\r\n")
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    return handler


@pytest.mark.parametrize("codec", CODECS)
def test_response_filters_change_the_head_and_stream_the_body(codec):
    async def main():
        up = Upstream(streamed(5))
        port_up = await up.start()
        upper = Upper("upper")
        server, port, _ = await serve(codec, port_up, [upper, Inner("inner")])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(2):  # and again on the same connection
            writer.write(GET)
            head, body = await read_response(reader)
            lines = head.lower().split(b"\r\n")
            assert lines[0].startswith(b"http/1.1 203")
            assert b"x-upper: first" in lines and b"x-inner: first" in lines
            assert not any(line.startswith(b"x-drop") for line in lines)
            assert b"transfer-encoding: chunked" in lines
            expected = (
                b"".join(b"[A]BC%d" % i for i in range(5)) + b"-TAIL-A|END"
            )  # the inner end passes the outer filter only
            assert body == expected
        assert upper.chunks >= 10  # chunk by chunk, not the body at once
        writer.close()
        server.close()
        up.close()

    run(main())


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("request_line", [b"HEAD /x", b"GET /204", b"GET /304"])
def test_response_filters_see_bodiless_heads_and_send_no_body(codec, request_line):
    """A response without a body (to a HEAD, a 204, a 304) goes through the filters'
    heads (Upper's header set, X-Drop removed) with ``reply.bodiless``; what the
    returned BodyFilter's end emits is dropped: the next response on the connection
    comes right after the head. A HEAD's Content-Length stays as the upstream sent it."""
    seen: list[bool] = []

    class Bodiless(Middleware):
        __slots__ = ()

        def response(self, fwd: Forward, reply: Reply) -> BodyFilter | None:
            seen.append(reply.bodiless)
            return None

    async def main():
        up = Upstream(streamed(1, bodiless=True))
        port_up = await up.start()
        server, port, _ = await serve(codec, port_up, [Upper("upper"), Bodiless("b")])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(2):  # the second response follows the first's head alone
            writer.write(request_line + b" HTTP/1.1\r\nHost: a.test\r\n\r\n")
            head = (await read_head(reader)).lower()
            assert head.startswith(b"http/1.1 "), head  # nothing before it
            assert b"x-upper: yes" in head and b"x-drop" not in head, head
            assert b"transfer-encoding" not in head
            if request_line.startswith(b"HEAD"):
                assert b"content-length: 9" in head
        assert seen == [True, True]
        writer.close()
        server.close()
        up.close()

    run(main())


# -- the outcome --------------------------------------------------------------------------


class Outcome(Middleware):
    __slots__ = ("seen",)

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.seen: list[tuple[int, bool, float]] = []

    def request(self, fwd: Forward) -> Answer | None:
        fwd.on_end(
            lambda: self.seen.append((fwd.status, fwd.network_error, fwd.elapsed)), timed=True
        )
        return None


class Refuse(Middleware):
    __slots__ = ()

    def request(self, fwd: Forward) -> Answer | None:
        return Answer(429)


@pytest.mark.parametrize("codec", CODECS)
def test_the_outcome_says_status_network_failure_and_time_to_the_head(codec):
    async def slow(reader, writer):
        head = await read_head(reader)
        if b"/slow" in head:
            await asyncio.sleep(0.25)
        if b"/cut" in head:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
            await writer.drain()
            writer.transport.abort()
            return
        writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def main():
        up = Upstream(slow)
        port_up = await up.start()
        outcome = Outcome("outcome")
        server, port, _ = await serve(codec, port_up, [outcome])
        for path in (b"/slow", b"/fast", b"/cut"):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET %s HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n" % path)
            await asyncio.wait_for(reader.read(), TIMEOUT)
            writer.close()
        for _ in range(100):
            if len(outcome.seen) == 3:
                break
            await asyncio.sleep(0.02)
        (s1, e1, t1), (s2, e2, t2), (s3, e3, t3) = outcome.seen
        assert (s1, e1) == (404, False) and 0.25 <= t1 < 5
        assert (s2, e2) == (404, False) and 0 <= t2 < t1
        assert (s3, e3) == (200, True) and t3 >= 0
        server.close()
        up.close()
        # A refused connection: 502, a network failure; edge's own answer: its status.
        outcome.seen.clear()
        server, port, _ = await serve(codec, port_up, [outcome])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(GET)
        head = await read_head(reader)
        assert head.startswith(b"HTTP/1.1 502")
        writer.close()
        server.close()
        server, port, _ = await serve(codec, port_up, [outcome, Refuse("refuse")])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(GET)
        head = await read_head(reader)
        assert head.startswith(b"HTTP/1.1 429")
        writer.close()
        server.close()
        assert [(s, e) for s, e, _ in outcome.seen] == [(502, True), (429, False)]

    run(main())


# -- the client certificate -------------------------------------------------------------


class Certs(Middleware):
    __slots__ = ("seen",)

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.seen: list[list[bytes]] = []

    def request(self, fwd: Forward) -> Answer | None:
        self.seen.append(fwd.client_certs())
        return None


def test_a_step_reads_the_tls_client_certificate(tmp_path):
    pki = PKI()
    server_pair = pki.issue("a.test")
    client_pair = pki.issue(cn="client-1", client=True)
    crt, key = server_pair.write(tmp_path, "server")
    ccrt, ckey = client_pair.write(tmp_path, "client")
    ca = pki.write_ca(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(crt, key)
    server_ctx.load_verify_locations(ca)
    server_ctx.verify_mode = ssl.CERT_OPTIONAL

    async def main():
        up = Upstream(ok())
        port_up = await up.start()
        certs = Certs("certs")
        server, port, _ = await serve("httptools", port_up, [certs], ssl_context=server_ctx)
        for with_cert in (True, False):
            client_ctx = ssl.create_default_context(cafile=ca)
            if with_cert:
                client_ctx.load_cert_chain(ccrt, ckey)
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client_ctx, server_hostname="a.test"
            )
            writer.write(GET)
            head, _ = await read_response(reader)
            assert head.startswith(b"HTTP/1.1 200")
            writer.close()
        from cryptography.hazmat.primitives.serialization import Encoding

        # As sent: the leaf, then the issuer the client's OpenSSL added from its store.
        assert certs.seen[0] == [
            client_pair.cert.public_bytes(Encoding.DER),
            pki.cert.public_bytes(Encoding.DER),
        ]
        assert certs.seen[1] == []
        server.close()
        up.close()

    run(main())


@pytest.mark.parametrize("codec", CODECS)
def test_client_certs_is_empty_without_tls(codec):
    async def main():
        up = Upstream(ok())
        port_up = await up.start()
        certs = Certs("certs")
        server, port, _ = await serve(codec, port_up, [certs])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(GET)
        await read_response(reader)
        assert certs.seen == [[]]
        writer.close()
        server.close()
        up.close()

    run(main())


# -- a service's request tee ---------------------------------------------------------------


class Copy:
    def __init__(self, head: bytes) -> None:
        self.head = head
        self.chunks: list[bytes] = []
        self.state = "open"

    def body(self, data: bytes) -> None:
        self.chunks.append(data)

    def end(self) -> None:
        self.state = "ended"

    def abort(self) -> None:
        self.state = "aborted"


class Teeing:
    """The route's service with a tee (what a mirroring service adds)."""

    def __init__(self, service) -> None:
        self._service = service
        self.copies: list[Copy] = []

    def __getattr__(self, name: str):
        return getattr(self._service, name)

    def tee(self, head, up_head: bytes) -> Copy:
        copy = Copy(up_head)
        self.copies.append(copy)
        return copy


@pytest.mark.parametrize("codec", CODECS)
def test_a_service_tee_gets_the_forwarded_head_and_each_body_chunk(codec):
    async def main():
        up = Upstream(ok())
        port_up = await up.start()
        server, port, service = await serve(codec, port_up, [])
        server.close()
        teeing = Teeing(service)
        server, port, _ = await serve(codec, port_up, [], service=teeing)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        # Content-Length, then chunked.
        writer.write(b"POST /up HTTP/1.1\r\nHost: a.test\r\nContent-Length: 6\r\n\r\nabc")
        await asyncio.sleep(0.05)
        writer.write(b"def")
        head, _ = await read_response(reader)
        assert head.startswith(b"HTTP/1.1 200")
        writer.write(
            b"POST /up2 HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3\r\nxyz\r\n2\r\nuv\r\n0\r\n\r\n"
        )
        await read_response(reader)
        first, second = teeing.copies
        assert first.head.startswith(b"POST /up HTTP/1.1\r\n")
        assert b"x-forwarded-for: 127.0.0.1" in first.head.lower()
        assert b"".join(first.chunks) == b"abcdef" and first.state == "ended"
        assert b"".join(second.chunks) == b"xyzuv" and second.state == "ended"
        # A client leaving mid-body aborts the copy.
        writer.write(b"POST /up3 HTTP/1.1\r\nHost: a.test\r\nContent-Length: 100\r\n\r\nab")
        for _ in range(100):
            if len(teeing.copies) == 3 and teeing.copies[2].chunks:
                break
            await asyncio.sleep(0.02)
        writer.transport.abort()
        for _ in range(100):
            if teeing.copies[2].state != "open":
                break
            await asyncio.sleep(0.02)
        assert teeing.copies[2].state == "aborted"
        server.close()
        up.close()

    run(main())


def test_the_hooks_are_found_once_per_pipeline():
    """A pipeline knows which steps wait and which filter; none of either costs nothing."""
    gate, tag, upper = Gate("gate"), Tag("tag"), Upper("upper")
    pipeline = Pipeline([tag, gate, upper])
    assert pipeline.steps == (tag, gate) and pipeline.waits == (False, True)
    assert pipeline.responders == (upper,) and not pipeline.empty
    plain = Pipeline([tag])
    assert plain.waits is None and plain.responders == () and plain.forwards
    only_filter = Pipeline([upper])
    assert only_filter.steps == () and only_filter.forwards and not only_filter.empty
    assert Pipeline([]).empty and not Pipeline([]).forwards
