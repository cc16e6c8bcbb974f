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
    """An upstream answering ``GET /<status>`` with that status and a body naming it."""

    async def handler(reader, writer):
        try:
            while True:
                head = await read_head(reader)
                path = head.split(b" ")[1]
                status = int(path.strip(b"/").split(b"?")[0] or b"200")
                body = b"upstream %d" % status
                writer.write(
                    b"HTTP/1.1 %d X\r\nContent-Length: %d\r\nX-Up: 1\r\n\r\n%s"
                    % (status, len(body), body)
                )
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    return handler


def pages(seen: list[bytes]):
    """The error-page service: records each request head, answers 200 with its target."""

    async def handler(reader, writer):
        try:
            while True:
                head = await read_head(reader)
                seen.append(head)
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
        # A response without a body goes as it came.
        head, _ = await ask(port, b"/500", b"HEAD")
        assert head.startswith(b"HTTP/1.1 500") and b"x-up: 1" in head.lower()
        assert len(seen) == 3
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
