"""The static configuration: entry points, providers, logs, ping/api, in Traefik's shape.

Owns the msgspec models read once at start (``edge run --config``) and the entry point
address syntax (:func:`parse_address`). Invariants kept by decoding (``__post_init__``
raises ``ValueError``, which msgspec reports with the key path): every address
parses, trusted IPs are IPs or CIDRs, exactly one of ``providers.file.filename`` /
``directory`` is set, ``ping``/``api``/``metrics`` name an existing TCP entry point, and
the log level is one of Traefik's (stored upper-case).

Like Traefik (``SetEffectiveConfiguration``), a configuration that defines no entry
point (an empty file included) gets one, ``http`` on ``:80``
(:attr:`StaticConfig.default_entry_point_added` says so, and the commands warn); when
``ping``, ``api.insecure`` or ``metrics.prometheus`` use the internal entry point
``traefik`` and none is defined, one is added on ``:8080``. Two entry points that
would bind one address (same port and protocol, hosts that overlap: ``:80`` covers
``0.0.0.0:80`` and ``[::1]:80``) are an error naming both, before anything binds,
unless both have ``reusePort``.

``serversTransport`` and ``tcpServersTransport`` (Traefik's static defaults): the
transport of every HTTP (TCP) load balancer that names none, ``default@internal``.
``api`` makes the service ``api@internal`` exist, which a router may name to serve
the API behind its own rule and middlewares (``api.insecure`` is not needed for it).
Both reach validation through :meth:`StaticConfig.entry_point_protocols`
(:class:`RuntimeDefaults`).
``providersThrottleDuration`` is accepted at the top level (as documented for edge) and
under ``providers`` (where Traefik reads it); the top-level field holds the result.

Entry point options for what arrives (Traefik's): ``http.redirections.entryPoint``
(every plain HTTP request is answered with a redirect to another entry point:
``to`` names it or is ``":port"``; ``scheme`` https and ``permanent`` by default; the
Location's port is the target's, resolved here into ``port``, which may also be
given to name a public port that differs), ``http.tls`` (every HTTP router on the
entry point terminates TLS with these defaults unless it has its own ``tls``; see
:class:`EntryPointKind`), and ``proxyProtocol`` (``trustedIPs`` / ``insecure``: whose
PROXY protocol v1/v2 headers are read; the connection then belongs to the address
the header names. A header from anyone else is refused: the connection is closed).
What an entry point gives its routers, and how it binds: ``http.middlewares``,
``asDefault`` and ``reusePort`` (see :class:`EntryPointHTTP`, :class:`EntryPoint`).

``core.defaultRuleSyntax``: the rule syntax of routers that name none (``v3``, or
``v2``, which Traefik v3 keeps for migration; see :mod:`edge.rules`).

``workers`` (edge's own key, not Traefik's): how many processes serve the entry points,
a number >= 1 or ``"auto"`` (one per CPU); 1 runs everything in one process, more runs
a supervisor with the providers and that many worker processes (:mod:`edge.supervisor`).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
from collections.abc import Mapping
from typing import Annotated, Literal

import msgspec

from edge.config.durations import Duration, SignedDuration
from edge.config.dynamic import (
    Base,
    Domain,
    ForwardingTimeouts,
    NonNegativeInt,
    ServersTransport,
    TCPServersTransport,
    TLSClientConfig,
    http_code_ranges,
    split_host_port,
)
from edge.config.redact import Secret

__all__ = [
    "DEFAULT_THROTTLE",
    "INTERNAL_ENTRY_POINT",
    "OTLPHTTP",
    "AccessLog",
    "AccessLogFieldHeaders",
    "AccessLogFields",
    "AccessLogFilters",
    "Api",
    "Core",
    "EntryPoint",
    "EntryPointHTTP",
    "EntryPointKind",
    "EntryPointObservability",
    "EntryPointProxyProtocol",
    "EntryPointTLS",
    "EntryPointUDP",
    "FileProviderConfig",
    "ForwardedHeaders",
    "IngressEndpoint",
    "KubernetesCRDConfig",
    "KubernetesGatewayConfig",
    "KubernetesIngressConfig",
    "KubernetesIngressNGINXConfig",
    "LifeCycle",
    "Log",
    "Metrics",
    "OTLPClientTLS",
    "Ping",
    "Prometheus",
    "Providers",
    "RedirectEntryPoint",
    "Redirections",
    "RespondingTimeouts",
    "RuntimeDefaults",
    "StaticConfig",
    "StaticServersTransport",
    "StaticTCPServersTransport",
    "Tracing",
    "TracingOTLP",
    "Transport",
    "parse_address",
    "usable_cpus",
]

INTERNAL_ENTRY_POINT = "traefik"
"""Traefik's name for the entry point serving ping/api/metrics; not a default for routers."""

DEFAULT_ENTRY_POINT = "http"
"""The entry point Traefik (and edge) adds, on ``:80``, when the configuration has none."""

NOT_YET_IMPLEMENTED: dict[str, str] = {}
"""Traefik options edge reads past (the loader reports them as ignored) that it will
implement: key path (lower case, no ``$.``) -> what edge does meanwhile."""

API_SERVICE = "api@internal"
"""Traefik's name for the API as a service a router can name (exists when ``api`` is set)."""
PROMETHEUS_SERVICE = "prometheus@internal"
"""Traefik's name for ``/metrics`` as a service a router can name (exists with
``metrics.prometheus.manualRouting``)."""

DEFAULT_THROTTLE = Duration(2.0)

REDIRECT_PRIORITY = 2**31 - 2
"""Traefik's priority for an entry point's redirect router (MaxInt32 - 1)."""

LOG_LEVELS: dict[str, int] = {
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
    "PANIC": logging.CRITICAL,
}


