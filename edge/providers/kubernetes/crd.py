"""Traefik's CRDs -> dynamic configuration: the pure conversion of the kubernetesCRD provider.

Owns :func:`convert`, from a :class:`~edge.providers.kubernetes.objects.ClusterState`
and :class:`CRDOptions` to a :class:`Conversion` (the ``Configuration`` and the
problems found), with the semantics and names of Traefik's ``kubernetesCRD`` provider
(``pkg/provider/kubernetes/crd``) for the kinds of ``traefik.io/v1alpha1`` edge
implements. Invariants: the same state and options give an equal result (every table
is walked in key order); nothing in the state makes it raise: what cannot be served is
*refused* with a :class:`Problem` naming the object, the place and the reason, and
everything else converts; a refused route is still published, under its own name, as a
disabled router whose error is the problem (the API and ``edge check`` show it where
the user looks); names never hold ``@`` (the merge adds the provider) except
cross-provider references the user wrote.

Which objects
    Only objects in ``namespaces`` (every namespace when empty), as Traefik's client
    watches only those. IngressRoute, IngressRouteTCP and IngressRouteUDP are served
    when their class (``spec.ingressClassName``, else the ``kubernetes.io/ingress.class``
    annotation) equals the ``ingressClass`` option, or, with the option unset, is empty
    or :data:`DEFAULT_CLASS` (Traefik's rule, with edge's class name for Traefik's
    ``traefik``). Other kinds are not filtered by class.

Names (Traefik's)
    An IngressRoute route's router is ``<ns>-<name>-<h>`` normalized, where ``h`` is the
    first 20 hex digits of the SHA-256 of its ``match`` (Traefik's ``makeServiceKey``:
    ``%.10x`` of the digest); normalizing turns every run of characters other than
    letters and digits into one ``-``. An IngressRouteTCP route's router is the same,
    not normalized (Traefik's ``makeID``); an IngressRouteUDP route's ``<ns>-<name>-<i>``,
    ``i`` its index. A route with one Service gets a load balancer named like its
    router; a route with several, a weighted service named like its router over
    ``<ns>-<service>-<port>`` (HTTP, normalized) or ``<router>-<service>-<port>`` (TCP,
    UDP) children. A route naming one TraefikService uses ``<ns>-<name>`` directly.
    Middlewares, MiddlewareTCPs, TraefikServices and ServersTransports are
    ``<ns>-<name>`` normalized; TLSOptions and TLSStores ``<ns>-<name>``, except those
    named ``default``, which are edge's ``default`` (two such in different namespaces are
    both refused, as Traefik drops both). A reference holding ``@`` names an element of
    another provider and is passed on as written.

References
    Middlewares, services, TLS options, TLS stores and serversTransports are found by
    name in the referrer's namespace, or the ``namespace`` the reference gives: another
    namespace is refused unless ``allowCrossNamespace`` (so is a ``…@kubernetescrd``
    reference, which could name any namespace). A reference to an object that does not
    exist, or that was itself refused, refuses the route.

Services
    A Service port is named by number or name (TCP ports for IngressRoute and
    IngressRouteTCP, UDP ports for IngressRouteUDP); its servers are the ready endpoints
    of its EndpointSlices, resolved exactly as the Ingress conversion resolves them
    (:mod:`edge.providers.kubernetes.endpoints`). ``nativeLB`` (or
    ``nativeLBByDefault``) gives the Service's cluster IP instead. An ExternalName
    Service gives ``externalName:port`` when ``allowExternalNameServices`` is set (a port
    number it does not list is taken as written, as Traefik does), else the route is
    refused; no ready endpoint gives a service without servers when
    ``allowEmptyServices`` is set, else the route is refused (both as Traefik). The HTTP
    scheme is ``scheme`` (``http``, ``https`` or ``h2c``: HTTP/2 with prior knowledge),
    else ``https`` for port 443 or a port name starting with
    ``https``, else ``http``. ``healthCheck`` becomes the load balancer's active check
    (Traefik's keys; an empty ``mode`` is ``http``, a duration given as a number is
    seconds) and is allowed only on an ExternalName Service, as in Traefik: a Service's
    pods are checked by Kubernetes' readiness, which already takes them out of its
    EndpointSlices. ``passiveHealthCheck`` becomes the load balancer's, on any Service.
    ``sticky`` and ``responseForwarding`` become the load balancer's (Traefik's keys).
    Options edge does not implement (service
    ``middlewares``) refuse the route, naming the option: nothing is
    served without what the user asked for. ``strategy`` passes on to the load balancer
    (Traefik's deprecated ``RoundRobin`` as ``wrr``); validation refuses what edge lacks. ``nodePortLB`` on a
    NodePort Service gives every Node's ``InternalIP`` with the port's ``nodePort`` (in
    node name order; for TCP and UDP it beats ``nativeLB``, for HTTP ``nativeLB`` wins:
    Traefik's order); a port without nodePort, or no node with an InternalIP, refuses
    the route, as does ``disableClusterScopeResources`` (Nodes are not read); on a
    Service of another type it is ignored, as in Traefik.

TLS
    ``tls.secretName`` is read from the route's namespace as the Ingress conversion reads
    it (:mod:`edge.providers.kubernetes.secrets`) into ``tls.certificates`` (in the
    store ``tls.store`` names, if any); a missing or bad Secret refuses the object's
    routes (they would answer with another certificate). ``tls.options`` names a
    TLSOption; ``tls.domains`` pass on; ``tls.certResolver`` is not supported and
    refuses the routes. IngressRouteTCP's ``tls.passthrough`` routes the TLS connection
    by SNI without terminating it (its Secret, if any, is not read, as in Traefik).

Secrets of TLSOptions and ServersTransports (Traefik's keys, read in the object's namespace)
    A ServersTransport's ``certificatesSecrets`` (and a ServersTransportTCP's
    ``tls.certificatesSecrets``) become edge's client ``certificates``, inline PEM, from
    Secrets of any type holding ``tls.crt`` and ``tls.key``. CA bundles (``rootCAs``
    entries ``{secret: name}``, the deprecated ``rootCAsSecrets``, a TLSOption's
    ``clientAuth.secretNames``) are read by :func:`~edge.providers.kubernetes.secrets.ca_bundle`
    (``tls.ca``, else ``ca.crt``), ``{configMap: name}`` entries by
    :func:`~edge.providers.kubernetes.secrets.config_map_ca_bundle` (the same keys). ``clientAuth.clientAuthType`` passes on. Where
    Traefik logs a missing or bad Secret and serves without it, edge refuses the element
    (and the routes using it): a transport without its client certificate or CA, or
    options without the CA that verifies clients, would not be what the user asked for.
    edge's own file keys (``certificates``, ``clientAuth.caFiles``) are refused in the
    cluster: an object must not make edge read its files.

Middlewares (Traefik's CRD shapes)
    A chain's ``middlewares`` are ``{name, namespace}`` references, resolved as a
    route's are (cross-namespace with ``allowCrossNamespace``; whether each exists is
    validation's question). ``basicAuth.secret`` and ``digestAuth.secret`` name a Secret
    of the Middleware's namespace whose users become ``users``
    (:func:`~edge.providers.kubernetes.secrets.auth_users`); a missing or unreadable one
    refuses the Middleware, as does ``usersFile`` (a file of edge's). ``errors.service``
    is a reference of a route's shape: a Service becomes the load balancer
    ``<middleware>-errorpage-service`` (rebuilt on endpoint churn like a route's), a
    TraefikService is named as it is; cross-namespace with ``allowCrossNamespace``.
    ``forwardAuth.tls`` and ``rateLimit.redis.tls`` read ``caSecret`` (as a
    transport's CA bundles) and ``certSecret`` (``tls.crt`` and ``tls.key`` of a Secret
    of any type) into edge's ``ca``, ``cert`` and ``key`` as inline PEM;
    ``rateLimit.redis.secret`` gives ``username`` and ``password``
    (:func:`~edge.providers.kubernetes.secrets.credentials`). A missing Secret or key
    refuses the Middleware naming the key; edge's own ``ca``/``cert``/``key`` (paths)
    and inline Redis credentials are refused. The other kinds (``compress``,
    ``retry``, ``circuitBreaker``, ``buffering``, ``passTLSClientCert``) are spelled
    as in the dynamic configuration; Traefik's int-or-string durations are decoded as
    seconds or duration strings.

TraefikServices
    ``weighted`` is a weighted service over its references (Services and
    TraefikServices, resolved as a route's). ``failover`` is edge's failover service:
    ``service`` and ``fallback`` are references of the same shape, resolved the same
    way (a Service gives its load balancer ``<ns>-<service>-<port>``, a TraefikService
    its own name); ``healthCheck: {}`` (from edge's dynamic configuration; Traefik's CRD
    has none) passes the failover's health up to the services using it; Traefik's
    ``errors`` (status ranges, body size) is refused unless empty, as edge's failover
    switches on health alone. ``weighted.sticky`` becomes the weighted service's.
    ``highestRandomWeight`` is refused by name; a TraefikService
    with more than one of ``weighted``, ``failover`` and ``mirroring`` is refused.
    ``mirroring`` is edge's mirroring service: its main service and each mirror are
    references of a route's shape (Traefik's inline ``LoadBalancerSpec``), resolved as
    a failover's (cross-namespace ones only with ``allowCrossNamespace``);
    ``mirrorBody``, ``maxBodySize`` and each mirror's ``percent`` pass on, and
    validation judges them.

Endpoint churn
    :func:`update_endpoints` derives ``convert(new)`` from ``convert(old)`` when only
    EndpointSlices changed, rebuilding the load balancers (HTTP, TCP, UDP) of the
    Services whose slices changed from where each came from (:class:`Backend`, kept in
    the :class:`Conversion`); routers, weighted services and TraefikServices stay the
    previous objects. It answers None (a whole conversion) when a changed Service had
    refused something for lack of ready endpoints, or does now.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, NamedTuple, TypeVar, cast

import msgspec

from edge.config.durations import dec_hook
from edge.config.dynamic import (
    UNSUPPORTED,
    CertAndStores,
    ClientAuth,
    Configuration,
    Domain,
    Failover,
    HealthCheck,
    HTTPConfiguration,
    LoadBalancer,
    Middleware,
    Mirroring,
    MirrorService,
    PassiveServerHealthCheck,
    ProxyProtocol,
    ResponseForwarding,
    Router,
    RouterObservability,
    RouterTLS,
    Server,
    ServerHealthCheck,
    ServersTransport,
    Service,
    Sticky,
    StoreCertificate,
    TCPConfiguration,
    TCPLoadBalancer,
    TCPMiddleware,
    TCPRouter,
    TCPRouterTLS,
    TCPServer,
    TCPServersTransport,
    TCPService,
    TLSConfiguration,
    TLSOptions,
    TLSStore,
    UDPConfiguration,
    UDPLoadBalancer,
    UDPRouter,
    UDPServer,
    UDPService,
    Weighted,
    WRRService,
)
from edge.providers.kubernetes import objects
from edge.providers.kubernetes.endpoints import (
    changed_services,
    endpoints_only,
    host_port,
    node_port_addresses,
    ready_addresses,
    service_port,
    slices_by_service,
)
from edge.providers.kubernetes.objects import (
    INGRESS_CLASS_ANNOTATION,
    ClusterState,
    Key,
    ObjectMeta,
    RouteTLS,
)
from edge.providers.kubernetes.objects import Service as KubeService
from edge.providers.kubernetes.secrets import (
    SecretError,
    auth_users,
    ca_bundle,
    config_map_ca_bundle,
    credentials,
    tls_certificate,
)

__all__ = [
    "DEFAULT_CLASS",
    "PROVIDER",
    "Backend",
    "CRDOptions",
    "Conversion",
    "Problem",
    "convert",
    "update_endpoints",
]

PROVIDER = "kubernetescrd"
"""The provider name Traefik gives these elements (``<ns>-<name>@kubernetescrd``)."""

DEFAULT_CLASS = "edge"
"""The class an object may name to be served when no ``ingressClass`` is configured."""

DEFAULT = "default"
"""The name of the TLSOption and TLSStore that become edge's defaults."""


