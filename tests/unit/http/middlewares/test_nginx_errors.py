"""errors with nginxHeaders: what the page request carries (ingress-nginx's custom errors)."""

from __future__ import annotations

import re

from edge.config.dynamic import ErrorPage
from edge.config.dynamic import Middleware as MiddlewareConfig
from edge.http.codec import RequestHead
from edge.http.middlewares import Forward, Reply
from edge.http.middlewares.builtin import from_config
from edge.http.middlewares.errors import ErrorPages
from edge.http.middlewares.nginx_errors import NginxErrorPages, Page

FIXED = {
    "X-Namespace": ["shop"],
    "X-Ingress-Name": ["front"],
    "X-Service-Name": ["web"],
    "X-Service-Port": ["http"],
}


def build(**config) -> NginxErrorPages:
    model = MiddlewareConfig(
        errors=ErrorPage(status=["404", "500-599"], service="pages", nginx_headers=FIXED, **config)
    )
    assert model.check() == []
    built = from_config("e@kubernetesingressnginx", model, lambda name: "the pages balancer")
    assert isinstance(built, NginxErrorPages)
    return built


def divert(pages: NginxErrorPages, status: int, headers: list[tuple[bytes, bytes]]):
    head = RequestHead(b"GET", b"/a/b?c=1", b"1.1", headers, True, False, None, False, False)
    fwd = Forward("shop.test", b"/a/b", b"c=1", head=head)
    reply = Reply(status, b"", [], 10)
    assert pages.response(fwd, reply) is None
    return reply.divert_to


def test_the_page_request_carries_ingress_nginx_headers():
    pages = build()
    found = divert(pages, 503, [(b"Accept", b"text/html"), (b"X-Request-ID", b"abc")])
    assert found is not None
    page, target, status = found
    assert (target, status) == (b"/", 503)
    assert isinstance(page, Page) and page.service == "the pages balancer"
    assert list(page.headers) == [
        (b"X-Namespace", b"shop"),
        (b"X-Ingress-Name", b"front"),
        (b"X-Service-Name", b"web"),
        (b"X-Service-Port", b"http"),
        (b"X-Code", b"503"),
        (b"X-Original-URI", b"/a/b?c=1"),
        (b"X-Request-ID", b"abc"),
        (b"X-Format", b"text/html"),
    ]


def test_a_request_without_accept_or_request_id():
    """No X-Format (nginx sends no header for an empty $http_accept); a new request id,
    32 hex digits as nginx's $request_id, different for each caught response."""
    pages = build()
    ids = set()
    for _ in range(2):
        page, _, _ = divert(pages, 404, [])
        headers = dict(page.headers)
        assert b"X-Format" not in headers and headers[b"X-Code"] == b"404"
        assert re.fullmatch(rb"[0-9a-f]{32}", headers[b"X-Request-ID"])
        ids.add(headers[b"X-Request-ID"])
    assert len(ids) == 2


def test_what_is_not_caught_is_not_diverted_and_rewrites_name_the_code():
    pages = build(status_rewrites={"404": 410})
    assert divert(pages, 200, []) is None and divert(pages, 403, []) is None
    page, _, status = divert(pages, 404, [])
    assert status == 410 and dict(page.headers)[b"X-Code"] == b"410"


def test_without_nginx_headers_the_plain_errors_middleware_is_built():
    model = MiddlewareConfig(errors=ErrorPage(status=["404"], service="pages"))
    built = from_config("e@file", model, lambda name: None)
    assert type(built) is ErrorPages


def test_bad_nginx_headers_name_their_key():
    for headers, problem in (
        ({"X Bad": ["1"]}, "errors.nginxHeaders: invalid header name 'X Bad'"),
        ({"X-Ok": ["a\r\nb"]}, "errors.nginxHeaders.X-Ok: a value may not hold CR, LF"),
    ):
        model = MiddlewareConfig(errors=ErrorPage(service="pages", nginx_headers=headers))
        (got,) = model.check()
        assert got.startswith(problem), got
