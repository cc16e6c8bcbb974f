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
    scheme is ``scheme``, else ``https`` for port 443 or a port name starting with
    ``https``, else ``http``. Options edge does not implement (``sticky``,
    ``healthCheck``, ``passiveHealthCheck``, ``responseForwarding``, a ``strategy`` other
    than ``wrr``, service ``middlewares``, the ``h2c`` scheme, ``nodePortLB``) refuse the
    route, naming the option: nothing is served without what the user asked for.

TLS
    ``tls.secretName`` is read from the route's namespace as the Ingress conversion reads
    it (:mod:`edge.providers.kubernetes.secrets`) into ``tls.certificates`` (in the
    store ``tls.store`` names, if any); a missing or bad Secret refuses the object's
    routes (they would answer with another certificate). ``tls.options`` names a
    TLSOption; ``tls.domains`` pass on; ``tls.certResolver`` is not supported and
    refuses the routes. IngressRouteTCP's ``tls.passthrough`` routes the TLS connection
    by SNI without terminating it (its Secret, if any, is not read, as in Traefik).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any, NamedTuple, TypeVar

import msgspec

from edge.config.durations import dec_hook
from edge.config.dynamic import (
    UNSUPPORTED,
    CertAndStores,
    Configuration,
    Domain,
    HTTPConfiguration,
    LoadBalancer,
    Middleware,
    ProxyProtocol,
    Router,
    RouterTLS,
    Server,
    ServersTransport,
    Service,
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
    host_port,
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
from edge.providers.kubernetes.secrets import SecretError, tls_certificate

__all__ = ["DEFAULT_CLASS", "PROVIDER", "CRDOptions", "Conversion", "Problem", "convert"]

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


class Conversion(NamedTuple):
    """What :func:`convert` returns: the configuration and every problem, in walk order."""

    configuration: Configuration
    problems: list[Problem]


class _Refused(Exception):
    """What is referred to cannot be served; the reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


_NAME_RUN_RE = re.compile(r"[\W_]+")


def _normalize(name: str) -> str:
    """Traefik's ``provider.Normalize``: runs of characters other than letters and
    digits become one ``-``, none at either end."""
    return "-".join(part for part in _NAME_RUN_RE.split(name) if part)


def _route_key(match: str, name: str) -> str:
    """Traefik's ``makeServiceKey``: the name and 10 bytes (20 hex digits) of SHA-256."""
    return f"{name}-{hashlib.sha256(match.encode('utf-8', 'surrogatepass')).hexdigest()[:20]}"


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


def _convert_spec(spec: Mapping[str, Any], model: type[T]) -> T:
    """A CRD spec held as plain data -> ``model``; :class:`_Refused` naming the bad key."""
    for key in ("unsupported", "problems"):  # edge's own bookkeeping, not a spec key
        if key in spec:
            raise _Refused(f"invalid spec: unknown field {key!r}")
    try:
        return msgspec.convert(dict(spec), model, dec_hook=dec_hook)
    except msgspec.ValidationError as exc:
        raise _Refused(f"invalid spec: {exc}") from None


class _Converter:
    def __init__(self, state: ClusterState, options: CRDOptions) -> None:
        self.state = state
        self.options = options
        self.slices = slices_by_service(state.endpoint_slices)
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
        if "@" in name:
            if not self.options.allow_cross_namespace and name.endswith(f"@{PROVIDER}"):
                raise _Refused(f"{kind} {name!r}: @{PROVIDER} references need allowCrossNamespace")
            return name, None
        if not name:
            raise _Refused(f"a {kind} reference names nothing")
        namespace = namespace or parent
        what = f"{kind} {namespace}/{name}"
        if namespace != parent and not self.options.allow_cross_namespace:
            raise _Refused(f"{what} is not in namespace {parent} and allowCrossNamespace is off")
        key = (namespace, name)
        if key not in table or not self.visible(namespace):
            raise _Refused(f"{what} not found")
        reason = self.refused.get((kind, *key))
        if reason is not None:
            raise _Refused(f"{what} is refused: {reason}")
        return _normalize(f"{namespace}-{name}"), key

    def servers(
        self,
        namespace: str,
        name: str,
        port: int | str,
        protocol: str,
        native_lb: bool | None,
        node_port_lb: bool,
    ) -> tuple[list[str], objects.ServicePort]:
        """``host:port`` of a Service port's servers (sorted) and the port."""
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
        if native_lb if native_lb is not None else self.options.native_lb_by_default:
            ip = svc.spec.cluster_ip
            address = host_port(ip, found.port) if ip and ip != "None" else None
            if address is None:
                raise _Refused(f"{what} has no cluster IP for nativeLB")
            return [address], found
        if node_port_lb and svc.spec.type == "NodePort":
            raise _Refused(f"nodePortLB: {UNSUPPORTED}")
        addresses, hosts = ready_addresses(
            self.slices.get((namespace, name), ()),
            found.name,
            protocol=protocol,
            allow_fqdn=self.options.allow_external_name_services,
        )
        if not addresses and not self.options.allow_empty_services:
            if hosts:
                raise _Refused(
                    f"{what}: its EndpointSlices {', '.join(hosts)} name hosts "
                    "(addressType FQDN) and allowExternalNameServices is off"
                )
            raise _Refused(f"{what} has no ready endpoints for port {found.name or found.port}")
        return sorted(addresses), found

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
        try:
            self.middlewares[_normalize("-".join(key))] = _middleware(
                mw.spec, Middleware, _HTTP_KINDS
            )
        except _Refused as refused:
            self.refuse("Middleware", key, "spec", refused.reason)

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
            client_auth = option.spec.get("clientAuth")
            if isinstance(client_auth, Mapping) and "secretNames" in client_auth:
                raise _Refused(f"clientAuth.secretNames: {UNSUPPORTED}")
            self.tls_options[_tls_name(*key)] = _convert_spec(option.spec, TLSOptions)
        except _Refused as refused:
            self.refuse("TLSOption", key, "spec", refused.reason)

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
            for field in ("rootCAs", "certificatesSecrets"):
                if field in st.spec:
                    raise _Refused(f"{field} (Secrets and ConfigMaps): {UNSUPPORTED}")
            self.transports[_normalize("-".join(key))] = _convert_spec(st.spec, ServersTransport)
        except _Refused as refused:
            self.refuse("ServersTransport", key, "spec", refused.reason)

    def servers_transport_tcp(self, key: Key, st: objects.ServersTransportTCP) -> None:
        try:
            tls = st.spec.get("tls")
            for field in ("rootCAs", "certificatesSecrets"):
                if isinstance(tls, Mapping) and field in tls:
                    raise _Refused(f"tls.{field} (Secrets and ConfigMaps): {UNSUPPORTED}")
            name = _normalize("-".join(key))
            self.tcp_transports[name] = _convert_spec(st.spec, TCPServersTransport)
        except _Refused as refused:
            self.refuse("ServersTransportTCP", key, "spec", refused.reason)

    def traefik_service(self, key: Key, ts: objects.TraefikService) -> None:
        spec = ts.spec
        try:
            for field, value in (
                ("mirroring", spec.mirroring),
                ("failover", spec.failover),
                ("highestRandomWeight", spec.highest_random_weight),
            ):
                if value is not None:
                    raise _Refused(f"{field}: {UNSUPPORTED}")
            if spec.weighted is None:
                raise _Refused("the TraefikService has no weighted services")
            if spec.weighted.sticky is not None:
                raise _Refused(f"weighted.sticky: {UNSUPPORTED}")
            services: dict[str, Service] = {}
            children = []
            for i, ref in enumerate(spec.weighted.services):
                try:
                    name, service = self.http_service(key[0], ref)
                except _Refused as refused:
                    raise _Refused(f"weighted.services[{i}]: {refused.reason}") from None
                if service is not None:
                    services[name] = service
                children.append(WRRService(name=name, weight=_weight(ref.weight)))
            services[_normalize("-".join(key))] = Service(weighted=Weighted(services=children))
            self.http_services.update(services)
        except _Refused as refused:
            self.refuse("TraefikService", key, "spec", refused.reason)

    # --- IngressRoute ----------------------------------------------------------------------

    def http_service(self, parent: str, ref: objects.RouteService) -> tuple[str, Service | None]:
        """(name, the load balancer to add; None for a TraefikService) of a reference."""
        kind = ref.kind or "Service"
        if kind == "TraefikService":
            name, _ = self.reference(
                parent, ref.namespace, ref.name, "TraefikService", self.state.traefik_services
            )
            return name, None
        if kind != "Service":
            raise _Refused(f"unsupported service kind {kind!r}")
        for field, value in (
            ("sticky", ref.sticky),
            ("healthCheck", ref.health_check),
            ("passiveHealthCheck", ref.passive_health_check),
            ("responseForwarding", ref.response_forwarding),
        ):
            if value is not None:
                raise _Refused(f"service {ref.name}: {field}: {UNSUPPORTED}")
        if ref.middlewares:
            raise _Refused(f"service {ref.name}: middlewares: {UNSUPPORTED}")
        if ref.strategy not in ("", "wrr", "RoundRobin"):
            raise _Refused(f"service {ref.name}: strategy {ref.strategy!r}: {UNSUPPORTED}")
        if ref.scheme not in ("", "http", "https"):
            if ref.scheme == "h2c":
                raise _Refused(f"service {ref.name}: scheme h2c: {UNSUPPORTED}")
            raise _Refused(f"service {ref.name}: invalid scheme {ref.scheme!r}")
        ns = self.service_namespace(parent, ref.namespace, ref.name)
        addresses, port = self.servers(
            ns, ref.name, ref.port, "TCP", ref.native_lb, ref.node_port_lb
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
        balancer = LoadBalancer(
            servers=[Server(url=f"{scheme}://{address}") for address in addresses],
            pass_host_header=True if ref.pass_host_header is None else ref.pass_host_header,
            servers_transport=transport,
        )
        name = _normalize(f"{ns}-{ref.name}-{_port_text(ref.port)}")
        return name, Service(load_balancer=balancer)

    def ingress_route(self, key: Key, ir: objects.IngressRoute) -> None:
        ns, name = key
        spec = ir.spec
        tls_error = ""
        router_tls = None
        if spec.tls is not None:
            try:
                options, domains = self.route_tls("IngressRoute", key, spec.tls)
                router_tls = RouterTLS(options=options, domains=domains)
            except _Refused as refused:
                tls_error = f"tls: {refused.reason}"
        if spec.parent_refs:
            tls_error = f"spec.parentRefs: {UNSUPPORTED}"
        for i, route in enumerate(spec.routes):
            router = _normalize(f"{ns}-{_route_key(route.match, name)}")
            where = f"spec.routes[{i}]"
            services: dict[str, Service] = {}
            try:
                if tls_error:  # or parentRefs
                    raise _Refused(tls_error)
                if route.kind not in ("", "Rule"):
                    raise _Refused(f"unsupported match kind {route.kind!r} (only Rule)")
                if not route.match:
                    raise _Refused("empty match rule")
                if router in self.http_routers:
                    raise _Refused(f"the same match as an earlier route (router {router})")
                middlewares = [
                    self.reference(ns, m.namespace, m.name, "Middleware", self.state.middlewares)[0]
                    for m in route.middlewares
                ]
                service = self.route_services(ns, router, route.services, services)
            except _Refused as refused:
                found = self.problem("IngressRoute", key, where, refused.reason)
                if router not in self.http_routers:
                    self.http_routers[router] = Router(
                        rule=route.match,
                        service="",
                        entry_points=list(spec.entry_points),
                        problems=[str(found)],
                    )
                continue
            self.http_services.update(services)
            self.http_routers[router] = Router(
                rule=route.match,
                service=service,
                entry_points=list(spec.entry_points),
                priority=route.priority,
                rule_syntax=route.syntax,
                middlewares=middlewares,
                tls=router_tls,
            )

    def route_services(
        self,
        ns: str,
        router: str,
        refs: list[objects.RouteService],
        services: dict[str, Service],
    ) -> str:
        """The service of a route (``services`` gets what it adds)."""
        if not refs:
            raise _Refused("the route names no service")
        if len(refs) == 1:
            name, service = self.http_service(ns, refs[0])
            if service is None:
                return name
            services[router] = service
            return router
        children = []
        for ref in refs:
            name, service = self.http_service(ns, ref)
            if service is not None:
                services[name] = service
            children.append(WRRService(name=name, weight=_weight(ref.weight)))
        services[router] = Service(weighted=Weighted(services=children))
        return router

    # --- IngressRouteTCP -------------------------------------------------------------------

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

    def ingress_route_tcp(self, key: Key, ir: objects.IngressRouteTCP) -> None:
        ns, name = key
        spec = ir.spec
        tls_error = ""
        router_tls = None
        if spec.tls is not None:
            try:
                options, domains = self.route_tls("IngressRouteTCP", key, spec.tls)
                router_tls = TCPRouterTLS(
                    passthrough=spec.tls.passthrough, options=options, domains=domains
                )
            except _Refused as refused:
                tls_error = f"tls: {refused.reason}"
        for i, route in enumerate(spec.routes):
            router = f"{ns}-{_route_key(route.match, name)}"
            where = f"spec.routes[{i}]"
            services: dict[str, TCPService] = {}
            try:
                if tls_error:
                    raise _Refused(tls_error)
                if not route.match:
                    raise _Refused("empty match rule")
                if router in self.tcp_routers:
                    raise _Refused(f"the same match as an earlier route (router {router})")
                middlewares = [
                    self.reference(
                        ns, m.namespace, m.name, "MiddlewareTCP", self.state.middleware_tcps
                    )[0]
                    for m in route.middlewares
                ]
                if not route.services:
                    raise _Refused("the route names no service")
                if len(route.services) == 1:
                    services[router] = self.tcp_service(ns, route.services[0])
                else:
                    children = []
                    for ref in route.services:
                        child = f"{router}-{ref.name}-{_port_text(ref.port)}"
                        services[child] = self.tcp_service(ns, ref)
                        children.append(WRRService(name=child, weight=_weight(ref.weight)))
                    services[router] = TCPService(weighted=Weighted(services=children))
            except _Refused as refused:
                found = self.problem("IngressRouteTCP", key, where, refused.reason)
                if router not in self.tcp_routers:
                    self.tcp_routers[router] = TCPRouter(
                        rule=route.match,
                        service="",
                        entry_points=list(spec.entry_points),
                        problems=[str(found)],
                    )
                continue
            self.tcp_services.update(services)
            self.tcp_routers[router] = TCPRouter(
                rule=route.match,
                service=router,
                entry_points=list(spec.entry_points),
                priority=route.priority,
                rule_syntax=route.syntax,
                middlewares=middlewares,
                tls=router_tls,
            )

    # --- IngressRouteUDP -------------------------------------------------------------------

    def udp_service(self, parent: str, ref: objects.RouteServiceUDP) -> UDPService:
        ns = self.service_namespace(parent, ref.namespace, ref.name)
        addresses, _ = self.servers(ns, ref.name, ref.port, "UDP", ref.native_lb, ref.node_port_lb)
        return UDPService(
            load_balancer=UDPLoadBalancer(servers=[UDPServer(address=a) for a in addresses])
        )

    def ingress_route_udp(self, key: Key, ir: objects.IngressRouteUDP) -> None:
        ns, name = key
        for i, route in enumerate(ir.spec.routes):
            router = f"{ns}-{name}-{i}"
            services: dict[str, UDPService] = {}
            try:
                if not route.services:
                    raise _Refused("the route names no service")
                if len(route.services) == 1:
                    services[router] = self.udp_service(ns, route.services[0])
                else:
                    children = []
                    for ref in route.services:
                        child = f"{router}-{ref.name}-{_port_text(ref.port)}"
                        services[child] = self.udp_service(ns, ref)
                        children.append(WRRService(name=child, weight=_weight(ref.weight)))
                    services[router] = UDPService(weighted=Weighted(services=children))
            except _Refused as refused:
                found = self.problem("IngressRouteUDP", key, f"spec.routes[{i}]", refused.reason)
                self.udp_routers[router] = UDPRouter(
                    service="", entry_points=list(ir.spec.entry_points), problems=[str(found)]
                )
                continue
            self.udp_services.update(services)
            self.udp_routers[router] = UDPRouter(
                service=router, entry_points=list(ir.spec.entry_points)
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
                self.ingress_route_tcp(key, tcp)
        for key, udp in self.items(state.ingress_route_udps):
            if self.selected(udp.metadata, udp.spec.ingress_class_name):
                self.ingress_route_udp(key, udp)
        return Conversion(self.configuration(), self.problems)

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


def _middleware(spec: Mapping[str, Any], model: type[T], kinds: tuple[str, ...]) -> T:
    """A Middleware's or MiddlewareTCP's spec -> the dynamic model; :class:`_Refused`
    naming a kind edge does not implement, or what is wrong with the one it does."""
    found = sorted(spec)
    unknown = [kind for kind in found if kind not in kinds]
    if unknown:
        raise _Refused(
            f"middleware kind {', '.join(unknown)}: {UNSUPPORTED} (edge has {', '.join(kinds)})"
        )
    if len(found) != 1:
        raise _Refused(f"a middleware must have exactly one kind, found {len(found)}")
    return _convert_spec(spec, model)


def convert(state: ClusterState, options: CRDOptions | None = None) -> Conversion:
    """The dynamic configuration for ``state`` (see the module doc for every rule)."""
    return _Converter(state, options or CRDOptions()).run()