def parse_address(address: str) -> tuple[str, int, str]:
    """An entry point address -> ``(host, port, protocol)``.

    Forms: ``":8080"``, ``"127.0.0.1:8080"``, ``"[::1]:8080"``, ``":5353/udp"``,
    ``"0.0.0.0:443/tcp"``. ``host`` is ``""`` for "every interface"; ``protocol`` is
    ``"tcp"`` (default) or ``"udp"``. Port 0 asks the OS for a free port.
    Raises ``ValueError`` naming the address.
    """
    if not isinstance(address, str):
        raise ValueError(f"invalid address {address!r}: expected a string like ':8080'")
    hostport, slash, proto = address.partition("/")
    protocol = proto.lower() if slash else "tcp"
    if protocol not in ("tcp", "udp"):
        raise ValueError(f"invalid address {address!r}: protocol must be tcp or udp, not {proto!r}")
    host, port = split_host_port(hostport)
    return host, port, protocol


# --- entry points -------------------------------------------------------------


class RespondingTimeouts(Base):
    read_timeout: Duration = Duration(60.0)
    write_timeout: Duration = Duration(0.0)  # 0: no timeout
    idle_timeout: Duration = Duration(180.0)


class LifeCycle(Base):
    request_accept_grace_timeout: Duration = Duration(0.0)
    grace_time_out: Duration = msgspec.field(default=Duration(10.0), name="graceTimeOut")


class Transport(Base):
    responding_timeouts: RespondingTimeouts = msgspec.field(default_factory=RespondingTimeouts)
    life_cycle: LifeCycle = msgspec.field(default_factory=LifeCycle)


class ForwardedHeaders(Base):
    """Whose X-Forwarded-* headers to keep: ``trustedIPs`` (IPs or CIDRs) or everyone's."""

    trusted_ips: list[str] = msgspec.field(default_factory=list, name="trustedIPs")
    insecure: bool = False

    def __post_init__(self) -> None:
        for entry in self.trusted_ips:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(f"trustedIPs: {entry!r} is not an IP address or CIDR") from None

    @property
    def trusted_networks(self) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        return tuple(ipaddress.ip_network(entry, strict=False) for entry in self.trusted_ips)


class EntryPointProxyProtocol(ForwardedHeaders):
    """``proxyProtocol`` of an entry point: whose PROXY protocol headers to read.

    Same keys and checks as ``forwardedHeaders``: ``trustedIPs`` (IPs or CIDRs) or
    ``insecure`` (everyone). A trusted peer may send a v1 or v2 header (or none);
    a header from any other peer closes the connection.
    """


class RedirectEntryPoint(Base):
    """``http.redirections.entryPoint``: answer every plain HTTP request with a redirect.

    ``to``: the target entry point's name, or ``":port"``. ``port`` (edge's own key):
    the port the Location names; resolved from ``to`` when not given (a target
    on port 0 has none until it binds: the entry point then names the bound one).
    Status as Traefik's: 301 (GET) / 308 (other methods) when ``permanent``,
    else 302 / 307. ``priority``: the redirect's router priority (Traefik's
    default, MaxInt32 - 1); a router of the entry point ranked above it is served
    instead of the redirect (an ACME challenge path, say).
    """

    to: str
    scheme: str = "https"
    permanent: bool = True
    port: str = ""
    priority: int = REDIRECT_PRIORITY

    def __post_init__(self) -> None:
        if not self.to:
            raise ValueError("redirections.entryPoint.to must name an entry point or a :port")
        if not self.scheme:
            raise ValueError("redirections.entryPoint.scheme must not be empty")
        if self.port and not (
            self.port.isascii() and self.port.isdigit() and int(self.port) <= 65535
        ):
            raise ValueError(f"redirections.entryPoint.port {self.port!r} is not a port")


class Redirections(Base):
    entry_point: RedirectEntryPoint | None = None


class EntryPointTLS(Base):
    """``http.tls`` of an entry point: the ``tls`` of every HTTP router on it that has none."""

    options: str = ""
    cert_resolver: str = ""
    domains: list[Domain] = []


class EntryPointHTTP(Base):
    """``http`` of an entry point: the request head's bounds and the parser.

    ``maxHeaderCount``: header fields in a request head; past it the request is
    refused with 431 (100, as Apache's LimitRequestFields and HAProxy's
    tune.http.maxhdr).

    ``sanitizePath`` (Traefik's, default true): a request path's dot segments
    (``/./``, ``/../``, also ``%2e``-spelled) are resolved, its empty ones
    dropped and a backslash escaped (``%5C``) before routing, and the backend
    receives the cleaned path
    (:func:`edge.http.codec.forward.sanitize_path`); false routes and forwards the path
    as sent, so a backend that resolves ``/x/../admin`` itself may be reached
    past ``/admin``'s routers and middlewares.

    ``middlewares`` (Traefik's): run before the own middlewares of every HTTP router
    on this entry point, in this order; a name without ``@`` is qualified by each
    router's provider, as the router's own references are (see :class:`EntryPointKind`).
    """

    max_header_bytes: Annotated[int, msgspec.Meta(gt=0)] = 1048576
    max_header_count: Annotated[int, msgspec.Meta(gt=0)] = 100
    parser: Literal["httptools", "h11"] = "httptools"
    redirections: Redirections | None = None
    sanitize_path: bool = True
    tls: EntryPointTLS | None = None
    middlewares: list[str] = []

    def __post_init__(self) -> None:
        for i, name in enumerate(self.middlewares):
            if not name.strip() or name.startswith("@") or name.endswith("@"):
                raise ValueError(f"middlewares[{i}] {name!r}: expected a name or name@provider")

    @property
    def redirect(self) -> RedirectEntryPoint | None:
        return self.redirections.entry_point if self.redirections is not None else None


class EntryPointHTTP2(Base):
    """``http2`` of an entry point (Traefik's keys and defaults): what an HTTP/2
    connection on it (ALPN ``h2``, or h2c with prior knowledge) may hold.

    ``maxConcurrentStreams``: streams a client may have open at once (its
    SETTINGS_MAX_CONCURRENT_STREAMS). ``maxDecoderHeaderTableSize``: the HPACK
    table edge keeps for what the client sends (SETTINGS_HEADER_TABLE_SIZE);
    ``maxEncoderHeaderTableSize``: the most edge keeps for what it sends, whatever
    table the client offers. The header list is bounded by ``http.maxHeaderBytes``.
    """

    max_concurrent_streams: Annotated[int, msgspec.Meta(gt=0, le=(1 << 31) - 1)] = 250
    max_decoder_header_table_size: Annotated[int, msgspec.Meta(ge=0, le=(1 << 31) - 1)] = 4096
    max_encoder_header_table_size: Annotated[int, msgspec.Meta(ge=0, le=(1 << 31) - 1)] = 4096


