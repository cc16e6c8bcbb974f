"""HTTP routers: immutable snapshots built once per configuration.

An :class:`HTTPRouter` answers one question per request, ``match(view)``: which
:class:`Route` serves it. Everything a request needs from the configuration is
resolved when the router is built (rules compiled and indexed by host, services
turned into balancers over :class:`Backend` objects holding their transport,
middlewares built into a pipeline), so the hot path only reads.

The only mutable state is inside balancers (round-robin scores), which belong to
the snapshot and die with it, and the health of servers: a load balancer with a
health check reads the set of its servers that are down, which outlives snapshots
(:mod:`edge.health` owns it and the checks that change it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from edge.balancer import SmoothWeightedRoundRobin
from edge.config.dynamic import Cookie, ServerHealthCheck
from edge.http.middlewares import EMPTY_PIPELINE, Pipeline
from edge.rules import RouteTable
from edge.transports import ServerURL, Transport

if TYPE_CHECKING:
    from edge.router.health import PassiveHealth


M = TypeVar("M")

_COOKIE_NAME_CHARS = frozenset(
    "!#$%&'*+-.^`|~abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
)


def sticky_cookie_name(name: str, service: str) -> str:
    """Traefik's cookie name: ``name`` with every character outside an HTTP token made
    ``_``; when empty, ``_`` and the first five hex digits of the SHA-1 of
    ``_TRAEFIK_BACKEND_<service>``."""
    if name:
        return "".join(c if c in _COOKIE_NAME_CHARS else "_" for c in name)
    return "_" + hashlib.sha1(f"_TRAEFIK_BACKEND_{service}".encode()).hexdigest()[:5]


def sticky_value(name: str) -> bytes:
    """The cookie value Traefik v3 writes for the server URL (or child service name)
    ``name``: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(name.encode()).hexdigest()[:16].encode()


def _fnv1_64(data: str) -> str:
    """FNV-1 64-bit, in lowercase hex without leading zeros (Go's ``fnv.New64`` and
    ``strconv.FormatUint(h, 16)``): the value older Traefik versions wrote."""
    h = 0xCBF29CE484222325
    for byte in data.encode():
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
        h ^= byte
    return format(h, "x")


def cookie_value(header: bytes, name: bytes) -> bytes | None:
    """The value of the first cookie ``name`` in one Cookie header's value, None when absent."""
    for part in header.split(b";"):
        key, eq, value = part.strip().partition(b"=")
        if eq and key == name:
            value = value.strip()
            if len(value) > 1 and value[:1] == value[-1:] == b'"':
                value = value[1:-1]
            return value
    return None


