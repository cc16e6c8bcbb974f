"""errors with nginxHeaders over real sockets, under both codecs: the page service sees
ingress-nginx's X-Code, X-Format, X-Original-URI, X-Request-ID and the provider's fixed
headers, and the client gets the page with the page's own status (nginx's
``error_page <code> = @location``), not the one caught.

The harness is the errors middleware's (:mod:`tests.integration.http.test_errors`).
"""

from __future__ import annotations

import asyncio

import pytest

from edge.config.dynamic import ErrorPage
from edge.config.dynamic import Middleware as MiddlewareConfig
from edge.http.middlewares.builtin import from_config
from tests.integration.http.test_errors import CODECS, ask, statuses
from tests.integration.http.test_middleware_hooks import Upstream, read_head, run, serve
from tests.integration.peers import free_port


def pages(seen: list[bytes]):
    """The default backend: records each request head, answers with the status its
    X-Code names (as ingress-nginx's custom-error-pages image does), or 200 for 418."""

    async def handler(reader, writer):
        try:
            while True:
                head = await read_head(reader)
                seen.append(head)
                code = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"x-code:")
                )
                status = 200 if code == 418 else code
                body = b"page %d" % code
                writer.write(
                    b"HTTP/1.1 %d Page\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body)
                )
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, StopIteration):
            writer.close()

    return handler


def nginx_errors(status: list[str]):
    headers = {
        "X-Namespace": ["shop"],
        "X-Ingress-Name": ["front"],
        "X-Service-Name": ["web"],
        "X-Service-Port": ["80"],
    }

    def steps(service):
        model = MiddlewareConfig(
            errors=ErrorPage(status=status, service="pages", nginx_headers=headers)
        )
        assert model.check() == []
        return [from_config("e@kubernetesingressnginx", model, lambda name: service)]

    return steps


@pytest.mark.parametrize("codec", CODECS)
def test_the_default_backend_sees_ingress_nginx_headers_and_sets_the_status(codec):
    async def main():
        up, page = Upstream(statuses()), Upstream(pages(seen := []))
        port_up, port_pages = await up.start(), await page.start()
        server, port, _ = await serve(
            codec, port_up, nginx_errors(["404", "418", "503"]), pages_port=port_pages
        )
        head, body = await ask(
            port, b"/404?q=1", extra=b"Accept: text/html\r\nX-Request-ID: r-1\r\nCookie: c=1\r\n"
        )
        assert head.startswith(b"HTTP/1.1 404 Page\r\n") and body == b"page 404"
        seen_head = seen[-1]
        assert seen_head.startswith(b"GET / HTTP/1.1\r\n")
        lines = seen_head.lower().split(b"\r\n")
        for line in (
            b"x-code: 404",
            b"x-format: text/html",
            b"x-original-uri: /404?q=1",
            b"x-request-id: r-1",
            b"x-namespace: shop",
            b"x-ingress-name: front",
            b"x-service-name: web",
            b"x-service-port: 80",
            b"host: a.test",
            b"cookie: c=1",
        ):
            assert line in lines, (line, seen_head)
        assert lines.count(b"x-request-id: r-1") == 1
        # The page's own status goes out, whatever was caught.
        head, body = await ask(port, b"/418")
        assert head.startswith(b"HTTP/1.1 200 Page\r\n") and body == b"page 418"
        # Not caught: as it came.
        head, body = await ask(port, b"/403")
        assert head.startswith(b"HTTP/1.1 403") and body == b"upstream 403"
        assert len(seen) == 2
        server.close()
        up.close()
        page.close()

    run(main())


@pytest.mark.parametrize("codec", CODECS)
def test_edge_s_own_502_goes_to_the_default_backend(codec):
    """Nothing behind the route: edge's 502 is caught, and the page says so."""

    async def main():
        page = Upstream(pages(seen := []))
        port_pages = await page.start()
        server, port, _ = await serve(
            codec, free_port(), nginx_errors(["502"]), pages_port=port_pages
        )
        head, body = await ask(port, b"/x")
        assert head.startswith(b"HTTP/1.1 502 Page") and body == b"page 502"
        assert b"x-original-uri: /x\r\n" in seen[-1].lower()
        server.close()
        page.close()

    run(main())
