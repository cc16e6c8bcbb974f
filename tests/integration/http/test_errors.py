"""The errors middleware over real sockets, under both codecs: a scripted upstream
answers with the status a request's path names, an error-page service answers with
what it was asked for, and the client sees the page with the caught (or rewritten)
status; edge's own 502 and 503 for the service are caught too.

The middleware is built from its configuration model (``from_config``) with the
pages service's balancer, in edge's HTTP server running in the test's loop
(:func:`tests.integration.http.test_middleware_hooks.serve`). Through a whole
``edge run``, a bad ``status`` disables the middleware naming the key.
"""

from __future__ import annotations

import asyncio

import pytest

from edge.config.dynamic import ErrorPage
from edge.config.dynamic import Middleware as MiddlewareConfig
from edge.http.middlewares.builtin import from_config
from tests.harness import Edge, get, lb
from tests.integration.http.servers import edge_with
from tests.integration.http.test_middleware_hooks import (
    TIMEOUT,
    Upstream,
    read_head,
    read_response,
    run,
    serve,
)
from tests.integration.peers import free_port

CODECS = ["httptools", "h11"]


def statuses():
    """An upstream answering ``GET /<status>`` with that status and a body naming it
    (a HEAD, a 204 or a 304 without it; a HEAD with the Content-Length a GET has)."""

    async def handler(reader, writer):
        try:
            while True:
                head = await read_head(reader)
                path = head.split(b" ")[1]
                status = int(path.strip(b"/").split(b"?")[0] or b"200")
                body = b"upstream %d" % status
                length = b"Content-Length: %d\r\n" % len(body)
                if status in (204, 304):
                    body = length = b""
                elif head.startswith(b"HEAD "):
                    body = b""
                writer.write(b"HTTP/1.1 %d X\r\n%sX-Up: 1\r\n\r\n%s" % (status, length, body))
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    return handler


def pages(seen: list[bytes], connections: list[int] | None = None):
    """The error-page service: records each request head (and in ``connections``, the
    number of the connection it came on), answers 200 with its target."""
    count = [0]

    async def handler(reader, writer):
        count[0] += 1
        number = count[0]
        try:
            while True:
                head = await read_head(reader)
                seen.append(head)
                if connections is not None:
                    connections.append(number)
                body = b"page for " + head.split(b" ")[1]
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(body), body)
                )
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    return handler


def errors(**config):
    def steps(service):
        model = MiddlewareConfig(errors=ErrorPage(service="pages", **config))
        assert model.check() == []
        return [from_config("e@file", model, lambda name: service)]

    return steps


async def ask(port: int, path: bytes, method: bytes = b"GET", extra: bytes = b""):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"%s %s HTTP/1.1\r\nHost: a.test\r\n%s\r\n" % (method, path, extra))
        if method == b"HEAD":
            return await read_head(reader), b""
        return await read_response(reader)
    finally:
        writer.close()


@pytest.mark.parametrize("codec", CODECS)
def test_a_caught_status_is_answered_with_the_page(codec):
    async def main():
        up, page = Upstream(statuses()), Upstream(pages(seen := []))
        port_up, port_pages = await up.start(), await page.start()
        server, port, _ = await serve(
            codec,
            port_up,
            errors(
                status=["500-599", "404"],
                query="/err/{status}?from={originalStatus}&u={url}",
                status_rewrites={"418": 400, "502-504": 500},
            ),
            pages_port=port_pages,
        )
        head, body = await ask(port, b"/500?q=1", extra=b"Cookie: c=1\r\n")
        assert head.startswith(b"HTTP/1.1 500 ")
        assert body == b"page for /err/500?from=500&u=http%3A%2F%2Fa.test%2F500%3Fq%3D1"
        assert b"content-type: text/html" in head.lower() and b"x-up" not in head.lower()
        page_head = seen[-1].lower()
        assert page_head.startswith(b"get /err/500?")
        assert b"host: a.test" in page_head and b"cookie: c=1" in page_head
        # Not caught: answered as it came.
        head, body = await ask(port, b"/403")
        assert head.startswith(b"HTTP/1.1 403") and body == b"upstream 403"
        # A single status; a rewrite of the status sent.
        head, body = await ask(port, b"/404")
        assert head.startswith(b"HTTP/1.1 404") and body.startswith(b"page for /err/404")
        head, body = await ask(port, b"/503")
        assert head.startswith(b"HTTP/1.1 500") and body.startswith(b"page for /err/500?from=503")
        assert len(seen) == 3
        server.close()
        up.close()
        page.close()

    run(main())