class Sticky(Generic[M]):
    """A sticky cookie over the members of one balancer: built once per configuration.

    ``lookup`` maps every cookie value that names a member (the SHA-256 one Traefik v3
    writes, and for clients of older versions the raw name, its FNV-1 hash and the hash
    of that) to the member's index; ``set_cookie[i]`` is the whole ``Set-Cookie`` line
    sticking a client to member ``i``, written as Go's ``http.SetCookie`` writes it.
    A value of an older version maps to ``(i, False)``: it still sticks, and the
    response rewrites it, as Traefik does.
    """

    __slots__ = ("index", "lookup", "members", "name", "set_cookie")

    def __init__(self, cookie: Cookie, service: str, members: list[tuple[M, str]]) -> None:
        name = sticky_cookie_name(cookie.name, service)
        self.name = name.encode()
        self.members = [m for m, _ in members]
        attrs = ""
        path = _attribute(cookie.path)
        if path:
            attrs += f"; Path={path}"
        domain = _attribute(cookie.domain.removeprefix("."))
        if domain:
            attrs += f"; Domain={domain}"
        if cookie.max_age > 0:
            attrs += f"; Max-Age={cookie.max_age}"
        elif cookie.max_age < 0:
            attrs += "; Max-Age=0"
        if cookie.http_only:
            attrs += "; HttpOnly"
        if cookie.secure:
            attrs += "; Secure"
        same_site = cookie.same_site.lower()
        if same_site:
            attrs += f"; SameSite={same_site.capitalize()}"
        self.index = {id(m): i for i, m in enumerate(self.members)}
        self.lookup: dict[bytes, tuple[int, bool]] = {}
        self.set_cookie: list[bytes] = []
        for i, (_, key) in enumerate(members):
            value = sticky_value(key)
            self.set_cookie.append(
                b"Set-Cookie: " + self.name + b"=" + value + attrs.encode() + b"\r\n"
            )
            fnv = _fnv1_64(key)
            for old in (key, fnv, _fnv1_64(fnv)):
                self.lookup.setdefault(old.encode(), (i, False))
        for i, (_, key) in enumerate(members):
            self.lookup[sticky_value(key)] = (i, True)

    def find(self, cookies: list[bytes]) -> tuple[int, bool]:
        """The index of the member the request's Cookie headers name (-1 for none), and
        whether the cookie is in the current form."""
        for header in cookies:
            value = cookie_value(header, self.name)
            if value is not None:
                return self.lookup.get(value, _NONE)
        return _NONE

    def pick(self, cookies: list[bytes], out: list[bytes], up, pick) -> M | None:
        """The member the cookie names when ``up(member)`` says it can serve, else
        ``pick()``'s, with its Set-Cookie line appended to ``out``."""
        i, current = self.find(cookies)
        if i >= 0:
            member = self.members[i]
            if up(member):
                if not current:
                    out.append(self.set_cookie[i])
                return member
        member = pick()
        if member is not None:
            out.append(self.set_cookie[self.index[id(member)]])
        return member


_NONE = (-1, False)


def _attribute(value: str) -> str:
    """A Set-Cookie attribute value without the bytes Go's ``http.SetCookie`` drops from
    a path (controls, DEL, ``;`` and anything beyond ASCII): nothing in the
    configuration can end the header or add one."""
    return "".join(c for c in value if " " <= c < "\x7f" and c != ";")


class Backend:
    """One server of a load balancer, with what is needed to reach it.

    ``health``: its load balancer's passive health check (None without one), told of
    each request's outcome by whoever sends it (``failed()``, ``answered(status)``).
    """

    __slots__ = ("health", "pass_host", "server", "service", "transport")
    status = 0  # a server; a StatusBackend: the status edge answers with instead

    def __init__(
        self,
        service: str,
        server: ServerURL,
        transport: Transport,
        pass_host: bool,
        health: PassiveHealth | None = None,
    ) -> None:
        self.service = service
        self.server = server
        self.transport = transport
        self.pass_host = pass_host
        self.health = health

    def failed(self) -> None:
        """A request to this server got no answer (refused, reset, timed out)."""
        if self.health is not None:
            self.health.failed(self.server.url)

    def answered(self, status: int) -> None:
        """This server answered a request with ``status`` (a 5xx counts as a failure)."""
        if self.health is not None:
            self.health.answered(self.server.url, status)