class EntryPointUDP(Base):
    """``udp`` of an entry point: session idle timeout and the bound on live sessions.

    ``maxSessions``: every session holds one socket (a file descriptor) and about a
    kilobyte of memory; 10,000 serves a busy DNS or game front end while a flood of
    spoofed sources costs at most that, whatever its rate (the oldest idle session is
    evicted first). The entry point raises the soft RLIMIT_NOFILE to fit the bound, or
    lowers the bound to fit the hard limit and says so in the log.
    """

    timeout: Duration = Duration(3.0)  # idle time before a UDP session is dropped
    max_sessions: Annotated[int, msgspec.Meta(gt=0)] = 10_000


class EntryPointObservability(Base):
    """Traefik's ``entryPoints.<n>.observability``: the default of every HTTP router on
    the entry point, and what its requests no router takes get. ``accessLogs`` (false:
    no access-log line, none for its TCP relays and UDP sessions either), ``metrics``
    (false: its requests counted nowhere), ``tracing`` (false: no span) and
    ``traceVerbosity`` (``detailed`` adds the Router and Service spans). A router's own
    ``observability`` replaces each field it sets (:mod:`edge.entrypoints.observability`)."""

    access_logs: bool = True
    metrics: bool = True
    tracing: bool = True
    trace_verbosity: Literal["minimal", "detailed"] = "minimal"


class EntryPoint(Base):
    """One entry point. ``asDefault`` (Traefik's): when any entry point has it, routers
    naming no ``entryPoints`` attach to those marked only (else to every TCP one but
    ``traefik``). ``reusePort`` (Traefik's): its sockets bind with SO_REUSEPORT, so other
    processes (or another entry point with it) may bind the same port, the kernel
    spreading connections (datagrams) among them."""

    address: str
    as_default: bool = False
    reuse_port: bool = False
    transport: Transport = msgspec.field(default_factory=Transport)
    forwarded_headers: ForwardedHeaders = msgspec.field(default_factory=ForwardedHeaders)
    http: EntryPointHTTP = msgspec.field(default_factory=EntryPointHTTP)
    http2: EntryPointHTTP2 = msgspec.field(default_factory=EntryPointHTTP2)
    udp: EntryPointUDP = msgspec.field(default_factory=EntryPointUDP)
    proxy_protocol: EntryPointProxyProtocol | None = None
    observability: EntryPointObservability = msgspec.field(default_factory=EntryPointObservability)

    def __post_init__(self) -> None:
        parse_address(self.address)

    @property
    def host(self) -> str:
        """The host to bind; ``""`` means every interface."""
        return parse_address(self.address)[0]

    @property
    def port(self) -> int:
        return parse_address(self.address)[1]

    @property
    def protocol(self) -> str:
        """``"tcp"`` or ``"udp"``."""
        return parse_address(self.address)[2]


# --- providers ----------------------------------------------------------------


class FileProviderConfig(Base):
    filename: str = ""
    directory: str = ""
    watch: bool = True  # Traefik's default: a file provider follows its files unless told not to

    def __post_init__(self) -> None:
        if bool(self.filename) == bool(self.directory):
            raise ValueError("set exactly one of filename, directory")


class IngressEndpoint(Base):
    """What edge writes into ``status.loadBalancer.ingress`` of the Ingresses it serves.

    ``publishedService`` (``namespace/name``): copy that Service's addresses; else
    ``ip`` and/or ``hostname`` as given (Traefik's ``ingressEndpoint``).
    """

    ip: str = ""
    hostname: str = ""
    published_service: str = ""

    def __post_init__(self) -> None:
        if self.published_service:
            namespace, slash, name = self.published_service.partition("/")
            if not slash or not namespace or not name or "/" in name:
                raise ValueError(
                    f"publishedService {self.published_service!r}: expected namespace/name"
                )
        elif not self.ip and not self.hostname:
            raise ValueError("ingressEndpoint: set publishedService, ip or hostname")


class KubernetesIngressConfig(Base):
    endpoint: str = ""  # overrides the API server URL of the in-cluster config or kubeconfig
    token: Secret = ""
    cert_auth_file_path: str = ""
    kubeconfig: str = ""  # "": $KUBECONFIG, else ~/.kube/config (outside a pod)
    namespaces: list[str] = []  # empty: all namespaces
    label_selector: str = ""
    ingress_class: str = ""
    throttle_duration: Duration | None = None  # None: providersThrottleDuration
    allow_empty_services: bool = False
    allow_external_name_services: bool = False
    ingress_endpoint: IngressEndpoint | None = None


class KubernetesCRDConfig(Base):
    endpoint: str = ""  # overrides the API server URL of the in-cluster config or kubeconfig
    token: Secret = ""
    cert_auth_file_path: str = ""
    kubeconfig: str = ""  # "": $KUBECONFIG, else ~/.kube/config (outside a pod)
    namespaces: list[str] = []  # empty: all namespaces
    label_selector: str = ""  # applies to the traefik.io kinds
    ingress_class: str = ""  # "": objects naming no class or edge's (crd.DEFAULT_CLASS)
    throttle_duration: Duration | None = None  # None: providersThrottleDuration
    allow_cross_namespace: bool = False
    allow_external_name_services: bool = False
    allow_empty_services: bool = False
    native_lb_by_default: bool = msgspec.field(default=False, name="nativeLBByDefault")
    # Nodes (cluster-scoped) are not watched; nodePortLB is refused for want of them.
    disable_cluster_scope_resources: bool = False


class GatewayStatusService(Base):
    """``statusAddress.service``: the Service whose addresses the Gateways get."""

    name: str = ""
    namespace: str = ""


