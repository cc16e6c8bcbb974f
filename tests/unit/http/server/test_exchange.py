"""The express path (quick parses, then straight through) against the general path.

The same exchanges go through a client connection three times: as edge runs
(httptools, express path on), with the server's express path off, and under
the h11 codec, which has no quick parse at all. What reaches the upstream and the
client must be the same bytes, exchange after exchange, and the connection must
end in the same state. Real protocol objects, routers and pools; transports
only record what is written. The wiring is ``loadtest/bench_hotpath.py``'s, so
the benchmark measures what is tested here.
"""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from edge.http.middlewares import Answer, Middleware, Pipeline
from edge.http.server.exchange import Exchange
from edge.router.http import Route
from loadtest.bench_hotpath import setup
from tests.unit.http.server.transport import Recorder


def run(
    exchanges: list[tuple[bytes, bytes]],
    express: bool,
    forbid_general: bool = False,
    codec: str = "httptools",
    ahead: bool = False,
) -> tuple[list[bytes], list[bytes], bool]:
    """(bytes sent upstream per exchange, bytes sent to the client per exchange, client closed).

    ``forbid_general``: the general path's entry points (``_begin``, ``upstream_head``)
    and parsers' llhttp are taken away, so any use of them fails. ``ahead``: each
    request after the first arrives before the response to the one before it
    (pipelining); the bytes are then counted over the whole run.
    """
    loop = uvloop.new_event_loop()
    general_path = (Exchange.begin, Exchange.upstream_head)
    try:
        client, upstream = setup(
            loop, codec, host="a.test", client_ip="10.0.0.7", transport=Recorder
        )
        if not express:
            client.quick = None
            upstream.quick = None
        if forbid_general:

            def general(*args):
                raise AssertionError("the general path ran")

            Exchange.begin = Exchange.upstream_head = general
            client.parser._feed = None
            upstream.parser._parser = None
        sent_up, sent_client = [], []
        if ahead:
            client.data_received(exchanges[0][0])
            for i, (_, response) in enumerate(exchanges):
                if i + 1 < len(exchanges):
                    client.data_received(exchanges[i + 1][0])
                upstream.data_received(response)
            return (
                [bytes(upstream.transport.data)],
                [bytes(client.transport.data)],
                client.transport.closing,
            )
        for request, response in exchanges:
            up_before, client_before = len(upstream.transport.data), len(client.transport.data)
            client.data_received(request)
            assert client.ex.upstream is upstream, "the pooled connection serves every exchange"
            upstream.data_received(response)
            sent_up.append(bytes(upstream.transport.data[up_before:]))
            sent_client.append(bytes(client.transport.data[client_before:]))
            if client.transport.closing:
                break
        return sent_up, sent_client, client.transport.closing
    finally:
        Exchange.begin, Exchange.upstream_head = general_path
        loop.close()


OK = b"HTTP/1.1 200 OK\r\nServer: t\r\nContent-Length: 5\r\n\r\nhello"


OK_KEEP = b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 5\r\n\r\nhello"


GET = b"GET /x?y=1 HTTP/1.1\r\nHost: a.test\r\nUser-Agent: t\r\n\r\n"