class LoadBalancer:
    """A loadBalancer service: smooth weighted round robin over its servers.

    Its server list may be replaced in place (:meth:`update`: an endpoints-only
    configuration change) with one assignment; what routes derived from the
    service (``pass_host``, ``pooled``) comes from its configuration and its
    transport, never from the servers, so it cannot go stale.
    """

    __slots__ = (
        "_wrr",
        "backends",
        "down",
        "health_check",
        "name",
        "pass_host",
        "pooled",
        "single",
        "sticks",
        "sticky",
        "sticky_cookie",
    )

    def __init__(
        self,
        name: str,
        backends: Iterable[tuple[Backend, int]],
        pass_host: bool,
        pooled: bool,
        *,
        down: set[str] | None = None,
        health_check: ServerHealthCheck | None = None,
        sticky: Cookie | None = None,
    ) -> None:
        """``down``: the URLs of its servers that are down (the health registry's set for
        this service, which checks change in place; None: no health check of any kind);
        ``health_check``: its active health check, which the registry runs."""
        self.name = name
        # Every server gets the client's Host (passHostHeader, the default).
        self.pass_host = pass_host
        # Every server's connections are kept alive between requests.
        self.pooled = pooled
        self.down = down
        self.health_check = health_check
        # sticky.cookie: Sticky over the servers in the rotation, rebuilt with them.
        self.sticky_cookie = sticky
        self.sticks: bool = sticky is not None  # a request's cookies choose (pick_sticky)
        self.sticky: Sticky[Backend] | None = None
        self._set(list(backends))

    def _set(
        self,
        backends: list[tuple[Backend, int]],
        old: SmoothWeightedRoundRobin[Backend] | None = None,
    ) -> None:
        wrr = SmoothWeightedRoundRobin(backends)
        if old is not None:
            wrr.inherit(old, lambda b: b.server.key)
        self._wrr = wrr
        # Every server, the checks' targets (weight 0 ones too, as Traefik checks them).
        self.backends: list[Backend] = [b for b, _ in backends]
        # One server (the common case) and no health to read: nothing to balance.
        self.single: Backend | None = wrr.single if self.down is None else None
        if self.sticky_cookie is not None:
            live = [(b, b.server.url) for b, w in backends if w > 0]
            self.sticky = Sticky(self.sticky_cookie, self.name, live)
            self.single = None

    def update(self, backends: Iterable[tuple[Backend, int]]) -> None:
        """New servers, in place; the rotation goes on for the servers that stay."""
        self._set(list(backends), self._wrr)

    def pick(self) -> Backend | None:
        """The next server up; None when none is (the service answers 503)."""
        down = self.down
        if not down:
            return self._wrr.pick()
        for _ in range(len(self._wrr)):
            backend = self._wrr.pick()
            if backend is None:
                return None
            if backend.server.url not in down:
                return backend
        return None

    def _up(self, backend: Backend) -> bool:
        down = self.down
        return not down or backend.server.url not in down

    def pick_sticky(
        self, cookies: list[bytes], out: list[bytes], client: str = ""
    ) -> Backend | None:
        """``pick()``, where a cookie naming a server up chooses it (``out`` gets the
        Set-Cookie lines the response carries; ``client``, the client's address, is for
        services it chooses: :class:`edge.router.services.HighestRandomWeightService`)."""
        sticky = self.sticky
        if sticky is None:
            return self.pick()
        return sticky.pick(cookies, out, self._up, self.pick)