class Problem(msgspec.Struct, frozen=True):
    """Why (part of) an object is not served: ``kind`` and ``object`` (``namespace/name``)
    say which, ``where`` the place in it (``spec.routes[0]``, ``spec``), ``reason`` what
    is wrong (``service default/web not found``)."""

    kind: str
    object: str
    where: str
    reason: str

    def __str__(self) -> str:
        return f"{self.kind} {self.object}: {self.where}: {self.reason}"


class CRDOptions(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    """The provider options the conversion reads (Traefik's key names)."""

    namespaces: tuple[str, ...] = ()
    ingress_class: str = ""
    allow_cross_namespace: bool = False
    allow_external_name_services: bool = False
    allow_empty_services: bool = False
    native_lb_by_default: bool = msgspec.field(default=False, name="nativeLBByDefault")
    disable_cluster_scope_resources: bool = False


_Ref = objects.RouteService | objects.RouteServiceTCP | objects.RouteServiceUDP


class Backend(NamedTuple):
    """Where one load balancer of a conversion comes from: the namespace of the object
    naming the Service (an IngressRoute, a TraefikService, an IngressRouteTCP or an
    IngressRouteUDP) and its reference; :func:`update_endpoints` rebuilds it from that.
    ``service``: the Kubernetes Service whose endpoints the load balancer holds."""

    parent: str
    ref: _Ref
    service: Key

    @classmethod
    def of(cls, parent: str, ref: _Ref) -> Backend:
        return cls(parent, ref, (ref.namespace or parent, ref.name))


class Conversion(NamedTuple):
    """What :func:`convert` returns: the configuration and every problem, in walk order;
    for :func:`update_endpoints`, where each load balancer comes from (by section,
    ``http``, ``tcp`` or ``udp``, and name) and the Services whose lack of ready
    endpoints refused something (a new endpoint would bring a route back)."""

    configuration: Configuration
    problems: list[Problem]
    backends: Mapping[tuple[str, str], Backend] = {}
    refused_services: frozenset[Key] = frozenset()


class _Refused(Exception):
    """What is referred to cannot be served; the reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


_NAME_RUN_RE = re.compile(r"[\W_]+")


def _normalize(name: str) -> str:
    """Traefik's ``provider.Normalize``: runs of characters other than letters and
    digits become one ``-``, none at either end."""
    return _NAME_RUN_RE.sub("-", name).strip("-")


def _route_key(match: str, name: str) -> str:
    """Traefik's ``makeServiceKey``: the name and 10 bytes (20 hex digits) of SHA-256."""
    return f"{name}-{hashlib.sha256(match.encode('utf-8', 'surrogatepass')).hexdigest()[:20]}"


_STRATEGIES = {"RoundRobin": "wrr"}
"""Traefik's CRD spellings of a load balancer's ``strategy`` that differ from the dynamic
configuration's: its deprecated ``RoundRobin`` is ``wrr``. The others
(``wrr``, ``p2c``, ``hrw``, ``leasttime``) pass on as written, and validation judges them."""


def _port_text(port: int | str) -> str:
    return str(port)


def _kinds(model: type[msgspec.Struct]) -> tuple[str, ...]:
    """The keys of ``model`` that are a middleware kind (not ``unsupported``/``problems``)."""
    return tuple(
        f.encode_name
        for f in msgspec.structs.fields(model)
        if f.name not in ("unsupported", "problems")
    )


_HTTP_KINDS = _kinds(Middleware)
_TCP_KINDS = _kinds(TCPMiddleware)

T = TypeVar("T")
S = TypeVar("S", Service, TCPService, UDPService)


class _Batch(Generic[S]):
    """What one route (or TraefikService) builds: services by name, and where each load
    balancer comes from; it joins the conversion only once the whole route converted."""

    def __init__(self) -> None:
        self.services: dict[str, S] = {}
        self.backends: dict[str, Backend] = {}

    def add(self, name: str, service: S, backend: Backend | None = None) -> None:
        self.services[name] = service
        if backend is None:
            self.backends.pop(name, None)
        else:
            self.backends[name] = backend


def _names(value: Any, where: str) -> list[str]:
    """A spec's list of Secret names (absent: none); :class:`_Refused` if it is not one."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _Refused(f"invalid spec: {where} is not a list of names")
    return value


def _convert_spec(spec: Mapping[str, Any], model: type[T]) -> T:
    """A CRD spec held as plain data -> ``model``; :class:`_Refused` naming the bad key."""
    for key in ("unsupported", "problems"):  # edge's own bookkeeping, not a spec key
        if key in spec:
            raise _Refused(f"invalid spec: unknown field {key!r}")
    try:
        return msgspec.convert(dict(spec), model, dec_hook=dec_hook)
    except msgspec.ValidationError as exc:
        raise _Refused(f"invalid spec: {exc}") from None


def _router_observability(value: Any) -> RouterObservability | None:
    """An IngressRoute route's ``observability`` (Traefik's RouterObservabilityConfig:
    ``accessLogs``, ``metrics``, ``tracing``, ``traceVerbosity``); :class:`_Refused`
    naming the bad key."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _Refused("observability: expected an object")
    try:
        return msgspec.convert(dict(value), RouterObservability)
    except msgspec.ValidationError as exc:
        raise _Refused(f"observability: {exc}") from None