CASES = {
    "plain": [(GET, OK)] * 3,
    "keep-alive both ways": [
        (b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: keep-alive\r\n\r\n", OK_KEEP)
    ]
    * 3,
    "client closes": [
        (GET, OK),
        (b"GET /last HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n", OK_KEEP),
        (GET, OK),
    ],
    "upstream closes": [
        (GET, b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    ],
    "http/1.0": [(b"GET / HTTP/1.0\r\nHost: a.test\r\nConnection: keep-alive\r\n\r\n", OK_KEEP)] * 2
    + [(b"GET / HTTP/1.0\r\nHost: a.test\r\n\r\n", OK)],
    "head and an empty post": [
        (
            b"HEAD / HTTP/1.1\r\nHost: a.test\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
        ),
        (b"POST /p HTTP/1.1\r\nHost: A.Test:8080\r\n\r\n", OK),
    ],
    "heads that change": [
        (GET, OK),
        (GET.replace(b"t\r\n\r\n", b"u\r\n\r\n"), OK.replace(b"Server: t", b"Server: u")),
        (
            b"GET /other HTTP/1.1\r\nHost: a.test\r\nUser-Agent: u\r\n\r\n",
            OK.replace(b"hello", b"world"),
        ),
        (GET, b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\nX: 1\r\n\r\nok"),
    ],
    "forwarded headers from the client": [
        (b"GET / HTTP/1.1\r\nHost: a.test\r\nX-Forwarded-For: 1.2.3.4\r\n\r\n", OK)
    ],
    "not quick: chunked response": [
        (GET, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
        (GET, OK),
    ],
}


@pytest.mark.parametrize("exchanges", CASES.values(), ids=CASES.keys())
def test_express_path_sends_what_the_general_path_sends(exchanges):
    express = run(exchanges, express=True)
    general = run(exchanges, express=False)
    strict = run(exchanges, express=False, codec="h11")  # no quick parse anywhere
    assert express == general == strict
    up, client, _ = express
    assert all(b"X-Forwarded-For: 10.0.0.7\r\n" in sent for sent in up)
    assert all(sent.startswith(b"HTTP/1.1 ") for sent in client)


@pytest.mark.parametrize(
    "name", ["plain", "keep-alive both ways", "client closes", "heads that change"]
)
def test_a_request_arriving_during_an_express_exchange_waits_its_turn(name):
    express = run(CASES[name], express=True, ahead=True)
    assert express == run(CASES[name], express=False, codec="h11", ahead=True)
    assert express[1][0].count(b"HTTP/1.1 ") == (2 if name == "client closes" else len(CASES[name]))


def test_express_path_is_taken_for_plain_exchanges():
    """The express path really runs: with the general parsers out of reach, plain traffic still flows."""
    loop_exchanges = CASES["plain"] + CASES["keep-alive both ways"]
    up, client, closed = run(loop_exchanges, express=True, forbid_general=True)
    assert len(client) == len(loop_exchanges) and not closed
    assert up[0] == b"GET /x?y=1 HTTP/1.1\r\nHost: a.test\r\nUser-Agent: t\r\n" + (
        b"X-Forwarded-For: 10.0.0.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: a.test\r\n"
        b"X-Forwarded-Port: 80\r\nX-Real-Ip: 10.0.0.7\r\n\r\n"
    )
    assert client[3] == OK_KEEP  # a lone keep-alive is edge's own intent for the client connection


def _variants(line: bytes) -> list[bytes]:
    """A header line as it arrives in the wild: spacing, case, a trailing tab."""
    name, _, value = line.partition(b": ")
    return [
        line,
        name + b":" + value,
        name.upper() + b":  " + value + b" ",
        name.lower() + b": " + value + b"\t",
        name + b": " + value.upper(),
    ]


REQUEST_VARIANTS = {
    b"no Connection": [b"GET /v HTTP/1.1\r\nHost: a.test\r\nAccept: */*\r\n\r\n"],
    **{
        b"Connection: " + token: [
            b"GET /v HTTP/1.1\r\nHost: a.test\r\n" + line + b"\r\nAccept: */*\r\n\r\n"
            for line in _variants(b"Connection: " + token)
        ]
        + [
            b"GET /v HTTP/1.1\r\n"
            + _variants(b"Connection: " + token)[1]
            + b"\r\nhost:a.test\r\n\r\n"
        ]
        for token in (b"close", b"keep-alive")
    },
    b"HTTP/1.0": [
        b"GET /v HTTP/1.0\r\nHost: a.test\r\n" + line + b"\r\n\r\n"
        for line in _variants(b"Connection: keep-alive")
    ],
    b"Host spelled oddly": [
        b"GET /v HTTP/1.1\r\n" + line + b"\r\n\r\n" for line in _variants(b"Host: A.Test")
    ],
}


RESPONSE_VARIANTS = [
    b"HTTP/1.1 200 OK\r\n" + cl + b"\r\n" + conn + b"\r\n\r\nhello"
    for cl in _variants(b"Content-Length: 5")[:3]
    for conn in [
        b"Server: t",
        *_variants(b"Connection: keep-alive"),
        *_variants(b"Connection: close"),
    ]
] + [
    b"HTTP/1.1 200 OK\r\nConnection:close\r\nServer: t\r\ncontent-length:5\r\n\r\nhello",
    b"HTTP/1.1 204 No Content\r\nConnection: keep-alive\r\n\r\n",
]


CORPUS = [
    (f"{kind.decode()} #{i} / response #{j}", [(request, response)])
    for kind, requests in REQUEST_VARIANTS.items()
    for i, request in enumerate(requests)
    for j, response in enumerate(RESPONSE_VARIANTS)
]


@pytest.mark.parametrize("exchanges", [c for _, c in CORPUS], ids=[n for n, _ in CORPUS])
def test_express_and_general_paths_forward_the_same_bytes(exchanges):
    """Every head of the corpus, through the express path, the general path and h11:
    the bytes that reach the upstream and the client are the same, and so is the
    connection's fate."""
    express = run(exchanges, express=True)
    assert express == run(exchanges, express=False) == run(exchanges, express=False, codec="h11")
    up, client, _ = express
    for sent in up:  # nothing hop-by-hop but a kept-alive next hop's own keep-alive goes up
        assert b"close" not in sent.lower()
    assert all(sent.startswith(b"HTTP/1.1 ") for sent in client)


def test_the_corpus_really_takes_the_express_path():
    """The corpus above exercises the express path: for its plain heads, with the
    general path taken away, the bytes are still the same."""
    taken = 0
    for _, exchanges in CORPUS:
        request, response = exchanges[0]
        if b"HTTP/1.0" in request or b"204" in response:
            continue
        assert run(exchanges, express=True, forbid_general=True) == run(exchanges, express=False)
        taken += 1
    assert taken > 100


class Tag(Middleware):
    """A middleware the express path has never heard of: it marks the request."""

    __slots__ = ()

    def request(self, fwd):
        fwd.set_header(b"X-Tag", self.name.encode())
        return None


def test_a_middleware_added_to_the_pipeline_applies_to_plain_traffic():
    """Plain traffic would take the express path; a route with any middleware that
    does something runs it (express eligibility comes from the pipeline, not a list)."""
    loop = uvloop.new_event_loop()
    try:
        client, upstream = setup(
            loop, "httptools", host="a.test", client_ip="10.0.0.7", transport=Recorder
        )
        route = client.ctx.router.by_host["a.test"]
        assert route.express
        tagged = Route(route.name, route.service, Pipeline([Tag("tagged")]))
        assert not tagged.express
        client.ctx.router.by_host["a.test"] = tagged
        for _ in range(3):
            before = len(upstream.transport.data)
            client.data_received(GET)
            assert b"\r\nX-Tag: tagged\r\n" in upstream.transport.data[before:]
            upstream.data_received(OK)
        assert client.transport.data.count(b"hello") == 3
    finally:
        loop.close()


class Held(Middleware):
    """Takes a slot for each request and gives it back when the exchange ends
    (Forward.on_end); notes the client address it was given."""

    __slots__ = ("clients", "held", "released")

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.held = 0
        self.released = 0
        self.clients: list[str] = []

    def request(self, fwd):
        self.clients.append(fwd.client_ip)
        self.held += 1
        fwd.on_end(self.release)
        return None

    def release(self) -> None:
        self.released += 1


class Refuse(Middleware):
    __slots__ = ()

    def request(self, fwd):
        return Answer(429, b"Retry-After: 1\r\n", b"Too Many Requests", b"text/x-test")


def _held_route(client, *steps):
    route = client.ctx.router.by_host["a.test"]
    client.ctx.router.by_host["a.test"] = Route(route.name, route.service, Pipeline(steps))


@pytest.mark.parametrize("codec", ["httptools", "h11"])
def test_what_a_middleware_holds_is_released_however_the_exchange_ends(codec):
    """Forward.on_end runs once per exchange: after a complete response, after an
    own answer of a later step, after an upstream failure, when the client leaves
    mid-exchange and when a response is cut; fwd.client_ip is the peer's."""
    loop = uvloop.new_event_loop()
    try:
        client, upstream = setup(
            loop, codec, host="a.test", client_ip="10.0.0.7", transport=Recorder
        )
        held = Held("held")
        _held_route(client, held)
        # 1. a complete response (twice on one connection).
        for n in (1, 2):
            client.data_received(GET)
            assert (held.held, held.released) == (n, n - 1)
            upstream.data_received(OK)
            assert held.released == n
        assert held.clients == ["10.0.0.7", "10.0.0.7"]
        # 2. a later step answers: the slot taken before it is given back.
        _held_route(client, held, Refuse("refuse"))
        before = len(client.transport.data)
        client.data_received(GET)
        answer = bytes(client.transport.data[before:])
        assert answer.startswith(b"HTTP/1.1 429 ")
        assert b"\r\nContent-Type: text/x-test\r\n" in answer and b"Retry-After: 1" in answer
        assert (held.held, held.released) == (3, 3)
        # 3. the upstream connection fails before responding (a POST: not retried): 502.
        _held_route(client, held)
        client.data_received(b"POST /x HTTP/1.1\r\nHost: a.test\r\nContent-Length: 2\r\n\r\nhi")
        assert held.released == 3
        client.ex.upstream.connection_lost(ConnectionResetError())
        assert held.released == 4
        assert b"HTTP/1.1 502 " in client.transport.data[before:]
        # 4. the client leaves while its request is at the upstream.
        client2, _ = setup(loop, codec, host="a.test", client_ip="10.0.0.8", transport=Recorder)
        _held_route(client2, held)
        client2.data_received(GET)
        assert held.held == 5 and held.released == 4
        client2.connection_lost(None)
        assert held.released == 5
        # 5. the response is cut after its head: the client connection is aborted,
        # its loss releases.
        client3, upstream3 = setup(
            loop, codec, host="a.test", client_ip="10.0.0.9", transport=Recorder
        )
        _held_route(client3, held)
        client3.data_received(GET)
        upstream3.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhel")
        assert held.released == 5
        upstream3.connection_lost(None)
        assert client3.transport.closing
        client3.connection_lost(None)  # what the abort brings
        assert (held.held, held.released) == (6, 6)
        assert held.clients[-2:] == ["10.0.0.8", "10.0.0.9"]
    finally:
        loop.close()


def test_an_answer_takes_the_response_edits_of_the_middlewares_before_it():
    """Traefik: a headers middleware's response headers wrap what the handlers after
    it write, edge's own answers included; one after the answering step never ran."""
    from edge.http.codec.forward import HeaderEdits

    class Fixed(Middleware):
        __slots__ = ("response_edits",)

        def __init__(self, name: str, value: bytes) -> None:
            super().__init__(name)
            self.response_edits = HeaderEdits([(b"X-" + name.encode(), value)])

    loop = uvloop.new_event_loop()
    try:
        client, _ = setup(loop, "httptools", host="a.test", transport=Recorder)
        _held_route(client, Fixed("before", b"1"), Refuse("refuse"), Fixed("after", b"2"))
        client.data_received(GET)
        answer = bytes(client.transport.data)
        assert answer.startswith(b"HTTP/1.1 429 ")
        assert b"\r\nX-before: 1\r\n" in answer
        assert b"X-after" not in answer
    finally:
        loop.close()


class Hold(Middleware):
    """Asks the exchange to hold each request 200 ms (as a rateLimit waiting for its
    token): long beside the test's 10 ms look, on a loaded machine too."""

    __slots__ = ()

    def request(self, fwd):
        fwd.delay = 0.2
        return None


@pytest.mark.parametrize("codec", ["httptools", "h11"])
def test_a_held_request_goes_upstream_after_its_delay(codec):
    loop = uvloop.new_event_loop()
    try:
        client, upstream = setup(loop, codec, host="a.test", transport=Recorder)
        held = Held("held")
        _held_route(client, Hold("hold"), held)
        client.data_received(GET)
        assert upstream.transport.data == b"" and held.held == 1
        loop.run_until_complete(asyncio.sleep(0.01))
        assert upstream.transport.data == b""  # still held
        deadline = loop.time() + 5.0  # the delay is 0.2 s; a loaded machine may take longer
        while not upstream.transport.data and loop.time() < deadline:
            loop.run_until_complete(asyncio.sleep(0.01))
        assert upstream.transport.data.startswith(b"GET /x?y=1 HTTP/1.1\r\n")
        upstream.data_received(OK)
        assert client.transport.data.endswith(b"hello") and held.released == 1
        # The client leaves while its request is held: nothing goes upstream, released.
        before = len(upstream.transport.data)
        client.data_received(GET)
        client.connection_lost(None)
        assert held.released == 2
        loop.run_until_complete(asyncio.sleep(0.3))
        assert len(upstream.transport.data) == before
    finally:
        loop.close()
