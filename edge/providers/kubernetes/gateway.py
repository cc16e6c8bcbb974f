"""Gateway API objects -> dynamic configuration and status: the Gateway provider's pure
conversion.

Owns :func:`convert`, from a :class:`GatewayState` and :class:`GatewayOptions` to a
:class:`Conversion`: the ``Configuration`` (names qualified ``@kubernetesgateway`` by
the merge, as Traefik's), the problems found, and the status each object should hold
(:class:`WantedStatus`: conditions without their transition time, which the writer,
:mod:`edge.providers.kubernetes.gateway_status`, keeps or sets). Invariants: the same
state and options give an equal result (every table is walked in key order); nothing in
the state makes it raise: what cannot be served is said in the object's status with
the spec's reason, and logged once as a :class:`Problem`.

Which objects (``gateway.networking.k8s.io``)
    GatewayClasses whose ``controllerName`` is edge's (``options.controller_name``,
    :data:`CONTROLLER_NAME` by default); Gateways of those classes; HTTPRoutes,
    GRPCRoutes (and with ``experimentalChannel`` TLSRoutes, TCPRoutes and UDPRoutes)
    whose ``parentRefs`` name such a Gateway. Namespaced objects only in
    ``namespaces`` (every namespace when empty). A parentRef to a Gateway edge does not own is not
    edge's business: no status is written for it.

GatewayClass
    ``Accepted``, and ``SupportedVersion`` (:func:`supported_version`): whether every
    Gateway API CRD's ``bundle-version`` is a release edge knows (v1.1 to v1.6);
    when not, edge still serves what it reads (``Accepted`` stays True, the spec's
    "best effort") and names the CRDs it doubts.

Listeners
    A listener is bound to the edge entry point listening on its port (a UDP entry
    point for ``UDP``, a TCP one otherwise), as Traefik binds them; none: ``Accepted``
    False, ``PortUnavailable``, unless ``openListeners``: then its routers name the
    entry point opened at run time for the port (``":<port>"``, ``":<port>/udp"``:
    :mod:`edge.entrypoints.opened`), and a port that could not be opened
    (``GatewayState.unopened``) is ``Accepted`` False, ``PortUnavailable``, naming the
    error, its routers kept so that edge keeps trying the port. ``HTTP`` and ``HTTPS``
    listeners carry HTTPRoutes and GRPCRoutes (edge speaks h2c with prior knowledge
    and h2 by ALPN to clients, as the GRPCRoute spec requires of them);
    with ``experimentalChannel`` (the routes' ``v1`` CRDs came with Gateway API
    v1.6), ``TLS`` listeners carry TLSRoutes (and TCPRoutes when they terminate),
    ``TCP`` ones TCPRoutes and ``UDP`` ones UDPRoutes; without it those three
    protocols are ``UnsupportedProtocol``. An HTTPS listener, and a TLS one in
    ``Terminate`` mode, terminates with its ``certificateRefs`` (Secrets of type
    ``kubernetes.io/tls``, another namespace's only with a ReferenceGrant), read as
    every conversion reads them (:mod:`edge.providers.kubernetes.secrets`); one whose
    certificates do not resolve stays ``Accepted`` with ``ResolvedRefs`` False and
    ``Programmed`` False: routes attach to it and are counted, their own references
    judged, but nothing is served there. ``Passthrough`` reads no certificate and is
    refused on HTTPS (``UnsupportedProtocol``). Two listeners of one Gateway with the same port,
    protocol and hostname are both ``Conflicted`` (``HostnameConflict``) and neither
    is served; so are all listeners of a port a TCP listener shares with another
    protocol (``ProtocolConflict``). ``allowedRoutes.kinds`` naming a kind the listener cannot carry:
    ``ResolvedRefs`` False, ``InvalidRouteKinds`` (the others stay).
    ``attachedRoutes`` counts the routes accepted on each listener.

TLSRoute, TCPRoute, UDPRoute
    Each rule is one TCP router (UDP for a UDPRoute) on the listener's entry point,
    named as Traefik names them (``<kind>-<ns>-<name>-gw-<ns>-<gw>-ep-<ep>-<i>``
    and the hash of an empty rule), over a weighted service of one load balancer per
    backendRef (the Service port of the route's protocol). A TLSRoute matches
    ``HostSNI`` of its hostnames intersected with the listener's (a wildcard:
    ``HostSNIRegexp``), passed through untouched on a Passthrough listener; a
    TCPRoute matches ``HostSNI("*")``, terminated on a TLS listener, raw on a TCP one.

HTTPRoutes
    Each ``parentRef`` is matched to the Gateway's listeners by ``sectionName`` and
    ``port`` (``NoMatchingParent`` if none), then by ``allowedRoutes``
    (``NotAllowedByListeners``) and hostnames (``hostnames`` intersected with the
    listener's ``hostname``: ``NoMatchingListenerHostname`` when empty). Each match of
    each rule becomes one router per accepted listener, on its entry point, named as
    Traefik names them (:func:`router_key`), its rule in edge's v3 language and its
    priority the spec's precedence (:func:`match_rule`: the longest hostname, an Exact
    path, then the longest path, then method, headers and query parameters; equal
    precedence fall to the route's namespace/name (the spec's oldest-route tie-break
    needs ``creationTimestamp``, which ObjectMeta does not read yet), then the first
    rule and match, by index: :meth:`_Converter.break_ties`). ``PathPrefix`` matches whole segments (``/foo`` is ``/foo``
    and ``/foo/...``, never ``/foobar``).

GRPCRoutes
    Attach as HTTPRoutes do (parentRefs, allowedRoutes, hostnames). Each match of each
    rule becomes one router per accepted listener (``grpcroute-...``, as Traefik names
    them) whose rule matches the call's path ``/<service>/<method>``
    (:func:`grpc_match_rule`: ``Exact`` or ``RegularExpression``, either part may be
    omitted; header matches ``Exact`` or ``RegularExpression``, a name given twice read
    once) and whose priority is the GRPCRoute precedence (non-wildcard hostname, any
    hostname, service, method characters, then header matches; ties as HTTPRoutes').
    Filters as an HTTPRoute's (RequestHeaderModifier, ResponseHeaderModifier,
    RequestMirror, whose copies go over HTTP/2 to the mirror's h2c servers);
    ExtensionRef is ``UnsupportedValue``, the rule answering 503; a match type edge does not know is
    ``UnsupportedValue`` and makes no router. Its backends are spoken to as h2c
    (``h2c://``), and the share of one that cannot be served gets 503, which a gRPC
    client reads as UNAVAILABLE (the spec's code); a call no router matches gets edge's
    404, UNIMPLEMENTED. An HTTPRoute and a GRPCRoute whose hostnames meet on one
    listener: the older (``creationTimestamp``, then namespace/name) is accepted there
    and the other is not (``Accepted`` False, ``NotAllowedByListeners``, naming the
    route that holds the hostnames; the spec names no reason), as the spec says
    (:meth:`_Converter.kind_conflicts`).

Backends
    Every rule's router goes to a weighted service (``<router>-wrr``) over one load
    balancer per backendRef (``<router>-svc-<ns>-<name>-<i>``) with its ``weight``
    (0: never chosen). A Service's servers are its ready endpoints on the named port
    (:mod:`edge.providers.kubernetes.endpoints`). A backendRef that cannot be served (a
    Service not found, no port, another kind, another namespace without a
    ReferenceGrant) is a member with ``status: 500`` in its place, so its share of the
    requests gets 500, as the spec asks, while the others keep theirs, and the route's
    ``ResolvedRefs`` is False (``BackendNotFound``, ``InvalidKind``,
    ``RefNotPermitted``). A rule with no backendRef answers 500 alike. A Service with
    no ready endpoint is a load balancer without servers: its share goes to the other
    members, and with none left edge answers 503 (the spec's SHOULD). Edge speaks to
    an HTTPRoute's servers (and its mirrors') as their Service port's ``appProtocol``
    says (GEP-1911: ``kubernetes.io/h2c`` HTTP/2 with prior knowledge, ``h2c://``;
    ``kubernetes.io/ws`` and ``http`` HTTP/1.1; ``kubernetes.io/wss`` and ``https``
    over TLS), HTTP/1.1 without one; another appProtocol makes the backendRef one
    that cannot be served (``UnsupportedProtocol``).

Endpoint churn
    :func:`update_endpoints` rebuilds only the load balancers of the Services whose
    EndpointSlices changed (each load balancer's origin is in
    :attr:`Conversion.backends`), giving what a whole conversion would.

Filters
    ``RequestHeaderModifier`` and ``ResponseHeaderModifier`` become a ``headers``
    middleware (``set`` sets the header, ``remove`` removes it, a request's ``add``
    appends to it, ``appendRequestHeaders``; a response's ``add`` sets it: an ``add``
    to a header the response already holds replaces it); ``RequestRedirect`` a
    ``redirectRegex`` over the whole URL, answering its ``statusCode`` (301, 302,
    303, 307 or 308) whatever the method; ``RequestMirror`` makes the rule's service a
    ``mirroring`` one over it, copying ``percent`` (or ``fraction``, rounded to a
    whole percent) of the requests to the mirror's Service; ``URLRewrite`` a ``headers`` middleware
    setting Host and a ``replacePath`` (``ReplaceFullPath``) or ``replacePathRegex``
    (``ReplacePrefixMatch``). Any other filter and a filter on a backendRef are not
    supported: the rule answers 503 and the route's ``Accepted`` is False
    (``UnsupportedValue``), naming it.

Timeouts
    A rule's ``timeouts`` (GEP-1742) are its routers' ``timeouts``, by the same names:
    ``request`` bounds a request from its arrival to its response's end, every try
    included, ``backendRequest`` each try to a backend; one that runs out answers 504
    (or cuts a response begun); ``0s`` is no bound. A duration that does not parse is
    ``UnsupportedValue``, as above.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

import msgspec

from edge.config.durations import Duration, parse_duration
from edge.config.dynamic import (
    CertAndStores,
    Configuration,
    Headers,
    HTTPConfiguration,
    LoadBalancer,
    Middleware,
    Mirroring,
    MirrorService,
    RedirectRegex,
    ReplacePath,
    ReplacePathRegex,
    Router,
    RouterTimeouts,
    RouterTLS,
    Server,
    Service,
    TCPConfiguration,
    TCPLoadBalancer,
    TCPRouter,
    TCPRouterTLS,
    TCPServer,
    TCPService,
    TLSConfiguration,
    UDPConfiguration,
    UDPLoadBalancer,
    UDPRouter,
    UDPServer,
    UDPService,
    Weighted,
    WRRService,
)
from edge.config.static import runtime_entry_point
from edge.providers.kubernetes import objects
from edge.providers.kubernetes.endpoints import (
    changed_services,
    ready_addresses,
    service_port,
    slices_by_service,
)
from edge.providers.kubernetes.objects import Key
from edge.providers.kubernetes.secrets import SecretError, tls_certificate

__all__ = [
    "BUNDLE_VERSION",
    "CONTROLLER_NAME",
    "GROUP",
    "PROVIDER",
    "Condition",
    "Conversion",
    "CustomResourceDefinition",
    "EntryPointPort",
    "GRPCMethodMatch",
    "GRPCRoute",
    "GRPCRouteMatch",
    "GatewayOptions",
    "GatewayState",
    "Problem",
    "WantedStatus",
    "convert",
    "grpc_match_rule",
    "intersect_hostnames",
    "match_rule",
    "router_key",
    "supported_version",
    "update_endpoints",
]

PROVIDER = "kubernetesgateway"
"""The provider name Traefik gives these elements (``…@kubernetesgateway``)."""

CONTROLLER_NAME = "edge.dev/gateway-controller"
"""The ``controllerName`` of the GatewayClasses edge serves, unless configured."""

GROUP = "gateway.networking.k8s.io"

HTTP_ROUTE = "HTTPRoute"
GRPC_ROUTE = "GRPCRoute"
TLS_ROUTE = "TLSRoute"
TCP_ROUTE = "TCPRoute"
UDP_ROUTE = "UDPRoute"

_ROUTE_KINDS = {
    "HTTP": (HTTP_ROUTE, GRPC_ROUTE),
    "HTTPS": (HTTP_ROUTE, GRPC_ROUTE),
    "TLS": (TLS_ROUTE, TCP_ROUTE),  # Passthrough: TLSRoute only
    "TCP": (TCP_ROUTE,),
    "UDP": (UDP_ROUTE,),
}
"""The route kinds each listener protocol carries."""


# --- what goes in and out -------------------------------------------------------------


class EntryPointPort(NamedTuple):
    """An edge entry point a listener may bind to: its name, port and whether UDP."""

    name: str
    port: int
    udp: bool = False


class GatewayOptions(msgspec.Struct, frozen=True):
    """What the conversion reads of the provider's configuration and of edge's."""

    controller_name: str = CONTROLLER_NAME
    namespaces: tuple[str, ...] = ()
    entry_points: tuple[EntryPointPort, ...] = ()
    experimental_channel: bool = False  # TLSRoute, TCPRoute and UDPRoute are read
    open_listeners: bool = False  # a listener on a port no entry point has gets one


BUNDLE_VERSION = "gateway.networking.k8s.io/bundle-version"
"""The annotation every Gateway API CRD carries: the release it came with."""

_KNOWN_BUNDLE = re.compile(r"v1\.[1-6]\.[0-9]+(?:-[0-9A-Za-z.-]+)?")
"""The releases edge knows: v1.1 (the first with every kind it always reads at
``v1``: GRPCRoute came then) to v1.6 (TLSRoute, TCPRoute and UDPRoute at ``v1``),
any patch."""

_GATEWAY_API_GROUPS = frozenset({GROUP, "gateway.networking.x-k8s.io"})


class CRDSpec(msgspec.Struct, frozen=True, rename="camel", gc=False):
    group: str = ""


class CustomResourceDefinition(msgspec.Struct, frozen=True, rename="camel", gc=False):
    """What SupportedVersion reads of a CRD (the rest of it, its schema above all, is
    skipped as it is decoded)."""

    metadata: objects.ObjectMeta = objects.ObjectMeta()
    spec: CRDSpec = CRDSpec()


def supported_version(crds: Mapping[Key, CustomResourceDefinition]) -> Condition:
    """The GatewayClass's ``SupportedVersion``: True when every Gateway API CRD in the
    cluster says (``bundle-version``) a release edge knows; else False, naming those
    that do not (edge still serves what it reads: the spec's "best effort", its
    ``Accepted`` stays True)."""
    unknown = []
    for key in sorted(crds):
        crd = crds[key]
        if crd.spec.group not in _GATEWAY_API_GROUPS:
            continue
        version = crd.metadata.annotations.get(BUNDLE_VERSION, "")
        if not _KNOWN_BUNDLE.fullmatch(version):
            unknown.append(f"{crd.metadata.name} ({version or 'no bundle-version'})")
    if unknown:
        why = "CRDs of a Gateway API release edge does not know (v1.1 to v1.6): "
        return Condition("SupportedVersion", False, "UnsupportedVersion", why + ", ".join(unknown))
    return Condition("SupportedVersion", True, "SupportedVersion", "")


class GRPCMethodMatch(msgspec.Struct, frozen=True, rename="camel", gc=False):
    type: str = "Exact"  # Exact, RegularExpression
    service: str | None = None  # None or "": any service
    method: str | None = None  # None or "": any method


class GRPCRouteMatch(msgspec.Struct, frozen=True, rename="camel", gc=False):
    method: GRPCMethodMatch | None = None
    headers: list[objects.HTTPHeaderMatch] = []


class GRPCRouteRule(msgspec.Struct, frozen=True, rename="camel", gc=False):
    """A GRPCRoute rule. Its filters and backendRefs have the fields of an HTTPRoute's
    (a GRPCRouteFilter lacks RequestRedirect and URLRewrite, which edge refuses here)."""

    name: str | None = None
    matches: list[GRPCRouteMatch] = []
    filters: list[objects.HTTPRouteFilter] = []
    backend_refs: list[objects.HTTPBackendRef] = []


class GRPCRouteSpec(msgspec.Struct, frozen=True, rename="camel", gc=False):
    parent_refs: list[objects.ParentReference] = []
    hostnames: list[str] = []
    rules: list[GRPCRouteRule] = []


class GRPCRoute(msgspec.Struct, frozen=True, rename="camel", gc=False):
    """What edge reads of a GRPCRoute (``gateway.networking.k8s.io/v1``); the other
    Gateway API kinds' models are in :mod:`edge.providers.kubernetes.objects`."""

    metadata: objects.ObjectMeta = objects.ObjectMeta()
    spec: GRPCRouteSpec = GRPCRouteSpec()
    status: dict[str, Any] = {}


