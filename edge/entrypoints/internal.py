"""``api@internal``: the API served by the routers that name it, behind their middlewares.

Traefik users protect the API with a router of their own (``service: api@internal``, a
rule, TLS, authentication middlewares) instead of ``api.insecure``'s open entry point.
Validation gives such a router the service ``api@internal`` (it exists when the static
configuration has ``api``; :mod:`edge.config.runtime.build`), which the router factory
builds as a load balancer without servers. Here, once per configuration, each route
whose service is that one becomes a route whose pipeline ends with :class:`APIAnswer`:
the router's own middlewares run first (an authentication middleware answers first,
a ``stripPrefix`` changes the path the API reads), then the API answers
(:meth:`edge.api.API.answer`), from the configuration the data plane serves.

Invariant: an entry point's routers are rebuilt only where one of its routes names
``api@internal``; every other entry point gets its router set as built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge import __version__
from edge.api import API
from edge.config.static import API_SERVICE, StaticConfig
from edge.http.middlewares import Answer, Forward, Middleware, Pipeline
from edge.router.http import HTTPRouter, Route
from edge.router.set import RouterSet

if TYPE_CHECKING:
    from edge.app import Dataplane

__all__ = ["APIAnswer", "APIRouter", "attach_api", "serve_api"]


class APIAnswer(Middleware):
    """The last step of an ``api@internal`` route: the API's answer to GET and HEAD
    (``/api/...``), Traefik's 404 for any other path and 405 for other methods."""

    __slots__ = ("api",)

    def __init__(self, api: API) -> None:
        super().__init__(API_SERVICE)
        self.api = api

    def request(self, fwd: Forward) -> Answer | None:
        if fwd.method not in (b"GET", b"HEAD"):
            return Answer(405, b"Allow: GET, HEAD\r\n", b"405 method not allowed\n")
        found = self.api.answer(fwd.path, fwd.query)
        if found is None:
            return Answer(404, b"", b"404 page not found\n")
        status, body, content_type, lines = found
        return Answer(status, lines, body, content_type)


class _Edits(Middleware):
    """A pipeline's folded header edits, kept when the pipeline is extended."""

    __slots__ = ("request_edits", "response_edits")

    def __init__(self, pipeline: Pipeline) -> None:
        super().__init__("edits")
        self.request_edits = pipeline.request_edits
        self.response_edits = pipeline.response_edits


def _api_route(route: Route, answer: APIAnswer) -> Route:
    pipeline = route.pipeline
    return Route(route.name, route.service, Pipeline([*pipeline.steps, _Edits(pipeline), answer]))


class APIRouter:
    """An HTTP router whose ``api@internal`` routes answer with the API: the same table,
    each such route swapped for its API route where the router hands it out."""

    __slots__ = ("by_host", "inner", "swapped", "table")

    def __init__(self, inner: HTTPRouter, swapped: dict[Route, Route]) -> None:
        self.inner = inner
        self.swapped = swapped
        self.table = inner.table
        self.by_host = {host: swapped.get(route, route) for host, route in inner.by_host.items()}

    def match(self, view) -> Route | None:
        route = self.inner.match(view)
        return self.swapped.get(route, route) if route is not None else None

    def __len__(self) -> int:
        return len(self.inner)


def _with_api(router: HTTPRouter | None, answer: APIAnswer) -> HTTPRouter | APIRouter | None:
    """``router`` with its ``api@internal`` routes answering with the API; itself if none.

    Made on the loop (the entry points' switch): no table is rebuilt (10,000 routes
    took 0.2 s), only the host index copied."""
    if router is None:
        return None
    swapped = {
        route: _api_route(route, answer)
        for *_, route in router.table.entries
        if route.service.name == API_SERVICE
    }
    return APIRouter(router, swapped) if swapped else router


def serve_api(routers: RouterSet, answer: APIAnswer) -> RouterSet:
    """``routers`` with every ``api@internal`` route answering with the API (see the module doc)."""
    http = _with_api(routers.http, answer)
    https = _with_api(routers.https, answer)
    if http is routers.http and https is routers.https:
        return routers
    assert http is not None
    # An APIRouter serves where an HTTPRouter does (match, by_host), as RedirectRouter does.
    return RouterSet(http=http, https=https, tcp=routers.tcp, udp=routers.udp)  # type: ignore[arg-type]


def attach_api(dataplane: Dataplane, static: StaticConfig) -> None:
    """Have ``dataplane``'s entry points serve ``api@internal`` routes when ``api`` is set:
    the API reads the configuration ``dataplane`` serves (its ``api.insecure`` one when
    there is one)."""
    if static.api is None:
        return
    api = dataplane.api or API(
        static, lambda: dataplane.runtime, __version__, down=dataplane.health.status
    )
    dataplane.entrypoints.api = APIAnswer(api)
