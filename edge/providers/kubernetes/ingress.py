"""Ingresses -> dynamic configuration: the pure conversion of the kubernetesIngress provider.

Owns :func:`convert`, from a :class:`~edge.providers.kubernetes.objects.ClusterState`
and :class:`IngressOptions` to a :class:`Conversion` (the ``Configuration``, the
problems found, the Ingresses edge is responsible for). Invariants: the same state and
options always give an equal result (every table is walked in sorted order; server lists
are sorted); nothing in the state can make it raise: every bad route is *left out* with
a :class:`Problem` naming the Ingress, the place and the reason, and every other route
is converted; router and service names are unique and never hold ``@`` (the merge adds
``@kubernetes``); the output validates (rules compile, priorities are explicit).

Which Ingresses (IngressClass)
    edge's classes are the IngressClasses whose ``spec.controller`` is
    :data:`CONTROLLER` (``edge.dev/ingress-controller``), restricted to the one named
    ``ingressClass`` when that option is set. An Ingress is served when
    ``spec.ingressClassName`` names one of edge's classes; otherwise when its legacy
    annotation ``kubernetes.io/ingress.class`` names one of them, or equals the
    ``ingressClass`` option (or :data:`DEFAULT_CLASS`, ``edge``, when the option is
    unset), as Traefik does; an Ingress naming no class at all is served when no
    ``ingressClass`` is configured (as Traefik does) or when one of edge's classes is
    the cluster default (``ingressclass.kubernetes.io/is-default-class: "true"``).
    Anything else (a foreign class, a class that does not exist) is ignored silently.

Rules
    Every router says ``ruleSyntax: v3`` (or the ``router.rulesyntax`` annotation's): its
    rule means the same whatever ``core.defaultRuleSyntax`` the user chose. Host ``foo.com`` -> ``Host(`foo.com`)``;
    ``*.foo.com`` matches exactly one label more (``a.foo.com``, not ``foo.com`` nor
    ``a.b.foo.com``), which is what v3's ``Host(`*.foo.com`)`` means: it is written so,
    and the route table indexes it by its wildcard (no regexp per request). No host: any
    host.
    ``Exact /foo`` -> ``Path(`/foo`)``. ``Prefix`` matches path elements: ``/foo`` (or
    ``/foo/``: a trailing slash is ignored) -> ``(Path(`/foo`) || PathPrefix(`/foo/`))``,
    so ``/foo``, ``/foo/`` and ``/foo/bar`` match and ``/foobar`` does not. ``Prefix /``
    matches everything: on a host the rule is ``Host`` alone (edge's fastest route),
    without a host ``PathPrefix(`/`)``. ``ImplementationSpecific`` (and an omitted
    pathType) is ``Prefix``; an empty path is ``/``. A path must start with ``/`` and
    hold no whitespace, control character, backquote or ``%`` (edge matches decoded
    paths, so an encoded rule path could never match): anything else is an invalid path.

Precedence (router priorities; an Ingress' ``router.priority`` annotation overrides)
    The Ingress spec orders by host, then by the longest matching path, then Exact
    before Prefix, across all Ingresses. Priorities carry exactly that, in tiers of
    :data:`TIER` (100,000): exact hosts ``300,000 + rank``, wildcard hosts
    ``200,000 + rank``, no host ``100,000 + rank``, where ``rank = 1 + 2 * length +
    (1 if Exact)`` and ``length`` is the path's length without its trailing slash
    (Prefix) or as written (Exact). Any route for a host beats every host-less route for
    that host's requests; a request none of its host's paths match falls through to the
    wildcard, then the host-less routes (as in Traefik; nginx would answer 404). Paths
    longer than :data:`MAX_PATH_LENGTH` are refused as invalid. Equal priorities (the
    same host and path in two Ingresses) are ordered by router name, that is by
    namespace and Ingress name.

defaultBackend
    An Ingress' ``spec.defaultBackend`` catches the requests for each of its hosts that
    none of the host's paths match: a ``Host`` route at the bottom of the host's tier
    (``300,000`` or ``200,000``), so it beats host-less routes. An Ingress with no
    rules, or with a host-less rule, also offers its defaultBackend as the controller's
    catch-all (``PathPrefix(`/`)``, priority :data:`CATCH_ALL_PRIORITY`, below every
    other route): the first such Ingress in (namespace, name) order wins, the others get
    a problem. (Traefik only reads defaultBackend on Ingresses without rules.)

TLS
    Each ``spec.tls`` entry's Secret (type ``kubernetes.io/tls``, PEM ``tls.crt`` and
    ``tls.key``) becomes one ``tls.certificates`` entry, inline PEM (a value that is
    not PEM is refused: edge would read it as a file path). A route whose host an entry
    lists (equal, or a single-label match of a ``*.`` entry; an entry listing no hosts
    covers every rule of its Ingress, host-less ones included) is emitted twice: the
    router without ``tls`` (plain HTTP) and ``<name>-tls`` with ``tls: {}``, so one
    Ingress answers on ``http://`` and ``https://`` on every entry point. The
    controller's catch-all always has both. An entry with no ``secretName`` gives TLS
    routers served with whatever certificate edge has for the name. When every entry
    covering a host has a missing or bad Secret, that host's ``-tls`` routers are left
    out (plain HTTP still served) and each bad Secret is a problem. ``router.tls:
    "true"`` makes every route of the Ingress TLS-only (``-tls`` routers alone, whatever
    ``spec.tls`` says; a bad Secret then means edge's default certificate).

Services
    A backend names a Service port by number or name (TCP ports only); the servers are
    the ready endpoints of the Service's EndpointSlices whose port has the same name as
    the Service port (the targetPort as resolved by Kubernetes): an endpoint counts
    unless ``ready`` is false or ``terminating`` is true (``ready`` unset means ready,
    per the API; Traefik keeps serving-but-terminating endpoints, edge drops them).
    IPv6 addresses are bracketed; servers are de-duplicated and sorted. A slice of
    ``addressType: FQDN`` names hosts, as an ExternalName Service does (``localhost`` is
    the node's own under hostNetwork), so it counts only when ``allowExternalNameServices``
    is set; else it adds nothing, and a Service with only such slices is refused naming
    them. The scheme is ``https`` for port 443 or a port name starting with ``https``,
    else ``http``.
    ExternalName Services give one server ``externalName:port`` when
    ``allowExternalNameServices`` is set, else the route is left out. A Service with
    no ready endpoint gives a service with no servers (edge answers 503) when
    ``allowEmptyServices`` is set, else the route is left out (both as Traefik). A
    service is named ``<namespace>-<service>-<port>`` (the Service port's name, or its
    number when unnamed) and shared by every route to that Service port, however the
    backend names it.

Annotations (prefixes :data:`ANNOTATION_PREFIXES`: edge's ``edge.ingress.kubernetes.io/``
and Traefik's ``traefik.ingress.kubernetes.io/``, read alike; one key under both must
agree)
    On the Ingress: ``router.entrypoints`` and ``router.middlewares`` (comma-separated;
    middlewares as ``name@provider``), ``router.priority`` (a positive integer, for the
    path routes; defaultBackend routes keep theirs), ``router.tls`` (a boolean),
    ``router.tls.options`` and ``router.tls.domains.<n>.main`` / ``.sans`` (carried by
    the TLS routers, and, as in Traefik, making the routes TLS-only),
    ``router.pathmatcher`` (``Path``, ``PathPrefix`` or ``PathRegexp``, applied as written
    to ImplementationSpecific paths only, as Traefik does), ``router.rulesyntax`` (``v2``
    or ``v3``). On the Service, as Traefik reads them, since one service serves many
    Ingresses: ``service.passhostheader`` (boolean), ``service.serverstransport`` (a
    serversTransport name), ``service.serversscheme`` (``http``, ``https`` or ``h2c``),
    ``service.sticky.cookie`` and ``service.sticky.cookie.{name, secure, httponly,
    samesite, maxage, path, domain}``, ``service.nativelb`` (one server: the cluster
    IP). ``router.tls.certresolver`` (no ACME in edge) and ``service.nodeportlb: true``
    (edge does not read Nodes) are refused as unsupported. An unknown key under either
    prefix, or a bad value, leaves out the whole Ingress (or every route to that
    Service) with a problem: a misspelt middleware must not serve a route unprotected.
    Routes attach to every entry point unless ``router.entrypoints`` names some.

Names (Traefik's style)
    Routers ``<namespace>-<ingress>-<host>-<path>``, ``*.`` hosts as ``wildcard-``,
    every run of characters other than ASCII letters and digits turned into one ``-``;
    defaultBackend routes end in ``-default-backend``. Two elements that would share a
    name both get ``-<10 hex digits of a SHA-256 of what they are>``. A second path of
    one Ingress with the same host, rule and TLS as an earlier one is a duplicate: left
    out with a problem.

Endpoint churn
    :func:`endpoints_only` (:mod:`~edge.providers.kubernetes.endpoints`'s, importable
    from here) tells that two states differ in EndpointSlices alone;
    :func:`update_endpoints` then derives the new conversion from the previous one by
    rebuilding only the services whose slices changed (10 changed slices among 5,000:
    7-9 ms, mostly comparing the tables; a full conversion: about 0.2 s), or says a
    full conversion is needed. Either way the result differs from the last one in server
    lists only, which :func:`edge.config.diff.changed_servers` confirms for the data
    plane's in-place update: names and every other field depend on the other kinds
    alone, and servers are sorted, so slice order never shows. The exception: without
    ``allowEmptyServices`` a Service losing its last ready endpoint removes its routes
    (and gaining one adds them): ``update_endpoints`` answers None, ``changed_servers``
    a full change.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, NamedTuple

import msgspec

from edge.config.dynamic import (
    CertAndStores,
    Configuration,
    Cookie,
    Domain,
    HTTPConfiguration,
    LoadBalancer,
    Middleware,
    Router,
    RouterTLS,
    Server,
    ServersTransport,
    Service,
    Sticky,
    TLSConfiguration,
)
from edge.config.static import KubernetesIngressConfig
from edge.providers.kubernetes.endpoints import (
    HOST_RE,
    changed_services,
    endpoints_only,
    host_port,
    ready_addresses,
    service_port,
    slices_by_service,
)
from edge.providers.kubernetes.objects import (
    INGRESS_CLASS_ANNOTATION,
    ClusterState,
    EndpointSlice,
    Ingress,
    IngressBackend,
    IngressClass,
    Key,
    ServicePort,
)
from edge.providers.kubernetes.objects import Service as KubeService
from edge.providers.kubernetes.secrets import SecretError, tls_certificate

__all__ = [
    "ANNOTATION_PREFIX",
    "ANNOTATION_PREFIXES",
    "CATCH_ALL_PRIORITY",
    "CONTROLLER",
    "DEFAULT_CLASS",
    "MAX_PATH_LENGTH",
    "RULE_SYNTAX",
    "TIER",
    "TRAEFIK_ANNOTATION_PREFIX",
    "Annotate",
    "Conversion",
    "IngressOptions",
    "PathMiddleware",
    "Problem",
    "ProblemKind",
    "RouterOptions",
    "ServiceVariant",
    "convert",
    "edge_classes",
    "endpoints_only",
    "is_selected",
    "router_options",
    "update_endpoints",
]

CONTROLLER = "edge.dev/ingress-controller"
"""The ``spec.controller`` of an IngressClass whose Ingresses edge serves."""

DEFAULT_CLASS = "edge"
"""The class name the legacy annotation uses for edge when no ``ingressClass`` is set."""

ANNOTATION_PREFIX = "edge.ingress.kubernetes.io/"

TRAEFIK_ANNOTATION_PREFIX = "traefik.ingress.kubernetes.io/"
"""Traefik's Ingress annotations, read as edge's own (a Traefik user's Ingresses work)."""

ANNOTATION_PREFIXES = (ANNOTATION_PREFIX, TRAEFIK_ANNOTATION_PREFIX)

TIER = 100_000
"""Priority span of one host tier; see the module doc."""

CATCH_ALL_PRIORITY = 1
"""The controller's catch-all (a defaultBackend of an Ingress without host rules)."""

MAX_PATH_LENGTH = (TIER - 3) // 2
"""The longest rule path whose rank still fits in its tier."""

_EXACT_HOST, _WILDCARD_HOST, _ANY_HOST = 3 * TIER, 2 * TIER, TIER

RULE_SYNTAX = "v3"
"""The ``ruleSyntax`` of every router the conversion makes (the rules are written in it)."""

ServiceKey = tuple[str, str, str]
"""(namespace, service, the Service port's name, or its number when unnamed)."""

ProblemKind = Literal[
    "invalid-annotation",
    "invalid-host",
    "invalid-path",
    "duplicate-path",
    "unsupported-backend",
    "service-not-found",
    "port-not-found",
    "external-name-refused",
    "no-endpoints",
    "secret-not-found",
    "secret-invalid",
    "default-backend-conflict",
]


class Problem(msgspec.Struct, frozen=True):
    """Why (part of) an Ingress is not served.

    ``ingress`` is ``namespace/name``; ``where`` the place in it
    (``spec.rules[0].http.paths[1] (host foo.com, path /api)``, ``spec.defaultBackend``,
    ``spec.tls[0]``, ``metadata.annotations``); ``reason`` says what is wrong
    (``service default/foo not found``).
    """

    ingress: str
    where: str
    kind: ProblemKind
    reason: str

    def __str__(self) -> str:
        return f"ingress {self.ingress}: {self.where}: {self.reason}"


class IngressOptions(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    """The provider options the conversion reads (Traefik's key names)."""

    ingress_class: str = ""
    allow_empty_services: bool = False
    allow_external_name_services: bool = False
    controller: str = CONTROLLER
    scheme_by_port: bool = True  # https for port 443 or a port name https*; else http

    @classmethod
    def from_config(cls, config: KubernetesIngressConfig) -> IngressOptions:
        return cls(
            ingress_class=config.ingress_class,
            allow_empty_services=config.allow_empty_services,
            allow_external_name_services=config.allow_external_name_services,
        )


class Conversion(NamedTuple):
    """What :func:`convert` returns.

    ``selected``: the Ingresses edge is responsible for (whose status it writes),
    problems or not. ``service_names``: which Service port each service of the
    configuration is ((namespace, service, port name or number) -> name), and
    ``refused``: the Services (namespace, name) some backend could not use;
    ``variants``: the services that are an Ingress' copy of one (name -> (Service port,
    what changed)); these three are what :func:`update_endpoints` needs. ``owners``:
    the Ingress of each served router.
    """

    configuration: Configuration
    problems: list[Problem]
    selected: frozenset[Key]
    service_names: Mapping[ServiceKey, str]
    refused: frozenset[Key]
    variants: Mapping[str, tuple[ServiceKey, ServiceVariant]] = {}
    owners: Mapping[str, Key] = {}


# --- class selection ---------------------------------------------------------------------


def edge_classes(
    classes: Mapping[Key, IngressClass], options: IngressOptions
) -> dict[str, IngressClass]:
    """The IngressClasses edge serves, by name (``classes`` as ClusterState keeps them)."""
    return {
        ic.metadata.name: ic
        for ic in classes.values()
        if ic.spec.controller == options.controller
        and (not options.ingress_class or ic.metadata.name == options.ingress_class)
    }


def is_selected(
    ingress: Ingress, classes: Mapping[str, IngressClass], options: IngressOptions
) -> bool:
    """Whether edge serves ``ingress``; ``classes`` are :func:`edge_classes`."""
    name = ingress.spec.ingress_class_name
    if name:
        return name in classes
    legacy = ingress.metadata.annotations.get(INGRESS_CLASS_ANNOTATION, "")
    if legacy:
        return legacy in classes or legacy == (options.ingress_class or DEFAULT_CLASS)
    return not options.ingress_class or any(ic.is_default for ic in classes.values())


# --- annotations -------------------------------------------------------------------------

_TRUE = frozenset({"1", "t", "true"})
_FALSE = frozenset({"0", "f", "false"})
_ROUTER_KEYS = (
    "router.entrypoints",
    "router.middlewares",
    "router.pathmatcher",
    "router.priority",
    "router.rulesyntax",
    "router.tls",
    "router.tls.domains.<n>.main",
    "router.tls.domains.<n>.sans",
    "router.tls.options",
)
_SERVICE_KEYS = (
    "service.nativelb",
    "service.passhostheader",
    "service.serversscheme",
    "service.serverstransport",
    "service.sticky.cookie",
    "service.sticky.cookie.<field>",
)
_UNSUPPORTED = {
    "router.tls.certresolver": "edge has no ACME certificate resolver; name the "
    "certificate's Secret in spec.tls instead",
    "service.nodeportlb": "edge does not read Nodes; let edge balance over the "
    "Service's endpoints, or use service.nativelb",
}
_DOMAIN_RE = re.compile(r"router\.tls\.domains\.(\d{1,3})\.(main|sans)")
_COOKIE_FIELDS = ("domain", "httponly", "maxage", "name", "path", "samesite", "secure")
_PATH_MATCHERS = ("Path", "PathPrefix", "PathRegexp")
_PLAIN_TLS = RouterTLS()


def _own(annotations: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """edge's annotations and Traefik's: lower-cased key after the prefix -> (full key,
    value); ``ValueError`` when both prefixes set one key to different values."""
    found: dict[str, tuple[str, str]] = {}
    for key, value in sorted(annotations.items()):
        lowered = key.lower()
        for prefix in ANNOTATION_PREFIXES:
            if lowered.startswith(prefix):
                short = lowered[len(prefix) :]
                other = found.get(short)
                if other is not None and other[1] != value:
                    raise ValueError(
                        f"annotations {other[0]} and {key} disagree ({other[1]!r}, {value!r})"
                    )
                found.setdefault(short, (key, value))
    return found


def _bool(key: str, value: str) -> bool:
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"annotation {key}: {value!r} is not a boolean (true or false)")


def _list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _unknown(
    key: str, short: str, known: tuple[str, ...], other: tuple[str, ...], where: str
) -> str:
    if short in _UNSUPPORTED:
        return f"annotation {key} is not supported: {_UNSUPPORTED[short]}"
    if short in other or (short.startswith("service.sticky.cookie.") and where == "Service"):
        return f"annotation {key} belongs on the {where}"
    return f"unknown annotation {key} (known: {', '.join(known)})"


@dataclass(frozen=True, slots=True)
class ServiceVariant:
    """An Ingress' own reading of the Services it routes to (another source's
    annotations: ingress-nginx's ``backend-protocol``, ``affinity``, ``upstream-vhost``):
    the routes of that Ingress get a copy of each service, named ``<service>-<suffix>``,
    with these fields changed (None: as the Service says). ``cluster_ip``: one server,
    the Service's cluster IP and port (kube-proxy balances; ingress-nginx's
    ``service-upstream``), when it has one."""

    suffix: str
    scheme: str | None = None
    sticky: Sticky | None = None
    pass_host_header: bool | None = None
    cluster_ip: bool = False
    servers_transport: str | None = None

    def apply(self, service: Service, kube: KubeService | None = None, port: str = "") -> Service:
        """``service`` (built for the Service ``kube``'s port ``port``, its name or
        number) as this variant reads it."""
        lb = service.load_balancer
        assert lb is not None  # services built here are load balancers
        servers = lb.servers
        if self.cluster_ip and kube is not None:
            ip = kube.spec.cluster_ip
            found = [p for p in kube.spec.ports if (p.name or str(p.port)) == port]
            address = (
                host_port(ip, found[0].port, "IPv4") or host_port(ip, found[0].port, "IPv6")
                if found and ip
                else None
            )
            if address is not None:
                scheme = servers[0].url.partition("://")[0] if servers else "http"
                servers = [Server(url=f"{scheme}://{address}")]
        if self.scheme is not None:
            servers = [
                msgspec.structs.replace(s, url=f"{self.scheme}://{s.url.partition('://')[2]}")
                for s in servers
            ]
        return msgspec.structs.replace(
            service,
            load_balancer=msgspec.structs.replace(
                lb,
                servers=servers,
                sticky=self.sticky if self.sticky is not None else lb.sticky,
                pass_host_header=(
                    lb.pass_host_header if self.pass_host_header is None else self.pass_host_header
                ),
                servers_transport=(
                    lb.servers_transport
                    if self.servers_transport is None
                    else self.servers_transport
                ),
            ),
        )


@dataclass(frozen=True, slots=True)
class RouterOptions:
    """What an Ingress' annotations say about its routes (edge's and Traefik's, or
    another source's: :data:`Annotate`)."""

    entry_points: list[str]
    middlewares: list[str]
    priority: int  # 0: computed
    tls_only: bool
    tls: RouterTLS = _PLAIN_TLS  # what the TLS routers carry
    path_matcher: str = ""  # "": edge's element-wise Prefix (ImplementationSpecific paths)
    rule_syntax: str = RULE_SYNTAX
    # Set by other sources only:
    path_regex: bool = False  # ImplementationSpecific paths are case-insensitive regexps
    plain_middlewares: tuple[str, ...] = ()  # first on plain routers (of TLS hosts, unless:)
    plain_everywhere: bool = False  # ... on every plain router
    service: ServiceVariant | None = None
    definitions: Mapping[str, Middleware] = dataclasses.field(default_factory=dict)
    transports: Mapping[str, ServersTransport] = dataclasses.field(default_factory=dict)
    path_middleware: PathMiddleware | None = None  # last on each path's routers


PathMiddleware = Callable[[str], Middleware]
"""A middleware made for one rule path (ingress-nginx's rewrite-target), from the path as
written; named ``<namespace>-<ingress>-rules-<i>-paths-<j>-rewrite``."""


Annotate = Callable[[Ingress, ClusterState], RouterOptions]
"""Reads an Ingress' annotations (``ValueError`` naming the bad one): edge's own
(:func:`router_options`) or another source's."""


def router_options(ing: Ingress, state: ClusterState | None = None) -> RouterOptions:
    """The routes' options from an Ingress' edge and Traefik annotations."""
    return _router_options(ing.metadata.annotations)


def _router_options(annotations: Mapping[str, str]) -> RouterOptions:
    """Parse an Ingress' annotations; ``ValueError`` naming the annotation if bad."""
    entry_points: list[str] = []
    middlewares: list[str] = []
    priority = 0
    tls_only: bool | None = None
    tls_options = ""
    domains: dict[int, dict[str, str | list[str]]] = {}
    path_matcher = matcher_key = ""
    rule_syntax = RULE_SYNTAX
    tls_key = ""  # an annotation that needs TLS routers (router.tls.options, domains)
    for short, (key, value) in sorted(_own(annotations).items()):
        domain = _DOMAIN_RE.fullmatch(short)
        if short == "router.entrypoints":
            entry_points = _list(value)
        elif short == "router.middlewares":
            middlewares = _list(value)
        elif short == "router.priority":
            text = value.strip()
            if not (text.isascii() and text.isdigit() and len(text) <= 18) or int(text) == 0:
                raise ValueError(f"annotation {key}: {value!r} is not a positive integer")
            priority = int(text)
        elif short == "router.tls":
            tls_only = _bool(key, value)
        elif short == "router.tls.options":
            tls_options, tls_key = value.strip(), key
        elif domain is not None:
            entry = domains.setdefault(int(domain.group(1)), {})
            entry[domain.group(2)] = value.strip() if domain.group(2) == "main" else _list(value)
            tls_key = key
        elif short == "router.pathmatcher":
            path_matcher, matcher_key = value.strip(), key
            if path_matcher not in _PATH_MATCHERS:
                raise ValueError(
                    f"annotation {key}: {value!r} is not one of {', '.join(_PATH_MATCHERS)}"
                )
        elif short == "router.rulesyntax":
            rule_syntax = value.strip().lower()
            if rule_syntax not in ("v2", "v3"):
                raise ValueError(f"annotation {key}: {value!r} is not v2 or v3")
        else:
            raise ValueError(_unknown(key, short, _ROUTER_KEYS, _SERVICE_KEYS, "Service"))
    if tls_key and tls_only is False:
        raise ValueError(f"annotation {tls_key} needs TLS, and router.tls is false")
    if path_matcher == "PathRegexp" and rule_syntax == "v2":
        raise ValueError(f"annotation {matcher_key}: PathRegexp is a v3 matcher, the syntax is v2")
    tls = RouterTLS(
        options=tls_options,
        domains=[
            Domain(main=str(d.get("main", "")), sans=list(d.get("sans", [])))
            for _, d in sorted(domains.items())
        ],
    )
    return RouterOptions(
        entry_points,
        middlewares,
        priority,
        bool(tls_only) or bool(tls_key),
        tls,
        path_matcher,
        rule_syntax,
    )


@dataclass(frozen=True, slots=True)
class _ServiceOptions:
    pass_host_header: bool
    servers_transport: str
    scheme: str  # "": by port
    sticky: Sticky | None = None
    native_lb: bool = False


def _service_options(annotations: Mapping[str, str]) -> _ServiceOptions:
    """Parse a Service's annotations; ``ValueError`` naming the annotation if bad."""
    pass_host_header = True
    transport = ""
    scheme = ""
    sticky: bool | None = None
    cookie: dict[str, object] = {}
    native_lb = False
    for short, (key, value) in sorted(_own(annotations).items()):
        field = short.removeprefix("service.sticky.cookie.")
        if short == "service.passhostheader":
            pass_host_header = _bool(key, value)
        elif short == "service.serverstransport":
            transport = value.strip()
        elif short == "service.serversscheme":
            scheme = value.strip().lower()
            if scheme not in ("http", "https", "h2c"):
                raise ValueError(f"annotation {key}: {value!r} is not http, https or h2c")
        elif short == "service.sticky.cookie":
            sticky = _bool(key, value)
        elif field != short and field in _COOKIE_FIELDS:
            cookie[field] = _cookie_field(key, field, value)
        elif short == "service.nativelb":
            native_lb = _bool(key, value)
        elif short == "service.nodeportlb" and not _bool(key, value):
            pass  # false: what edge does anyway
        else:
            raise ValueError(_unknown(key, short, _SERVICE_KEYS, _ROUTER_KEYS, "Ingress"))
    if cookie and sticky is False:
        raise ValueError("service.sticky.cookie is false, and cookie fields are set")
    chosen = None
    if sticky or cookie:
        try:
            chosen = Sticky(
                cookie=msgspec.convert(
                    {
                        "name": cookie.get("name", ""),
                        "secure": cookie.get("secure", False),
                        "httpOnly": cookie.get("httponly", False),
                        "sameSite": cookie.get("samesite", ""),
                        "maxAge": cookie.get("maxage", 0),
                        "path": cookie.get("path", "/"),
                        "domain": cookie.get("domain", ""),
                    },
                    Cookie,
                )
            )
        except msgspec.ValidationError as exc:
            raise ValueError(f"annotations service.sticky.cookie.*: {exc}") from None
    return _ServiceOptions(pass_host_header, transport, scheme, chosen, native_lb)


def _cookie_field(key: str, field: str, value: str) -> object:
    """One ``service.sticky.cookie.<field>`` value, typed."""
    if field in ("secure", "httponly"):
        return _bool(key, value)
    if field == "maxage":
        text = value.strip()
        digits = text.removeprefix("-")
        if not (digits.isascii() and digits.isdigit() and len(digits) <= 12):
            raise ValueError(f"annotation {key}: {value!r} is not an integer")
        return int(text)
    if field == "samesite":
        text = value.strip().lower()
        if text not in ("", "none", "lax", "strict"):
            raise ValueError(f"annotation {key}: {value!r} is not none, lax or strict")
        return text
    return value.strip()


# --- hosts, paths, rules -----------------------------------------------------------------

_BAD_PATH_RE = re.compile(r"[\x00-\x20\x7f`%]")
_NAME_RUN_RE = re.compile(r"[^0-9A-Za-z]+")
_NAME_DASHES = str.maketrans({chr(c): "-" for c in range(128) if not chr(c).isalnum()})


def _check_host(host: str) -> str:
    """The host lower-cased; ``ValueError`` if it is not a DNS name or ``*.`` + one."""
    name = host.lower()
    if len(name) > 253 or not host.isascii() or not HOST_RE.fullmatch(name):
        shown = _shown(host)
        raise ValueError(f"invalid host {shown!r}: not a DNS name or a '*.' wildcard of one")
    return name


def _shown(text: str, limit: int = 100) -> str:
    """``text`` cut for a message: what a user wrote may be megabytes long."""
    return text if len(text) <= limit else f"{text[:limit]}..."


def _host_rule(host: str) -> str:
    return f"Host(`{host}`)"  # v3: a "*." host matches one label more


def _path_match(path_type: str, path: str) -> tuple[bool, str]:
    """(exact, path) checked: the rule path (a Prefix path without its trailing slash,
    ``""`` for ``/``); ``ValueError`` saying why the path is invalid."""
    if path_type not in ("Exact", "Prefix", "ImplementationSpecific", ""):
        raise ValueError(
            f"invalid pathType {path_type!r}: expected Exact, Prefix or ImplementationSpecific"
        )
    exact = path_type == "Exact"
    if not path and path_type in ("ImplementationSpecific", ""):
        path = "/"
    if not path.startswith("/"):
        raise ValueError(f"invalid path {_shown(path)!r}: it must start with '/'")
    bad = _BAD_PATH_RE.search(path)
    if bad is not None:
        reason = f"character {bad.group()!r} is not allowed"
        raise ValueError(f"invalid path {_shown(path)!r}: {reason}")
    if len(path) > MAX_PATH_LENGTH:
        raise ValueError(f"invalid path: longer than {MAX_PATH_LENGTH} characters")
    return exact, path if exact else path.rstrip("/")


def _route_rule(host: str, exact: bool, path: str) -> str:
    if exact:
        path_rule = f"Path(`{path}`)"
    elif not path:  # Prefix "/"
        return _host_rule(host) if host else "PathPrefix(`/`)"
    else:
        path_rule = f"Path(`{path}`) || PathPrefix(`{path}/`)"
        if host:
            path_rule = f"({path_rule})"
    return f"{_host_rule(host)} && {path_rule}" if host else path_rule


def _matcher_rule(host: str, matcher: str, path: str) -> str:
    """The rule of an ImplementationSpecific path under ``router.pathmatcher`` (Traefik's
    reading: the matcher applied to the path as written)."""
    path_rule = f"{matcher}(`{path}`)"
    return f"{_host_rule(host)} && {path_rule}" if host else path_rule


def _tier(host: str) -> int:
    if not host:
        return _ANY_HOST
    return _WILDCARD_HOST if host.startswith("*.") else _EXACT_HOST


def _covers(tls_host: str, host: str) -> bool:
    """Whether a TLS entry's host covers a rule's host (equal, or one label under ``*.``)."""
    if tls_host == host:
        return True
    if tls_host.startswith("*.") and not host.startswith("*."):
        label, dot, parent = host.partition(".")
        return bool(label) and bool(dot) and f"*.{parent}" == tls_host
    return False


def _normalize(text: str) -> str:
    if not text.isascii():
        return _NAME_RUN_RE.sub("-", text).strip("-")
    text = text.translate(_NAME_DASHES)  # as the regexp, in one pass and fewer calls
    while "--" in text:
        text = text.replace("--", "-")
    return text.strip("-")


def _host_name_part(host: str) -> str:
    return f"wildcard-{host[2:]}" if host.startswith("*.") else host


def _where_path(i: int, j: int, host: str, path: str) -> str:
    shown = _shown(path) or "(none)"
    return f"spec.rules[{i}].http.paths[{j}] (host {host or '(any)'}, path {shown})"


# --- services ----------------------------------------------------------------------------


class _Refused(Exception):
    """A backend or Secret cannot be used: the problem's kind and reason."""

    def __init__(self, kind: ProblemKind, reason: str) -> None:
        super().__init__(reason)
        self.kind: ProblemKind = kind
        self.reason = reason


class _Services:
    """Resolves backends to services; each Service port is built once."""

    def __init__(
        self, state: ClusterState, options: IngressOptions, only: set[Key] | None = None
    ) -> None:
        self.state = state
        self.options = options
        self.resolved: dict[tuple[str, str, int, str], ServiceKey | _Refused] = {}
        self.built: dict[ServiceKey, Service] = {}
        self.refused: set[Key] = set()  # Services some backend could not use
        # of the Services in ``only``, or all
        self.slices: dict[Key, list[EndpointSlice]] = slices_by_service(state.endpoint_slices, only)

    def resolve(self, namespace: str, backend: IngressBackend) -> ServiceKey:
        """The service key for a backend; :class:`_Refused` when it cannot be served."""
        if backend.service is None:
            if backend.resource is not None:
                raise _Refused(
                    "unsupported-backend",
                    f"resource backends are not supported ({backend.resource.kind} "
                    f"{backend.resource.name})",
                )
            raise _Refused("unsupported-backend", "the backend names no service")
        port = backend.service.port
        written = (namespace, backend.service.name, port.number, port.name)
        resolved = self.resolved.get(written)
        if resolved is None:
            try:
                resolved = self._resolve(*written)
            except _Refused as refused:
                resolved = refused
                self.refused.add(written[:2])
            self.resolved[written] = resolved
        if isinstance(resolved, _Refused):
            raise resolved
        return resolved

    def _resolve(self, namespace: str, name: str, number: int, port_name: str) -> ServiceKey:
        what = f"service {namespace}/{name}"
        svc: KubeService | None = self.state.services.get((namespace, name))
        if svc is None:
            raise _Refused("service-not-found", f"{what} not found")
        if not number and not port_name:
            raise _Refused("port-not-found", f"the backend names no port of {what}")
        found = service_port(svc, number, port_name)
        if found is None:
            shown = number if number else repr(port_name)
            raise _Refused("port-not-found", f"port {shown} not found on {what}")
        key = (namespace, name, found.name or str(found.port))
        if key not in self.built:
            self.built[key] = self._build(what, svc, found)
        return key

    def rebuild(self, key: ServiceKey) -> Service:
        """The service for ``key`` again (its Service unchanged, its endpoints maybe not);
        :class:`_Refused` when it can no longer be served."""
        svc = self.state.services[key[:2]]
        for port in svc.spec.ports:
            if (port.name or str(port.port)) == key[2] and port.protocol in ("TCP", ""):
                return self._build(f"service {key[0]}/{key[1]}", svc, port)
        raise _Refused("port-not-found", f"port {key[2]} not found on service {key[0]}/{key[1]}")

    def _build(self, what: str, svc: KubeService, service_port: ServicePort) -> Service:
        try:
            opts = _service_options(svc.metadata.annotations)
        except ValueError as exc:
            raise _Refused("invalid-annotation", f"{what}: {exc}") from None
        external = svc.spec.type == "ExternalName"
        if external and not self.options.allow_external_name_services:
            raise _Refused(
                "external-name-refused",
                f"{what} is an ExternalName service and allowExternalNameServices is off",
            )
        by_port = self.options.scheme_by_port and (
            service_port.port == 443 or service_port.name.startswith("https")
        )
        scheme = opts.scheme or ("https" if by_port else "http")
        urls: set[str] = set()
        hosts: list[str] = []  # FQDN slices refused
        if opts.native_lb and not external:
            ip = svc.spec.cluster_ip
            if not ip or ip == "None":
                raise _Refused(
                    "unsupported-backend",
                    f"{what}: service.nativelb needs a cluster IP, and the Service is headless",
                )
            address = host_port(ip, service_port.port, "IPv4") or host_port(
                ip, service_port.port, "IPv6"
            )
            if address is None:
                raise _Refused("unsupported-backend", f"{what}: clusterIP {ip!r} is not an IP")
            urls.add(f"{scheme}://{address}")
        elif external:
            address = host_port(svc.spec.external_name, service_port.port)
            if address is None:
                raise _Refused(
                    "unsupported-backend",
                    f"{what}: externalName {svc.spec.external_name!r} is not a host name",
                )
            urls.add(f"{scheme}://{address}")
        else:
            addresses, hosts = ready_addresses(
                self.slices.get(svc.metadata.key, ()),
                service_port.name,
                allow_fqdn=self.options.allow_external_name_services,
            )
            urls = {f"{scheme}://{address}" for address in addresses}
        if not urls and hosts and not self.options.allow_empty_services:
            raise _Refused(
                "external-name-refused",
                f"{what}: its EndpointSlices {', '.join(hosts)} name hosts (addressType FQDN) "
                "and allowExternalNameServices is off",
            )
        if not urls and not self.options.allow_empty_services:
            raise _Refused(
                "no-endpoints",
                f"{what} has no ready endpoints for port {service_port.name or service_port.port}",
            )
        return Service(
            load_balancer=LoadBalancer(
                servers=[Server(url=url) for url in sorted(urls)],
                pass_host_header=opts.pass_host_header,
                servers_transport=opts.servers_transport,
                sticky=opts.sticky,
            )
        )


# --- the conversion ----------------------------------------------------------------------


@dataclass(slots=True)
class _Route:
    base: str  # the name before de-duplication
    identity: str  # what the route is; unique per route
    rule: str
    priority: int
    service: ServiceKey
    entry_points: list[str]
    middlewares: list[str]
    tls: bool
    problem: str = ""  # set: a stand-in for a route that cannot be served, disabled with it
    tls_config: RouterTLS = _PLAIN_TLS
    rule_syntax: str = RULE_SYNTAX
    variant: ServiceVariant | None = None
    owner: Key = ("", "")  # the Ingress


def _unique_names(candidates: list[tuple[str, str]]) -> list[str]:
    """(base name, identity) pairs with distinct identities -> unique names, in order.

    A base name used once is kept; every use of a shared one gets a hash of its identity.
    """
    counts = Counter(base for base, _ in candidates)
    taken = {base for base, count in counts.items() if count == 1}
    names = []
    for base, identity in candidates:
        if counts[base] == 1:
            names.append(base)
            continue
        digest = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()
        size = 10
        name = f"{base}-{digest[:size]}"
        while name in taken:
            size += 6
            name = f"{base}-{digest[:size]}"
        taken.add(name)
        names.append(name)
    return names


class _Converter:
    def __init__(
        self, state: ClusterState, options: IngressOptions, annotate: Annotate = router_options
    ) -> None:
        self.state = state
        self.options = options
        self.annotate = annotate
        self.owner: Key = ("", "")  # the Ingress being converted
        self.definitions: dict[str, Middleware] = {}  # middlewares the annotations made
        self.transports: dict[str, ServersTransport] = {}  # and serversTransports
        self.services = _Services(state, options)
        self.routes: list[_Route] = []
        self.problems: list[Problem] = []
        self.certificates: dict[Key, CertAndStores] = {}
        self.catch_all_from: str = ""

    def problem(
        self,
        ingress: str,
        where: str,
        kind: ProblemKind,
        reason: str,
        stand_in: tuple[str, str, str, RouterOptions] | None = None,
    ) -> None:
        """Record a problem; ``stand_in`` (base name, identity, rule, options): the route
        it left out, published as a disabled router whose error is the problem, so the
        API shows it where the user looks for the route (as Traefik shows a router whose
        service is missing). Problems with no route (a Secret) have none."""
        found = Problem(ingress, where, kind, reason)
        self.problems.append(found)
        if stand_in is not None:
            base, identity, rule, ropts = stand_in
            self.routes.append(
                _Route(
                    base,
                    f"{identity}|left-out",
                    rule,
                    0,
                    ("", "", ""),
                    ropts.entry_points,
                    [],
                    False,
                    str(found),
                )
            )

    def ingress(self, ing: Ingress) -> None:
        ns, name = ing.metadata.key
        self.owner = (ns, name)
        label = f"{ns}/{name}"
        try:
            ropts = self.annotate(ing, self.state)
        except ValueError as exc:
            stand_in = (_normalize(f"{ns}-{name}"), label, "", RouterOptions([], [], 0, False))
            self.problem(label, "metadata.annotations", "invalid-annotation", str(exc), stand_in)
            return
        tls_hosts, tls_all = self.tls(ing, label)
        prefix = f"{ns}-{name}"
        seen: dict[str, tuple[int, int]] = {}  # rule text -> (rule, path) defining it first
        hosts: list[str] = []  # valid hosts of the rules, in order, for the defaultBackend
        any_host = not ing.spec.rules

        def with_tls(host: str) -> tuple[bool, ...]:
            """Which routers a route of ``host`` gets: plain, TLS, or both."""
            if ropts.tls_only:
                return (True,)
            covered = tls_all or (bool(host) and any(_covers(t, host) for t in tls_hosts))
            return (False, True) if covered else (False,)

        for i, rule in enumerate(ing.spec.rules):
            host = rule.host
            if host:
                try:
                    host = _check_host(host)
                except ValueError as exc:
                    stand_in = (_normalize(f"{prefix}-rules-{i}"), f"{label}|rules|{i}", "", ropts)
                    self.problem(label, f"spec.rules[{i}]", "invalid-host", str(exc), stand_in)
                    continue
                if host not in hosts:
                    hosts.append(host)
            else:
                any_host = True
            if rule.http is None:
                continue
            for j, path in enumerate(rule.http.paths):
                base = _normalize(f"{prefix}-{_host_name_part(host)}{path.path}")
                where = _where_path(i, j, host, path.path)
                identity = f"{label}|{i}|{j}"
                try:
                    exact, rule_path = _path_match(path.path_type, path.path)
                except ValueError as exc:
                    stand_in = (base, identity, _host_rule(host) if host else "", ropts)
                    self.problem(label, where, "invalid-path", str(exc), stand_in)
                    continue
                if ropts.path_regex and path.path_type in ("ImplementationSpecific", ""):
                    text = _matcher_rule(host, "PathRegexp", f"(?i)^{path.path or '/'}")
                elif ropts.path_matcher and path.path_type in ("ImplementationSpecific", ""):
                    rule_path = path.path or "/"
                    text = _matcher_rule(host, ropts.path_matcher, rule_path)
                else:
                    text = _route_rule(host, exact, rule_path)
                try:
                    service = self.services.resolve(ns, path.backend)
                except _Refused as refused:
                    stand_in = (base, identity, text, ropts)
                    self.problem(label, where, refused.kind, refused.reason, stand_in)
                    continue
                first = seen.get(text)
                if first is not None:
                    reason = (
                        f"the same host and path as spec.rules[{first[0]}].http.paths[{first[1]}]"
                    )
                    stand_in = (base, identity, text, ropts)
                    self.problem(label, where, "duplicate-path", f"{reason}; left out", stand_in)
                    continue
                seen[text] = (i, j)
                rank = 1 + 2 * len(rule_path) + (1 if exact else 0)
                priority = ropts.priority or _tier(host) + rank
                path_ropts = ropts
                if ropts.path_middleware is not None:
                    made = _normalize(f"{prefix}-rules-{i}-paths-{j}-rewrite")
                    path_ropts = dataclasses.replace(
                        ropts,
                        middlewares=[*ropts.middlewares, made],
                        definitions={made: ropts.path_middleware(path.path or "/")},
                    )
                for tls in (tlses := with_tls(host)):
                    plain_extra = not tls and (ropts.plain_everywhere or len(tlses) == 2)
                    self.add(
                        base,
                        f"{label}|{text}",
                        text,
                        priority,
                        service,
                        path_ropts,
                        tls,
                        plain_extra,
                    )

        backend = ing.spec.default_backend
        if backend is None:
            return
        try:
            service = self.services.resolve(ns, backend)
        except _Refused as refused:
            stand_in = (_normalize(f"{prefix}-default-backend"), f"{label}|default", "", ropts)
            self.problem(label, "spec.defaultBackend", refused.kind, refused.reason, stand_in)
            return
        no_priority = dataclasses.replace(ropts, priority=0)
        for host in hosts:
            base = _normalize(f"{prefix}-{_host_name_part(host)}-default-backend")
            text = _host_rule(host)
            identity = f"{label}|default|{host}"
            for tls in (tlses := with_tls(host)):
                plain_extra = not tls and (ropts.plain_everywhere or len(tlses) == 2)
                self.add(base, identity, text, _tier(host), service, no_priority, tls, plain_extra)
        if any_host:
            if self.catch_all_from:
                reason = f"the controller's default backend is ingress {self.catch_all_from}'s"
                stand_in = (
                    f"{prefix}-default-backend",
                    f"{label}|catch-all",
                    "PathPrefix(`/`)",
                    ropts,
                )
                self.problem(
                    label, "spec.defaultBackend", "default-backend-conflict", reason, stand_in
                )
                return
            self.catch_all_from = label
            base, identity = f"{prefix}-default-backend", f"{label}|catch-all"
            for tls in (True,) if ropts.tls_only else (False, True):
                self.add(
                    base,
                    identity,
                    "PathPrefix(`/`)",
                    CATCH_ALL_PRIORITY,
                    service,
                    no_priority,
                    tls,
                    not tls,
                )

    def add(
        self,
        base: str,
        identity: str,
        rule: str,
        priority: int,
        service: ServiceKey,
        ropts: RouterOptions,
        tls: bool,
        plain_extra: bool = False,
    ) -> None:
        """One router; ``plain_extra``: it gets ``ropts.plain_middlewares`` first."""
        if tls:
            base, identity = f"{base}-tls", f"{identity}|tls"
        middlewares = ropts.middlewares
        if plain_extra and ropts.plain_middlewares:
            middlewares = [*ropts.plain_middlewares, *middlewares]
        route = _Route(
            base,
            identity,
            rule,
            priority,
            service,
            ropts.entry_points,
            middlewares,
            tls,
            tls_config=ropts.tls,
            rule_syntax=ropts.rule_syntax,
            variant=ropts.service,
            owner=self.owner,
        )
        self.routes.append(route)
        self.definitions.update(ropts.definitions)
        self.transports.update(ropts.transports)

    def tls(self, ing: Ingress, label: str) -> tuple[list[str], bool]:
        """Load the Secrets of ``spec.tls``; the hosts served over TLS, and whether some
        good entry lists no hosts (covering every rule)."""
        ns = ing.metadata.namespace
        hosts: list[str] = []
        every = False
        for i, entry in enumerate(ing.spec.tls):
            if entry.secret_name:
                key = (ns, entry.secret_name)
                try:
                    if key not in self.certificates:
                        self.certificates[key] = self.certificate(key)
                except _Refused as refused:
                    self.problem(label, f"spec.tls[{i}]", refused.kind, refused.reason)
                    continue
            if not entry.hosts:
                every = True
            hosts.extend(h.lower() for h in entry.hosts)
        return hosts, every

    def certificate(self, key: Key) -> CertAndStores:
        try:
            return tls_certificate(self.state.secrets, key)
        except SecretError as exc:
            raise _Refused(exc.kind, exc.reason) from None

    def result(self, selected: frozenset[Key]) -> Conversion:
        used = sorted({route.service for route in self.routes if not route.problem})
        service_names = dict(
            zip(
                used,
                _unique_names([(_normalize("-".join(key)), "/".join(key)) for key in used]),
                strict=True,
            )
        )
        served = [r for r in self.routes if not r.problem]
        left_out = [r for r in self.routes if r.problem]
        names = _unique_names([(r.base, r.identity) for r in served])
        # Stand-ins are named apart, so that one never renames a served router.
        taken = set(names)
        for name, route in zip(
            _unique_names([(f"{r.base}-left-out", r.identity) for r in left_out]),
            left_out,
            strict=True,
        ):
            while name in taken:
                name = f"{name}-{hashlib.sha256(route.identity.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}"
            taken.add(name)
            names.append(name)
        self.routes = served + left_out
        router_names = names
        # Variants: an Ingress' own copy of a service (ServiceVariant), named after it.
        variants: dict[str, tuple[ServiceKey, ServiceVariant]] = {}
        route_services: list[str] = []
        for route in served:
            service_name = service_names[route.service]
            if route.variant is not None:
                service_name = f"{service_name}-{route.variant.suffix}"
                variants[service_name] = (route.service, route.variant)
            route_services.append(service_name)
        route_services.extend("" for _ in left_out)
        owners = {
            name: route.owner
            for name, route in zip(router_names, self.routes, strict=True)
            if not route.problem
        }
        routers = {
            name: Router(
                rule=route.rule,
                service=service_name,
                entry_points=list(route.entry_points),
                priority=route.priority,
                middlewares=list(route.middlewares),
                tls=route.tls_config if route.tls else None,
                rule_syntax=route.rule_syntax,
            )
            if not route.problem
            else Router(
                rule=route.rule,
                service="",
                entry_points=list(route.entry_points),
                rule_syntax=RULE_SYNTAX,
                problems=[route.problem],
            )
            for name, route, service_name in zip(
                router_names, self.routes, route_services, strict=True
            )
        }
        plain = {n for n in route_services if n in service_names.values()}
        services = {
            name: self.services.built[key] for key, name in service_names.items() if name in plain
        }
        for name, (key, variant) in variants.items():
            kube = self.state.services.get(key[:2])
            services[name] = variant.apply(self.services.built[key], kube, key[2])
        certificates = [self.certificates[key] for key in sorted(self.certificates)]
        configuration = Configuration(
            http=HTTPConfiguration(
                routers=routers,
                services=dict(sorted(services.items())),
                middlewares={  # those some router uses
                    name: made
                    for name, made in sorted(self.definitions.items())
                    if any(name in r.middlewares for r in served)
                },
                servers_transports={  # those some variant uses
                    name: made
                    for name, made in sorted(self.transports.items())
                    if any(v.servers_transport == name for _, v in variants.values())
                },
            ),
            tls=TLSConfiguration(certificates=certificates) if certificates else None,
        )
        refused = frozenset(self.services.refused)
        return Conversion(
            configuration, self.problems, selected, service_names, refused, variants, owners
        )


def convert(
    state: ClusterState,
    options: IngressOptions | None = None,
    *,
    select: Callable[[Ingress], bool] | None = None,
    annotate: Annotate = router_options,
) -> Conversion:
    """The dynamic configuration for ``state`` (see the module doc for every rule).

    Another source converting Ingresses its own way (ingress-nginx's) says which it
    serves (``select``; default: edge's classes) and how it reads their annotations
    (``annotate``)."""
    options = options or IngressOptions()
    if select is None:
        classes = edge_classes(state.ingress_classes, options)

        def select(ing: Ingress) -> bool:
            return is_selected(ing, classes, options)

    converter = _Converter(state, options, annotate)
    selected = []
    for key in sorted(state.ingresses):
        ing = state.ingresses[key]
        if select(ing):
            selected.append(key)
            converter.ingress(ing)
    return converter.result(frozenset(selected))


# --- endpoint churn ----------------------------------------------------------------------


def update_endpoints(
    previous: Conversion,
    old: ClusterState,
    new: ClusterState,
    options: IngressOptions | None = None,
) -> Conversion | None:
    """``convert(new, options)``, built from ``previous`` (``convert(old, options)``) at a
    cost that grows with the EndpointSlices changed, not the cluster; None when that is
    not possible and :func:`convert` must run: the states differ in more than
    EndpointSlices, or a changed Service was refused before, or is now (its last ready
    endpoint gone without ``allowEmptyServices``), since routes then come or go.
    """
    if not endpoints_only(old, new) or previous.configuration.http is None:
        return None
    options = options or IngressOptions()
    affected = changed_services(old.endpoint_slices, new.endpoint_slices)
    if affected & previous.refused:
        return None
    builder = _Services(new, options, only=affected)
    services = dict(previous.configuration.http.services)
    try:
        for service_key, name in previous.service_names.items():
            if service_key[:2] in affected and name in services:
                services[name] = builder.rebuild(service_key)
        for name, (service_key, variant) in previous.variants.items():
            if service_key[:2] in affected:
                kube = new.services.get(service_key[:2])
                services[name] = variant.apply(builder.rebuild(service_key), kube, service_key[2])
    except _Refused:
        return None
    http = msgspec.structs.replace(previous.configuration.http, services=services)
    configuration = msgspec.structs.replace(previous.configuration, http=http)
    return previous._replace(configuration=configuration)