class Weighted:
    """A weighted service: smooth weighted round robin over child services."""

    __slots__ = ("_by_weight", "_wrr", "name", "pass_host", "pooled", "sticks", "sticky")
    single = None  # never one server to skip the balancing for

    _by_weight: tuple[Service, ...]  # the children in the rotation, heaviest first
    _wrr: SmoothWeightedRoundRobin[Service]
    name: str
    pass_host: bool  # every server of every child gets the client's Host
    pooled: bool  # every child keeps its connections alive
    sticks: bool  # it or a child is sticky: a request's cookies choose (pick_sticky)

    def __init__(
        self, name: str, children: Iterable[tuple[Service, int]], sticky: Cookie | None = None
    ) -> None:
        self.name = name
        children = list(children)
        self._wrr = SmoothWeightedRoundRobin(children)
        self._by_weight = tuple(c for c, w in sorted(children, key=lambda cw: -cw[1]) if w > 0)
        self.pass_host = all(child.pass_host for child, _ in children)
        self.pooled = all(child.pooled for child, _ in children)
        # sticky.cookie: the children in the rotation, by name as Traefik knows them
        # (a child of the same provider by its name in that provider: Traefik keeps
        # references as written, and a provider writes its own unqualified).
        self.sticky: Sticky[Service] | None = None
        if sticky is not None:
            _, at, provider = name.rpartition("@")
            suffix = "@" + provider if at else None
            live = [
                (child, child.name.removesuffix(suffix) if suffix else child.name)
                for child, w in children
                if w > 0
            ]
            self.sticky = Sticky(sticky, name, live)
        self.sticks = sticky is not None or any(child.sticks for child, _ in children)

    def pick(self) -> Backend | None:
        first = self._wrr.pick()
        if first is None:
            return None
        backend = first.pick()
        if backend is not None:
            return backend
        for child in self._fallbacks(first):
            backend = child.pick()
            if backend is not None:
                return backend
        return None

    def _fallbacks(self, tried: Service) -> Iterator[Service]:
        """The children to try, each once, after ``tried`` (the rotation's pick) had no
        server up: the rotation's next picks, so that the others keep their shares, then
        by weight those it did not reach (it can land on one heavy child again and again).
        """
        seen = {id(tried)}
        wrr = self._wrr
        for _ in range(len(wrr) - 1):
            child = wrr.pick()
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                yield child
        for child in self._by_weight:
            if id(child) not in seen:
                seen.add(id(child))
                yield child

    def pick_sticky(
        self, cookies: list[bytes], out: list[bytes], client: str = ""
    ) -> Backend | None:
        """``pick()`` where cookies choose: this service's sticky cookie names a child
        (kept while it has a server up), and each child's its server."""
        sticky = self.sticky
        if sticky is None:
            first = self._wrr.pick()
            if first is None:
                return None
            backend = first.pick_sticky(cookies, out, client)
            if backend is not None:
                return backend
            for child in self._fallbacks(first):
                backend = child.pick_sticky(cookies, out, client)
                if backend is not None:
                    return backend
            return None
        i, current = sticky.find(cookies)
        if i >= 0:
            mark = len(out)
            backend = sticky.members[i].pick_sticky(cookies, out, client)
            if backend is not None:
                if not current:
                    out.insert(mark, sticky.set_cookie[i])
                return backend
            del out[mark:]
        first = self._wrr.pick()
        if first is None:
            return None
        child = first
        mark = len(out)
        backend = child.pick_sticky(cookies, out, client)
        if backend is None:
            del out[mark:]
            for child in self._fallbacks(first):
                backend = child.pick_sticky(cookies, out, client)
                if backend is not None:
                    break
                del out[mark:]
            else:
                return None
        out.insert(mark, sticky.set_cookie[sticky.index[id(child)]])
        return backend


class Failover:
    """A failover service: its main service while that has a server up, else its fallback.

    A child with no server up (every one down, or none at all) picks None, so the
    health of a child, whatever its kind, is what it picks; a failover with neither
    picks None itself, which a weighted or failover parent skips in turn.
    """

    __slots__ = ("fallback", "main", "name", "pass_host", "pooled", "sticks")
    single = None  # never one server to skip the choice for

    main: Service | None
    fallback: Service | None
    name: str
    pass_host: bool  # every server of both children gets the client's Host
    pooled: bool  # both children keep their connections alive
    sticks: bool  # a child is sticky: a request's cookies choose (pick_sticky)

    def __init__(self, name: str, main: Service | None, fallback: Service | None) -> None:
        self.name = name
        self.main = main
        self.fallback = fallback
        children = [c for c in (main, fallback) if c is not None]
        self.pass_host = all(c.pass_host for c in children)
        self.pooled = all(c.pooled for c in children)
        self.sticks = any(c.sticks for c in children)

    def pick(self) -> Backend | None:
        main = self.main
        backend = main.pick() if main is not None else None
        if backend is None and self.fallback is not None:
            return self.fallback.pick()
        return backend

    def pick_sticky(
        self, cookies: list[bytes], out: list[bytes], client: str = ""
    ) -> Backend | None:
        main = self.main
        backend = main.pick_sticky(cookies, out, client) if main is not None else None
        if backend is None and self.fallback is not None:
            return self.fallback.pick_sticky(cookies, out, client)
        return backend


class StatusBackend(Backend):
    """What a :class:`StatusService` picks: no server but the status edge answers
    with; whoever picks a backend answers that before reading anything else of it
    (``server`` and ``transport`` are unset)."""

    __slots__ = ("status",)

    def __init__(self, service: str, status: int) -> None:
        self.service = service
        self.status = status
        self.pass_host = True
        self.health = None