class _Converter:
    def __init__(
        self, state: ClusterState, options: CRDOptions, only: set[Key] | None = None
    ) -> None:
        self.state = state
        self.options = options
        self.slices = slices_by_service(state.endpoint_slices, only)
        self.problems: list[Problem] = []
        self.http_routers: dict[str, Router] = {}
        self.http_services: dict[str, Service] = {}
        self.middlewares: dict[str, Middleware] = {}
        self.transports: dict[str, ServersTransport] = {}
        self.tcp_routers: dict[str, TCPRouter] = {}
        self.tcp_services: dict[str, TCPService] = {}
        self.tcp_middlewares: dict[str, TCPMiddleware] = {}
        self.tcp_transports: dict[str, TCPServersTransport] = {}
        self.udp_routers: dict[str, UDPRouter] = {}
        self.udp_services: dict[str, UDPService] = {}
        self.certificates: dict[tuple[str, str, str], CertAndStores] = {}
        self.tls_options: dict[str, TLSOptions] = {}
        self.tls_stores: dict[str, TLSStore] = {}
        # (kind, namespace, name) -> why it was refused, for those referring to it
        self.refused: dict[tuple[str, str, str], str] = {}
        self.backends: dict[tuple[str, str], Backend] = {}
        self.refused_services: set[Key] = set()
        # Per conversion (a Service port is named by many routes): its ready endpoints,
        # sorted, with the FQDN slices left out, by (namespace, name, port, port name,
        # protocol); the HTTP servers of one such list by (id(addresses), scheme), the
        # value holding the list so that its id stays its own.
        self.ready: dict[tuple[str, str, int, str, str], tuple[list[str], list[str]]] = {}
        self.http_servers: dict[tuple[int, str], tuple[list[str], list[Server]]] = {}

    # --- helpers -----------------------------------------------------------------------

    def visible(self, namespace: str) -> bool:
        return not self.options.namespaces or namespace in self.options.namespaces

    def items(self, table: Mapping[Key, T]) -> list[tuple[Key, T]]:
        return [(key, table[key]) for key in sorted(table) if self.visible(key[0])]

    def selected(self, meta: ObjectMeta, class_name: str | None) -> bool:
        name = (
            class_name
            if class_name is not None
            else meta.annotations.get(INGRESS_CLASS_ANNOTATION, "")
        )
        wanted = self.options.ingress_class
        return name == wanted or (not wanted and name == DEFAULT_CLASS)

    def problem(self, kind: str, key: Key, where: str, reason: str) -> Problem:
        found = Problem(kind, f"{key[0]}/{key[1]}", where, reason)
        self.problems.append(found)
        return found

    def refuse(self, kind: str, key: Key, where: str, reason: str) -> None:
        """An object of a referable kind is refused: a problem, remembered for referrers."""
        self.problem(kind, key, where, reason)
        self.refused[(kind, *key)] = reason

    def reference(
        self, parent: str, namespace: str, name: str, kind: str, table: Mapping[Key, Any]
    ) -> tuple[str, Key | None]:
        """(the element's name, the object's key; None across providers) of a reference
        from namespace ``parent``; :class:`_Refused` if not allowed, missing or refused."""
        found, key = self.resolve(parent, namespace, name, kind)
        if key is None:
            return found, None
        namespace = key[0]
        what = f"{kind} {namespace}/{name}"
        if key not in table or not self.visible(namespace):
            raise _Refused(f"{what} not found")
        reason = self.refused.get((kind, *key))
        if reason is not None:
            raise _Refused(f"{what} is refused: {reason}")
        return found, key

    def resolve(self, parent: str, namespace: str, name: str, kind: str) -> tuple[str, Key | None]:
        """Traefik's ``resolveReference``: (the element's name, the object's key; None
        across providers) of a reference from namespace ``parent``, without looking the
        object up; :class:`_Refused` if the reference is not allowed."""
        if "@" in name:
            if not self.options.allow_cross_namespace and name.endswith(f"@{PROVIDER}"):
                raise _Refused(f"{kind} {name!r}: @{PROVIDER} references need allowCrossNamespace")
            return name, None
        if not name:
            raise _Refused(f"a {kind} reference names nothing")
        namespace = namespace or parent
        if namespace != parent and not self.options.allow_cross_namespace:
            raise _Refused(
                f"{kind} {namespace}/{name} is not in namespace {parent} "
                "and allowCrossNamespace is off"
            )
        return _normalize(f"{namespace}-{name}"), (namespace, name)

    def servers(
        self,
        namespace: str,
        name: str,
        port: int | str,
        protocol: str,
        native_lb: bool | None,
        node_port_lb: bool,
        *,
        http: bool = False,
    ) -> tuple[list[str], objects.ServicePort]:
        """``host:port`` of a Service port's servers (sorted; nodes in node order) and the
        port. ``nodePortLB`` beats ``nativeLB`` for TCP and UDP, loses for ``http`` (the
        order of Traefik's checks)."""
        what = f"service {namespace}/{name}"
        svc: KubeService | None = self.state.services.get((namespace, name))
        if svc is None or not self.visible(namespace):
            raise _Refused(f"{what} not found")
        if port in (0, ""):
            raise _Refused(f"the reference to {what} names no port")
        number, port_name = (port, "") if isinstance(port, int) else (0, port)
        external = svc.spec.type == "ExternalName"
        if external and not self.options.allow_external_name_services:
            raise _Refused(
                f"{what} is an ExternalName service and allowExternalNameServices is off"
            )
        found = service_port(svc, number, port_name, protocol)
        if found is None and external and number:
            found = objects.ServicePort(port=number, protocol=protocol)  # as Traefik does
        if found is None:
            other = "UDP" if protocol == "TCP" else "TCP"
            if service_port(svc, number, port_name, other) is not None:
                raise _Refused(f"port {port!r} of {what} is {other}, not {protocol}")
            raise _Refused(f"{protocol} port {port!r} not found on {what}")
        if external:
            address = host_port(svc.spec.external_name, found.port)
            if address is None:
                raise _Refused(
                    f"{what}: externalName {svc.spec.external_name!r} is not a host name"
                )
            return [address], found
        node_ports = node_port_lb and svc.spec.type == "NodePort"
        if node_ports and not http:
            return self.node_ports(what, found), found
        if native_lb if native_lb is not None else self.options.native_lb_by_default:
            ip = svc.spec.cluster_ip
            address = host_port(ip, found.port) if ip and ip != "None" else None
            if address is None:
                raise _Refused(f"{what} has no cluster IP for nativeLB")
            return [address], found
        if node_ports:
            return self.node_ports(what, found), found
        memo = (namespace, name, found.port, found.name, protocol)
        ready = self.ready.get(memo)
        if ready is None:
            found_addresses, found_hosts = ready_addresses(
                self.slices.get((namespace, name), ()),
                found.name,
                protocol=protocol,
                allow_fqdn=self.options.allow_external_name_services,
            )
            ready = self.ready[memo] = (sorted(found_addresses), found_hosts)
        addresses, hosts = ready
        if not addresses and not self.options.allow_empty_services:
            self.refused_services.add((namespace, name))
            if hosts:
                raise _Refused(
                    f"{what}: its EndpointSlices {', '.join(hosts)} name hosts "
                    "(addressType FQDN) and allowExternalNameServices is off"
                )
            raise _Refused(f"{what} has no ready endpoints for port {found.name or found.port}")
        return addresses, found

    def node_ports(self, what: str, port: objects.ServicePort) -> list[str]:
        """``nodePortLB``: every node's InternalIP with the port's nodePort."""
        if self.options.disable_cluster_scope_resources:
            raise _Refused(
                f"nodePortLB on {what}: Nodes are not read (disableClusterScopeResources)"
            )
        if not 0 < port.node_port <= 65535:
            raise _Refused(f"port {port.name or port.port} of {what} has no nodePort")
        found = node_port_addresses(self.state.nodes, port.node_port)
        if not found:
            raise _Refused(f"nodePortLB: no node has an InternalIP address for {what}")
        return found

    def service_namespace(self, parent: str, namespace: str, name: str) -> str:
        namespace = namespace or parent
        if namespace != parent and not self.options.allow_cross_namespace:
            raise _Refused(
                f"service {namespace}/{name} is not in namespace {parent} "
                "and allowCrossNamespace is off"
            )
        return namespace

    def route_tls(self, kind: str, key: Key, tls: RouteTLS) -> tuple[str, list[Domain]]:
        """Check an object's ``tls`` and load its Secret: (TLS options name, domains)."""
        ns = key[0]
        if tls.cert_resolver:
            raise _Refused(f"tls.certResolver {tls.cert_resolver!r}: {UNSUPPORTED}")
        options = ""
        if tls.options is not None and tls.options.name:
            ref = tls.options
            options, found = self.reference(
                ns, ref.namespace, ref.name, "TLSOption", self.state.tls_options
            )
            if found is not None:
                options = _tls_name(*found)
        stores: list[str] = []
        if tls.store is not None and tls.store.name:
            ref = tls.store
            store, found = self.reference(
                ns, ref.namespace, ref.name, "TLSStore", self.state.tls_stores
            )
            stores = [_tls_name(*found) if found is not None else store]
        if tls.secret_name and not tls.passthrough:
            self.certificate((ns, tls.secret_name), stores)
        domains = [Domain(main=d.main, sans=list(d.sans)) for d in tls.domains]
        return options, domains

    def certificate(self, key: Key, stores: list[str]) -> None:
        if not self.visible(key[0]):
            raise _Refused(f"secret {key[0]}/{key[1]} not found")
        try:
            cert = tls_certificate(self.state.secrets, key)
        except SecretError as exc:
            raise _Refused(exc.reason) from None
        self.certificates[(*key, ",".join(stores))] = msgspec.structs.replace(cert, stores=stores)

    # --- elements referred to ------------------------------------------------------------

    def middleware(self, key: Key, mw: objects.Middleware) -> None:
        name = _normalize("-".join(key))
        batch: _Batch[Service] = _Batch()
        try:
            spec = mw.spec
            if "chain" in spec:
                spec = {**spec, "chain": self.chain(key[0], spec["chain"])}
            for auth in ("basicAuth", "digestAuth"):
                if auth in spec:
                    spec = {**spec, auth: self.auth(key[0], auth, spec[auth])}
            if "errors" in spec:
                spec = {**spec, "errors": self.error_page(key[0], name, spec["errors"], batch)}
            if "forwardAuth" in spec:
                spec = {**spec, "forwardAuth": self.forward_auth(key[0], spec["forwardAuth"])}
            if "rateLimit" in spec:
                spec = {**spec, "rateLimit": self.rate_limit(key[0], spec["rateLimit"])}
            self.middlewares[name] = _middleware(spec, Middleware, _HTTP_KINDS)
            self.commit("http", self.http_services, batch)
        except _Refused as refused:
            self.refuse("Middleware", key, "spec", refused.reason)

    def error_page(self, namespace: str, name: str, spec: Any, batch: _Batch[Service]) -> Any:
        """A Middleware's ``errors`` with Traefik's ``service`` (a reference of a route's
        shape) as the name of the service answering its pages: a Service's own load
        balancer ``<middleware>-errorpage-service`` (into ``batch``), a TraefikService
        by its name (Traefik's names); cross-namespace only with
        ``allowCrossNamespace``."""
        if not isinstance(spec, Mapping) or "service" not in spec:
            return spec  # decoding (or the model's check) names what is wrong
        value = spec["service"]
        if not isinstance(value, Mapping):
            raise _Refused("invalid spec: errors.service is not a service reference ({name, port})")
        ref = _reference("errors.service", value)
        try:
            found, service, backend = self.http_service(namespace, ref, named=False)
        except _Refused as refused:
            raise _Refused(f"errors.service: {refused.reason}") from None
        if service is not None:
            found = f"{name}-errorpage-service"
            batch.add(found, service, backend)
        return {**spec, "service": found}

    def forward_auth(self, namespace: str, spec: Any) -> Any:
        """A Middleware's ``forwardAuth`` with Traefik's ``tls`` (Secrets read as
        :meth:`client_tls` reads them)."""
        if not isinstance(spec, Mapping) or spec.get("tls") is None:
            return spec
        tls = self.client_tls(namespace, spec["tls"], "forwardAuth.tls", ca_optional=True)
        return {**spec, "tls": tls}

    def rate_limit(self, namespace: str, spec: Any) -> Any:
        """A Middleware's ``rateLimit`` with Traefik's ``redis``: ``secret`` (a Secret of
        the Middleware's namespace holding ``username`` and ``password``) and ``tls``
        (:meth:`client_tls`) read into edge's keys; edge's ``username`` and ``password``
        are refused in the cluster (credentials belong in a Secret)."""
        if not isinstance(spec, Mapping) or not isinstance(spec.get("redis"), Mapping):
            return spec
        redis = dict(spec["redis"])
        for field in ("username", "password"):
            if field in redis:
                raise _Refused(
                    f"invalid spec: unknown field rateLimit.redis.{field} (Traefik's is secret)"
                )
        if redis.get("tls") is not None:
            redis["tls"] = self.client_tls(namespace, redis["tls"], "rateLimit.redis.tls")
        if "secret" in redis:
            secret = redis.pop("secret")
            where = "rateLimit.redis.secret"
            if not isinstance(secret, str) or not secret:
                raise _Refused(f"invalid spec: {where} names no Secret")
            try:
                if not self.visible(namespace):
                    raise SecretError("secret-not-found", f"secret {namespace}/{secret} not found")
                redis["username"], redis["password"] = credentials(
                    self.state.secrets, (namespace, secret)
                )
            except SecretError as exc:
                raise _Refused(f"{where}: {exc.reason}") from None
        return {**spec, "redis": redis}

    def client_tls(
        self, namespace: str, spec: Any, where: str, *, ca_optional: bool = False
    ) -> Any:
        """Traefik's ``ClientTLS`` of a CRD (``caSecret``: a CA bundle read by
        :meth:`ca`; ``certSecret``: a Secret of any type holding ``tls.crt`` and
        ``tls.key``; ``insecureSkipVerify``; ``caOptional`` where ``ca_optional``) as
        edge's ``ca``, ``cert`` and ``key``, inline PEM. edge's own keys (paths) are
        refused: an object in the cluster must not make edge read its files."""
        if not isinstance(spec, Mapping):
            raise _Refused(f"invalid spec: {where} is not an object")
        allowed = {"caSecret", "certSecret", "insecureSkipVerify"}
        if ca_optional:
            allowed.add("caOptional")
        for field in sorted(set(spec) - allowed):
            secret = {"ca": " (Traefik's is caSecret)", "cert": " (Traefik's is certSecret)",
                      "key": " (Traefik's is certSecret)"}.get(field, "")  # fmt: skip
            raise _Refused(f"invalid spec: unknown field {where}.{field}{secret}")
        found = {k: v for k, v in spec.items() if k in ("insecureSkipVerify", "caOptional")}
        if spec.get("caSecret") is not None:
            found["ca"] = self.ca(namespace, spec["caSecret"], f"{where}.caSecret")
        name = spec.get("certSecret")
        if name is not None:
            if not isinstance(name, str) or not name:
                raise _Refused(f"{where}.certSecret: names no secret")
            try:
                if not self.visible(namespace):
                    raise SecretError("secret-not-found", f"secret {namespace}/{name} not found")
                cert = tls_certificate(self.state.secrets, (namespace, name), any_type=True)
            except SecretError as exc:
                raise _Refused(f"{where}.certSecret: {exc.reason}") from None
            found["cert"], found["key"] = cert.cert_file, cert.key_file
        return found

    def auth(self, namespace: str, kind: str, spec: Any) -> Any:
        """A Middleware's ``basicAuth`` or ``digestAuth`` with Traefik's ``secret`` (a
        Secret of the Middleware's namespace) read into ``users``
        (:func:`~edge.providers.kubernetes.secrets.auth_users`). ``usersFile`` is
        refused: an object in the cluster must not make edge read its files."""
        if not isinstance(spec, Mapping):
            return spec  # decoding names what is wrong
        if "usersFile" in spec:
            raise _Refused(f"invalid spec: unknown field {kind}.usersFile (Traefik's is secret)")
        if "secret" not in spec:
            return spec
        name = spec["secret"]
        if not isinstance(name, str) or not name:
            raise _Refused(f"invalid spec: {kind}.secret names no Secret")
        if "users" in spec:
            raise _Refused(f"invalid spec: {kind} has both secret and users")
        try:
            if not self.visible(namespace):
                raise SecretError("secret-not-found", f"secret {namespace}/{name} not found")
            users = auth_users(self.state.secrets, (namespace, name), basic=kind == "basicAuth")
        except SecretError as exc:
            raise _Refused(f"{kind}.secret: {exc.reason}") from None
        return {**{k: v for k, v in spec.items() if k != "secret"}, "users": users}

    def chain(self, namespace: str, spec: Any) -> Any:
        """A Middleware's ``chain`` with its ``middlewares`` (Traefik's ``{name,
        namespace}`` references, the namespace defaulting to the Middleware's) as the
        element names a router would use; ``@`` names pass on as written. Other
        namespaces need ``allowCrossNamespace``. Whether each exists is validation's
        question, as for a router's list (Traefik does not look either)."""
        if not isinstance(spec, Mapping) or not isinstance(spec.get("middlewares"), list):
            return spec  # decoding names what is wrong
        names = []
        for i, ref in enumerate(spec["middlewares"]):
            where = f"chain.middlewares[{i}]"
            if not isinstance(ref, Mapping) or not isinstance(ref.get("name"), str):
                raise _Refused(f"invalid spec: {where}: expected {{name, namespace}}")
            if set(ref) - {"name", "namespace"}:
                raise _Refused(f"invalid spec: {where}: unknown field "
                               f"{sorted(set(ref) - {'name', 'namespace'})[0]!r}")  # fmt: skip
            ns = ref.get("namespace") or ""
            if not isinstance(ns, str):
                raise _Refused(f"invalid spec: {where}.namespace is not a string")
            try:
                names.append(self.resolve(namespace, ns, ref["name"], "Middleware")[0])
            except _Refused as refused:
                raise _Refused(f"{where}: {refused.reason}") from None
        return {**spec, "middlewares": names}

    def middleware_tcp(self, key: Key, mw: objects.MiddlewareTCP) -> None:
        try:
            self.tcp_middlewares[_normalize("-".join(key))] = _middleware(
                mw.spec, TCPMiddleware, _TCP_KINDS
            )
        except _Refused as refused:
            self.refuse("MiddlewareTCP", key, "spec", refused.reason)

    def tls_option(self, key: Key, option: objects.TLSOption, defaults: int) -> None:
        try:
            if key[1] == DEFAULT and defaults > 1:
                raise _Refused("TLSOptions named default exist in more than one namespace")
            spec = dict(option.spec)
            client_auth = self.client_auth(key[0], spec.pop("clientAuth", None))
            options = _convert_spec(spec, TLSOptions)
            self.tls_options[_tls_name(*key)] = msgspec.structs.replace(
                options, client_auth=client_auth
            )
        except _Refused as refused:
            self.refuse("TLSOption", key, "spec", refused.reason)

    def client_auth(self, namespace: str, spec: Any) -> ClientAuth | None:
        """A TLSOption's ``clientAuth`` (Traefik's: ``secretNames``, CA bundles read from
        Secrets of the option's namespace, and ``clientAuthType``) as edge's."""
        if spec is None:
            return None
        if not isinstance(spec, Mapping):
            raise _Refused("invalid spec: clientAuth is not an object")
        for field in sorted(set(spec) - {"secretNames", "clientAuthType"}):
            raise _Refused(f"invalid spec: unknown field clientAuth.{field}")
        names = spec.get("secretNames") or []
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise _Refused("invalid spec: clientAuth.secretNames is not a list of names")
        cas = [self.ca(namespace, name, f"clientAuth.secretNames[{i}]")
               for i, name in enumerate(names)]  # fmt: skip
        auth = {"caFiles": cas, "clientAuthType": spec.get("clientAuthType") or ""}
        try:
            return msgspec.convert(auth, ClientAuth)
        except msgspec.ValidationError as exc:
            raise _Refused(f"invalid spec: clientAuth: {exc}") from None

    def ca(self, namespace: str, name: Any, where: str, config_map: bool = False) -> str:
        """The CA bundle of the Secret (or ConfigMap) ``name`` in ``namespace``."""
        what = "configMap" if config_map else "secret"
        if not isinstance(name, str) or not name:
            raise _Refused(f"{where}: names no {what}")
        if not self.visible(namespace):
            raise _Refused(f"{where}: {what} {namespace}/{name} not found")
        try:
            if config_map:
                return config_map_ca_bundle(self.state.config_maps, (namespace, name))
            return ca_bundle(self.state.secrets, (namespace, name))
        except SecretError as exc:
            raise _Refused(f"{where}: {exc.reason}") from None

    def transport_tls(self, namespace: str, spec: dict[str, Any], where: str) -> dict[str, Any]:
        """Traefik's keys of a serversTransport's TLS settings that name Secrets and
        ConfigMaps (``rootCAs``, the deprecated ``rootCAsSecrets``,
        ``certificatesSecrets``), taken out of ``spec`` and read into edge's
        ``rootCAs`` and ``certificates`` (inline PEM). edge's own keys for files
        (``certificates``, and ``rootCAs`` as strings) are refused: an object in the
        cluster must not make edge read its files."""
        if "certificates" in spec:
            raise _Refused(f"invalid spec: unknown field {where}certificates (Traefik's "
                           "is certificatesSecrets)")  # fmt: skip
        cas: list[str] = []
        for i, name in enumerate(
            _names(spec.pop("rootCAsSecrets", None), f"{where}rootCAsSecrets")
        ):
            cas.append(self.ca(namespace, name, f"{where}rootCAsSecrets[{i}]"))
        roots = spec.pop("rootCAs", None) or []
        if not isinstance(roots, list):
            raise _Refused(f"invalid spec: {where}rootCAs is not a list")
        for i, root in enumerate(roots):
            at = f"{where}rootCAs[{i}]"
            if not isinstance(root, Mapping) or set(root) - {"secret", "configMap"}:
                raise _Refused(
                    f"invalid spec: {at}: expected {{secret: name}} or {{configMap: name}}"
                )
            if not root:
                raise _Refused(f"{at}: names neither a Secret nor a ConfigMap")
            if len(root) > 1:
                raise _Refused(f"{at}: names both a Secret and a ConfigMap")
            if "configMap" in root:
                cas.append(self.ca(namespace, root["configMap"], at, config_map=True))
            else:
                cas.append(self.ca(namespace, root["secret"], at))
        certificates = []
        names = _names(spec.pop("certificatesSecrets", None), f"{where}certificatesSecrets")
        for i, name in enumerate(names):
            key = (namespace, name)
            try:
                if not self.visible(namespace):
                    raise SecretError("secret-not-found", f"secret {namespace}/{name} not found")
                cert = tls_certificate(self.state.secrets, key, any_type=True)
            except SecretError as exc:
                raise _Refused(f"{where}certificatesSecrets[{i}]: {exc.reason}") from None
            certificates.append({"certFile": cert.cert_file, "keyFile": cert.key_file})
        found: dict[str, Any] = {}
        if cas:
            found["rootCAs"] = cas
        if certificates:
            found["certificates"] = certificates
        return found

    def tls_store(self, key: Key, store: objects.TLSStore, defaults: int) -> None:
        name = _tls_name(*key)
        spec = store.spec
        try:
            if key[1] == DEFAULT and defaults > 1:
                raise _Refused("TLSStores named default exist in more than one namespace")
            if spec.default_generated_cert is not None:
                raise _Refused(f"defaultGeneratedCert: {UNSUPPORTED}")
            default = None
            if spec.default_certificate is not None:
                secret = (key[0], spec.default_certificate.secret_name)
                try:
                    cert = tls_certificate(self.state.secrets, secret)
                except SecretError as exc:
                    raise _Refused(f"defaultCertificate: {exc.reason}") from None
                default = StoreCertificate(cert_file=cert.cert_file, key_file=cert.key_file)
            for i, entry in enumerate(spec.certificates):
                try:
                    self.certificate((key[0], entry.secret_name), [name])
                except _Refused as refused:
                    raise _Refused(f"certificates[{i}]: {refused.reason}") from None
            self.tls_stores[name] = TLSStore(default_certificate=default)
        except _Refused as refused:
            self.refuse("TLSStore", key, "spec", refused.reason)

    def servers_transport(self, key: Key, st: objects.ServersTransport) -> None:
        try:
            spec = dict(st.spec)
            spec.update(self.transport_tls(key[0], spec, ""))
            self.transports[_normalize("-".join(key))] = _convert_spec(spec, ServersTransport)
        except _Refused as refused:
            self.refuse("ServersTransport", key, "spec", refused.reason)

    def servers_transport_tcp(self, key: Key, st: objects.ServersTransportTCP) -> None:
        try:
            spec = dict(st.spec)
            tls = spec.get("tls")
            if isinstance(tls, Mapping):
                tls = dict(tls)
                tls.update(self.transport_tls(key[0], tls, "tls."))
                spec["tls"] = tls
            name = _normalize("-".join(key))
            self.tcp_transports[name] = _convert_spec(spec, TCPServersTransport)
        except _Refused as refused:
            self.refuse("ServersTransportTCP", key, "spec", refused.reason)

    def traefik_service(self, key: Key, ts: objects.TraefikService) -> None:
        spec = ts.spec
        try:
            if spec.highest_random_weight is not None:
                raise _Refused(f"highestRandomWeight: {UNSUPPORTED}")
            batch: _Batch[Service] = _Batch()
            kinds = [
                kind
                for kind, value in (
                    ("weighted", spec.weighted),
                    ("failover", spec.failover),
                    ("mirroring", spec.mirroring),
                )
                if value is not None
            ]
            if len(kinds) > 1:
                raise _Refused(f"the TraefikService has both {' and '.join(kinds)}")
            if spec.failover is not None:
                service = self.failover(key[0], spec.failover, batch)
            elif spec.mirroring is not None:
                service = self.mirroring(key[0], spec.mirroring, batch)
            else:
                service = self.weighted(key[0], spec.weighted, batch)
            batch.add(_normalize("-".join(key)), service)
            self.commit("http", self.http_services, batch)
        except _Refused as refused:
            self.refuse("TraefikService", key, "spec", refused.reason)

    def weighted(
        self, namespace: str, spec: objects.WeightedSpec | None, batch: _Batch[Service]
    ) -> Service:
        """A TraefikService's ``weighted``: a weighted service over its references."""
        if spec is None:
            raise _Refused("the TraefikService has no weighted services")
        sticky = _health("weighted.sticky", spec.sticky, Sticky)
        children = []
        for i, ref in enumerate(spec.services):
            name = self.child(namespace, ref, f"weighted.services[{i}]", batch)
            children.append(WRRService(name=name, weight=_weight(ref.weight)))
        return Service(weighted=Weighted(services=children, sticky=sticky))

    def failover(self, namespace: str, spec: Any, batch: _Batch[Service]) -> Service:
        """A TraefikService's ``failover`` (Traefik's ``service``, ``fallback`` and
        ``errors``; edge's ``healthCheck``) as edge's failover service."""
        if not isinstance(spec, Mapping):
            raise _Refused("invalid spec: failover is not an object")
        for field in sorted(set(spec) - {"service", "fallback", "errors", "healthCheck"}):
            raise _Refused(f"invalid spec: unknown field failover.{field}")
        errors = spec.get("errors")
        if errors not in (None, {}) and (
            not isinstance(errors, Mapping)
            or errors.get("status")
            or errors.get("maxRequestBodyBytes") is not None
        ):
            raise _Refused(f"failover.errors: {UNSUPPORTED} (it fails over on health)")
        names = []
        for field in ("service", "fallback"):
            value = spec.get(field)
            if not isinstance(value, Mapping):
                raise _Refused(f"invalid spec: failover.{field} is not a service reference")
            try:
                ref = msgspec.convert(dict(value), objects.RouteService)
            except msgspec.ValidationError as exc:
                raise _Refused(f"invalid spec: failover.{field}: {exc}") from None
            names.append(self.child(namespace, ref, f"failover.{field}", batch))
        check = _health("failover.healthCheck", spec.get("healthCheck"), HealthCheck)
        return Service(failover=Failover(service=names[0], fallback=names[1], health_check=check))

    def mirroring(self, namespace: str, spec: Any, batch: _Batch[Service]) -> Service:
        """A TraefikService's ``mirroring``: its own keys (Traefik's ``LoadBalancerSpec``
        inline) name the main service, each of ``mirrors`` a mirror and its ``percent``."""
        if not isinstance(spec, Mapping):
            raise _Refused("invalid spec: mirroring is not an object")
        own = {"mirrorBody": bool, "maxBodySize": int, "mirrors": list}
        for field, kind in own.items():
            value = spec.get(field)
            # (A YAML true is no integer here, though Python's bool is an int.)
            if value is not None and (type(value) is bool) != (kind is bool):
                raise _Refused(f"invalid spec: mirroring.{field} is not {_KIND_NAMES[kind]}")
            if value is not None and not isinstance(value, kind):
                raise _Refused(f"invalid spec: mirroring.{field} is not {_KIND_NAMES[kind]}")
        main = _reference("mirroring", {k: v for k, v in spec.items() if k not in own})
        name = self.child(namespace, main, "mirroring", batch)
        mirrors = []
        for i, mirror in enumerate(spec.get("mirrors") or ()):
            where = f"mirroring.mirrors[{i}]"
            if not isinstance(mirror, Mapping):
                raise _Refused(f"invalid spec: {where} is not a service reference")
            percent = mirror.get("percent", 0)
            if not isinstance(percent, int) or isinstance(percent, bool):
                raise _Refused(f"invalid spec: {where}.percent is not an integer")
            ref = _reference(where, {k: v for k, v in mirror.items() if k != "percent"})
            mirrors.append(
                MirrorService(name=self.child(namespace, ref, where, batch), percent=percent)
            )
        defaults = Mirroring()
        return Service(
            mirroring=Mirroring(
                service=name,
                mirrors=mirrors,
                mirror_body=spec.get("mirrorBody", defaults.mirror_body),
                max_body_size=spec.get("maxBodySize", defaults.max_body_size),
            )
        )

    def child(
        self, namespace: str, ref: objects.RouteService, where: str, batch: _Batch[Service]
    ) -> str:
        """The name of a TraefikService's reference at ``where``; its load balancer
        (a Service's) goes into ``batch``."""
        try:
            name, service, backend = self.http_service(namespace, ref)
        except _Refused as refused:
            raise _Refused(f"{where}: {refused.reason}") from None
        if service is not None:
            batch.add(name, service, backend)
        return name

    # --- services ----------------------------------------------------------------------------

    def commit(self, section: str, table: dict[str, S], batch: _Batch[S]) -> None:
        """Add what a route (or a TraefikService) built, and where its load balancers
        come from (a name rebuilt without one, a weighted service, forgets it)."""
        table.update(batch.services)
        for name in batch.services:
            backend = batch.backends.get(name)
            if backend is None:
                self.backends.pop((section, name), None)
            else:
                self.backends[(section, name)] = backend

    def http_service(
        self, parent: str, ref: objects.RouteService, named: bool = True
    ) -> tuple[str, Service | None, Backend | None]:
        """(name, the load balancer to add and where it comes from; None for a
        TraefikService) of a reference; a Service's name is ``""`` unless ``named`` (a
        route's only service is named after its router)."""
        kind = ref.kind or "Service"
        if kind == "TraefikService":
            name, _ = self.reference(
                parent, ref.namespace, ref.name, "TraefikService", self.state.traefik_services
            )
            return name, None, None
        if kind != "Service":
            raise _Refused(f"unsupported service kind {kind!r}")
        if ref.middlewares:
            raise _Refused(f"service {ref.name}: middlewares: {UNSUPPORTED}")
        if ref.scheme not in ("", "http", "https", "h2c"):
            raise _Refused(f"service {ref.name}: invalid scheme {ref.scheme!r}")
        ns = self.service_namespace(parent, ref.namespace, ref.name)
        addresses, port = self.servers(
            ns, ref.name, ref.port, "TCP", ref.native_lb, ref.node_port_lb, http=True
        )
        health = self.health_check(ns, ref)
        passive = _health(
            f"service {ref.name}: passiveHealthCheck",
            ref.passive_health_check,
            PassiveServerHealthCheck,
        )
        scheme = ref.scheme or (
            "https" if port.port == 443 or port.name.startswith("https") else "http"
        )
        transport = ""
        if ref.servers_transport:
            transport, _ = self.reference(
                parent, "", ref.servers_transport, "ServersTransport",
                self.state.servers_transports,
            )  # fmt: skip
        memo = (id(addresses), scheme)
        held = self.http_servers.get(memo)
        if held is None:
            servers = [Server(url=f"{scheme}://{address}") for address in addresses]
            held = self.http_servers[memo] = (addresses, servers)
        balancer = LoadBalancer(
            servers=held[1],
            pass_host_header=True if ref.pass_host_header is None else ref.pass_host_header,
            servers_transport=transport,
            strategy=_STRATEGIES.get(ref.strategy, ref.strategy),
            health_check=health,
            passive_health_check=passive,
            sticky=_health(f"service {ref.name}: sticky", ref.sticky, Sticky),
            response_forwarding=_health(
                f"service {ref.name}: responseForwarding",
                ref.response_forwarding,
                ResponseForwarding,
            ),
        )
        name = _normalize(f"{ns}-{ref.name}-{_port_text(ref.port)}") if named else ""
        return name, Service(load_balancer=balancer), Backend.of(parent, ref)

    def health_check(self, namespace: str, ref: objects.RouteService) -> ServerHealthCheck | None:
        """The active check of a reference to the Service ``namespace/ref.name`` (found):
        Traefik's ``healthCheck``, on an ExternalName Service only."""
        if ref.health_check is None:
            return None
        svc = self.state.services[(namespace, ref.name)]
        if svc.spec.type != "ExternalName":
            raise _Refused(
                f"service {namespace}/{ref.name}: healthCheck is allowed only on "
                "ExternalName services (Kubernetes' readiness checks the pods)"
            )
        spec = ref.health_check
        if isinstance(spec, Mapping) and spec.get("mode") == "":
            spec = {k: v for k, v in spec.items() if k != "mode"}  # Traefik's http
        return _health(f"service {ref.name}: healthCheck", spec, ServerHealthCheck)

    def tcp_service(self, parent: str, ref: objects.RouteServiceTCP) -> TCPService:
        ns = self.service_namespace(parent, ref.namespace, ref.name)
        addresses, _ = self.servers(ns, ref.name, ref.port, "TCP", ref.native_lb, ref.node_port_lb)
        transport = ""
        if ref.servers_transport:
            transport, _ = self.reference(
                parent, "", ref.servers_transport, "ServersTransportTCP",
                self.state.servers_transport_tcps,
            )  # fmt: skip
        proxy = None
        if ref.proxy_protocol is not None:
            version = ref.proxy_protocol.version or 2
            if version not in (1, 2):
                raise _Refused(f"service {ref.name}: proxyProtocol version {version} is not 1 or 2")
            proxy = ProxyProtocol(version=version)  # type: ignore[arg-type]
        return TCPService(
            load_balancer=TCPLoadBalancer(
                servers=[TCPServer(address=address, tls=ref.tls) for address in addresses],
                servers_transport=transport,
                proxy_protocol=proxy,
                termination_delay=None if transport else ref.termination_delay,
            )
        )

    def udp_service(self, parent: str, ref: objects.RouteServiceUDP) -> UDPService:
        ns = self.service_namespace(parent, ref.namespace, ref.name)
        addresses, _ = self.servers(ns, ref.name, ref.port, "UDP", ref.native_lb, ref.node_port_lb)
        return UDPService(
            load_balancer=UDPLoadBalancer(servers=[UDPServer(address=a) for a in addresses])
        )

    def rebuild(self, backend: Backend) -> Service | TCPService | UDPService:
        """The load balancer ``backend`` describes, from this state's endpoints."""
        ref = backend.ref
        if isinstance(ref, objects.RouteServiceTCP):
            return self.tcp_service(backend.parent, ref)
        if isinstance(ref, objects.RouteServiceUDP):
            return self.udp_service(backend.parent, ref)
        service = self.http_service(backend.parent, ref, named=False)[1]
        assert service is not None  # a backend is a Service's load balancer
        return service

    def route_services(
        self,
        ns: str,
        router: str,
        refs: Sequence[_Ref],
        batch: _Batch[S],
        wrap: Callable[[Weighted], S],
    ) -> str:
        """The service of a route naming ``refs`` (``batch`` gets what it adds): a
        reference alone is the route's load balancer, named like its router (a
        TraefikService is used by its own name); several are a weighted service named
        like the router over their load balancers."""
        if not refs:
            raise _Refused("the route names no service")
        named = len(refs) > 1
        built = [self.route_service(ns, router, ref, named) for ref in refs]
        if len(built) == 1:
            name, service, backend = built[0]
            if service is None:
                return name
            batch.add(router, cast(S, service), backend)
            return router
        children = []
        for ref, (name, service, backend) in zip(refs, built, strict=True):
            if service is not None:
                batch.add(name, cast(S, service), backend)
            children.append(WRRService(name=name, weight=_weight(ref.weight)))
        batch.add(router, wrap(Weighted(services=children)))
        return router

    def route_service(
        self, ns: str, router: str, ref: _Ref, named: bool
    ) -> tuple[str, Service | TCPService | UDPService | None, Backend | None]:
        """(name as a weighted child, load balancer, its backend) of one reference: HTTP
        children are named after the Service port (Traefik's ``<ns>-<service>-<port>``;
        only when ``named``: a route's only Service needs no such name), TCP and UDP ones
        after the router (``<router>-<service>-<port>``)."""
        if isinstance(ref, objects.RouteService):
            return self.http_service(ns, ref, named)
        child = f"{router}-{ref.name}-{_port_text(ref.port)}"
        if isinstance(ref, objects.RouteServiceTCP):
            return child, self.tcp_service(ns, ref), Backend.of(ns, ref)
        return child, self.udp_service(ns, ref), Backend.of(ns, ref)

    # --- IngressRoute and IngressRouteTCP ---------------------------------------------------

    def ingress_route(self, key: Key, ir: objects.IngressRoute | objects.IngressRouteTCP) -> None:
        """The routers of an IngressRoute (HTTP) or an IngressRouteTCP: one per route,
        named after its match; a refused route is a stand-in router holding the problem."""
        ns, name = key
        spec = ir.spec
        http = isinstance(ir, objects.IngressRoute)
        # What differs between the two: their kind, tables, models and middleware kind.
        if http:
            kind, section, mw_kind = "IngressRoute", "http", "Middleware"
            tables: tuple[dict[str, Any], dict[str, Any], Mapping[Key, Any]] = (
                self.http_routers,
                self.http_services,
                self.state.middlewares,
            )
            make: Callable[..., Any] = Router
            wrap: Callable[[Weighted], Any] = lambda w: Service(weighted=w)  # noqa: E731
        else:
            kind, section, mw_kind = "IngressRouteTCP", "tcp", "MiddlewareTCP"
            tables = (self.tcp_routers, self.tcp_services, self.state.middleware_tcps)
            make, wrap = TCPRouter, lambda w: TCPService(weighted=w)
        routers, services, mw_table = tables
        error = ""
        router_tls: Any = None  # RouterTLS or TCPRouterTLS
        if spec.tls is not None:
            try:
                options, domains = self.route_tls(kind, key, spec.tls)
                router_tls = (
                    RouterTLS(options=options, domains=domains)
                    if http
                    else TCPRouterTLS(
                        passthrough=spec.tls.passthrough, options=options, domains=domains
                    )
                )
            except _Refused as refused:
                error = f"tls: {refused.reason}"
        if isinstance(ir, objects.IngressRoute) and ir.spec.parent_refs:
            error = f"spec.parentRefs: {UNSUPPORTED}"
        routes: Sequence[objects.Route | objects.RouteTCP] = spec.routes
        for i, route in enumerate(routes):
            router = f"{ns}-{_route_key(route.match, name)}"
            router = _normalize(router) if http else router  # Traefik's names
            batch: _Batch[Any] = _Batch()
            try:
                if error:
                    raise _Refused(error)
                if isinstance(route, objects.Route) and route.kind not in ("", "Rule"):
                    raise _Refused(f"unsupported match kind {route.kind!r} (only Rule)")
                if not route.match:
                    raise _Refused("empty match rule")
                if router in routers:
                    raise _Refused(f"the same match as an earlier route (router {router})")
                middlewares = [
                    self.reference(ns, m.namespace, m.name, mw_kind, mw_table)[0]
                    for m in route.middlewares
                ]
                service = self.route_services(ns, router, route.services, batch, wrap)
                extra = (
                    {"observability": _router_observability(route.observability)}
                    if isinstance(route, objects.Route)
                    else {}
                )
            except _Refused as refused:
                found = self.problem(kind, key, f"spec.routes[{i}]", refused.reason)
                if router not in routers:
                    routers[router] = make(
                        rule=route.match,
                        service="",
                        entry_points=list(spec.entry_points),
                        problems=[str(found)],
                    )
                continue
            self.commit(section, services, batch)
            routers[router] = make(
                rule=route.match,
                service=service,
                entry_points=list(spec.entry_points),
                priority=route.priority,
                rule_syntax=route.syntax,
                middlewares=middlewares,
                tls=router_tls,
                **extra,
            )

    # --- IngressRouteUDP -------------------------------------------------------------------

    def ingress_route_udp(self, key: Key, ir: objects.IngressRouteUDP) -> None:
        ns, name = key
        for i, route in enumerate(ir.spec.routes):
            router = f"{ns}-{name}-{i}"
            batch: _Batch[UDPService] = _Batch()
            try:
                service = self.route_services(
                    ns, router, route.services, batch, lambda w: UDPService(weighted=w)
                )
            except _Refused as refused:
                found = self.problem("IngressRouteUDP", key, f"spec.routes[{i}]", refused.reason)
                self.udp_routers[router] = UDPRouter(
                    service="", entry_points=list(ir.spec.entry_points), problems=[str(found)]
                )
                continue
            self.commit("udp", self.udp_services, batch)
            self.udp_routers[router] = UDPRouter(
                service=service, entry_points=list(ir.spec.entry_points)
            )

    # --- the whole -------------------------------------------------------------------------

    def run(self) -> Conversion:
        state = self.state
        defaults = sum(1 for k, _ in self.items(state.tls_options) if k[1] == DEFAULT)
        for key, option in self.items(state.tls_options):
            self.tls_option(key, option, defaults)
        defaults = sum(1 for k, _ in self.items(state.tls_stores) if k[1] == DEFAULT)
        for key, store in self.items(state.tls_stores):
            self.tls_store(key, store, defaults)
        for key, mw in self.items(state.middlewares):
            self.middleware(key, mw)
        for key, mw_tcp in self.items(state.middleware_tcps):
            self.middleware_tcp(key, mw_tcp)
        for key, st in self.items(state.servers_transports):
            self.servers_transport(key, st)
        for key, st_tcp in self.items(state.servers_transport_tcps):
            self.servers_transport_tcp(key, st_tcp)
        for key, ts in self.items(state.traefik_services):
            self.traefik_service(key, ts)
        for key, ir in self.items(state.ingress_routes):
            if self.selected(ir.metadata, ir.spec.ingress_class_name):
                self.ingress_route(key, ir)
        for key, tcp in self.items(state.ingress_route_tcps):
            if self.selected(tcp.metadata, tcp.spec.ingress_class_name):
                self.ingress_route(key, tcp)
        for key, udp in self.items(state.ingress_route_udps):
            if self.selected(udp.metadata, udp.spec.ingress_class_name):
                self.ingress_route_udp(key, udp)
        return Conversion(
            self.configuration(),
            self.problems,
            self.backends,
            frozenset(self.refused_services),
        )

    def configuration(self) -> Configuration:
        http = HTTPConfiguration(
            routers=self.http_routers,
            services=self.http_services,
            middlewares=self.middlewares,
            servers_transports=self.transports,
        )
        tcp = TCPConfiguration(
            routers=self.tcp_routers,
            services=self.tcp_services,
            middlewares=self.tcp_middlewares,
            servers_transports=self.tcp_transports,
        )
        udp = UDPConfiguration(routers=self.udp_routers, services=self.udp_services)
        tls = TLSConfiguration(
            certificates=[self.certificates[k] for k in sorted(self.certificates)],
            options=self.tls_options,
            stores=self.tls_stores,
        )
        return Configuration(
            http=http if http != HTTPConfiguration() else None,
            tcp=tcp if tcp != TCPConfiguration() else None,
            udp=udp if udp != UDPConfiguration() else None,
            tls=tls if tls != TLSConfiguration() else None,
        )