class GatewayState(msgspec.Struct, frozen=True):
    """The cached objects one conversion reads, by (namespace, name); the namespace is
    ``""`` for GatewayClasses and Namespaces (cluster-scoped). ``crds``: the cluster's
    CustomResourceDefinitions, None while not known (no ``SupportedVersion`` then)."""

    gateway_classes: Mapping[Key, objects.GatewayClass] = {}
    gateways: Mapping[Key, objects.Gateway] = {}
    http_routes: Mapping[Key, objects.HTTPRoute] = {}
    grpc_routes: Mapping[Key, GRPCRoute] = {}
    tls_routes: Mapping[Key, objects.TLSRoute] = {}
    tcp_routes: Mapping[Key, objects.TCPRoute] = {}
    udp_routes: Mapping[Key, objects.UDPRoute] = {}
    reference_grants: Mapping[Key, objects.ReferenceGrant] = {}
    namespaces: Mapping[Key, objects.Namespace] = {}
    services: Mapping[Key, objects.Service] = {}
    endpoint_slices: Mapping[Key, objects.EndpointSlice] = {}
    secrets: Mapping[Key, objects.Secret] = {}
    crds: Mapping[Key, CustomResourceDefinition] | None = None
    # The run-time entry points (openListeners) that could not be opened: name -> why.
    unopened: Mapping[str, str] = {}

    @classmethod
    def from_snapshot(cls, tables: Mapping[str, Mapping[Key, Any]]) -> GatewayState:
        return cls(
            gateway_classes=tables.get("GatewayClass", {}),
            gateways=tables.get("Gateway", {}),
            http_routes=tables.get("HTTPRoute", {}),
            grpc_routes=tables.get("GRPCRoute", {}),
            tls_routes=tables.get("TLSRoute", {}),
            tcp_routes=tables.get("TCPRoute", {}),
            udp_routes=tables.get("UDPRoute", {}),
            reference_grants=tables.get("ReferenceGrant", {}),
            namespaces=tables.get("Namespace", {}),
            services=tables.get("Service", {}),
            endpoint_slices=tables.get("EndpointSlice", {}),
            secrets=tables.get("Secret", {}),
            crds=tables.get("CustomResourceDefinition"),
        )


class Problem(msgspec.Struct, frozen=True):
    """What edge could not serve: the object (kind, ``namespace/name``), where in it,
    and why; ``code``: the reason of the condition that says it (``BackendNotFound``,
    ``PortUnavailable``...), the reason of its Event."""

    kind: str
    object: str
    where: str
    reason: str
    code: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.object}: {self.where}: {self.reason}"


class Condition(NamedTuple):
    """A status condition as edge wants it (the writer adds ``lastTransitionTime``)."""

    type: str
    status: bool
    reason: str
    message: str = ""

    def to_builtins(self, generation: int) -> dict[str, Any]:
        return {
            "type": self.type,
            "status": "True" if self.status else "False",
            "reason": self.reason,
            "message": self.message,
            "observedGeneration": generation,
        }