class StatusService:
    """A weighted member with a ``status`` (:class:`edge.config.dynamic.WRRService`):
    picked with its weight like any child, it always picks its
    :class:`StatusBackend`, so its share of the requests gets that status (the
    Gateway API's 500 for a backendRef that cannot be served) while the other members
    keep theirs. Not ``pooled``, so no route through it takes the express path, which
    never looks for a status."""

    __slots__ = ("backend", "name")
    single = None
    pass_host = True
    pooled = False
    sticks = False

    def __init__(self, name: str, status: int) -> None:
        self.name = name
        self.backend = StatusBackend(name, status)

    def pick(self) -> Backend:
        return self.backend

    def pick_sticky(self, cookies: list[bytes], out: list[bytes], client: str = "") -> Backend:
        return self.backend


Service = LoadBalancer | Weighted | Failover | StatusService


class Observers(NamedTuple):
    """What a route's exchanges report to on one entry point, decided once per
    configuration from the router's and the entry point's ``observability``
    (:mod:`edge.entrypoints.observability`): the entry point's meter (None: counted
    nowhere), what reads each finished exchange (the access log, or tracing's hook
    chained to it; None: nothing), and tracing's upstream header edits (None: not
    traced, so the route may take the express path)."""

    meter: Any = None
    record: Callable[..., None] | None = None
    trace: Callable[..., Any] | None = None


UNOBSERVED = Observers()


class Route:
    """What a matched router resolves to: its service, its middleware pipeline, its
    ``timeouts`` in seconds (0: none): ``deadline`` for a whole request, every try
    included, ``try_timeout`` for each try; and what its exchanges report to
    (``observers``, unpacked into ``meter``, ``record`` and ``trace``, which the
    exchange reads: a route is its entry point's, see :meth:`observed`)."""

    __slots__ = (
        "deadline",
        "express",
        "meter",
        "name",
        "observers",
        "pipeline",
        "record",
        "service",
        "trace",
        "try_timeout",
    )

    def __init__(
        self,
        name: str,
        service: Service,
        pipeline: Pipeline = EMPTY_PIPELINE,
        deadline: float = 0.0,
        try_timeout: float = 0.0,
        observers: Observers = UNOBSERVED,
    ) -> None:
        self.name = name
        self.service = service
        self.pipeline = pipeline
        self.deadline = deadline
        self.try_timeout = try_timeout
        self.observers = observers
        self.meter, self.record, self.trace = observers
        # The connection's express path: nothing of the exchange changes (derived
        # from the pipeline, so a middleware added later is never skipped), every
        # server gets the client's Host, and the upstream connection is pooled
        # (a lone Connection: keep-alive holds both ways).
        # A sticky service reads the request's cookies and may set one: never express.
        # Timeouts are kept by the general path alone. A traced route writes the
        # upstream's traceparent, which the express path (the client's own bytes) cannot.
        self.express = (
            pipeline.empty
            and service.pass_host
            and service.pooled
            and not service.sticks
            and not deadline
            and not try_timeout
            and observers.trace is None
        )

    def observed(self, observers: Observers) -> Route:
        """This route on an entry point whose exchanges report to ``observers`` (itself
        when they are its own already): the same service and pipeline."""
        if observers == self.observers:
            return self
        return Route(
            self.name, self.service, self.pipeline, self.deadline, self.try_timeout, observers
        )


class HTTPRouter:
    """The routes of one entrypoint."""

    __slots__ = ("by_host", "table")

    def __init__(self, table: RouteTable) -> None:
        self.table = table
        # host -> Route for hosts the host alone routes (RouteTable.match_host).
        self.by_host = table.by_host

    def match(self, view) -> Route | None:
        return self.table.match(view)

    def __len__(self) -> int:
        return len(self.table)


EMPTY_ROUTER = HTTPRouter(RouteTable(()))