class GatewayStatusAddress(Base):
    """``statusAddress``, Traefik's: what edge writes into each Gateway's
    ``status.addresses`` in place of the nodes running its pods: ``ip`` and/or
    ``hostname`` as given, else the addresses of ``service`` (as a published
    Service's are read for the Ingress status)."""

    ip: str = ""
    hostname: str = ""
    service: GatewayStatusService | None = None

    def __post_init__(self) -> None:
        if not (self.ip or self.hostname or self.service is not None):
            raise ValueError("statusAddress: needs ip, hostname or service")
        if self.service is not None and not (self.service.name and self.service.namespace):
            raise ValueError("statusAddress.service: needs name and namespace")


class KubernetesGatewayConfig(Base):
    """``providers.kubernetesGateway``: the Gateway API source
    (:mod:`edge.providers.kubernetes.gateway`). ``labelSelector`` applies to the
    Gateway API kinds; ``experimentalChannel`` adds TLSRoute, TCPRoute and UDPRoute;
    ``statusAddress`` sets the Gateways' addresses. Traefik's ``nativeLBByDefault``
    is refused (:data:`edge.config.loader.TRAEFIK_KEYS`)."""

    endpoint: str = ""  # overrides the API server URL of the in-cluster config or kubeconfig
    token: Secret = ""
    cert_auth_file_path: str = ""
    kubeconfig: str = ""  # "": $KUBECONFIG, else ~/.kube/config (outside a pod)
    namespaces: list[str] = []  # empty: all namespaces
    label_selector: str = ""
    throttle_duration: Duration | None = None  # None: providersThrottleDuration
    experimental_channel: bool = False
    status_address: GatewayStatusAddress | None = None  # None: the nodes of edge's pods
    # Edge's own: a listener whose port no entry point has gets one opened at run time
    # (RuntimeEntryPoints), closed when the listener goes.
    open_listeners: bool = False


class KubernetesIngressNGINXConfig(Base):
    """``providers.kubernetesIngressNGINX``: Ingresses written for ingress-nginx, read
    with its annotations (:mod:`edge.providers.kubernetes.ingress_nginx`), Traefik's
    keys. An Ingress is served when its ``ingressClassName`` names an IngressClass whose
    controller is ``controllerClass``, or (``ingressClassByName``) names
    ``ingressClass`` itself; when its legacy ``kubernetes.io/ingress.class`` annotation
    is ``ingressClass``; or, naming no class, when ``watchIngressWithoutClass``.
    ``watchNamespace`` limits it to one namespace (as ingress-nginx's flag).
    ``publishService`` (``namespace/name``) or ``publishStatusAddress`` is what the
    Ingresses' status says. ``defaultBackendService`` (``namespace/name``, its first
    port) answers what no Ingress routes, and the custom errors of Ingresses without a
    ``default-backend`` of their own; ``globalAllowedResponseHeaders``: the headers a
    ``custom-headers`` ConfigMap may set (ingress-nginx's
    ``global-allowed-response-headers``). ``watchNamespaceSelector`` is refused."""

    endpoint: str = ""  # overrides the API server URL of the in-cluster config or kubeconfig
    token: Secret = ""
    cert_auth_file_path: str = ""
    kubeconfig: str = ""  # "": $KUBECONFIG, else ~/.kube/config (outside a pod)
    throttle_duration: Duration | None = None  # None: providersThrottleDuration
    watch_namespace: str = ""  # "": every namespace
    watch_namespace_selector: str = ""
    ingress_class: str = "nginx"
    controller_class: str = "k8s.io/ingress-nginx"
    watch_ingress_without_class: bool = False
    ingress_class_by_name: bool = False
    publish_service: str = ""
    publish_status_address: list[str] = []
    default_backend_service: str = ""
    disable_svc_external_name: bool = False
    global_allowed_response_headers: list[str] = []
    # Beyond Traefik: ingress-nginx's --tcp-services-configmap and
    # --udp-services-configmap ("namespace/name"): "<port>": "<ns>/<svc>:<port>[:PROXY]".
    tcp_services_config_map: str = ""
    udp_services_config_map: str = ""

    def __post_init__(self) -> None:
        if self.watch_namespace_selector:
            raise ValueError("watchNamespaceSelector is not supported: name watchNamespace")
        if self.default_backend_service:
            namespace, _, name = self.default_backend_service.partition("/")
            if not namespace or not name or "/" in name:
                raise ValueError(
                    f"defaultBackendService: {self.default_backend_service!r} is not namespace/name"
                )
        if self.publish_service:
            IngressEndpoint(published_service=self.publish_service)  # checks namespace/name


class Providers(Base):
    providers_throttle_duration: Duration | None = None  # Traefik's place for it
    file: FileProviderConfig | None = None
    kubernetes_ingress: KubernetesIngressConfig | None = None
    kubernetes_crd: KubernetesCRDConfig | None = msgspec.field(default=None, name="kubernetesCRD")
    kubernetes_gateway: KubernetesGatewayConfig | None = None
    kubernetes_ingress_nginx: KubernetesIngressNGINXConfig | None = msgspec.field(
        default=None, name="kubernetesIngressNGINX"
    )


# --- observability --------------------------------------------------------------


class Ping(Base):
    entry_point: str = INTERNAL_ENTRY_POINT
    manual_routing: bool = False


_BASE_PATH_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/_.:~-")
"""What Traefik's ``api.basePath`` may hold after its leading ``/``."""


class Api(Base):
    """Traefik's API (:mod:`edge.api`), read-only; ``insecure`` serves it on the ``traefik``
    entry point. ``dashboard`` (true by default, as in Traefik): the dashboard's page at
    ``{basePath}dashboard/`` wherever the API is served. ``basePath`` (``/``): where the
    API (``{basePath}api/...``) and the dashboard are, an absolute path of Traefik's
    characters. ``dashboardName``: the name the dashboard shows (``/api/version`` says
    it). ``debug`` is named as not supported."""

    insecure: bool = False
    dashboard: bool = True
    base_path: str = "/"
    dashboard_name: str = ""

    def __post_init__(self) -> None:
        path = self.base_path
        if not path.startswith("/") or not set(path) <= _BASE_PATH_CHARS:
            raise ValueError(f"basePath: {path!r} is not an absolute URL path")