class WantedStatus(NamedTuple):
    """The status edge wants on one object: ``kind`` and key, the generation it was
    made from, and its ``status`` as JSON builtins with conditions lacking
    ``lastTransitionTime``. For a route, ``status["parents"]`` holds edge's entries
    only (the writer keeps other controllers')."""

    kind: str
    key: Key
    generation: int
    status: dict[str, Any]


class Backend(NamedTuple):
    """Where a load balancer's servers come from: a Service port (by number), the
    protocol of its servers and the scheme edge speaks to them (an HTTP service's:
    ``http``, or ``h2c`` for a GRPCRoute's); :func:`update_endpoints` rebuilds it from
    that."""

    service: Key
    port: int
    protocol: str
    scheme: str = "http"


class Conversion(NamedTuple):
    """The configuration, its problems, the statuses wanted, where each load balancer
    comes from (by section, ``http``, ``tcp`` or ``udp``, and name), and the listeners
    each entry point opened at run time is for (``Gateway ns/name listener x``)."""

    configuration: Configuration
    problems: list[Problem]
    statuses: list[WantedStatus]
    backends: Mapping[tuple[str, str], Backend] = {}
    opened: Mapping[str, tuple[str, ...]] = {}


def _load_balancer(
    section: str, addresses: list[str], scheme: str = "http"
) -> Service | TCPService | UDPService:
    """The load balancer of ``addresses`` (``host:port``) in ``section``; an HTTP one's
    servers are ``<scheme>://host:port``."""
    if section == "udp":
        return UDPService(
            load_balancer=UDPLoadBalancer(servers=[UDPServer(address=a) for a in addresses])
        )
    if section == "tcp":
        return TCPService(
            load_balancer=TCPLoadBalancer(servers=[TCPServer(address=a) for a in addresses])
        )
    return Service(
        load_balancer=LoadBalancer(servers=[Server(url=f"{scheme}://{a}") for a in addresses])
    )


# --- names, rules and hostnames (pure) ---------------------------------------------------

_NAME_RUN_RE = re.compile(r"[\W_]+")


def _normalize(name: str) -> str:
    """Traefik's ``provider.Normalize``: each run of characters other than letters and
    digits becomes one ``-``, none at either end."""
    return _NAME_RUN_RE.sub("-", name).strip("-")


def router_key(route: Key, gateway: Key, entry_point: str, rule_index: int) -> str:
    """Traefik's key of one HTTPRoute rule on one Gateway entry point (normalized)."""
    return _normalize(
        f"httproute-{route[0]}-{route[1]}-gw-{gateway[0]}-{gateway[1]}-ep-{entry_point}-{rule_index}"
    )


def router_name(rule: str, key: str) -> str:
    """Traefik's ``makeRouterName``: the key and the first 20 hex digits of the rule's
    SHA-256."""
    return f"{key}-{hashlib.sha256(rule.encode()).hexdigest()[:20]}"


def _quote(value: str) -> str:
    """A Go-escaped double-quoted string of the rule language."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _host_rule(hostnames: list[str]) -> tuple[str, int]:
    """The rule of ``hostnames`` (``""``: any host) and their rank: the longest one's
    length, a non-wildcard one above a wildcard of its length. That is the spec's
    order ("characters in a matching non-wildcard hostname", then "in a matching
    hostname") between hostnames one request can both match: a name is never shorter
    than a wildcard it matches. HTTPRoutes and GRPCRoutes rank hosts alike, so a
    GRPCRoute's exact host beats an HTTPRoute's wildcard of the same port."""
    rules = []
    longest = 0
    for host in hostnames:
        longest = max(longest, len(host) * 2 + (not host.startswith("*.")))
        if host.startswith("*."):
            pattern = "^[a-z0-9-\\.]+" + re.escape(host[1:]) + "$"
            rules.append(f"HostRegexp({_quote(pattern)})")
        else:
            rules.append(f"Host({_quote(host)})")
    if not rules:
        return "", 0
    return (rules[0] if len(rules) == 1 else f"({' || '.join(rules)})"), longest


def _path_rule(path: objects.HTTPPathMatch) -> tuple[str, int]:
    """The rule of a path match and its rank: Exact above every other kind, then the
    number of characters."""
    value = path.value or "/"
    if path.type == "Exact":
        return f"Path({_quote(value)})", 10_000 + len(value)
    if path.type == "RegularExpression":
        return f"PathRegexp({_quote(value)})", len(value)
    if value == "/":
        return 'PathPrefix("/")', 1
    trimmed = value.rstrip("/")
    return f"(Path({_quote(trimmed)}) || PathPrefix({_quote(trimmed + '/')}))", len(value)


def match_rule(hostnames: list[str], match: objects.HTTPRouteMatch) -> tuple[str, int]:
    """The v3 rule of one HTTPRoute match on ``hostnames``, and its priority.

    The priority orders matches as the spec's precedence does, each criterion above
    all those after it: the hostnames (:func:`_host_rule`; a host beats none), an
    Exact path, the most characters of path, a method, the most header matches, the
    most query parameter matches (the spec allows 16 of each; the fields are sized for 99).
    Traefik weighs the same criteria but lets a few more characters of prefix
    outweigh a method or headers, which the spec does not. What is left equal is
    ordered by :meth:`_Converter.break_ties`."""
    path = match.path if match.path is not None else objects.HTTPPathMatch()
    rule, path_rank = _path_rule(path)
    parts = [rule]
    if match.method:
        parts.append(f"Method({_quote(match.method)})")
    for header in match.headers:
        fn = "HeaderRegexp" if header.type == "RegularExpression" else "Header"
        parts.append(f"{fn}({_quote(header.name)},{_quote(header.value)})")
    for query in match.query_params:
        fn = "QueryRegexp" if query.type == "RegularExpression" else "Query"
        parts.append(f"{fn}({_quote(query.name)},{_quote(query.value)})")
    rule = " && ".join(parts)
    host, host_rank = _host_rule(hostnames)
    priority = (
        host_rank * 10**10
        + path_rank * 100_000
        + (10_000 if match.method else 0)
        + min(len(match.headers), 99) * 100
        + min(len(match.query_params), 99)
    )
    return (f"{host} && {rule}" if host else rule), priority


def _grpc_method_rule(method: GRPCMethodMatch | None) -> str:
    """The path rule of a gRPC method match: a call's path is ``/<service>/<method>``;
    an omitted service or method matches any."""
    if method is None or not (method.service or method.method):
        return 'PathPrefix("/")'
    service, name = method.service or "", method.method or ""
    if method.type == "Exact":
        if service and name:
            return f"Path({_quote(f'/{service}/{name}')})"
        service, name = re.escape(service), re.escape(name)
    elif method.type == "RegularExpression":
        service, name = (f"(?:{part})" if part else "" for part in (service, name))
    else:
        raise ValueError(f"method match type {method.type!r} is not supported")
    any_part = "[^/]+"
    return f"PathRegexp({_quote(f'^/{service or any_part}/{name or any_part}$')})"


def grpc_match_rule(hostnames: list[str], match: GRPCRouteMatch) -> tuple[str, int]:
    """The v3 rule of one GRPCRoute match on ``hostnames``, and its priority.

    The priority orders matches as the spec's GRPCRoute precedence does, each
    criterion above all those after it: the hostnames (:func:`_host_rule`: the spec's
    non-wildcard then any hostname characters), the most characters of the service,
    of the method, then the most header matches (a header named twice counts once: only its first match is read, as the
    spec says). Hostnames rank as an HTTPRoute's, so routes of both kinds on one port
    rank alike by host. ``ValueError`` for a match type edge does not know."""
    method = match.method
    parts = [_grpc_method_rule(method)]
    seen: set[str] = set()
    for header in match.headers:
        if header.name.lower() in seen:
            continue
        seen.add(header.name.lower())
        if header.type not in ("Exact", "RegularExpression"):
            raise ValueError(f"header match type {header.type!r} is not supported")
        fn = "HeaderRegexp" if header.type == "RegularExpression" else "Header"
        parts.append(f"{fn}({_quote(header.name)},{_quote(header.value)})")
    rule = " && ".join(parts)
    host, host_rank = _host_rule(hostnames)
    service = len(method.service or "") if method is not None else 0
    name = len(method.method or "") if method is not None else 0
    # Service and method are at most 1024 characters, headers 16: below 10**10.
    priority = host_rank * 10**10 + ((service * 1025) + name) * 17 + len(seen)
    return (f"{host} && {rule}" if host else rule), priority


def tie_order(routes: Mapping[Key, Any]) -> dict[Key, int]:
    """Each HTTPRoute's (or GRPCRoute's) place among routes whose matches are otherwise
    equal, as the spec orders them: the oldest (``metadata.creationTimestamp``) first, then by
    namespace/name."""
    ranked = sorted(routes, key=lambda k: (routes[k].metadata.creation_timestamp, k))
    return {key: place for place, key in enumerate(ranked)}


def sni_rule(hostnames: list[str]) -> tuple[str, int]:
    """A TLSRoute's TCP rule on ``hostnames`` (``HostSNI("*")`` for none) and its
    priority, Traefik's: the longest hostname's length less its wildcards."""
    rules = []
    priority = 0
    for host in dict.fromkeys(hostnames):
        if host.startswith("*."):
            pattern = "^[a-z0-9-\\.]+" + re.escape(host[1:]) + "$"
            rules.append(f"HostSNIRegexp({_quote(pattern)})")
            priority = max(priority, len(host) - 1)
        else:
            rules.append(f"HostSNI({_quote(host)})")
            priority = max(priority, len(host))
    if not rules:
        return 'HostSNI("*")', 0
    return " || ".join(rules), priority


def _intersect(listener: str, route: str) -> str | None:
    """The hostname both a listener's and a route's hostname match (the more specific),
    or None."""
    if listener == route:
        return route
    if listener.startswith("*."):
        if route.startswith("*."):
            if route.endswith(listener[1:]):
                return route
            return listener if listener.endswith(route[1:]) else None
        return route if route.endswith(listener[1:]) else None
    if route.startswith("*.") and listener.endswith(route[1:]):
        return listener
    return None


def intersect_hostnames(listener: str | None, route: list[str]) -> list[str] | None:
    """The hostnames a route serves on a listener: the route's when the listener names
    none, the listener's when the route names none, else each pair's intersection
    (:func:`_intersect`); None when nothing is left (``NoMatchingListenerHostname``)."""
    if not listener:
        return list(route)
    if not route:
        return [listener]
    found: list[str] = []
    for host in route:
        both = _intersect(listener, host)
        if both is not None and both not in found:
            found.append(both)
    return found or None


def _selects(selector: objects.LabelSelector, labels: Mapping[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.match_labels.items()):
        return False
    for req in selector.match_expressions:
        present = req.key in labels
        if req.operator == "In" and not (present and labels[req.key] in req.values):
            return False
        if req.operator == "NotIn" and present and labels[req.key] in req.values:
            return False
        if req.operator == "Exists" and not present:
            return False
        if req.operator == "DoesNotExist" and present:
            return False
        if req.operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


# --- the conversion ----------------------------------------------------------------------


class _Listener:
    """One listener of a Gateway as converted: where it binds, what it carries, its
    conditions and the routes attached to it."""

    def __init__(self, gateway: objects.Gateway, spec: objects.Listener) -> None:
        self.gateway = gateway
        self.spec = spec
        self.entry_point = ""
        self.kinds: list[str] = []
        self.conditions: list[Condition] = []
        self.ok = False  # routes may attach (and are counted)
        self.programmed = True  # ...and are served: False while its refs are unresolved
        self.unopened = False  # its port, opened at run time, could not be (not served)
        self.attached = 0

    @property
    def key(self) -> Key:
        return self.gateway.metadata.key

    def fail(self, kind: str, reason: str, message: str) -> None:
        self.conditions.append(Condition(kind, kind == "Conflicted", reason, message))


_FAILED_SHARE = {HTTP_ROUTE: (500, "http"), GRPC_ROUTE: (503, "h2c")}
"""Per route kind: the status the share of a backendRef that cannot be served gets,
and the scheme edge speaks to its servers."""

_APP_PROTOCOLS = {
    "kubernetes.io/h2c": "h2c",
    "kubernetes.io/ws": "http",
    "kubernetes.io/wss": "https",
    "http": "http",
    "https": "https",
}
"""GEP-1911, backend protocol selection: the scheme edge speaks to an HTTPRoute's
backend whose Service port has this ``appProtocol`` (WebSockets are HTTP/1.1's
upgrade, over TLS for ``wss``); a port without one is ``http``, a port with another
one edge does not speak (``ResolvedRefs`` False, ``UnsupportedProtocol``)."""

_GRPC_FILTERS = frozenset({"RequestHeaderModifier", "ResponseHeaderModifier", "RequestMirror"})
"""The GRPCRoute filters edge implements (a mirror's copies go to its h2c servers over
HTTP/2, :class:`edge.router.services.Mirror`); not ExtensionRef."""


def _hostnames_meet(a: list[str], b: list[str]) -> bool:
    """Two routes' hostnames on one listener (empty: any host) share a host."""
    if not a or not b:
        return True
    return any(_intersect(x, y) is not None for x in a for y in b)


