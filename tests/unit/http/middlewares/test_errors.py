"""errors: its configuration's ranges and rewrites, and what it asks the page service for."""

from __future__ import annotations

import pytest

from edge.config.dynamic import ErrorPage, http_code_ranges
from edge.config.dynamic import Middleware as MiddlewareConfig
from edge.http.middlewares import Forward, Reply
from edge.http.middlewares.builtin import from_config
from edge.http.middlewares.errors import ErrorPages


def test_ranges_are_traefiks():
    assert http_code_ranges(["500-599", "404", "418-418"]) == ((500, 599), (404, 404), (418, 418))
    for bad in ["5xx", "500-", "-1", "500-600-700", ""]:
        with pytest.raises(ValueError, match=r"^\[0\]: "):
            http_code_ranges([bad])


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ({"status": ["5xx"]}, "errors.status[0]: '5xx' is not a status or a range of them"),
        ({"status_rewrites": {"abc": 500}}, "errors.statusRewrites: 'abc' is not a status"),
        ({"status_rewrites": {"500": 42}}, "errors.statusRewrites.500: 42 is not a status"),
        ({"service": ""}, "errors.service: the service answering the error pages must be named"),
    ],
)
def test_bad_values_name_their_key(config, problem):
    model = MiddlewareConfig(errors=ErrorPage(**{"service": "pages", **config}))
    (got,) = model.check()
    assert got.startswith(problem)


def divert_of(pages: ErrorPages, status: int, path: bytes = b"/a", query: bytes = b""):
    fwd = Forward("a.test", path, query, authority=b"a.test:8080")
    reply = Reply(status, b"", [], 10)
    assert pages.response(fwd, reply) is None
    return reply.divert_to


def test_what_is_caught_and_the_page_asked_for():
    service = object()
    model = MiddlewareConfig(
        errors=ErrorPage(
            status=["500-599", "404"],
            service="pages",
            query="err/{status}/{originalStatus}?u={url}",
            status_rewrites={"502-504": 500, "404": 410},
        )
    )
    names = []
    pages = from_config("e@file", model, lambda name: names.append(name) or service)
    assert names == ["pages@file"]  # qualified with the middleware's provider
    assert isinstance(pages, ErrorPages) and pages.own_answers
    assert divert_of(pages, 200) is None and divert_of(pages, 403) is None
    assert divert_of(pages, 500) == (service, b"/err/500/500?u=http%3A%2F%2Fa.test%3A8080%2Fa", 500)
    assert divert_of(pages, 503, b"/b", b"x=1 2")[1:] == (
        b"/err/500/503?u=http%3A%2F%2Fa.test%3A8080%2Fb%3Fx%3D1+2",
        500,
    )
    assert divert_of(pages, 404)[2] == 410
    # An empty query asks for /; a diverted reply is never diverted again.
    plain = ErrorPages("e", ((500, 599),), service)
    assert divert_of(plain, 500) == (service, b"/", 500)
    again = Reply(500, b"", [], 0, diverted=True)
    plain.response(Forward("a.test", b"/", b""), again)
    assert again.divert_to is None


def test_a_bodiless_reply_is_caught_as_any_other():
    """Traefik's catcher reads the status whatever the method: a 404 to a HEAD (a
    reply without a body) is diverted; a 304 outside the ranges is not."""
    service = object()
    pages = ErrorPages("e", ((404, 404), (500, 599)), service, "/{status}")
    fwd = Forward("a.test", b"/", b"", method=b"HEAD")
    head = Reply(404, b"", [(b"Content-Length", b"9")], None, bodiless=True)
    assert pages.response(fwd, head) is None
    assert head.divert_to == (service, b"/404", 404)
    not_modified = Reply(304, b"", [], None, bodiless=True)
    pages.response(Forward("a.test", b"/", b""), not_modified)
    assert not_modified.divert_to is None