class Prometheus(Base):
    """Traefik's ``metrics.prometheus`` (:mod:`edge.entrypoints.metrics`): ``/metrics`` on
    ``entryPoint``, or, with ``manualRouting``, only where a router names the service
    ``prometheus@internal``. ``headerLabels``: label name -> request header whose value
    labels the ``requests_total`` families (a label name Prometheus accepts, none of
    the families' own)."""

    entry_point: str = INTERNAL_ENTRY_POINT
    manual_routing: bool = False
    buckets: list[float] = msgspec.field(default_factory=lambda: [0.1, 0.3, 1.2, 5.0])
    add_entry_points_labels: bool = True
    add_routers_labels: bool = False
    add_services_labels: bool = True
    header_labels: dict[str, str] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        for bound in self.buckets:
            if not bound == bound or bound in (float("inf"), float("-inf")):
                raise ValueError(f"buckets: {bound} is not a finite number")
        for label, header in self.header_labels.items():
            if not _LABEL_NAME.fullmatch(label) or label.startswith("__"):
                raise ValueError(f"headerLabels: {label!r} is not a Prometheus label name")
            if label in _OWN_LABELS:
                raise ValueError(f"headerLabels: {label!r} is a label the metrics have already")
            if not header:
                raise ValueError(f"headerLabels: {label!r} names no header")


_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_OWN_LABELS = frozenset(("code", "method", "protocol", "entrypoint", "router", "service", "le"))


class Metrics(Base):
    """Traefik's ``metrics``: ``prometheus``; ``addInternals``: count what edge's own
    services answer too (``/ping``, the API, ``/metrics``, ``*@internal`` routers)."""

    prometheus: Prometheus | None = None
    add_internals: bool = False


class Log(Base):
    level: str = "INFO"  # case-insensitive on input; stored upper-case, WARNING -> WARN
    format: Literal["common", "json"] = "common"
    file_path: str = ""  # "": stderr

    def __post_init__(self) -> None:
        level = self.level.upper()
        if level == "WARNING":
            level = "WARN"
        if level not in LOG_LEVELS:
            raise ValueError(
                f"invalid log level {self.level!r}: expected one of {', '.join(LOG_LEVELS)}"
            )
        msgspec.structs.force_setattr(self, "level", level)

    @property
    def python_level(self) -> int:
        """The :mod:`logging` level for :attr:`level`."""
        return LOG_LEVELS[self.level]


class AccessLogFilters(Base):
    """``accessLog.filters``: a line is kept when any filter set keeps it (Traefik's
    ``keepAccessLog``): its status in ``statusCodes`` (``"404"``, ``"500-599"``), a
    retry happened (``retryAttempts``), or it took longer than ``minDuration``. No
    filter set keeps every line."""

    status_codes: list[str] = []
    retry_attempts: bool = False
    min_duration: Duration = Duration(0)

    def __post_init__(self) -> None:
        try:
            http_code_ranges(self.status_codes)
        except ValueError as exc:
            raise ValueError(f"statusCodes{exc}") from None

    @property
    def active(self) -> bool:
        """Whether any filter is set (an empty ``filters`` keeps every line, as Traefik's)."""
        return bool(self.status_codes or self.retry_attempts or self.min_duration > 0)


class AccessLogFieldHeaders(Base):
    """``accessLog.fields.headers``: what becomes of each request, origin and downstream
    header (``request_<Name>``, ``origin_<Name>``, ``downstream_<Name>``): kept,
    dropped or ``REDACTED``. ``names``: per header name (any case), over ``defaultMode``."""

    default_mode: Literal["keep", "drop", "redact"] = "drop"
    names: dict[str, Literal["keep", "drop", "redact"]] = {}


class AccessLogQueryParameters(Base):
    default_mode: Literal["keep", "drop"] = "keep"


class AccessLogFields(Base):
    """``accessLog.fields``: which fields a line has. ``names``: per field name (any
    case: ``ClientUsername``, ``StartUTC``), over ``defaultMode``."""

    default_mode: Literal["keep", "drop"] = "keep"
    names: dict[str, Literal["keep", "drop"]] = {}
    headers: AccessLogFieldHeaders = msgspec.field(default_factory=AccessLogFieldHeaders)
    query_parameters: AccessLogQueryParameters = msgspec.field(
        default_factory=AccessLogQueryParameters
    )


class AccessLog(Base):
    """``accessLog``, Traefik's keys (``otlp`` aside): what is written, and where; see
    :mod:`edge.entrypoints.accesslog`. ``addInternals``: also the requests edge's own
    services answer (``ping``, ``api``, ``metrics``, redirections: ``*@internal``)."""

    file_path: str = ""  # "": stdout
    format: Literal["common", "genericCLF", "json"] = "common"
    buffering_size: NonNegativeInt = 0
    filters: AccessLogFilters | None = None
    fields: AccessLogFields = msgspec.field(default_factory=AccessLogFields)
    add_internals: bool = False


class OTLPClientTLS(Base):
    """Traefik's ``ClientTLS`` for the OpenTelemetry collector: ``ca`` (else the system's
    bundle), ``cert`` and ``key`` (a client certificate: both or neither),
    ``insecureSkipVerify``. A relative path is read from the working directory, as
    Traefik reads it (:mod:`edge.config.paths`)."""

    ca: str = ""
    cert: str = ""
    key: Secret = ""
    insecure_skip_verify: bool = False

    def __post_init__(self) -> None:
        if bool(self.cert) != bool(self.key):
            raise ValueError("cert and key: a client certificate needs both")