class _Unsupported(Exception):
    """A field or filter edge does not implement: the route's Accepted is False."""


class _Converter:
    def __init__(self, state: GatewayState, options: GatewayOptions) -> None:
        self.state = state
        self.options = options
        self.namespaces = frozenset(options.namespaces)
        self.routers: dict[str, Router] = {}
        # Per HTTP router: where its match stands among equals (kind, route, rule, match).
        self.ties: dict[str, tuple[str, Key, int, int]] = {}
        # HTTPRoutes and GRPCRoutes refused on a listener (gateway, listener name) for
        # hostnames a route of the other kind holds there: -> that route.
        self.claimed: dict[tuple[str, Key, Key, str], tuple[str, Key]] = {}
        self.services: dict[str, Service] = {}
        self.middlewares: dict[str, Middleware] = {}
        self.tcp_routers: dict[str, TCPRouter] = {}
        self.tcp_services: dict[str, TCPService] = {}
        self.udp_routers: dict[str, UDPRouter] = {}
        self.udp_services: dict[str, UDPService] = {}
        self.certificates: dict[Key, CertAndStores] = {}
        self.problems: list[Problem] = []
        self.statuses: list[WantedStatus] = []
        self.origins: dict[tuple[str, str], Backend] = {}
        self.opened: dict[str, list[str]] = {}  # run-time entry point -> its listeners
        self.slices = slices_by_service(state.endpoint_slices)

    def visible(self, namespace: str) -> bool:
        return not self.namespaces or namespace in self.namespaces

    def problem(self, kind: str, key: Key, where: str, reason: str, code: str) -> None:
        self.problems.append(
            Problem(kind, f"{key[0]}/{key[1]}" if key[0] else key[1], where, reason, code)
        )

    # --- classes and gateways -------------------------------------------------------------

    def classes(self) -> set[str]:
        ours: set[str] = set()
        crds = self.state.crds
        version = supported_version(crds) if crds is not None else None
        for key in sorted(self.state.gateway_classes):
            gc = self.state.gateway_classes[key]
            if gc.spec.controller_name != self.options.controller_name:
                continue
            ours.add(gc.metadata.name)
            gen = gc.metadata.generation
            conds = [Condition("Accepted", True, "Accepted", "handled by edge")]
            if version is not None:
                conds.append(version)
            self.statuses.append(
                WantedStatus(
                    "GatewayClass", key, gen, {"conditions": [c.to_builtins(gen) for c in conds]}
                )
            )
        return ours

    def gateways(self, classes: set[str]) -> dict[Key, list[_Listener]]:
        found: dict[Key, list[_Listener]] = {}
        for key in sorted(self.state.gateways):
            gw = self.state.gateways[key]
            if gw.spec.gateway_class_name not in classes or not self.visible(key[0]):
                continue
            listeners = [_Listener(gw, spec) for spec in gw.spec.listeners]
            seen: dict[tuple[int, str, str], _Listener] = {}
            for listener in listeners:
                self.listener(listener)
                spec = listener.spec
                bound = (spec.port, spec.protocol, spec.hostname or "")
                other = seen.get(bound)
                if other is not None:
                    for twin in (other, listener):
                        if not any(c.type == "Conflicted" for c in twin.conditions):
                            twin.fail(
                                "Conflicted",
                                "HostnameConflict",
                                f"listeners {other.spec.name} and {spec.name} share port "
                                f"{spec.port}, protocol {spec.protocol} and hostname "
                                f"{spec.hostname or '(none)'}",
                            )
                            twin.ok = False
                seen[bound] = listener
            self.protocol_conflicts(listeners)
            found[key] = listeners
        return found

    def protocol_conflicts(self, listeners: list[_Listener]) -> None:
        """A TCP listener owns its port: edge's raw TCP router takes every connection
        there, so HTTP, HTTPS or TLS listeners on that port would never be reached
        (these three share a port: edge tells them apart by the first bytes). All
        listeners of such a port are ``Conflicted`` (``ProtocolConflict``)."""
        by_port: dict[int, list[_Listener]] = {}
        for li in listeners:
            if li.spec.protocol != "UDP":
                by_port.setdefault(li.spec.port, []).append(li)
        for port, group in by_port.items():
            protocols = {li.spec.protocol for li in group}
            if "TCP" not in protocols or len(protocols) == 1:
                continue
            for li in group:
                if not any(c.type == "Conflicted" for c in li.conditions):
                    li.fail(
                        "Conflicted",
                        "ProtocolConflict",
                        f"port {port} has listeners of protocols {', '.join(sorted(protocols))}:"
                        " a TCP listener cannot share its port",
                    )
                    li.ok = False

    def listener(self, listener: _Listener) -> None:
        """Bind a listener and check it; its failing conditions in ``conditions``."""
        gw, spec = listener.gateway, listener.spec
        where = f"spec.listeners[{spec.name}]"
        if spec.protocol not in _ROUTE_KINDS or (
            spec.protocol in ("TLS", "TCP", "UDP") and not self.options.experimental_channel
        ):
            reason = f"protocol {spec.protocol!r} is not supported"
            if spec.protocol in _ROUTE_KINDS:
                reason += " without experimentalChannel (TLSRoute, TCPRoute, UDPRoute)"
            listener.fail("Accepted", "UnsupportedProtocol", reason)
            self.problem("Gateway", gw.metadata.key, where, reason, "UnsupportedProtocol")
            return
        udp = spec.protocol == "UDP"
        eps = [e for e in self.options.entry_points if e.port == spec.port and e.udp == udp]
        if eps:
            listener.entry_point = sorted(eps)[0].name
        elif self.options.open_listeners:
            listener.entry_point = runtime_entry_point(spec.port, udp)
            self.opened.setdefault(listener.entry_point, []).append(
                f"Gateway {gw.metadata.namespace}/{gw.metadata.name} listener {spec.name}"
            )
        if not listener.entry_point:
            reason = f"no {'UDP' if udp else 'TCP'} entry point of edge listens on port {spec.port}"
            listener.fail("Accepted", "PortUnavailable", reason)
            self.problem("Gateway", gw.metadata.key, where, reason, "PortUnavailable")
            return
        why = self.state.unopened.get(listener.entry_point)
        if why is not None:
            # Said, but its routers stay: they keep edge asking for the port, which
            # every round tries again.
            reason = f"port {spec.port} ({'UDP' if udp else 'TCP'}) cannot be opened: {why}"
            listener.fail("Accepted", "PortUnavailable", reason)
            listener.unopened = True
            self.problem("Gateway", gw.metadata.key, where, reason, "PortUnavailable")
        supported = _ROUTE_KINDS[spec.protocol]
        if spec.protocol == "TLS" and spec.tls is not None and spec.tls.mode == "Passthrough":
            supported = (TLS_ROUTE,)
        allowed = spec.allowed_routes or objects.AllowedRoutes()
        if allowed.kinds:
            kinds = []
            invalid = []
            for k in allowed.kinds:
                if (k.group is None or k.group == GROUP) and k.kind in supported:
                    if k.kind not in kinds:
                        kinds.append(k.kind)
                else:
                    invalid.append(f"{k.group if k.group is not None else GROUP}/{k.kind}")
            listener.kinds = kinds
            if invalid:
                listener.fail(
                    "ResolvedRefs",
                    "InvalidRouteKinds",
                    f"route kinds {', '.join(invalid)} are not supported on {spec.protocol}",
                )
        else:
            listener.kinds = list(supported)
        if spec.protocol in ("HTTP", "TCP", "UDP") and spec.tls is not None:
            listener.fail(
                "Accepted", "UnsupportedValue", f"a {spec.protocol} listener takes no tls"
            )
            return
        if spec.protocol in ("HTTPS", "TLS"):
            resolved = self.listener_tls(listener, where)
            if resolved is None:
                return
            listener.programmed = resolved
        listener.ok = True

    def listener_tls(self, listener: _Listener, where: str) -> bool | None:
        """Whether a TLS listener's certificates resolve (False: routes attach to it, but
        nothing is served there, as the spec's Programmed False), or None when its
        ``tls`` is refused (``Accepted`` False)."""
        gw, spec = listener.gateway, listener.spec
        tls = spec.tls
        if tls is None:
            listener.fail("Accepted", "UnsupportedValue", f"a {spec.protocol} listener needs tls")
            return None
        if tls.mode == "Passthrough":
            if spec.protocol == "TLS":
                return True  # the connection is not terminated: no certificate is read
            listener.fail(
                "Accepted", "UnsupportedProtocol", "HTTPS listeners cannot be Passthrough"
            )
            return None
        if not tls.certificate_refs:
            listener.fail(
                "ResolvedRefs", "InvalidCertificateRef", "Terminate needs a certificateRef"
            )
            return False
        ns = gw.metadata.namespace
        loaded: list[tuple[Key, CertAndStores]] = []
        for ref in tls.certificate_refs:
            target = ref.namespace or ns
            what = f"certificateRef {target}/{ref.name}"
            if (ref.group or "") != "" or (ref.kind or "Secret") != "Secret":
                listener.fail(
                    "ResolvedRefs",
                    "InvalidCertificateRef",
                    f"{what}: {ref.group}/{ref.kind} is not a Secret",
                )
                return False
            if target != ns and not self.granted("Gateway", ns, "", "Secret", ref.name, target):
                listener.fail(
                    "ResolvedRefs",
                    "RefNotPermitted",
                    f"{what}: no ReferenceGrant in {target} lets Gateways of {ns} refer to it",
                )
                return False
            try:
                if not self.visible(target):
                    raise SecretError("secret-not-found", f"secret {target}/{ref.name} not found")
                loaded.append(
                    ((target, ref.name), tls_certificate(self.state.secrets, (target, ref.name)))
                )
            except SecretError as exc:
                listener.fail("ResolvedRefs", "InvalidCertificateRef", f"{what}: {exc.reason}")
                self.problem("Gateway", gw.metadata.key, where, exc.reason, "InvalidCertificateRef")
                return False
        for key, cert in loaded:
            self.certificates.setdefault(key, cert)
        return True

    def granted(
        self, from_kind: str, from_ns: str, group: str, kind: str, name: str, ns: str
    ) -> bool:
        """A ReferenceGrant in ``ns`` lets ``from_kind`` objects of ``from_ns`` refer to
        the ``group``/``kind`` object ``name``."""
        for key in sorted(self.state.reference_grants):
            if key[0] != ns:
                continue
            spec = self.state.reference_grants[key].spec
            if not any(
                f.group == GROUP and f.kind == from_kind and f.namespace == from_ns
                for f in spec.from_
            ):
                continue
            if any(
                t.group == group and t.kind == kind and (t.name is None or t.name == name)
                for t in spec.to
            ):
                return True
        return False

    def allows(self, listener: _Listener, namespace: str, kind: str) -> bool:
        if kind not in listener.kinds:
            return False
        allowed = listener.spec.allowed_routes or objects.AllowedRoutes()
        where = allowed.namespaces.from_
        if where == "All":
            return True
        if where == "Selector":
            selector = allowed.namespaces.selector
            ns = self.state.namespaces.get(("", namespace))
            return (
                selector is not None and ns is not None and _selects(selector, ns.metadata.labels)
            )
        return namespace == listener.gateway.metadata.namespace

    # --- routes --------------------------------------------------------------------------

    def routes(self, gateways: dict[Key, list[_Listener]]) -> None:
        state = self.state
        self.kind_conflicts(gateways)
        for kind, table in (
            (HTTP_ROUTE, state.http_routes),
            (GRPC_ROUTE, state.grpc_routes),
            (TLS_ROUTE, state.tls_routes),
            (TCP_ROUTE, state.tcp_routes),
            (UDP_ROUTE, state.udp_routes),
        ):
            for key in sorted(table):
                route = table[key]
                if not self.visible(key[0]):
                    continue
                parents = []
                for ref, gw_key, listeners in self.parent_gateways(route, gateways):
                    parents.append(self.parent(kind, route, ref, gw_key, listeners))
                if parents or self.reported(route):
                    # None left: edge's old entries go (a parentRef removed, a Gateway
                    # gone or no longer of edge's class); other controllers' stay.
                    self.statuses.append(
                        WantedStatus(kind, key, route.metadata.generation, {"parents": parents})
                    )

    def parent_gateways(
        self, route: Any, gateways: dict[Key, list[_Listener]]
    ) -> list[tuple[objects.ParentReference, Key, list[_Listener]]]:
        """The parentRefs of ``route`` naming a Gateway of edge's, with its key and
        listeners; the others are not edge's to report on."""
        found = []
        for ref in route.spec.parent_refs:
            if (ref.group if ref.group is not None else GROUP) != GROUP:
                continue
            if (ref.kind or "Gateway") != "Gateway":
                continue
            gw_key = (ref.namespace or route.metadata.namespace, ref.name)
            listeners = gateways.get(gw_key)
            if listeners is not None:
                found.append((ref, gw_key, listeners))
        return found

    def candidates(
        self, kind: str, route: Any, ref: objects.ParentReference, listeners: list[_Listener]
    ) -> tuple[list[_Listener], list[_Listener], list[tuple[_Listener, list[str]]]]:
        """The listeners ``ref`` names (by sectionName and port), those of them that
        allow ``route``, and those whose hostname it shares, with the hostnames it
        serves there (:func:`intersect_hostnames`)."""
        matched = [
            li
            for li in listeners
            if (ref.section_name is None or li.spec.name == ref.section_name)
            and (ref.port is None or li.spec.port == ref.port)
        ]
        allowed = [
            li for li in matched if li.ok and self.allows(li, route.metadata.namespace, kind)
        ]
        hosted = []
        for li in allowed:
            hostnames: list[str] | None = []
            if kind in (HTTP_ROUTE, GRPC_ROUTE, TLS_ROUTE):
                hostnames = intersect_hostnames(li.spec.hostname, route.spec.hostnames)
            if hostnames is not None:
                hosted.append((li, hostnames))
        return matched, allowed, hosted

    def kind_conflicts(self, gateways: dict[Key, list[_Listener]]) -> None:
        """The spec's rule for an HTTPRoute and a GRPCRoute on one listener whose
        hostnames intersect: exactly one is accepted there, the oldest
        (``creationTimestamp``), then the first by namespace/name. Routes are taken in
        that order; one meeting a route of the other kind already taken on a listener
        is refused on it (:attr:`claimed`)."""
        if not self.state.grpc_routes:
            return
        entries = [
            (route.metadata.creation_timestamp, key, kind, route)
            for kind, table in (
                (HTTP_ROUTE, self.state.http_routes),
                (GRPC_ROUTE, self.state.grpc_routes),
            )
            for key, route in table.items()
            if self.visible(key[0])
        ]
        taken: dict[tuple[Key, str], list[tuple[str, Key, list[str]]]] = {}
        for _, key, kind, route in sorted(entries, key=lambda e: (e[0], e[1], e[2])):
            for ref, gw_key, listeners in self.parent_gateways(route, gateways):
                for li, hostnames in self.candidates(kind, route, ref, listeners)[2]:
                    held = taken.setdefault((gw_key, li.spec.name), [])
                    other = next(
                        (
                            (k, rkey)
                            for k, rkey, hosts in held
                            if k != kind and _hostnames_meet(hosts, hostnames)
                        ),
                        None,
                    )
                    if other is None:
                        held.append((kind, key, hostnames))
                    else:
                        self.claimed[(kind, key, gw_key, li.spec.name)] = other

    def reported(self, route: Any) -> bool:
        """The route's status holds an entry of edge's."""
        held = route.status.get("parents") if isinstance(route.status, dict) else None
        return any(
            isinstance(p, dict) and p.get("controllerName") == self.options.controller_name
            for p in held or ()
        )

    def parent(
        self,
        kind: str,
        route: Any,
        ref: objects.ParentReference,
        gw_key: Key,
        listeners: list[_Listener],
    ) -> dict[str, Any]:
        key = route.metadata.key
        gen = route.metadata.generation
        matched, allowed, hosted = self.candidates(kind, route, ref, listeners)
        accepted = Condition(
            "Accepted", False, "NoMatchingParent", f"no listener of {gw_key[0]}/{gw_key[1]} matches"
        )
        resolved = Condition("ResolvedRefs", True, "ResolvedRefs", "")
        if matched and not any(li.ok for li in matched):
            accepted = accepted._replace(message="no listener it names is valid")
        if matched and any(li.ok for li in matched) and not allowed:
            accepted = Condition(
                "Accepted", False, "NotAllowedByListeners", "the listeners do not allow it"
            )
        if allowed and not hosted:
            accepted = Condition(
                "Accepted",
                False,
                "NoMatchingListenerHostname",
                "no hostname of it matches a listener's",
            )
        conflicts = [self.claimed.get((kind, key, gw_key, li.spec.name)) for li, _ in hosted]
        if hosted and all(conflicts):
            other_kind, other = conflicts[0]  # type: ignore[misc]
            accepted = Condition(
                "Accepted",
                False,
                "NotAllowedByListeners",
                f"{other_kind} {other[0]}/{other[1]}, older, holds the same hostnames on the "
                "listener: an HTTPRoute and a GRPCRoute cannot share a hostname there",
            )
        hosted = [h for h, c in zip(hosted, conflicts, strict=True) if c is None]
        if hosted:
            accepted = Condition("Accepted", True, "Accepted", "")
            unsupported: list[str] = []
            for li, hostnames in hosted:
                li.attached += 1
                if not li.programmed:  # attached, but served nowhere: its refs still judged
                    found = self.unresolved(kind, route)
                    if found is not None and resolved.status:
                        resolved = found
                    continue
                if kind == HTTP_ROUTE:
                    found, unsup = self.http_rules(route, gw_key, li, hostnames)
                elif kind == GRPC_ROUTE:
                    found, unsup = self.grpc_rules(route, gw_key, li, hostnames)
                else:
                    found, unsup = self.l4_rules(kind, route, gw_key, li, hostnames), []
                if found is not None and resolved.status:
                    resolved = found
                unsupported.extend(u for u in unsup if u not in unsupported)
            if unsupported:
                accepted = Condition("Accepted", False, "UnsupportedValue", "; ".join(unsupported))
        if not accepted.status or not resolved.status:
            for c in (accepted, resolved):
                if not c.status:
                    self.problem(
                        kind,
                        key,
                        f"parentRef {gw_key[0]}/{gw_key[1]}",
                        f"{c.reason}: {c.message}",
                        c.reason,
                    )
        parent_ref: dict[str, Any] = {
            "group": GROUP,
            "kind": "Gateway",
            "namespace": gw_key[0],
            "name": gw_key[1],
        }
        if ref.section_name is not None:
            parent_ref["sectionName"] = ref.section_name
        if ref.port is not None:
            parent_ref["port"] = ref.port
        return {
            "parentRef": parent_ref,
            "controllerName": self.options.controller_name,
            "conditions": [accepted.to_builtins(gen), resolved.to_builtins(gen)],
        }

    def http_rules(
        self, route: objects.HTTPRoute, gw_key: Key, li: _Listener, hostnames: list[str]
    ) -> tuple[Condition | None, list[str]]:
        """Routers and services of every rule of ``route`` on listener ``li``: the first
        ResolvedRefs failure (None: all resolved) and what is unsupported."""
        key = route.metadata.key
        failed: Condition | None = None
        unsupported: list[str] = []
        for ri, rule in enumerate(route.spec.rules):
            rkey = router_key(key, gw_key, li.entry_point, ri)
            for mi, match in enumerate(rule.matches or [objects.HTTPRouteMatch()]):
                text, priority = match_rule(hostnames, match)
                name = router_name(text, rkey)
                self.ties[name] = (HTTP_ROUTE, key, ri, mi)
                try:
                    timeouts = _timeouts(rule.timeouts, f"rules[{ri}].timeouts")
                    mirrors: list[tuple[str, objects.HTTPRequestMirrorFilter]] = []
                    mws = self.filters(name, rule.filters, match, f"rules[{ri}]", mirrors)
                except _Unsupported as exc:
                    if str(exc) not in unsupported:
                        unsupported.append(str(exc))
                    mws = []
                    timeouts = None
                    service = self.unavailable(f"{name}-wrr")
                else:
                    service, cond = self.backends(route, name, rule)
                    if cond is not None and failed is None:
                        failed = cond
                    if mirrors:
                        service, cond = self.mirroring(route, name, service, mirrors)
                        if cond is not None and failed is None:
                            failed = cond
                self.routers[name] = Router(
                    rule=text,
                    service=service,
                    entry_points=[li.entry_point],
                    priority=priority,
                    rule_syntax="v3",
                    middlewares=mws,
                    tls=RouterTLS() if li.spec.protocol == "HTTPS" else None,
                    timeouts=timeouts,
                )
        return failed, unsupported

    def grpc_rules(
        self, route: GRPCRoute, gw_key: Key, li: _Listener, hostnames: list[str]
    ) -> tuple[Condition | None, list[str]]:
        """Routers and services of every rule of a GRPCRoute on listener ``li``, as
        :meth:`http_rules` makes an HTTPRoute's: one router per match
        (:func:`grpc_match_rule`), its header filters as an HTTPRoute's, its backends
        spoken to as h2c; what edge cannot do answers 503 (UNAVAILABLE)."""
        key = route.metadata.key
        failed: Condition | None = None
        unsupported: list[str] = []
        for ri, rule in enumerate(route.spec.rules):
            rkey = _normalize(
                f"grpcroute-{key[0]}-{key[1]}-gw-{gw_key[0]}-{gw_key[1]}-ep-{li.entry_point}-{ri}"
            )
            where = f"rules[{ri}]"
            for mi, match in enumerate(rule.matches or [GRPCRouteMatch()]):
                try:
                    text, priority = grpc_match_rule(hostnames, match)
                except ValueError as exc:
                    text, priority = grpc_match_rule(hostnames, GRPCRouteMatch())
                    problem: str | None = f"{where}.matches[{mi}]: {exc}"
                else:
                    problem = None
                name = router_name(text, rkey)
                mirrors: list[tuple[str, objects.HTTPRequestMirrorFilter]] = []
                try:
                    if problem is not None:
                        raise _Unsupported(problem)
                    for fi, f in enumerate(rule.filters):
                        if f.type not in _GRPC_FILTERS:
                            raise _Unsupported(
                                f"{where}.filters[{fi}]: filter {f.type} is not supported"
                            )
                    mws = self.filters(name, rule.filters, objects.HTTPRouteMatch(), where, mirrors)
                except _Unsupported as exc:
                    if str(exc) not in unsupported:
                        unsupported.append(str(exc))
                    if problem is not None:
                        continue  # its match cannot be told: it would catch others' calls
                    mws = []
                    service = self.unavailable(f"{name}-wrr")
                else:
                    service, cond = self.backends(route, name, rule, GRPC_ROUTE)
                    if cond is not None and failed is None:
                        failed = cond
                    if mirrors:
                        service, cond = self.mirroring(route, name, service, mirrors, GRPC_ROUTE)
                        if cond is not None and failed is None:
                            failed = cond
                self.ties[name] = (GRPC_ROUTE, key, ri, mi)
                self.routers[name] = Router(
                    rule=text,
                    service=service,
                    entry_points=[li.entry_point],
                    priority=priority,
                    rule_syntax="v3",
                    middlewares=mws,
                    tls=RouterTLS() if li.spec.protocol == "HTTPS" else None,
                )
        return failed, unsupported

    def unresolved(self, kind: str, route: Any) -> Condition | None:
        """The first backendRef of ``route`` that cannot be served, as its ResolvedRefs
        condition (None: all resolve); what the rules would find, making nothing."""
        protocol = "UDP" if kind == UDP_ROUTE else "TCP"
        for rule in route.spec.rules:
            for ref in rule.backend_refs:
                _, cond = self.resolve(kind, route.metadata.namespace, ref, protocol)
                if cond is not None:
                    return cond
        return None

    def unavailable(self, name: str) -> str:
        """A service with no server (edge answers 503)."""
        self.services[name] = Service(load_balancer=LoadBalancer())
        return name

    def resolve(
        self, kind: str, namespace: str, ref: Any, protocol: str
    ) -> tuple[list[str] | None, Condition | None]:
        """The ``host:port`` addresses of one backendRef of a ``kind`` route in
        ``namespace``, or the ResolvedRefs condition saying why there are none."""
        target = ref.namespace or namespace
        if getattr(ref, "filters", None):
            why = "backendRef filters are not supported"
            return None, Condition("ResolvedRefs", False, "UnsupportedValue", why)
        if (ref.group or "") != "" or (ref.kind or "Service") != "Service":
            why = f"backendRef {ref.group or 'core'}/{ref.kind}: only Services are supported"
            return None, Condition("ResolvedRefs", False, "InvalidKind", why)
        if target != namespace and not self.granted(
            kind, namespace, "", "Service", ref.name, target
        ):
            why = f"backendRef {target}/{ref.name}: no ReferenceGrant in {target} allows it"
            return None, Condition("ResolvedRefs", False, "RefNotPermitted", why)
        addresses, why = self.servers(target, ref, protocol)
        if addresses is None:
            return None, Condition("ResolvedRefs", False, "BackendNotFound", why)
        if kind == HTTP_ROUTE and self.http_scheme(target, ref) is None:
            port = self.service_port(target, ref, protocol)
            assert port is not None  # servers() found it
            why = (
                f"service {target}/{ref.name} port {ref.port}: appProtocol "
                f"{port.app_protocol!r} is not one edge speaks ({', '.join(_APP_PROTOCOLS)})"
            )
            return None, Condition("ResolvedRefs", False, "UnsupportedProtocol", why)
        return addresses, None

    def service_port(self, namespace: str, ref: Any, protocol: str) -> objects.ServicePort | None:
        """The Service port a backendRef names, None when there is none."""
        svc = self.state.services.get((namespace, ref.name))
        return service_port(svc, ref.port, "", protocol) if svc is not None else None

    def http_scheme(self, namespace: str, ref: Any) -> str | None:
        """The scheme edge speaks to an HTTPRoute's backend (its Service port's
        ``appProtocol``, :data:`_APP_PROTOCOLS`); None for one it does not speak."""
        port = self.service_port(namespace, ref, "TCP")
        if port is None or port.app_protocol is None:
            return "http"
        return _APP_PROTOCOLS.get(port.app_protocol)

    def backends(
        self, route: Any, router: str, rule: Any, kind: str = HTTP_ROUTE
    ) -> tuple[str, Condition | None]:
        """The weighted service of a rule of an HTTPRoute or GRPCRoute (``kind``): a
        GRPCRoute's servers are spoken to as h2c, an HTTPRoute's as their Service port's
        ``appProtocol`` says (:meth:`http_scheme`), and the share of a backendRef that
        cannot be served gets 503 (which a gRPC client reads as UNAVAILABLE, the code
        the spec asks for) where an HTTPRoute's gets 500."""
        ns = route.metadata.namespace
        failed: Condition | None = None
        children: list[WRRService] = []
        refused, scheme = _FAILED_SHARE[kind]
        for bi, ref in enumerate(rule.backend_refs):
            child = f"{router}-svc-{ref.namespace or ns}-{ref.name}-{bi}"
            weight = max(ref.weight, 0)
            addresses, cond = self.resolve(kind, ns, ref, "TCP")
            if addresses is None:
                failed = failed or cond
                children.append(WRRService(name=child, weight=weight, status=refused))
                continue
            target = ref.namespace or ns
            spoken = scheme if kind == GRPC_ROUTE else self.http_scheme(target, ref) or scheme
            self.services[child] = self.balance("http", child, target, ref, addresses, spoken)
            children.append(WRRService(name=child, weight=weight))
        if not rule.backend_refs:
            children.append(WRRService(name=f"{router}-none", status=refused))
        name = f"{router}-wrr"
        self.services[name] = Service(weighted=Weighted(services=children))
        return name, failed

    def balance(
        self,
        section: str,
        name: str,
        namespace: str,
        ref: Any,
        addresses: list[str] | None,
        scheme: str = "http",
    ) -> Any:
        """The load balancer ``name`` over ``addresses`` (none when None: the Service
        could not be resolved), remembered for :func:`update_endpoints` otherwise."""
        if addresses is not None:
            protocol = "UDP" if section == "udp" else "TCP"
            origin = Backend((namespace, ref.name), ref.port, protocol, scheme)
            self.origins[(section, name)] = origin
        return _load_balancer(section, addresses or [], scheme)

    def mirroring(
        self,
        route: objects.HTTPRoute | GRPCRoute,
        router: str,
        service: str,
        mirrors: list[tuple[str, objects.HTTPRequestMirrorFilter]],
        kind: str = HTTP_ROUTE,
    ) -> tuple[str, Condition | None]:
        """``service`` wrapped in a mirroring service sending each mirror its share of
        the requests (``percent``, or ``fraction`` rounded to a whole percent); a mirror
        whose backendRef cannot be served is left out, and said in ResolvedRefs. A
        GRPCRoute's mirrors are spoken to as h2c, as its backends."""
        ns = route.metadata.namespace
        failed: Condition | None = None
        copies: list[MirrorService] = []
        for name, mirror in mirrors:
            ref = mirror.backend_ref
            assert ref is not None  # refused in filters()
            addresses, cond = self.resolve(kind, ns, ref, "TCP")
            if addresses is None:
                failed = failed or cond
                continue
            target = ref.namespace or ns
            scheme = "h2c" if kind == GRPC_ROUTE else self.http_scheme(target, ref) or "http"
            self.services[name] = self.balance("http", name, target, ref, addresses, scheme)
            percent = 100
            if mirror.percent is not None:
                percent = mirror.percent
            elif mirror.fraction is not None and mirror.fraction.denominator > 0:
                percent = round(100 * mirror.fraction.numerator / mirror.fraction.denominator)
            copies.append(MirrorService(name=name, percent=max(0, min(percent, 100))))
        if not copies:
            return service, failed
        name = f"{router}-mirroring"
        self.services[name] = Service(mirroring=Mirroring(service=service, mirrors=copies))
        return name, failed

    def servers(self, namespace: str, ref: Any, protocol: str) -> tuple[list[str] | None, str]:
        """The ready ``host:port`` of a Service port (sorted), or why there are none."""
        what = f"service {namespace}/{ref.name}"
        svc = self.state.services.get((namespace, ref.name))
        if svc is None or not self.visible(namespace):
            return None, f"{what} not found"
        if not ref.port:
            return None, f"the backendRef to {what} names no port"
        port = service_port(svc, ref.port, "", protocol)
        if port is None:
            return None, f"{protocol} port {ref.port} not found on {what}"
        if svc.spec.type == "ExternalName":
            return None, f"{what} is an ExternalName service"
        slices = self.slices.get((namespace, ref.name), ())
        addresses, _ = ready_addresses(slices, port.name, protocol=protocol)
        return sorted(addresses), ""

    # --- TLSRoute, TCPRoute, UDPRoute ---------------------------------------------------------

    def l4_rules(
        self, kind: str, route: Any, gw_key: Key, li: _Listener, hostnames: list[str]
    ) -> Condition | None:
        """TCP (TLSRoute, TCPRoute) or UDP routers of every rule of ``route`` on ``li``;
        the first ResolvedRefs failure (None: all resolved)."""
        key = route.metadata.key
        failed: Condition | None = None
        udp = kind == UDP_ROUTE
        for ri, rule in enumerate(route.spec.rules):
            rkey = _normalize(
                f"{kind.lower()}-{key[0]}-{key[1]}-gw-{gw_key[0]}-{gw_key[1]}"
                f"-ep-{li.entry_point}-{ri}"
            )
            name = router_name("", rkey)
            children: list[WRRService] = []
            for bi, ref in enumerate(rule.backend_refs):
                child = f"{name}-svc-{ref.namespace or key[0]}-{ref.name}-{bi}"
                addresses, cond = self.resolve(kind, key[0], ref, "UDP" if udp else "TCP")
                failed = failed or cond
                target = ref.namespace or key[0]
                if udp:
                    self.udp_services[child] = self.balance("udp", child, target, ref, addresses)
                else:
                    self.tcp_services[child] = self.balance("tcp", child, target, ref, addresses)
                children.append(WRRService(name=child, weight=max(ref.weight, 0)))
            service = f"{name}-wrr"
            weighted = Weighted(services=children)
            if udp:
                self.udp_services[service] = UDPService(weighted=weighted)
                self.udp_routers[name] = UDPRouter(service=service, entry_points=[li.entry_point])
                continue
            self.tcp_services[service] = TCPService(weighted=weighted)
            rule_text, priority = sni_rule(hostnames) if kind == TLS_ROUTE else ('HostSNI("*")', 0)
            tls = None
            if li.spec.protocol == "TLS" and li.spec.tls is not None:
                tls = TCPRouterTLS(passthrough=li.spec.tls.mode == "Passthrough")
            self.tcp_routers[name] = TCPRouter(
                rule=rule_text,
                service=service,
                entry_points=[li.entry_point],
                priority=priority,
                rule_syntax="v3",
                tls=tls,
            )
        return failed

    # --- filters ---------------------------------------------------------------------------

    def filters(
        self,
        router: str,
        filters: list[objects.HTTPRouteFilter],
        match: objects.HTTPRouteMatch,
        where: str,
        mirrors: list[tuple[str, objects.HTTPRequestMirrorFilter]],
    ) -> list[str]:
        """The middlewares of ``filters``, in order; RequestMirror filters go to
        ``mirrors`` (name, filter): they make the rule's service a mirroring one."""
        names: list[str] = []
        path = match.path if match.path is not None else objects.HTTPPathMatch()
        for i, f in enumerate(filters):
            base = f"{router}-{f.type.lower()}-{i}"
            made: list[tuple[str, Middleware]] = []
            if f.type == "RequestHeaderModifier" and f.request_header_modifier is not None:
                made.append(
                    (
                        base,
                        Middleware(
                            headers=Headers(
                                custom_request_headers=_edits(f.request_header_modifier, False),
                                append_request_headers={
                                    h.name: h.value for h in f.request_header_modifier.add
                                },
                            )
                        ),
                    )
                )
            elif f.type == "ResponseHeaderModifier" and f.response_header_modifier is not None:
                made.append(
                    (
                        base,
                        Middleware(
                            headers=Headers(
                                custom_response_headers=_edits(f.response_header_modifier)
                            )
                        ),
                    )
                )
            elif f.type == "RequestRedirect" and f.request_redirect is not None:
                made.append(
                    (base, Middleware(redirect_regex=_redirect(f.request_redirect, path, where)))
                )
            elif f.type == "URLRewrite" and f.url_rewrite is not None:
                rewrite = f.url_rewrite
                if rewrite.hostname:
                    made.append(
                        (
                            f"{base}-host",
                            Middleware(
                                headers=Headers(custom_request_headers={"Host": rewrite.hostname})
                            ),
                        )
                    )
                if rewrite.path is not None:
                    made.append((f"{base}-path", _rewrite_path(rewrite.path, path, where)))
            elif f.type == "RequestMirror" and f.request_mirror is not None:
                if f.request_mirror.backend_ref is None:
                    raise _Unsupported(f"{where}.filters[{i}]: RequestMirror names no backendRef")
                mirrors.append((base, f.request_mirror))
            else:
                raise _Unsupported(f"{where}.filters[{i}]: filter {f.type} is not supported")
            for name, mw in made:
                self.middlewares[name] = mw
                names.append(name)
        return names

    def break_ties(self) -> None:
        """Matches of equal precedence ordered as the spec orders them: by route
        (:func:`tie_order`), then the first rule, then the first match of it. Each
        HTTP router's priority becomes its precedence times the number of routers plus
        its place in that order from the last, so equals never fall to the router name
        (where rule 10 would sort before rule 2). GRPCRoutes' matches rank alike, by their
        own precedence (:func:`grpc_match_rule`)."""
        orders = {
            HTTP_ROUTE: tie_order(self.state.http_routes),
            GRPC_ROUTE: tie_order(self.state.grpc_routes),
        }
        ranked = sorted(
            self.ties,
            key=lambda n: (orders[self.ties[n][0]][self.ties[n][1]], *self.ties[n]),
        )
        scale = len(ranked)
        for place, name in enumerate(ranked):
            router = self.routers[name]
            priority = router.priority * scale + (scale - 1 - place)
            self.routers[name] = msgspec.structs.replace(router, priority=priority)

    # --- the whole ----------------------------------------------------------------------

    def run(self) -> Conversion:
        classes = self.classes()
        gateways = self.gateways(classes)
        self.routes(gateways)
        self.break_ties()
        for key, listeners in gateways.items():
            self.statuses.append(self.gateway_status(self.state.gateways[key], listeners))
        http = HTTPConfiguration(
            routers=dict(sorted(self.routers.items())),
            services=dict(sorted(self.services.items())),
            middlewares=dict(sorted(self.middlewares.items())),
        )
        tls = (
            TLSConfiguration(certificates=[self.certificates[k] for k in sorted(self.certificates)])
            if self.certificates
            else None
        )
        tcp = (
            TCPConfiguration(
                routers=dict(sorted(self.tcp_routers.items())),
                services=dict(sorted(self.tcp_services.items())),
            )
            if self.tcp_routers
            else None
        )
        udp = (
            UDPConfiguration(
                routers=dict(sorted(self.udp_routers.items())),
                services=dict(sorted(self.udp_services.items())),
            )
            if self.udp_routers
            else None
        )
        conf = Configuration(http=http, tcp=tcp, udp=udp, tls=tls)
        opened = {ep: tuple(sorted(names)) for ep, names in sorted(self.opened.items())}
        return Conversion(conf, self.problems, self.statuses, self.origins, opened)

    def gateway_status(self, gw: objects.Gateway, listeners: list[_Listener]) -> WantedStatus:
        gen = gw.metadata.generation
        out = []
        for li in listeners:
            types = {c.type for c in li.conditions}
            conds = list(li.conditions)
            if "Accepted" not in types:
                conds.append(Condition("Accepted", True, "Accepted", ""))
            if "ResolvedRefs" not in types:
                conds.append(Condition("ResolvedRefs", True, "ResolvedRefs", ""))
            if "Conflicted" not in types:
                conds.append(Condition("Conflicted", False, "NoConflicts", ""))
            served = li.ok and li.programmed and not li.unopened
            conds.append(Condition("Programmed", served, "Programmed" if served else "Invalid", ""))
            out.append(
                {
                    "name": li.spec.name,
                    "supportedKinds": [{"group": GROUP, "kind": k} for k in li.kinds],
                    "attachedRoutes": li.attached,
                    "conditions": [c.to_builtins(gen) for c in sorted(conds)],
                }
            )
        valid = sum(li.ok and not li.unopened for li in listeners)
        if valid == len(listeners):
            accepted = Condition("Accepted", True, "Accepted", "")
        else:
            accepted = Condition(
                "Accepted",
                valid > 0,
                "ListenersNotValid",
                f"{len(listeners) - valid} of {len(listeners)} listeners are not valid",
            )
        live = sum(li.ok and li.programmed and not li.unopened for li in listeners)
        programmed = Condition("Programmed", live > 0, "Programmed" if live else "Invalid", "")
        status = {
            "conditions": [accepted.to_builtins(gen), programmed.to_builtins(gen)],
            "listeners": out,
        }
        return WantedStatus("Gateway", gw.metadata.key, gen, status)


