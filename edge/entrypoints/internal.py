"""``api@internal`` and ``prometheus@internal``: the API and ``/metrics`` served by the
routers that name them, behind their middlewares.

Traefik users protect the API with a router of their own (``service: api@internal``, a
rule, TLS, authentication middlewares) instead of ``api.insecure``'s open entry point.
Validation gives such a router the service ``api@internal`` (it exists when the static
configuration has ``api``; :mod:`edge.config.runtime.build`), which the router factory
builds as a load balancer without servers. Here, once per configuration, each route
whose service is that one becomes a route whose pipeline ends with :class:`APIAnswer`:
the router's own middlewares run first (an authentication middleware answers first,
a ``stripPrefix`` changes the path the API reads), then the API answers
(:meth:`edge.api.API.answer`), from the configuration the data plane serves.

``prometheus@internal`` (it exists with ``metrics.prometheus.manualRouting``) is served
the same way, its routes ending with :class:`~edge.entrypoints.metrics.MetricsAnswer`
(Traefik's ``manualRouting``: ``/metrics`` is then served nowhere else).

Invariant: an entry point's routers are rebuilt only where one of its routes names
one of these services; every other entry point gets its router set as built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from edge import __version__
from edge.api import API
from edge.config.static import API_SERVICE, PROMETHEUS_SERVICE, StaticConfig
from edge.entrypoints.metrics import MetricsAnswer
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


def _api_route(route: Route, answer: Middleware) -> Route:
    pipeline = route.pipeline
    return Route(
        route.name,
        route.service,
        Pipeline([*pipeline.steps, _Edits(pipeline), answer]),
        observers=route.observers,  # its entry point's access log, metrics, tracing
    )


class APIRouter:
    """An HTTP router whose ``api@internal`` (``prometheus@internal``) routes answer with
    the API (``/metrics``): the same table, each such route swapped for its answering
    route where the router hands it out."""

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


def _with_api(
    router: HTTPRouter | None, answers: Mapping[str, Middleware]
) -> HTTPRouter | APIRouter | None:
    """``router`` with its routes naming a service of ``answers`` (service name -> the
    middleware answering for it) answering so; itself if none.

    Made on the loop (the entry points' switch): no table is rebuilt (10,000 routes
    took 0.2 s), only the host index copied."""
    if router is None:
        return None
    swapped = {
        route: _api_route(route, answers[route.service.name])
        for *_, route in router.table.entries
        if route.service.name in answers
    }
    return APIRouter(router, swapped) if swapped else router


def serve_api(routers: RouterSet, answers: Mapping[str, Middleware]) -> RouterSet:
    """``routers`` with every route naming a service of ``answers`` answering with its
    middleware (see the module doc)."""
    http = _with_api(routers.http, answers)
    https = _with_api(routers.https, answers)
    if http is routers.http and https is routers.https:
        return routers
    assert http is not None
    # An APIRouter serves where an HTTPRouter does (match, by_host), as RedirectRouter does.
    return RouterSet(http=http, https=https, tcp=routers.tcp, udp=routers.udp)  # type: ignore[arg-type]


def attach_api(dataplane: Dataplane, static: StaticConfig) -> None:
    """Have ``dataplane``'s entry points serve ``api@internal`` routes when ``api`` is set
    (the API reads the configuration ``dataplane`` serves: its ``api.insecure`` one when
    there is one), and ``prometheus@internal`` routes with ``manualRouting``."""
    answers: dict[str, Middleware] = {}
    if static.api is not None:
        api = dataplane.api or API(
            static, lambda: dataplane.runtime, __version__, down=dataplane.health.status
        )
        answers[API_SERVICE] = APIAnswer(api)
    prom = static.metrics.prometheus if static.metrics is not None else None
    if prom is not None and prom.manual_routing and dataplane.metrics is not None:
        answers[PROMETHEUS_SERVICE] = MetricsAnswer(dataplane.metrics)
    dataplane.entrypoints.internal = answers