def _tls_name(namespace: str, name: str) -> str:
    """A TLSOption's or TLSStore's element name (Traefik's ``makeID``, ``default`` kept)."""
    return DEFAULT if name == DEFAULT else f"{namespace}-{name}"


def _weight(weight: int | None) -> int:
    return 1 if weight is None else weight


_KIND_NAMES = {bool: "a boolean", int: "an integer", list: "a list"}


_REFERENCE_KEYS = frozenset(f.encode_name for f in msgspec.structs.fields(objects.RouteService))


def _reference(where: str, spec: Mapping[str, Any]) -> objects.RouteService:
    """A service reference (a route's shape) at ``where``; :class:`_Refused` naming it
    or a key it does not know."""
    for field in sorted(set(spec) - _REFERENCE_KEYS):
        raise _Refused(f"invalid spec: unknown field {where}.{field}")
    try:
        return msgspec.convert(dict(spec), objects.RouteService)
    except msgspec.ValidationError as exc:
        raise _Refused(f"invalid spec: {where}: {exc}") from None


def _health(where: str, spec: Any, model: type[T]) -> T | None:
    """A health check's spec (absent: None) -> ``model``; :class:`_Refused` naming
    ``where`` and what is wrong."""
    if spec is None:
        return None
    if not isinstance(spec, Mapping):
        raise _Refused(f"invalid spec: {where} is not an object")
    try:
        return _convert_spec(spec, model)
    except _Refused as refused:
        raise _Refused(f"{where}: {refused.reason}") from None