def _timeouts(timeouts: objects.HTTPRouteTimeouts | None, where: str) -> RouterTimeouts | None:
    """A rule's ``timeouts`` as its routers' (``0s``: no bound, as the spec asks)."""
    if timeouts is None or (timeouts.request is None and timeouts.backend_request is None):
        return None
    seconds = []
    for key, value in (("request", timeouts.request), ("backendRequest", timeouts.backend_request)):
        try:
            seconds.append(Duration(parse_duration(value)) if value is not None else Duration(0.0))
        except ValueError as exc:
            raise _Unsupported(f"{where}.{key} {value!r}: {exc}") from None
    return RouterTimeouts(request=seconds[0], backend_request=seconds[1])


def _edits(f: objects.HTTPHeaderFilter, add: bool = True) -> dict[str, str]:
    """A header filter as the ``headers`` middleware's edits (empty: remove); ``add``:
    its ``add`` headers set too (a response's: edge appends only to requests)."""
    edits: dict[str, str] = {}
    for h in (*(f.add if add else ()), *f.set):
        edits[h.name] = h.value
    for name in f.remove:
        edits[name] = ""
    return edits


_URL = r"^([a-z]+)://(\[[^\]]*\]|[^/:?]+)(:[0-9]+)?"


def _prefix(match: objects.HTTPPathMatch, where: str) -> str:
    if match.type != "PathPrefix":
        raise _Unsupported(f"{where}: ReplacePrefixMatch needs a PathPrefix match")
    return (match.value or "/").rstrip("/")