class OTLPHTTP(Base):
    """``tracing.otlp.http``: the collector's URL (``scheme://host:port/path``; no path:
    ``/v1/traces``, as Traefik's exporter posts), headers sent with every export, TLS."""

    endpoint: str = "https://localhost:4318"
    headers: dict[str, Secret] = {}  # authenticate the export: values shown masked
    tls: OTLPClientTLS | None = None

    def __post_init__(self) -> None:
        scheme, sep, rest = self.endpoint.partition("://")
        if not sep or scheme.lower() not in ("http", "https") or not rest.split("/", 1)[0]:
            raise ValueError(
                f"endpoint {self.endpoint!r}: expected http(s)://host:port/path of a collector"
            )
        for name, value in self.headers.items():
            if not _TOKEN.fullmatch(name) or any(c in value for c in "\r\n\0"):
                raise ValueError(f"headers: {name!r} is not a header edge can send")


class TracingOTLP(Base):
    """``tracing.otlp``: ``http`` (the default when neither is given); ``grpc`` is named
    as not supported (:data:`edge.config.loader.TRAEFIK_KEYS`)."""

    http: OTLPHTTP | None = None


class Tracing(Base):
    """Traefik's ``tracing`` (:mod:`edge.entrypoints.tracing`): spans of every HTTP
    exchange, W3C ``traceparent`` to the upstream, exported over OTLP/HTTP.
    ``sampleRate``: the share of traces edge starts that are sampled (an incoming
    ``traceparent`` keeps its own decision: Traefik's ``ParentBased``).
    ``resourceAttributes`` (``globalAttributes``, deprecated, where it is not set),
    ``capturedRequestHeaders`` / ``capturedResponseHeaders`` (span attributes),
    ``safeQueryParams`` (every other query value is ``REDACTED``), ``addInternals``
    (also what edge's own services answer)."""

    service_name: str = "traefik"
    sample_rate: float = 1.0
    add_internals: bool = False
    resource_attributes: dict[str, str] | None = None
    global_attributes: dict[str, str] | None = None
    captured_request_headers: list[str] = []
    captured_response_headers: list[str] = []
    safe_query_params: list[str] = []
    otlp: TracingOTLP | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.sample_rate <= 1.0:
            raise ValueError(f"sampleRate {self.sample_rate}: expected a number from 0.0 to 1.0")
        if self.resource_attributes is None and self.global_attributes is not None:
            msgspec.structs.force_setattr(self, "resource_attributes", self.global_attributes)

    @property
    def http(self) -> OTLPHTTP:
        """Where spans go: ``otlp.http``, or its defaults."""
        otlp = self.otlp
        return otlp.http if otlp is not None and otlp.http is not None else _OTLP_HTTP


_OTLP_HTTP = OTLPHTTP()
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110's token: a header name


class Core(Base):
    default_rule_syntax: Literal["v3", "v2"] = "v3"


# --- the default transports -------------------------------------------------------


class Spiffe(Base):
    """Traefik's SPIFFE settings: read so they are named, never applied (edge has no SPIFFE)."""

    ids: list[str] = []
    trust_domain: str = ""


def _refuse_spiffe(spiffe: Spiffe | None) -> None:
    if spiffe is not None:
        raise ValueError("spiffe: not supported by edge (it has no SPIFFE workload API client)")


class StaticServersTransport(Base):
    """Traefik's static ``serversTransport``: ``default@internal``, the transport of every
    HTTP load balancer naming none (:meth:`to_dynamic`). ``rootCAs`` relative to the
    static file's folder, as every path of the static file (``edge.cli.load_static``)."""

    insecure_skip_verify: bool = False
    root_cas: list[str] = msgspec.field(default_factory=list, name="rootCAs")
    max_idle_conns_per_host: int = 200
    forwarding_timeouts: ForwardingTimeouts = msgspec.field(default_factory=ForwardingTimeouts)
    spiffe: Spiffe | None = None

    def __post_init__(self) -> None:
        _refuse_spiffe(self.spiffe)

    def to_dynamic(self) -> ServersTransport:
        return ServersTransport(
            insecure_skip_verify=self.insecure_skip_verify,
            root_cas=list(self.root_cas),
            max_idle_conns_per_host=self.max_idle_conns_per_host,
            forwarding_timeouts=self.forwarding_timeouts,
        )


class StaticTCPClientTLS(Base):
    insecure_skip_verify: bool = False
    root_cas: list[str] = msgspec.field(default_factory=list, name="rootCAs")
    spiffe: Spiffe | None = None

    def __post_init__(self) -> None:
        _refuse_spiffe(self.spiffe)


class StaticTCPServersTransport(Base):
    """Traefik's static ``tcpServersTransport``: ``default@internal`` of TCP load balancers."""

    dial_timeout: Duration = Duration(30.0)
    dial_keep_alive: SignedDuration = SignedDuration(15.0)
    termination_delay: SignedDuration = SignedDuration(0.1)
    tls: StaticTCPClientTLS | None = None

    def to_dynamic(self) -> TCPServersTransport:
        tls = self.tls
        return TCPServersTransport(
            dial_timeout=self.dial_timeout,
            dial_keep_alive=self.dial_keep_alive,
            termination_delay=self.termination_delay,
            tls=None
            if tls is None
            else TLSClientConfig(
                insecure_skip_verify=tls.insecure_skip_verify, root_cas=list(tls.root_cas)
            ),
        )


class RuntimeDefaults:
    """What the static configuration adds to every dynamic one's validation
    (:func:`edge.config.runtime.build_runtime`): ``default@internal`` for HTTP and TCP,
    and whether ``api@internal`` and ``prometheus@internal`` exist. Travels on each
    :class:`EntryPointKind`."""

    __slots__ = ("api", "opens", "prometheus", "servers_transport", "tcp_servers_transport")

    def __init__(
        self,
        servers_transport: ServersTransport | None = None,
        tcp_servers_transport: TCPServersTransport | None = None,
        api: bool = False,
        opens: bool = False,
        prometheus: bool = False,
    ) -> None:
        self.servers_transport = servers_transport or ServersTransport()
        self.tcp_servers_transport = tcp_servers_transport or TCPServersTransport()
        self.api = api
        self.opens = opens  # runtimeEntryPoints: routers naming ":<port>" open it
        self.prometheus = prometheus  # metrics.prometheus.manualRouting

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RuntimeDefaults) and all(
            getattr(self, a) == getattr(other, a) for a in self.__slots__
        )

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self):
        return (
            RuntimeDefaults,
            (
                self.servers_transport,
                self.tcp_servers_transport,
                self.api,
                self.opens,
                self.prometheus,
            ),
        )