def _middleware(spec: Mapping[str, Any], model: type[T], kinds: tuple[str, ...]) -> T:
    """A Middleware's or MiddlewareTCP's spec -> the dynamic model; :class:`_Refused`
    naming a kind edge does not implement, or what is wrong with the one it does."""
    found = sorted(spec)
    unknown = [kind for kind in found if kind not in kinds]
    if unknown:
        raise _Refused(f"middleware kind {', '.join(unknown)}: {UNSUPPORTED}")
    if len(found) != 1:
        raise _Refused(f"a middleware must have exactly one kind, found {len(found)}")
    return _convert_spec(spec, model)


def convert(state: ClusterState, options: CRDOptions | None = None) -> Conversion:
    """The dynamic configuration for ``state`` (see the module doc for every rule)."""
    return _Converter(state, options or CRDOptions()).run()


def update_endpoints(
    previous: Conversion,
    old: ClusterState,
    new: ClusterState,
    options: CRDOptions | None = None,
) -> Conversion | None:
    """``convert(new, options)``, built from ``previous`` (``convert(old, options)``) at a
    cost that grows with the EndpointSlices changed, not the cluster: only the HTTP, TCP
    and UDP load balancers of the Services whose slices changed are rebuilt (from the
    references they came from); routers, weighted services and TraefikServices are the
    previous ones. None when :func:`convert` must run: the states differ in more than
    EndpointSlices, or a changed Service refused something before (no ready endpoint:
    a new one brings a route back) or does now (its last ready endpoint gone without
    ``allowEmptyServices``: its routes go).
    """
    if not endpoints_only(old, new):
        return None
    affected = changed_services(old.endpoint_slices, new.endpoint_slices)
    if affected & previous.refused_services:
        return None
    converter = _Converter(new, options or CRDOptions(), only=affected)
    rebuilt: dict[str, dict[str, Any]] = {}
    for (section, name), backend in previous.backends.items():
        if backend.service in affected:
            try:
                rebuilt.setdefault(section, {})[name] = converter.rebuild(backend)
            except _Refused:
                return None
    configuration = previous.configuration
    for section, services in rebuilt.items():
        part = getattr(configuration, section)
        part = msgspec.structs.replace(part, services={**part.services, **services})
        configuration = msgspec.structs.replace(configuration, **{section: part})
    return previous._replace(configuration=configuration)