def _redirect(
    f: objects.HTTPRequestRedirectFilter, match: objects.HTTPPathMatch, where: str
) -> RedirectRegex:
    """A RequestRedirect as a ``redirectRegex`` over ``scheme://host[:port]/path?query``."""
    if f.status_code not in (301, 302, 303, 307, 308):
        raise _Unsupported(f"{where}: redirect statusCode {f.status_code} is not supported")
    scheme = f.scheme or "${1}"
    host = f.hostname or "${2}"
    if f.port is not None:
        default = {"http": 80, "https": 443}.get(f.scheme or "")
        port = "" if f.port == default else f":{f.port}"
    elif f.scheme:
        port = ""
    else:
        port = "${3}"
    modifier = f.path
    if modifier is None:
        regex, path = _URL + r"(.*)$", "${4}"
    elif modifier.type == "ReplaceFullPath":
        regex, path = _URL + r"[^?]*(\?.*)?$", (modifier.replace_full_path or "/") + "${4}"
    elif modifier.type == "ReplacePrefixMatch":
        prefix = _prefix(match, where)
        repl = (modifier.replace_prefix_match or "/").rstrip("/")
        if repl:
            regex, path = _URL + re.escape(prefix) + r"(/[^?]*)?(\?.*)?$", repl + "${4}${5}"
        else:
            regex, path = _URL + re.escape(prefix) + r"/?([^?]*)(\?.*)?$", "/${4}${5}"
    else:
        raise _Unsupported(f"{where}: path modifier {modifier.type!r} is not supported")
    return RedirectRegex(
        regex=regex,
        replacement=f"{scheme}://{host}{port}{path}",
        permanent=f.status_code in (301, 308),
        status_code=f.status_code,
    )