def runtime_entry_point(port: int, udp: bool = False) -> str:
    """The name of the entry point opened at run time on ``port``: its address as an
    entry point's is written (``":8080"``, ``":8053/udp"``), so a provider names it in
    its routers' ``entryPoints`` and validation knows it for one."""
    return f":{port}/udp" if udp else f":{port}"


def runtime_port(name: str) -> tuple[int, str] | None:
    """``(port, protocol)`` of a run-time entry point's name, None for another name."""
    if not name.startswith(":") or name[1:].partition("/")[0] in ("", "0"):
        return None
    try:
        _, port, protocol = parse_address(name)
    except ValueError:
        return None
    return (port, protocol) if name == runtime_entry_point(port, protocol == "udp") else None


class RuntimeEntryPoints(Base):
    """``runtimeEntryPoints`` (edge's own): entry points opened while edge runs, one per
    port a router names as ``":<port>"`` (``":<port>/udp"`` for UDP routers) that no
    entry point of this file has, closed once no router names it. Set, or implied by a
    provider's ``openListeners``; ``host`` is the address they bind (``""``: every
    address). They take the entry points' defaults (timeouts, no PROXY protocol, no
    forwarded headers trusted)."""

    host: str = ""


# --- the whole --------------------------------------------------------------------


class StaticConfig(Base):
    entry_points: dict[str, EntryPoint] = {}
    providers: Providers = msgspec.field(default_factory=Providers)
    providers_throttle_duration: Duration = DEFAULT_THROTTLE
    ping: Ping | None = None
    api: Api | None = None
    metrics: Metrics | None = None
    log: Log = msgspec.field(default_factory=Log)
    access_log: AccessLog | None = None
    tracing: Tracing | None = None
    core: Core = msgspec.field(default_factory=Core)
    workers: Annotated[int, msgspec.Meta(ge=1)] | Literal["auto"] = 1
    servers_transport: StaticServersTransport | None = None
    tcp_servers_transport: StaticTCPServersTransport | None = None
    runtime_entry_points: RuntimeEntryPoints | None = None

    def __post_init__(self) -> None:
        for name in self.entry_points:
            if not name or "@" in name:
                raise ValueError(f"entryPoints: invalid entry point name {name!r}")
        gateway = self.providers.kubernetes_gateway
        if self.runtime_entry_points is None and gateway is not None and gateway.open_listeners:
            msgspec.structs.force_setattr(self, "runtime_entry_points", RuntimeEntryPoints())
        if not self.entry_points:  # Traefik's SetEffectiveConfiguration, before `traefik`
            msgspec.structs.force_setattr(
                self, "entry_points", {DEFAULT_ENTRY_POINT: _DEFAULT_HTTP}
            )

        nested = self.providers.providers_throttle_duration
        if nested is not None:
            top = self.providers_throttle_duration
            if top != DEFAULT_THROTTLE and top != nested:
                raise ValueError(
                    "providersThrottleDuration is set both at the top level and under providers, "
                    "with different values"
                )
            msgspec.structs.force_setattr(self, "providers_throttle_duration", nested)

        users: list[tuple[str, str]] = []  # (what, entry point name)
        if self.ping is not None and not self.ping.manual_routing:
            users.append(("ping", self.ping.entry_point))
        if self.api is not None and self.api.insecure:
            users.append(("api", INTERNAL_ENTRY_POINT))
        prom = self.metrics.prometheus if self.metrics is not None else None
        if prom is not None and not prom.manual_routing:
            users.append(("metrics.prometheus", prom.entry_point))
        if any(ep == INTERNAL_ENTRY_POINT for _, ep in users) and (
            INTERNAL_ENTRY_POINT not in self.entry_points
        ):
            entry_points = dict(self.entry_points)
            entry_points[INTERNAL_ENTRY_POINT] = EntryPoint(address=":8080")
            msgspec.structs.force_setattr(self, "entry_points", entry_points)
        for what, ep in users:
            entry_point = self.entry_points.get(ep)
            if entry_point is None:
                raise ValueError(f"{what}: entryPoint {ep!r} is not defined in entryPoints")
            if entry_point.protocol != "tcp":
                raise ValueError(f"{what}: entryPoint {ep!r} is a UDP entry point")
        _check_addresses(self.entry_points)
        self._resolve_redirects()

    @property
    def default_entry_point_added(self) -> bool:
        """No entry point was configured: ``http`` on ``:80`` was added, as Traefik adds it."""
        return self.entry_points.get(DEFAULT_ENTRY_POINT) is _DEFAULT_HTTP

    def _resolve_redirects(self) -> None:
        """Check every ``http.redirections.entryPoint.to`` and give it the port to name."""
        changed = {}
        for name, ep in self.entry_points.items():
            redirections = ep.http.redirections
            if redirections is None or redirections.entry_point is None:
                continue
            redirect = redirections.entry_point
            where = f"entryPoints.{name}.http.redirections.entryPoint"
            if ep.protocol != "tcp":
                raise ValueError(f"{where}: {name!r} is a UDP entry point")
            to = redirect.to
            if to.startswith(":"):
                port = to[1:]
                if not (port.isascii() and port.isdigit() and 0 < int(port) <= 65535):
                    raise ValueError(f"{where}.to {to!r}: not a port")
            else:
                target = self.entry_points.get(to)
                if target is None:
                    raise ValueError(f"{where}.to {to!r}: no such entry point")
                if target.protocol != "tcp":
                    raise ValueError(f"{where}.to {to!r} is a UDP entry point")
                port = str(target.port) if target.port else ""
            if redirect.port or not port:
                continue
            redirect = msgspec.structs.replace(redirect, port=port)
            http = msgspec.structs.replace(
                ep.http,
                redirections=msgspec.structs.replace(redirections, entry_point=redirect),
            )
            changed[name] = msgspec.structs.replace(ep, http=http)
        if changed:
            msgspec.structs.force_setattr(self, "entry_points", {**self.entry_points, **changed})

    @property
    def worker_count(self) -> int:
        """:attr:`workers` as a number: ``"auto"`` is the CPUs this process may use (see :func:`usable_cpus`)."""
        if self.workers == "auto":
            return usable_cpus()
        return int(self.workers)

    def entry_point_protocols(self) -> dict[str, str]:
        """Entry point name -> ``"tcp"`` | ``"udp"``, what the watcher and runtime need.

        Each value is an :class:`EntryPointKind`: the protocol, carrying the entry
        point's ``http.tls`` and the :class:`RuntimeDefaults` (one object for all) for
        the runtime's validation to apply.
        """
        defaults = RuntimeDefaults(
            self.servers_transport.to_dynamic() if self.servers_transport else None,
            self.tcp_servers_transport.to_dynamic() if self.tcp_servers_transport else None,
            api=self.api is not None,
            opens=self.runtime_entry_points is not None,
            prometheus=self.metrics is not None
            and self.metrics.prometheus is not None
            and self.metrics.prometheus.manual_routing,
        )
        return {
            name: EntryPointKind(
                ep.protocol, ep.http.tls, defaults, tuple(ep.http.middlewares), ep.as_default
            )
            for name, ep in self.entry_points.items()
        }