async def heads_then_get(port: int, requests: list[bytes]) -> tuple[list[bytes], bytes, bytes]:
    """On one connection, each of ``requests`` (``METHOD /path``: their heads only, as
    to a HEAD or a bodiless status), then ``GET /403``: what follows the heads is
    that answer's head alone, with nothing left of a body before it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        heads = []
        for line in requests:
            writer.write(b"%s HTTP/1.1\r\nHost: a.test\r\n\r\n" % line)
            heads.append(await read_head(reader))
        writer.write(b"GET /403 HTTP/1.1\r\nHost: a.test\r\n\r\n")
        head, body = await read_response(reader)
        return heads, head, body
    finally:
        writer.close()


@pytest.mark.parametrize("codec", CODECS)
def test_a_bodiless_error_is_caught_and_answered_without_a_body(codec):
    """Traefik catches the status whatever the method: a 404 or 503 to a HEAD is
    answered with the page's head (its Content-Type and Content-Length), the caught
    (or rewritten) status, and no body; a 204 or 304 outside the ranges goes as it
    came; one within them gets the page's head, no body (Go's server drops it). The
    page is asked for with GET and its body read: its connection serves them all."""

    async def main():
        up, page = Upstream(statuses()), Upstream(pages(seen := [], connections := []))
        port_up, port_pages = await up.start(), await page.start()
        server, port, _ = await serve(
            codec,
            port_up,
            errors(status=["404", "503", "304"], query="/err/{status}",
                   status_rewrites={"503": 500}),
            pages_port=port_pages,
        )  # fmt: skip
        heads, head, body = await heads_then_get(
            port, [b"HEAD /404", b"HEAD /503", b"GET /204", b"GET /304", b"HEAD /200"]
        )
        assert head.startswith(b"HTTP/1.1 403") and body == b"upstream 403"
        h404, h503, h204, h304, h200 = (h.lower() for h in heads)
        assert h404.startswith(b"http/1.1 404 ") and b"x-up" not in h404
        assert b"content-type: text/html" in h404
        assert b"content-length: %d" % len(b"page for /err/404") in h404
        assert h503.startswith(b"http/1.1 500 ") and b"content-type: text/html" in h503
        assert h204.startswith(b"http/1.1 204 ") and b"x-up: 1" in h204
        assert h304.startswith(b"http/1.1 304 ") and b"content-type: text/html" in h304
        assert h200.startswith(b"http/1.1 200 ") and b"x-up: 1" in h200
        assert b"content-length: %d" % len(b"upstream 200") in h200
        assert [h.split(b" ")[:2] for h in seen] == [
            [b"GET", b"/err/404"],
            [b"GET", b"/err/500"],
            [b"GET", b"/err/304"],
        ]
        assert connections == [1, 1, 1]
        server.close()
        up.close()
        page.close()

    run(main())


@pytest.mark.parametrize("codec", CODECS)
def test_edge_s_own_errors_for_the_service_are_caught(codec):
    """Nothing listening behind the route: edge's 502 becomes the page (with 502)."""

    async def main():
        page = Upstream(pages(seen := []))
        port_pages = await page.start()
        server, port, _ = await serve(
            codec,
            free_port(),
            errors(status=["502"], query="/down/{status}"),
            pages_port=port_pages,
        )
        head, body = await ask(port, b"/x")
        assert head.startswith(b"HTTP/1.1 502") and body == b"page for /down/502"
        assert len(seen) == 1
        # To a HEAD: the page's head, no body (the connection serves the next one).
        heads, head, body = await heads_then_get(port, [b"HEAD /x"])
        assert heads[0].startswith(b"HTTP/1.1 502") and b"content-length: 18" in heads[0].lower()
        assert head.startswith(b"HTTP/1.1 502") and body == b"page for /down/502"
        assert len(seen) == 3
        server.close()
        page.close()

    run(main())


@pytest.mark.parametrize("codec", CODECS)
def test_a_page_service_that_cannot_answer_leaves_the_caught_status(codec):
    async def main():
        up = Upstream(statuses())
        port_up = await up.start()
        server, port, _ = await serve(
            codec, port_up, errors(status=["500"], query="/e"), pages_port=free_port()
        )
        head, _ = await asyncio.wait_for(ask(port, b"/500"), TIMEOUT)
        assert head.startswith(b"HTTP/1.1 502")  # the page's service is down: edge's 502
        server.close()
        up.close()

    run(main())


def test_a_bad_status_disables_the_middleware_naming_the_key(tmp_path, backend):
    service = lb(backend.url)
    e = edge_with(
        tmp_path,
        "httptools",
        service,
        {"e": {"errors": {"status": ["5xx"], "service": "app", "query": "/"}}},
    )
    try:
        assert get(e.port, "/", host="app.example")[0] == 404  # its router is disabled
        e.wait_for(r"errors\.status\[0\]: '5xx' is not a status or a range of them", start=0)
    finally:
        e.stop()


def test_the_page_service_is_found_through_a_whole_edge(tmp_path, backend):
    """Through ``edge run``: nothing behind the app, so edge's 502 becomes the pages
    service's answer to ``/down``."""
    dyn = {
        "http": {
            "routers": {
                "app": {"rule": "Host(`app.example`)", "service": "app", "middlewares": ["e"]}
            },
            "services": {"app": lb(f"http://127.0.0.1:{free_port()}"), "pages": lb(backend.url)},
            "middlewares": {
                "e": {"errors": {"status": ["502"], "service": "pages", "query": "/down"}}
            },
        }
    }
    e = Edge(tmp_path, dyn)
    try:
        status, _, body = get(e.port, "/", host="app.example")
        assert status == 502 and body != b"Bad Gateway"
        assert backend.requests and backend.requests[-1].target == b"/down"
    finally:
        e.stop()