def _rewrite_path(
    modifier: objects.HTTPPathModifier, match: objects.HTTPPathMatch, where: str
) -> Middleware:
    if modifier.type == "ReplaceFullPath":
        return Middleware(replace_path=ReplacePath(path=modifier.replace_full_path or "/"))
    if modifier.type == "ReplacePrefixMatch":
        prefix = _prefix(match, where)
        repl = (modifier.replace_prefix_match or "/").rstrip("/")
        if repl:
            return Middleware(
                replace_path_regex=ReplacePathRegex(
                    regex="^" + re.escape(prefix) + "(/.*)?$", replacement=repl + "${1}"
                )
            )
        return Middleware(
            replace_path_regex=ReplacePathRegex(
                regex="^" + re.escape(prefix) + "/?(.*)$", replacement="/${1}"
            )
        )
    raise _Unsupported(f"{where}: path modifier {modifier.type!r} is not supported")


def convert(state: GatewayState, options: GatewayOptions | None = None) -> Conversion:
    """The configuration, problems and wanted statuses of ``state`` (see the module doc)."""
    return _Converter(state, options or GatewayOptions()).run()


def update_endpoints(
    previous: Conversion,
    old_slices: Mapping[Key, objects.EndpointSlice],
    new_slices: Mapping[Key, objects.EndpointSlice],
    services: Mapping[Key, objects.Service],
) -> Conversion | None:
    """``previous`` with the load balancers of the Services whose EndpointSlices changed
    from ``old_slices`` to ``new_slices`` rebuilt, and nothing else: what a whole
    conversion of the new state gives when only slices changed (statuses included:
    ready endpoints never change a condition), at a cost that grows with the slices
    changed. None when a whole conversion is needed (a Service or port not found)."""
    affected = changed_services(old_slices, new_slices)
    grouped = slices_by_service(new_slices, only=affected)
    rebuilt: dict[str, dict[str, Any]] = {}
    for (section, name), backend in previous.backends.items():
        if backend.service not in affected:
            continue
        svc = services.get(backend.service)
        port = service_port(svc, backend.port, "", backend.protocol) if svc is not None else None
        if port is None:
            return None
        found, _ = ready_addresses(
            grouped.get(backend.service, ()), port.name, protocol=backend.protocol
        )
        rebuilt.setdefault(section, {})[name] = _load_balancer(
            section, sorted(found), backend.scheme
        )
    configuration = previous.configuration
    for section, changed in rebuilt.items():
        part = getattr(configuration, section)
        part = msgspec.structs.replace(part, services={**part.services, **changed})
        configuration = msgspec.structs.replace(configuration, **{section: part})
    return previous._replace(configuration=configuration)