class EntryPointKind(str):
    """An entry point's protocol (``"tcp"``/``"udp"``, compares as that string) with
    the HTTP defaults its routers inherit (Traefik's entry point model): ``http_tls``
    and ``http_middlewares``; and ``as_default``, whether routers naming no entry
    point attach to it (see :class:`EntryPoint`).

    It travels where the protocols go (the watcher, a worker's validation, ``edge
    check``) so that :func:`edge.config.runtime.build_runtime` can give every HTTP
    router of an entry point with ``http.tls`` that TLS, put ``http.middlewares``
    before its own, and apply the static configuration's ``defaults``
    (:class:`RuntimeDefaults`, the same on every kind). Plain strings (no model, no
    defaults) work as well.
    """

    http_tls: EntryPointTLS | None
    defaults: RuntimeDefaults | None
    http_middlewares: tuple[str, ...]
    as_default: bool

    def __new__(
        cls,
        protocol: str,
        http_tls: EntryPointTLS | None = None,
        defaults: RuntimeDefaults | None = None,
        http_middlewares: tuple[str, ...] = (),
        as_default: bool = False,
    ) -> EntryPointKind:
        kind = super().__new__(cls, protocol)
        kind.http_tls = http_tls
        kind.defaults = defaults
        kind.http_middlewares = tuple(http_middlewares)
        kind.as_default = as_default
        return kind

    def __reduce__(self):  # pickles (and copies) keep the model
        return (
            EntryPointKind,
            (str(self), self.http_tls, self.defaults, self.http_middlewares, self.as_default),
        )


def _overlap(a: str, b: str) -> bool:
    """Whether binding hosts ``a`` and ``b`` on one port and protocol collide: ``""`` is
    every interface, ``0.0.0.0`` every IPv4 and ``::`` every IPv6 one (edge binds IPv6
    sockets v6-only, as asyncio does); names are compared as written."""
    if a == "" or b == "":
        return True
    try:
        x, y = ipaddress.ip_address(a), ipaddress.ip_address(b)
    except ValueError:
        return a.lower() == b.lower()
    if x.version != y.version:
        return False
    return x == y or x.is_unspecified or y.is_unspecified


def _check_addresses(entry_points: Mapping[str, EntryPoint]) -> None:
    """Two entry points binding one address: an error naming both (port 0 never collides),
    unless both have ``reusePort`` (then both bind it, as Traefik's do)."""
    seen: list[tuple[str, str, int, str]] = []
    for name, ep in entry_points.items():
        host, port, protocol = parse_address(ep.address)
        for other, other_host, other_port, other_protocol in seen:
            if (
                (port, protocol) == (other_port, other_protocol)
                and port
                and _overlap(host, other_host)
                and not (ep.reuse_port and entry_points[other].reuse_port)
            ):
                raise ValueError(
                    f"entryPoints {other!r} ({entry_points[other].address}) and {name!r} "
                    f"({ep.address}) both bind port {port}/{protocol}: give each its own address"
                )
        seen.append((name, host, port, protocol))


_DEFAULT_HTTP = EntryPoint(address=":80")  # the very object: default_entry_point_added


def usable_cpus(
    environ: Mapping[str, str] = os.environ, cgroup_root: str = "/sys/fs/cgroup"
) -> int:
    """The CPUs this process may use: the least of its CPU affinity, its cgroup's CPU
    quota (rounded up) and ``EDGE_CPU_LIMIT`` (a pod's CPU limit, passed through the
    Downward API by the DaemonSet). In a container the CPU count alone is the node's."""
    counts = [
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    ]
    quota = _cgroup_quota(cgroup_root)
    if quota:
        counts.append(quota)
    limit = environ.get("EDGE_CPU_LIMIT", "").strip()
    if limit.isdigit() and int(limit) > 0:
        counts.append(int(limit))
    return max(1, min(counts))


def _cgroup_quota(root: str) -> int:
    """The cgroup CPU quota in whole CPUs, rounded up; 0 without one (v2 ``cpu.max``, v1 cfs)."""
    try:
        with open(f"{root}/cpu.max") as f:
            quota, period = f.read().split()[:2]
        if quota == "max":
            return 0
        return -(-int(quota) // int(period))
    except (OSError, ValueError):
        pass
    try:
        with open(f"{root}/cpu/cpu.cfs_quota_us") as f:
            quota_us = int(f.read())
        with open(f"{root}/cpu/cpu.cfs_period_us") as f:
            period_us = int(f.read())
    except (OSError, ValueError):
        return 0
    return -(-quota_us // period_us) if quota_us > 0 and period_us > 0 else 0
