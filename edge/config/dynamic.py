"""The dynamic configuration: what every provider produces, in Traefik's shape.

Owns the msgspec models for ``http``, ``tcp``, ``udp`` and ``tls`` and the shared
:class:`Base` every configuration model (static and dynamic) inherits. One model serves
the file provider, the Kubernetes providers and the API's dump.

Invariants kept by decoding (``__post_init__`` raises ``ValueError``, which msgspec
reports with the key path): a service, UDP/TCP service and middleware have exactly one
kind set (unless it holds Traefik options edge lacks, see :class:`Element`); server URLs
are ``http(s)://host[:port]``; TCP/UDP server addresses are
``host:port``. Element names written in files contain no ``@`` (``@`` separates a name from its
provider, see :mod:`edge.config.merge`; checked by the loader, since merged
configurations hold qualified names). References between elements (router ->
service, ...) are *not* checked here: that is :mod:`edge.config.runtime`'s job, so one
broken router never rejects a whole file.

Models are frozen; those holding lists or dicts compare with ``==`` but are not hashable.
Durations are :class:`~edge.config.durations.Duration` (float seconds).
"""

from __future__ import annotations

import http
import ipaddress
import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Literal, dataclass_transform
from urllib.parse import urlsplit

import msgspec
import re2  # google-re2: the engine and syntax of Go's regexp
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from edge.config import htpasswd, pem, tlsnames
from edge.config.durations import Duration, SignedDuration
from edge.config.redact import HeaderValue, Secret
from edge.errors import ConfigError
from edge.rules.regexp import _compile_re2

__all__ = [
    "AddPrefix",
    "Base",
    "BasicAuth",
    "CertAndStores",
    "ClientAuth",
    "ClientCertificate",
    "Configuration",
    "DigestAuth",
    "Domain",
    "Element",
    "Failover",
    "ForwardingTimeouts",
    "HRWService",
    "HTTPConfiguration",
    "Headers",
    "HealthCheck",
    "HighestRandomWeight",
    "IPAllowList",
    "IPStrategy",
    "IPWhiteList",
    "InFlightReq",
    "LoadBalancer",
    "Middleware",
    "PassiveServerHealthCheck",
    "PeerCertSAN",
    "ProxyProtocol",
    "RateLimit",
    "RedirectScheme",
    "Router",
    "RouterObservability",
    "RouterTLS",
    "RouterTimeouts",
    "Server",
    "ServerHealthCheck",
    "ServersTransport",
    "Service",
    "SourceCriterion",
    "StoreCertificate",
    "StripPrefix",
    "TCPConfiguration",
    "TCPIPAllowList",
    "TCPInFlightConn",
    "TCPLoadBalancer",
    "TCPMiddleware",
    "TCPRouter",
    "TCPRouterTLS",
    "TCPServer",
    "TCPServersTransport",
    "TCPService",
    "TLSClientConfig",
    "TLSConfiguration",
    "TLSOptions",
    "TLSStore",
    "UDPConfiguration",
    "UDPLoadBalancer",
    "UDPRouter",
    "UDPServer",
    "UDPService",
    "WRRService",
    "Weighted",
    "ip_range",
    "split_host_port",
]

UNSUPPORTED = "not supported by this version of edge"
"""What edge says of a Traefik option it does not implement (see :class:`Element`)."""


# Struct's own dataclass_transform defaults to not frozen, so a type checker would
# see every subclass that does not restate ``frozen=True`` as mutable (and reject it
# as a mutable child of a frozen parent). Restating the transform here with
# ``frozen_default=True`` keeps ``frozen`` said once, below. At run time the
# decorator only sets ``Base.__dataclass_transform__``; msgspec ignores it.
@dataclass_transform(frozen_default=True, field_specifiers=(msgspec.field,))
class Base(
    msgspec.Struct,
    frozen=True,
    forbid_unknown_fields=True,
    rename="camel",
    omit_defaults=True,
):
    """Base of every configuration model.

    * ``frozen``: a decoded configuration is a value; the watcher compares them with ``==``.
    * ``forbid_unknown_fields``: a misspelt key is an error naming it, never silently ignored.
    * ``rename="camel"``: Python ``snake_case`` attributes, Traefik's ``camelCase`` keys;
      where camel-casing does not give Traefik's spelling (``trustedIPs``, ``rootCAs``)
      the field says ``msgspec.field(name=...)``.
    * ``omit_defaults``: encoding writes only what differs from the defaults.
    """


class Element(Base, kw_only=True):
    """Base of the named elements validation judges one by one (routers, services,
    middlewares, serversTransports, TLS options).

    ``unsupported``: the key paths of Traefik options this version of edge does not
    implement, found in the element by the loader (:mod:`edge.config.loader`), which
    takes them out so the rest decodes; :mod:`edge.config.runtime` disables the
    element for them, so nothing is served without what the user asked for.

    ``problems``: why a provider could not make the element it stands for (the
    Kubernetes provider: the part of an Ingress it cannot serve, such as a missing
    Service): validation disables the element with each as its error and checks
    nothing else of it, so the API and ``edge check`` show where it went and why.
    """

    unsupported: list[str] = []
    problems: list[str] = []


NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]
Port = Annotated[int, msgspec.Meta(ge=0, le=65535)]


def split_host_port(address: str) -> tuple[str, int]:
    """``"host:port"`` / ``"[v6]:port"`` / ``":port"`` -> ``(host, port)``; ``ValueError`` otherwise.

    ``host`` is ``""`` when omitted and has no brackets for IPv6.
    """
    if not isinstance(address, str) or not address:
        raise ValueError(f"invalid address {address!r}: expected host:port")
    if address.startswith("["):
        end = address.find("]")
        if end < 0 or address[end + 1 : end + 2] != ":":
            raise ValueError(f"invalid address {address!r}: expected [ipv6]:port")
        host, port_text = address[1:end], address[end + 2 :]
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            raise ValueError(
                f"invalid address {address!r}: {host!r} is not an IPv6 address"
            ) from None
    else:
        host, sep, port_text = address.rpartition(":")
        if not sep:
            raise ValueError(f"invalid address {address!r}: expected host:port (missing ':port')")
        if ":" in host:
            raise ValueError(f"invalid address {address!r}: write IPv6 hosts as [addr]:port")
    if not port_text.isascii() or not port_text.isdigit():
        raise ValueError(f"invalid address {address!r}: port {port_text!r} is not a number")
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"invalid address {address!r}: port {port} is out of range")
    return host, port


def _exactly_one(what: str, **kinds: object) -> None:
    set_ = [key for key, value in kinds.items() if value is not None]
    if len(set_) != 1:
        names = ", ".join(kinds)
        found = f" (found {', '.join(set_)})" if set_ else ""
        raise ValueError(f"{what} must have exactly one of: {names}{found}")


# --- http ---------------------------------------------------------------------


class Domain(Base):
    main: str = ""
    sans: list[str] = []


class RouterTLS(Base):
    """``tls`` of an HTTP router: terminate TLS for this router."""

    cert_resolver: str = ""
    options: str = ""  # TLS options name; "" means "default"
    domains: list[Domain] = []


class RouterTimeouts(Base):
    """``timeouts`` of an HTTP router (edge's key, the Gateway API's HTTPRoute
    ``timeouts`` by their names and meaning): ``request`` bounds each request from its
    arrival to the end of its response, every try included; ``backendRequest`` each
    try, from its start (the dial included) to the end of the server's response. One
    that runs out answers 504 while no response began (a try's may be retried, as any
    timeout of its server), else cuts the connection. 0: no bound."""

    request: Duration = Duration(0.0)
    backend_request: Duration = Duration(0.0)


class RouterObservability(Base):
    """``observability`` of an HTTP router (Traefik's): whether its requests are written
    to the access log (``accessLogs``), counted in the metrics (``metrics``) and traced
    (``tracing``), and how finely (``traceVerbosity``: ``detailed`` adds the Router and
    Service spans). Each field left out is the entry point's (``entryPoints.<n>.
    observability``); none switches on what the static configuration has off.
    Decided once per configuration (:mod:`edge.entrypoints.observability`)."""

    access_logs: bool | None = None
    metrics: bool | None = None
    tracing: bool | None = None
    trace_verbosity: Literal["", "minimal", "detailed"] = ""  # "": the entry point's


class Router(Element):
    rule: str
    service: str
    entry_points: list[str] = []  # empty: every (non-internal) TCP entry point
    priority: int = 0  # 0: default priority, len(rule)
    rule_syntax: str = ""  # "v3" or "v2"; "": core.defaultRuleSyntax (checked by runtime)
    middlewares: list[str] = []
    tls: RouterTLS | None = None
    timeouts: RouterTimeouts | None = None
    observability: RouterObservability | None = None


_PLAIN_URL = re.compile(r"https?://(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):([0-9]{1,5})")
"""A server URL with an explicit port and nothing else: valid as it stands."""


class Server(Base):
    url: str
    weight: NonNegativeInt = 1

    def __post_init__(self) -> None:
        plain = _PLAIN_URL.fullmatch(self.url)
        if plain is not None and 0 < int(plain.group(1)) <= 65535:
            return  # the common form, checked without urlsplit (20,000 servers per Kubernetes sync)
        try:
            parts = urlsplit(self.url)
            port = parts.port
        except ValueError as exc:
            raise ValueError(f"invalid server url {self.url!r}: {exc}") from None
        if parts.scheme not in ("http", "https", "h2c"):
            raise ValueError(f"invalid server url {self.url!r}: scheme must be http, https or h2c")
        if not parts.hostname:
            raise ValueError(f"invalid server url {self.url!r}: no host")
        if port == 0:
            raise ValueError(f"invalid server url {self.url!r}: port 0")


class ServerHealthCheck(Base):
    """``loadBalancer.healthCheck``: each server is asked ``method path`` every
    ``interval`` (every ``unhealthyInterval`` while down); an answer within ``timeout``
    with ``status`` (any 2xx or 3xx when 0) keeps it in the rotation, anything else
    takes it out until a check passes. ``scheme``, ``port`` and ``hostname`` (the Host
    sent) replace the server URL's; redirects are followed unless ``followRedirects``
    is false. Values Traefik replaces by its defaults (an interval or timeout of 0 or
    less) are refused here, so the file says what runs."""

    scheme: str = ""
    mode: str = "http"
    path: str = ""
    method: str = ""  # "": GET
    status: int = 0
    port: Port = 0
    interval: SignedDuration = SignedDuration(30.0)
    unhealthy_interval: SignedDuration | None = None  # None: interval
    timeout: SignedDuration = SignedDuration(5.0)
    hostname: str = ""
    follow_redirects: bool = True
    headers: dict[str, HeaderValue] = {}

    def check(self) -> None:
        if self.mode not in ("http", "grpc"):
            raise ValueError(f"mode {self.mode!r}: unknown (Traefik's: http, grpc)")
        if self.scheme not in ("", "http", "https"):
            raise ValueError(f"scheme {self.scheme!r}: expected http or https")
        if self.path and (not self.path.startswith("/") or any(c in self.path for c in " \r\n")):
            raise ValueError(f"path {self.path!r}: expected a relative URL path, starting with /")
        if self.method and not re.fullmatch(r"[A-Z]+", self.method):
            raise ValueError(f"method {self.method!r}: expected an HTTP method")
        if self.status and not 100 <= self.status <= 599:
            raise ValueError(f"status {self.status}: expected an HTTP status (100 to 599)")
        if self.interval <= 0:
            raise ValueError("interval: must be greater than 0")
        if self.timeout <= 0:
            raise ValueError("timeout: must be greater than 0")
        if self.unhealthy_interval is not None and self.unhealthy_interval <= 0:
            raise ValueError("unhealthyInterval: must be greater than 0")
        _header_value("hostname", self.hostname)
        for name, value in self.headers.items():
            _header_name(f"headers[{name!r}]", name)
            _header_value(f"headers[{name!r}]", value)


class PassiveServerHealthCheck(Base):
    """``loadBalancer.passiveHealthCheck``: ``maxFailedAttempts`` failed requests to a
    server (no answer, or a 5xx) within ``failureWindow`` take it out of the rotation
    for ``failureWindow`` (until an active check passes, when there is one)."""

    failure_window: Duration = Duration(10.0)
    max_failed_attempts: Annotated[int, msgspec.Meta(ge=1)] = 1

    def check(self) -> None:
        if self.failure_window <= 0:
            raise ValueError("failureWindow: must be greater than 0")


class HealthCheck(Base):
    """``healthCheck: {}`` of a weighted or failover service: its health (whether a
    child can serve) goes up to the services using it, which skip it while down."""


class Cookie(Base):
    """``sticky.cookie``: the cookie naming the server (or child service) a client sticks
    to. ``name`` "" is derived from the service's name, as Traefik derives it."""

    name: str = ""
    secure: bool = False
    http_only: bool = False
    same_site: Literal["", "none", "lax", "strict", "None", "Lax", "Strict"] = ""
    max_age: int = 0  # > 0: Max-Age; < 0: expires at once (Max-Age=0); 0: a session cookie
    path: str = "/"
    domain: str = ""


class Sticky(Base):
    cookie: Cookie | None = None


class ResponseForwarding(Base):
    """``loadBalancer.responseForwarding``: Traefik's ``flushInterval`` is how often its
    proxy flushes response bytes it buffered to the client (100ms by default, a
    negative value: after every write). Edge buffers none: each read from the server
    is written to the client at once, which is Traefik's negative value whatever the
    interval says. The key is read (Traefik's duration syntax) and shown by the API."""

    flush_interval: SignedDuration = SignedDuration(0.1)


class LoadBalancer(Base):
    servers: list[Server] = []
    pass_host_header: bool = True
    servers_transport: str = ""  # "" means the default transport, default@internal
    # Traefik's strategies: "wrr" (its default), "p2c", "hrw", "leasttime"; edge has
    # wrr and p2c; judged by validation (edge.config.runtime.http).
    strategy: str = ""
    health_check: ServerHealthCheck | None = None
    passive_health_check: PassiveServerHealthCheck | None = None
    sticky: Sticky | None = None
    response_forwarding: ResponseForwarding | None = None


class WRRService(Base):
    """A member of a ``weighted`` service. With ``status`` (edge's key, an HTTP error
    status) it is an answer, not a service: its share of the requests gets that status
    from edge and ``name`` only labels it (Traefik's internal ``WRRService.Status``,
    which its Gateway provider sets to 500 for a backendRef it cannot serve)."""

    name: str
    weight: NonNegativeInt = 1
    status: int | None = None

    def __post_init__(self) -> None:
        if self.status is not None and not 400 <= self.status <= 599:
            raise ValueError(f"status {self.status}: an answer is an HTTP error, 400 to 599")


class Weighted(Base):
    services: list[WRRService] = []
    health_check: HealthCheck | None = None
    sticky: Sticky | None = None


class HRWService(Base):
    """A member of a ``highestRandomWeight`` service (no ``status``: Traefik's has none)."""

    name: str
    weight: NonNegativeInt = 1


class HighestRandomWeight(Base):
    """Rendezvous hashing over services on the client's address (Traefik v3.4's):
    :class:`edge.router.services.HighestRandomWeightService`."""

    services: list[HRWService] = []
    health_check: HealthCheck | None = None


class Failover(Base):
    """``failover``: ``service`` while it has a server up, else ``fallback``."""

    service: str = ""
    fallback: str = ""
    health_check: HealthCheck | None = None


class MirrorService(Base):
    """One of ``mirroring.mirrors``: service ``name`` gets a copy of ``percent`` % of
    the requests (0 to 100)."""

    name: str
    percent: int = 0


class Mirroring(Base):
    """``mirroring``: ``service`` answers every request; each mirror gets a copy of its
    share of them, whose answer is dropped. ``mirrorBody`` false sends the copies
    without the body; a body over ``maxBodySize`` bytes (-1: no limit, Traefik's
    default) is not mirrored at all (the request is still served)."""

    service: str = ""
    mirror_body: bool = True
    max_body_size: int = -1
    mirrors: list[MirrorService] = []
    health_check: HealthCheck | None = None

    def check(self) -> None:
        if not self.service:
            raise ValueError("service: a mirroring service needs a service to answer")
        for i, mirror in enumerate(self.mirrors):
            if not 0 <= mirror.percent <= 100:
                raise ValueError(f"mirrors[{i}].percent {mirror.percent}: must be 0 to 100")
            if not mirror.name:
                raise ValueError(f"mirrors[{i}].name: a mirror needs a service name")


class Service(Element):
    load_balancer: LoadBalancer | None = None
    weighted: Weighted | None = None
    failover: Failover | None = None
    mirroring: Mirroring | None = None
    highest_random_weight: HighestRandomWeight | None = None

    def __post_init__(self) -> None:
        if self.unsupported or self.problems:  # disabled anyway; it may have no kind
            return
        _exactly_one(
            "a service",
            loadBalancer=self.load_balancer,
            weighted=self.weighted,
            failover=self.failover,
            mirroring=self.mirroring,
            highestRandomWeight=self.highest_random_weight,
        )


class StripPrefix(Base):
    """Prefixes tried in order; the first the path starts with is taken away."""

    prefixes: list[str] = []

    def check(self) -> None:
        for i, prefix in enumerate(self.prefixes):
            _target_part(f"prefixes[{i}]", prefix)


class StripPrefixRegex(Base):
    """Regexps (Go's syntax) tried in order; the first match at the path's start is taken away."""

    regex: list[str] = []

    def check(self) -> None:
        for i, pattern in enumerate(self.regex):
            go_regexp(pattern.strip(), f"regex[{i}]")


class AddPrefix(Base):
    prefix: str = ""

    def check(self) -> None:
        if not self.prefix:
            raise ValueError("prefix: must not be empty (Traefik refuses an empty prefix)")
        _target_part("prefix", self.prefix)


class ReplacePath(Base):
    """The path goes upstream as ``path``; the one replaced as X-Replaced-Path."""

    path: str = ""

    def check(self) -> None:
        _target_part("path", self.path)
        if _BAD_ESCAPE.search(self.path):
            raise ValueError(f"path: {self.path!r} holds a % not followed by two hex digits")


class ReplacePathRegex(Base):
    """Every match of ``regex`` in the (escaped) path replaced by ``replacement``
    (Go's template: ``$1``, ``${1}``, ``${name}``, ``$$``)."""

    regex: str = ""
    replacement: str = ""

    def check(self) -> None:
        compiled = go_regexp(self.regex.strip(), "regex")
        go_template(self.replacement.strip(), compiled, "replacement")
        _target_part("replacement", self.replacement.strip())


class RedirectRegex(Base):
    """A redirect to ``replacement`` when ``regex`` matches the request's URL."""

    regex: str = ""
    replacement: str = ""
    permanent: bool = False
    # Not a key of Traefik's files (the Gateway provider sets it, as Traefik's sets its
    # own redirect's): this status whatever the method; 0: ``permanent`` decides.
    status_code: int = 0

    def check(self) -> None:
        if self.status_code not in (0, 301, 302, 303, 307, 308):
            raise ValueError(f"statusCode: {self.status_code} is not a redirect status")
        compiled = go_regexp(self.regex, "regex")
        go_template(self.replacement, compiled, "replacement")
        if _NOT_IN_VALUE.search(self.replacement):
            raise ValueError("replacement: may not hold CR, LF or another control character")


class Chain(Base):
    """Middlewares run in this order, as if the router named them in its place."""

    middlewares: list[str] = []


class ContentType(Base):
    """Traefik's Content-Type auto-detection switch. edge never sniffs a body: a
    response without Content-Type goes without one, whatever this says (Traefik v3
    does the same without this middleware, and sniffs with it)."""

    auto_detect: bool | None = None


# What a header edit writes into a head as it is: a token name, and a value of
# HTAB, SP, VCHAR and obs-text; a CR or LF would end the line and start another
# (Traefik's Go server and client never write one either).
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_NOT_IN_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_NOT_IN_TARGET = re.compile(r"[\x00-\x20\x7f]")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _target_part(key: str, value: str) -> None:
    # It goes into the request line: a space or a line break there would start
    # another part of the line, or another line (a header, a request).
    if _NOT_IN_TARGET.search(value):
        raise ValueError(f"{key}: {value!r} holds whitespace or a control character")


def _header_name(key: str, name: str) -> None:
    if not _HEADER_NAME.fullmatch(name):
        raise ValueError(f"{key}: invalid header name {name!r}")


def _header_value(key: str, value: str) -> None:
    if _NOT_IN_VALUE.search(value):
        raise ValueError(f"{key}: a value may not hold CR, LF or another control character")


class Headers(Base):
    """Traefik's headers middleware: custom request and response headers (an empty
    value removes the header), CORS, and the security headers of unrolled/secure."""

    custom_request_headers: dict[str, HeaderValue] = {}
    custom_response_headers: dict[str, str] = {}
    # CORS
    access_control_allow_credentials: bool = False
    access_control_allow_headers: list[str] = []
    access_control_allow_methods: list[str] = []
    access_control_allow_origin_list: list[str] = []
    access_control_allow_origin_list_regex: list[str] = []
    access_control_expose_headers: list[str] = []
    access_control_max_age: int | None = None
    add_vary_header: bool = False
    # security
    allowed_hosts: list[str] = []
    hosts_proxy_headers: list[str] = []
    ssl_proxy_headers: dict[str, str] = {}
    sts_seconds: int | None = None
    sts_include_subdomains: bool = False
    sts_preload: bool = False
    force_sts_header: bool = msgspec.field(default=False, name="forceSTSHeader")
    frame_deny: bool = False
    custom_frame_options_value: str = ""
    content_type_nosniff: bool = False
    browser_xss_filter: bool = False
    custom_browser_xss_value: str = msgspec.field(default="", name="customBrowserXSSValue")
    content_security_policy: str = ""
    content_security_policy_report_only: str = ""
    public_key: str = ""
    referrer_policy: str = ""
    permissions_policy: str = ""
    is_development: bool = False
    # Not a key of Traefik's files (the Gateway provider's RequestHeaderModifier ``add``
    # sets it): each value is appended to the request's same-named header, joined by
    # a comma, or sets it when the request has none.
    append_request_headers: dict[str, HeaderValue] = {}

    def has_custom(self) -> bool:
        return bool(
            self.custom_request_headers
            or self.custom_response_headers
            or self.append_request_headers
        )

    def has_cors(self) -> bool:
        return bool(
            self.access_control_allow_credentials
            or self.access_control_allow_headers
            or self.access_control_allow_methods
            or self.access_control_allow_origin_list
            or self.access_control_allow_origin_list_regex
            or self.access_control_expose_headers
            or self.access_control_max_age is not None
            or self.add_vary_header
        )

    def has_secure(self) -> bool:
        return bool(
            self.allowed_hosts
            or self.hosts_proxy_headers
            or self.ssl_proxy_headers
            or self.sts_seconds is not None
            or self.sts_include_subdomains
            or self.sts_preload
            or self.force_sts_header
            or self.frame_deny
            or self.custom_frame_options_value
            or self.content_type_nosniff
            or self.browser_xss_filter
            or self.custom_browser_xss_value
            or self.content_security_policy
            or self.content_security_policy_report_only
            or self.public_key
            or self.referrer_policy
            or self.permissions_policy
            or self.is_development
        )

    def check(self) -> None:
        if not (self.has_custom() or self.has_cors() or self.has_secure()):
            raise ValueError(": sets nothing (Traefik refuses an empty headers middleware)")
        for field, headers in (
            ("customRequestHeaders", self.custom_request_headers),
            ("customResponseHeaders", self.custom_response_headers),
            ("sslProxyHeaders", self.ssl_proxy_headers),
            ("appendRequestHeaders", self.append_request_headers),
        ):
            for name, value in headers.items():
                _header_name(field, name)
                _header_value(f"{field}.{name}", value)
        for i, name in enumerate(self.hosts_proxy_headers):
            _header_name(f"hostsProxyHeaders[{i}]", name)
        for field, values in (
            ("accessControlAllowHeaders", self.access_control_allow_headers),
            ("accessControlAllowMethods", self.access_control_allow_methods),
            ("accessControlAllowOriginList", self.access_control_allow_origin_list),
            ("accessControlExposeHeaders", self.access_control_expose_headers),
            ("allowedHosts", self.allowed_hosts),
        ):
            for i, value in enumerate(values):
                _header_value(f"{field}[{i}]", value)
        for field, value in (
            ("customFrameOptionsValue", self.custom_frame_options_value),
            ("customBrowserXSSValue", self.custom_browser_xss_value),
            ("contentSecurityPolicy", self.content_security_policy),
            ("contentSecurityPolicyReportOnly", self.content_security_policy_report_only),
            ("publicKey", self.public_key),
            ("referrerPolicy", self.referrer_policy),
            ("permissionsPolicy", self.permissions_policy),
        ):
            _header_value(field, value)
        for i, pattern in enumerate(self.access_control_allow_origin_list_regex):
            go_regexp(pattern, f"accessControlAllowOriginListRegex[{i}]")


class RedirectScheme(Base):
    scheme: str
    port: str = ""
    permanent: bool = False
    # Not a key of Traefik's files (its providers set it): 308 whatever the method.
    force_permanent_redirect: bool = False

    def check(self) -> None:
        if not self.scheme:
            raise ValueError("scheme: must not be empty")
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.\-]*", self.scheme):
            raise ValueError(f"scheme: invalid scheme {self.scheme!r}")
        if self.port and not (
            self.port.isascii() and self.port.isdigit() and int(self.port) <= 65535
        ):
            raise ValueError(f"port: invalid port {self.port!r}")


class _Auth(Base):
    """What basicAuth and digestAuth share: ``users`` and the lines of ``usersFile``
    (read when the configuration is checked and built; ``users`` win over the
    file's), the ``realm`` of the 401's ``WWW-Authenticate``, and what goes upstream
    for an authenticated request: the user's name in ``headerField`` (when set), and
    no Authorization header when ``removeHeader``."""

    users: list[Secret] = []  # htpasswd lines: a hash is a secret too (Traefik's loggable:false)
    users_file: str = ""
    realm: str = ""  # "traefik" when empty
    header_field: str = ""
    remove_header: bool = False

    def check(self) -> None:
        _header_value("realm", self.realm)  # it goes into WWW-Authenticate
        if self.header_field:
            _header_name("headerField", self.header_field)


class BasicAuth(_Auth):
    """HTTP Basic authentication against htpasswd lines (``name:hash``,
    :mod:`edge.config.htpasswd`); a request without valid credentials is answered
    401 with ``WWW-Authenticate: Basic realm="..."``."""

    def check(self) -> None:
        super().check()
        htpasswd.basic_users(self.users, self.users_file)


class DigestAuth(_Auth):
    """HTTP Digest authentication (RFC 2617, MD5, ``qop=auth``) against htdigest lines
    (``name:realm:md5``; only the middleware's realm's are used)."""

    def check(self) -> None:
        super().check()
        htpasswd.digest_users(self.users, self.users_file)


class IPStrategy(Base):
    """How a middleware finds the client's address (Traefik's ``ipStrategy``):
    ``depth`` (> 0) takes the depth-th X-Forwarded-For entry from the right and wins
    over ``excludedIPs`` (the first entry from the right not among them); with
    neither, the connection's peer. ``ipv6Subnet`` (1 to 128; peer and depth only)
    counts an IPv6 address as the first of its subnet."""

    depth: int = 0
    excluded_ips: list[str] = msgspec.field(default_factory=list, name="excludedIPs")
    ipv6_subnet: int | None = None

    def check(self) -> None:
        if self.depth < 0:
            raise ValueError(f"depth: {self.depth} is negative (0: no depth)")
        if self.depth == 0 and self.excluded_ips:
            for i, entry in enumerate(self.excluded_ips):
                _ip_range_of(f"excludedIPs[{i}]", entry)
            return  # Traefik reads no ipv6Subnet with excludedIPs
        if self.ipv6_subnet is not None and not 0 < self.ipv6_subnet <= 128:
            raise ValueError(f"ipv6Subnet: {self.ipv6_subnet} is not between 1 and 128")


def ip_range(entry: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """An IP or a CIDR as Go reads it (``net.ParseIP``, ``net.ParseCIDR``: no zone, no
    netmask form, no spaces); ``ValueError`` otherwise."""
    addr, slash, bits = entry.partition("/")
    if "%" in addr or (slash and not (bits.isascii() and bits.isdigit())):
        raise ValueError(f"invalid IP or CIDR {entry!r}")
    ip = ipaddress.ip_address(addr)
    return ipaddress.ip_network((ip, int(bits) if slash else ip.max_prefixlen), strict=False)


def _ip_range_of(key: str, entry: str) -> None:
    try:
        ip_range(entry)
    except ValueError:
        raise ValueError(f"{key}: invalid IP or CIDR {entry!r}") from None


def _source_range(ranges: list[str]) -> None:
    if not ranges:
        raise ValueError("sourceRange: is empty (Traefik refuses to build the middleware)")
    for i, entry in enumerate(ranges):
        _ip_range_of(f"sourceRange[{i}]", entry)


def _ip_strategy(strategy: IPStrategy | None) -> None:
    if strategy is not None:
        try:
            strategy.check()
        except ValueError as exc:
            raise ValueError(f"ipStrategy.{exc}") from None


class IPAllowList(Base):
    """Requests whose client address (``ipStrategy``'s) is in ``sourceRange`` (IPs and
    CIDRs, v4 and v6) pass; the others are answered ``rejectStatusCode`` (403 when 0)."""

    source_range: list[str] = []
    ip_strategy: IPStrategy | None = None
    reject_status_code: int = 0

    def check(self) -> None:
        _source_range(self.source_range)
        code = self.reject_status_code
        if code and code not in _HTTP_STATUSES:
            raise ValueError(f"rejectStatusCode: {code} is not an HTTP status code")
        _ip_strategy(self.ip_strategy)


class IPWhiteList(Base):
    """Traefik's deprecated name of :class:`IPAllowList` (no ``rejectStatusCode``: 403)."""

    source_range: list[str] = []
    ip_strategy: IPStrategy | None = None

    def check(self) -> None:
        _source_range(self.source_range)
        _ip_strategy(self.ip_strategy)


_HTTP_STATUSES = frozenset(s.value for s in http.HTTPStatus)


class SourceCriterion(Base):
    """What groups requests as one source (at most one of them): ``ipStrategy``, the
    value of the header ``requestHeaderName``, or the Host (``requestHost``)."""

    ip_strategy: IPStrategy | None = None
    request_header_name: str = ""
    request_host: bool = False

    def check(self) -> None:
        if self.ip_strategy is not None and self.request_header_name:
            raise ValueError("ipStrategy and requestHeaderName are mutually exclusive")
        if self.ip_strategy is not None and self.request_host:
            raise ValueError("ipStrategy and requestHost are mutually exclusive")
        if self.request_header_name and self.request_host:
            raise ValueError("requestHost and requestHeaderName are mutually exclusive")
        if self.request_header_name:
            _header_name("requestHeaderName", self.request_header_name)
        _ip_strategy(self.ip_strategy)


def _source_criterion(criterion: SourceCriterion | None) -> None:
    if criterion is not None:
        try:
            criterion.check()
        except ValueError as exc:
            raise ValueError(f"sourceCriterion.{exc}") from None


class Redis(Base):
    """``rateLimit.redis``: the Redis server that keeps a rateLimit's buckets, so every
    edge node (and worker) using it enforces one limit. ``endpoints``: one
    ``host:port`` (several make a Redis Cluster in Traefik, which edge does not
    speak); ``username``/``password`` (AUTH), ``db`` (SELECT), ``tls``; connections at
    most ``maxActiveConns`` or else ``poolSize`` (0: 10 per CPU), ``minIdleConns``
    kept open; ``dialTimeout`` (5 s; 0: 5 s), ``readTimeout`` and ``writeTimeout``
    (3 s; 0 or negative: none, as Traefik) bound each wait. ``failOpen`` (edge's
    own): while Redis cannot answer, serve requests unlimited (true) or answer 500
    as Traefik does (false, the default)."""

    endpoints: list[str] = msgspec.field(default_factory=lambda: ["localhost:6379"])
    tls: ForwardAuthTLS | None = None
    username: Secret = ""
    password: Secret = ""
    db: int = 0
    pool_size: int = 0
    min_idle_conns: int = 0
    max_active_conns: int = 0
    read_timeout: SignedDuration = SignedDuration(3.0)
    write_timeout: SignedDuration = SignedDuration(3.0)
    dial_timeout: SignedDuration = SignedDuration(5.0)
    fail_open: bool = False

    def check(self) -> None:
        if len(self.endpoints) != 1:
            raise ValueError(
                f"endpoints: {len(self.endpoints)} given; edge speaks to one server "
                "(not a Redis Cluster)"
            )
        try:
            split_host_port(self.endpoints[0])
        except ValueError as exc:
            raise ValueError(f"endpoints[0]: {exc}") from None
        for key, value in (
            ("db", self.db),
            ("poolSize", self.pool_size),
            ("minIdleConns", self.min_idle_conns),
            ("maxActiveConns", self.max_active_conns),
        ):
            if value < 0:
                raise ValueError(f"{key}: {value} is negative")
        if self.tls is not None:
            try:
                self.tls.check()
            except ValueError as exc:
                raise ValueError(f"tls.{exc}") from None


class RateLimit(Base):
    """A token bucket per source: ``average`` requests per ``period`` (0: no limit),
    ``burst`` at once (at least 1); ``sourceCriterion`` groups requests (the peer's
    address when unset)."""

    average: int = 0
    period: SignedDuration = SignedDuration(1.0)  # 0: a second
    burst: int = 1
    source_criterion: SourceCriterion | None = None
    redis: Redis | None = None

    def check(self) -> None:
        if self.average < 0:
            raise ValueError(f"average: {self.average} is negative (0: no limit)")
        if self.period < 0:
            raise ValueError(f"period: {self.period} is negative")
        _source_criterion(self.source_criterion)
        if self.redis is not None:
            try:
                self.redis.check()
            except ValueError as exc:
                raise ValueError(f"redis.{exc}") from None


class InFlightReq(Base):
    """At most ``amount`` requests of one source in flight (``sourceCriterion``; the
    Host when unset); the next are answered 429."""

    amount: int = 0
    source_criterion: SourceCriterion | None = None

    def check(self) -> None:
        if self.amount < 0:
            raise ValueError(f"amount: {self.amount} is negative")
        _source_criterion(self.source_criterion)


class ForwardAuthTLS(Base):
    """``forwardAuth.tls``: TLS to the auth server. ``ca`` (a path or inline PEM)
    verifies its certificate (else the system's CAs do), ``cert`` and ``key`` (both
    or neither; paths or inline PEM) are offered to it when it asks for a client
    certificate, ``insecureSkipVerify`` verifies nothing. ``caOptional`` is read and
    ignored, as Traefik ignores it (deprecated: client authentication is the
    server's choice)."""

    ca: str = ""
    cert: str = ""
    key: Secret = ""
    insecure_skip_verify: bool = False
    ca_optional: bool | None = None

    def check(self) -> None:
        if bool(self.cert) != bool(self.key):
            raise ValueError("cert, key: both must be set, or neither")
        if self.ca:
            _pem_certificates("ca", self.ca)
        if self.cert:
            leaf = _pem_certificates("cert", self.cert)[0]
            key = _pem_key("key", self.key)
            if _public(leaf.public_key()) != _public(key.public_key()):
                raise ValueError("cert, key: the key is not the certificate's")


def _pem_certificates(key: str, value: str) -> list[x509.Certificate]:
    """The certificates of a path or inline PEM; ValueError naming ``key`` (and the
    file, never an inline value) when there is none to read."""
    try:
        data = pem.read_pem(key, value)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError:
        raise ValueError(f"{key} {pem.describe(value)}: no certificate could be read") from None


def _pem_key(key: str, value: str) -> PrivateKeyTypes:
    try:
        data = pem.read_pem(key, value)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    try:
        return serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):  # TypeError: it has a password
        raise ValueError(
            f"{key} {pem.describe(value)}: no private key could be read (one without a password)"
        ) from None


def _public(public_key: object) -> bytes:
    return public_key.public_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


class ForwardAuth(Base):
    """Traefik's forwardAuth: each request is first asked of the auth server at
    ``address``; a 2xx lets it go on (with ``authResponseHeaders`` and the headers
    ``authResponseHeadersRegex`` matches copied from that answer onto it, and its
    cookies named in ``addAuthCookiesToResponse`` onto the response); any other
    answer goes to the client as it came. ``authRequestHeaders`` (empty: all) are
    the client's headers sent along; ``trustForwardHeader`` (unset, true, false:
    three behaviours, as in Traefik) says what becomes of the X-Forwarded-*
    headers; ``preserveRequestMethod`` asks with the client's method instead of
    GET; ``maxResponseBodySize`` bounds the answer's body (-1: no limit; over it:
    401); ``preserveLocationHeader`` sends a relative Location as
    it came instead of resolving it against ``address``; ``authSigninURL``
    redirects a 401 there; ``headerField`` names the answer's header holding the
    user (Traefik logs it; edge's access log has no user field: read, not used).
    ``forwardBody`` sends the request's body to the auth server too (with its
    Content-Length, or chunked as it came), the upstream getting it whole after;
    ``maxBodySize`` bounds it (-1: no limit, Traefik's default; over it: 401)."""

    address: str = ""
    tls: ForwardAuthTLS | None = None
    trust_forward_header: bool | None = None
    auth_response_headers: list[str] = []
    auth_response_headers_regex: str = ""
    auth_request_headers: list[str] = []
    max_response_body_size: int = -1
    add_auth_cookies_to_response: list[str] = []
    header_field: str = ""
    preserve_location_header: bool = False
    preserve_request_method: bool = False
    auth_signin_url: str = msgspec.field(default="", name="authSigninURL")
    forward_body: bool = False
    max_body_size: int = -1

    def check(self) -> None:
        forward_auth_address(self.address)
        for field, names in (
            ("authResponseHeaders", self.auth_response_headers),
            ("authRequestHeaders", self.auth_request_headers),
        ):
            for i, name in enumerate(names):
                _header_name(f"{field}[{i}]", name)
        if self.auth_response_headers_regex:
            go_regexp(self.auth_response_headers_regex, "authResponseHeadersRegex")
        if self.header_field:
            _header_name("headerField", self.header_field)
        _header_value("authSigninURL", self.auth_signin_url)
        if self.tls is not None:
            try:
                self.tls.check()
            except ValueError as exc:
                raise ValueError(f"tls.{exc}") from None


def forward_auth_address(address: str) -> tuple[bool, str, int, bytes, bytes]:
    """(TLS, host, port, Host header, request-target) of a forwardAuth ``address``: an
    ``http://`` or ``https://`` URL with a host; ``ValueError`` naming the key otherwise."""
    if not address:
        raise ValueError("address: must not be empty")
    if _NOT_IN_VALUE.search(address) or " " in address:
        raise ValueError(f"address: {address!r} holds a space or a control character")
    parts = urlsplit(address)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"address: {address!r} is not an http:// or https:// URL with a host")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"address: {address!r}: {exc}") from None
    tls = parts.scheme == "https"
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    authority = parts.netloc.rpartition("@")[2]
    return tls, parts.hostname, port or (443 if tls else 80), authority.encode(), target.encode()


class TLSClientCertificateIssuerDNInfo(Base):
    """Which parts of the issuer's name ``passTLSClientCert.info.issuer`` sends."""

    country: bool = False
    province: bool = False
    locality: bool = False
    organization: bool = False
    common_name: bool = False
    serial_number: bool = False
    domain_component: bool = False


class TLSClientCertificateSubjectDNInfo(Base):
    """Which parts of the subject's name ``passTLSClientCert.info.subject`` sends."""

    country: bool = False
    province: bool = False
    locality: bool = False
    organization: bool = False
    organizational_unit: bool = False
    common_name: bool = False
    serial_number: bool = False
    domain_component: bool = False


class TLSClientCertificateInfo(Base):
    """What ``X-Forwarded-Tls-Client-Cert-Info`` holds of each client certificate."""

    not_after: bool = False
    not_before: bool = False
    sans: bool = False
    serial_number: bool = False
    subject: TLSClientCertificateSubjectDNInfo | None = None
    issuer: TLSClientCertificateIssuerDNInfo | None = None


class PassTLSClientCert(Base):
    """Traefik's passTLSClientCert: the TLS client's certificate goes upstream in
    ``X-Forwarded-Tls-Client-Cert`` (``pem``) and what ``info`` selects of it in
    ``X-Forwarded-Tls-Client-Cert-Info`` (:mod:`edge.http.middlewares.clientcert`)."""

    pem: bool = False
    info: TLSClientCertificateInfo | None = None


class MediaType(msgspec.Struct, frozen=True):
    """A parsed Content-Type, as Go's ``mime.ParseMediaType`` reads one: the type
    lowercased, parameter names lowercased, values as written (quotes taken off)."""

    type: str
    params: dict[str, str]

    def matches(self, other: MediaType) -> bool:
        """klauspost/gzhttp's ``parsedContentType.equals`` (Traefik's compress): the
        same type and, when this one names parameters, exactly the same ones."""
        return self.type == other.type and (not self.params or self.params == other.params)


_MEDIA_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_MEDIA_TYPE = re.compile(rf"[ \t]*({_MEDIA_TOKEN}(?:/{_MEDIA_TOKEN})?)[ \t]*")
_MEDIA_PARAM = re.compile(
    rf'[ \t]*({_MEDIA_TOKEN})[ \t]*=[ \t]*(?:({_MEDIA_TOKEN})|"((?:[^"\\]|\\.)*)")[ \t]*'
)
_QUOTED_PAIR = re.compile(r"\\(.)")


def media_type(text: str) -> MediaType | None:
    """``text``, a Content-Type value, parsed; None when Go's parser refuses it
    (not a token or ``type/subtype``, a parameter without ``=``, one given twice;
    Go takes a lone token, as Content-Disposition has them)."""
    kind, _, rest = text.partition(";")
    m = _MEDIA_TYPE.fullmatch(kind)
    if m is None:
        return None
    params: dict[str, str] = {}
    for part in rest.split(";") if rest.strip() else ():
        if not part.strip():
            continue
        p = _MEDIA_PARAM.fullmatch(part)
        if p is None:
            return None
        name = p.group(1).lower()
        if name in params:
            return None
        value = p.group(2)
        params[name] = value if value is not None else _QUOTED_PAIR.sub(r"\1", p.group(3))
    return MediaType(m.group(1).lower(), params)


COMPRESS_ENCODINGS = ("gzip", "br", "zstd")
"""The content codings ``compress`` knows, in Traefik's default order of preference."""


class Compress(Base):
    """Responses compressed with the first of ``encodings`` the client accepts best
    (``defaultEncoding`` without Accept-Encoding or for ``*``), when their body has
    at least ``minResponseBodyBytes`` (0: 1024) and their Content-Type is not
    excluded (``application/grpc`` always is), or is included."""

    excluded_content_types: list[str] = []
    included_content_types: list[str] = []
    min_response_body_bytes: int = 1024
    encodings: list[str] = msgspec.field(default_factory=lambda: list(COMPRESS_ENCODINGS))
    default_encoding: str = ""

    def check(self) -> None:
        if self.excluded_content_types and self.included_content_types:
            raise ValueError(
                "excludedContentTypes, includedContentTypes: mutually exclusive, set one"
            )
        for key, types in (
            ("excludedContentTypes", self.excluded_content_types),
            ("includedContentTypes", self.included_content_types),
        ):
            for i, text in enumerate(types):
                if media_type(text) is None:
                    raise ValueError(f"{key}[{i}]: {text!r} is not a media type")
        if not self.encodings:
            raise ValueError("encodings: at least one encoding must be given")
        for i, name in enumerate(self.encodings):
            if name not in COMPRESS_ENCODINGS:
                raise ValueError(f"encodings[{i}]: unsupported encoding {name!r} (gzip, br, zstd)")
        if self.default_encoding and self.default_encoding not in self.encodings:
            raise ValueError(f"defaultEncoding: {self.default_encoding!r} is not one of encodings")


class Retry(Base):
    """Up to ``attempts`` tries of a request (the first included) whose server could
    not be reached, or answered with a status in ``status``; ``initialInterval`` the
    first wait of an exponential backoff (0: tries follow at once), ``timeout`` the
    time from the first try within which another may start (0: no bound).
    ``maxRequestBodyBytes``: the largest body held to send again after a status
    (negative: no limit); ``disableRetryOnNetworkError`` (needs ``status``);
    ``retryNonIdempotentMethod``: retry by status any method
    (:mod:`edge.http.middlewares.retry`)."""

    attempts: int = 0
    initial_interval: Duration = Duration(0.0)
    timeout: Duration = Duration(0.0)
    max_request_body_bytes: int = 2 * 1024 * 1024
    status: list[str] = []
    disable_retry_on_network_error: bool = False
    retry_non_idempotent_method: bool = False

    def check(self) -> None:
        if self.attempts <= 0:
            raise ValueError(f"attempts: {self.attempts} is not a positive number of tries")
        try:
            http_code_ranges(self.status)
        except ValueError as exc:
            raise ValueError(f"status{exc}") from None
        if self.disable_retry_on_network_error and not self.status:
            raise ValueError("disableRetryOnNetworkError: retrying nothing else, it needs status")


# -- circuitBreaker's expression language (vulcand/oxy's, which Traefik uses) -------------

CB_FUNCTIONS: dict[str, tuple[tuple[type, ...], type]] = {
    "NetworkErrorRatio": ((), float),
    "ResponseCodeRatio": ((int, int, int, int), float),
    "LatencyAtQuantileMS": ((float,), int),
    "RequestThreshold": ((), int),
}
"""The functions a circuitBreaker expression may call: their parameters' and result's types."""

CB_OPERATORS = ("==", "!=", "<=", ">=", "<", ">")

_CB_TOKEN = re.compile(
    r"\s*(?:(?P<num>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)|(?P<name>[A-Za-z_]\w*)"
    r'|(?P<str>"[^"\\]*")'
    r"|(?P<op>&&|\|\||==|!=|<=|>=|<|>|\(|\)|,))"
)

BUFFERING_FUNCTIONS: dict[str, tuple[tuple[type, ...], type]] = {
    "IsNetworkError": ((), bool),
    "Attempts": ((), int),
    "ResponseCode": ((), int),
    "RequestMethod": ((), str),
}
"""The functions a buffering ``retryExpression`` may call (oxy's buffer threshold)."""

CBNode = tuple
"""A parsed expression: ``("or", (node, ...))``, ``("and", (node, ...))`` or
``("cmp", operator, function, arguments, literal)``."""


def parse_cb_expression(
    text: str,
    functions: dict[str, tuple[tuple[type, ...], type]] = CB_FUNCTIONS,
    key: str = "expression",
) -> CBNode:
    """A circuitBreaker ``expression`` parsed (sans-IO: the text in, a tree out):
    comparisons of a function's value with a number, joined by ``&&`` and ``||``
    (``&&`` binds tighter) and grouped by parentheses. As oxy's predicate language,
    a comparison puts the function first and the number's type must be the
    function's (``NetworkErrorRatio() > 0.5``, ``LatencyAtQuantileMS(50.0) > 100``);
    an integer argument is taken where a float is expected. A ``ValueError`` names
    ``expression`` and the position (from 0) of what is wrong. ``functions`` and
    ``key`` serve oxy's other predicates (buffering's ``retryExpression``): a function
    of a bool result stands alone (``("call", function, arguments)``), one of a
    string result compares with a quoted string."""
    tokens: list[tuple[str, str, int]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _CB_TOKEN.match(text, pos)
        if m is None:
            at = len(text) - len(text[pos:].lstrip())
            raise ValueError(f"{key}: unexpected {text[at]!r} at position {at} in {text!r}")
        kind = m.lastgroup or ""
        tokens.append((kind, m.group(kind), m.start(kind)))
        pos = m.end()
    tokens.append(("end", "", len(text)))
    i = 0

    def fail(what: str, at: int) -> ValueError:
        return ValueError(f"{key}: {what} at position {at} in {text!r}")

    def peek() -> tuple[str, str, int]:
        return tokens[i]

    def take() -> tuple[str, str, int]:
        nonlocal i
        token = tokens[i]
        i += 1
        return token

    def expect(value: str) -> None:
        kind, got, at = take()
        if got != value or kind == "end":
            raise fail(f"{value!r} expected, found {got or 'the end'!r}", at)

    def number(expected: type, where: str) -> float | int | str:
        kind, got, at = take()
        if expected is str:
            if kind != "str":
                raise fail(f"a quoted string expected {where}, found {got or 'the end'!r}", at)
            return got[1:-1]
        if kind != "num":
            raise fail(f"a number expected {where}, found {got or 'the end'!r}", at)
        is_int = got.isdigit()
        if expected is int and not is_int:
            raise fail(f"an integer expected {where}, found {got}", at)
        if expected is float and is_int and where.startswith("to compare"):
            raise fail(f"a float expected {where} (write {got}.0), found {got}", at)
        return int(got) if is_int else float(got)

    def comparison() -> CBNode:
        kind, name, at = take()
        if kind != "name":
            raise fail(f"a function expected, found {name or 'the end'!r}", at)
        if name not in functions:
            known = ", ".join(functions)
            raise fail(f"unknown function {name!r} (one of {known})", at)
        params, result = functions[name]
        expect("(")
        args: list[float | int | str] = []
        for n, param in enumerate(params):
            if n:
                expect(",")
            value = number(param, f"as argument {n + 1} of {name}")
            args.append(float(value) if param is float else value)
        expect(")")
        if result is bool:
            return ("call", name, tuple(args))
        kind, op, at = take()
        if op not in CB_OPERATORS or kind != "op":
            raise fail(f"a comparison expected after {name}(), found {op or 'the end'!r}", at)
        literal = number(result, f"to compare with {name}()")
        return ("cmp", op, name, tuple(args), literal)

    def primary() -> CBNode:
        if peek()[1] == "(" and peek()[0] == "op":
            take()
            node = disjunction()
            expect(")")
            return node
        return comparison()

    def conjunction() -> CBNode:
        nodes = [primary()]
        while peek()[1] == "&&":
            take()
            nodes.append(primary())
        return nodes[0] if len(nodes) == 1 else ("and", tuple(nodes))

    def disjunction() -> CBNode:
        nodes = [conjunction()]
        while peek()[1] == "||":
            take()
            nodes.append(conjunction())
        return nodes[0] if len(nodes) == 1 else ("or", tuple(nodes))

    if tokens[0][0] == "end":
        raise fail("empty", 0)
    tree = disjunction()
    kind, got, at = peek()
    if kind != "end":
        raise fail(f"unexpected {got!r}", at)
    return tree


class CircuitBreaker(Base):
    """Answers ``responseCode`` instead of forwarding while ``expression`` (over the
    last 10 s of this middleware's exchanges) holds: checked every ``checkPeriod``,
    tripped for ``fallbackDuration``, then ``recoveryDuration`` letting a growing
    share of requests through."""

    expression: str = ""
    check_period: Duration = Duration(0.1)
    fallback_duration: Duration = Duration(10.0)
    recovery_duration: Duration = Duration(10.0)
    response_code: int = 503

    def check(self) -> None:
        parse_cb_expression(self.expression)
        if not 200 <= self.response_code <= 999:
            raise ValueError(f"responseCode: {self.response_code} is not a status (200-999)")


def http_code_ranges(blocks: list[str]) -> tuple[tuple[int, int], ...]:
    """Traefik's ``HTTPCodeRanges``: each block ``"500-599"`` or ``"404"``; a
    ``ValueError`` naming the block (``[i]: ...``) that is neither."""
    ranges = []
    for i, block in enumerate(blocks):
        parts = block.split("-")
        if len(parts) == 1:
            parts.append(parts[0])
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise ValueError(f"[{i}]: {block!r} is not a status or a range of them (500-599)")
        ranges.append((int(parts[0]), int(parts[1])))
    return tuple(ranges)


class ErrorPage(Base):
    """``errors``: a response whose status is in ``status`` is replaced by ``service``'s
    answer to a GET of ``query`` (``{status}``, ``{originalStatus}``, ``{url}``), sent
    with the caught status or the one ``statusRewrites`` maps its range to.

    ``nginxHeaders`` (Traefik's, which its ingress-nginx provider sets): ingress-nginx's
    custom errors instead. The page request also carries these headers and
    ``X-Code`` (the status), ``X-Format`` (the client's Accept), ``X-Original-URI``
    (the request target) and ``X-Request-ID`` (the client's, else a new one), and the
    page goes out with its own status (nginx's ``error_page code = @location``)."""

    status: list[str] = []
    status_rewrites: dict[str, int] = {}
    service: str = ""
    query: str = ""
    nginx_headers: dict[str, list[str]] | None = None

    def check(self) -> None:
        try:
            http_code_ranges(self.status)
        except ValueError as exc:
            raise ValueError(f"status{exc}") from None
        for block, to in self.status_rewrites.items():
            try:
                http_code_ranges([block])
            except ValueError:
                raise ValueError(
                    f"statusRewrites: {block!r} is not a status or a range of them (500-599)"
                ) from None
            if not 100 <= to <= 999:
                raise ValueError(f"statusRewrites.{block}: {to} is not a status")
        if not self.service:
            raise ValueError("service: the service answering the error pages must be named")
        for name, values in (self.nginx_headers or {}).items():
            _header_name("nginxHeaders", name)
            for value in values:
                _header_value(f"nginxHeaders.{name}", value)


class Buffering(Base):
    """Whole bodies held before they go on: in memory up to ``mem*BodyBytes`` (1 MiB
    when not positive), the rest in a temporary file; over ``max*BodyBytes`` (no limit
    when not positive) answered 413. ``disableRequestBuffer`` / ``disableResponseBuffer``
    (Traefik sets them from its ingress-nginx provider, out of its files; edge reads
    them from files too): that body streams, with no limit (and, the response's, no
    ``retryExpression``)."""

    max_request_body_bytes: int = 0
    mem_request_body_bytes: int = 0
    max_response_body_bytes: int = 0
    mem_response_body_bytes: int = 0
    retry_expression: str = ""
    disable_request_buffer: bool = False
    disable_response_buffer: bool = False

    def check(self) -> None:
        if self.retry_expression:
            parse_cb_expression(self.retry_expression, BUFFERING_FUNCTIONS, "retryExpression")
        for key, value in (
            ("maxRequestBodyBytes", self.max_request_body_bytes),
            ("memRequestBodyBytes", self.mem_request_body_bytes),
            ("maxResponseBodyBytes", self.max_response_body_bytes),
            ("memResponseBodyBytes", self.mem_response_body_bytes),
        ):
            if value < 0:
                raise ValueError(f"{key}: {value} is negative")


class GrpcWeb(Base):
    """Traefik's ``grpcWeb``: gRPC-Web requests turned into gRPC for the server,
    ``allowOrigins`` answering CORS. Read so that its refusal can say why (gRPC
    needs HTTP/2 to the server): validation disables it and the routers using it."""

    allow_origins: list[str] = []

    def check(self) -> None:
        raise ValueError(
            f": {UNSUPPORTED}: it turns gRPC-Web into gRPC, which needs HTTP/2 to the server"
        )


class Middleware(Element):
    """One HTTP middleware: exactly one kind set (checked when decoded); its values
    are judged by :meth:`check`, which validation calls, so a bad one disables that
    middleware and the routers using it, never the whole configuration."""

    strip_prefix: StripPrefix | None = None
    add_prefix: AddPrefix | None = None
    headers: Headers | None = None
    redirect_scheme: RedirectScheme | None = None
    strip_prefix_regex: StripPrefixRegex | None = None
    replace_path: ReplacePath | None = None
    replace_path_regex: ReplacePathRegex | None = None
    redirect_regex: RedirectRegex | None = None
    chain: Chain | None = None
    content_type: ContentType | None = None
    basic_auth: BasicAuth | None = None
    digest_auth: DigestAuth | None = None
    ip_allow_list: IPAllowList | None = None
    ip_white_list: IPWhiteList | None = None
    rate_limit: RateLimit | None = None
    in_flight_req: InFlightReq | None = None
    forward_auth: ForwardAuth | None = None
    pass_tls_client_cert: PassTLSClientCert | None = msgspec.field(
        default=None, name="passTLSClientCert"
    )
    compress: Compress | None = None
    retry: Retry | None = None
    circuit_breaker: CircuitBreaker | None = None
    errors: ErrorPage | None = None
    buffering: Buffering | None = None
    grpc_web: GrpcWeb | None = None

    def __post_init__(self) -> None:
        if self.unsupported or self.problems:  # disabled anyway; it may have no kind
            return
        _exactly_one("a middleware", **dict(self._kinds()))

    def _kinds(self) -> list[tuple[str, Base | None]]:
        return [(key, getattr(self, field)) for field, key in _MIDDLEWARE_KEYS.items()]

    @property
    def kind(self) -> str:
        """Traefik's name of the middleware type set (``"stripPrefix"``, ...)."""
        for key, value in self._kinds():
            if value is not None:
                return key
        raise AssertionError("unreachable: validated in __post_init__")

    def check(self) -> list[str]:
        """What is wrong with this middleware's values, each naming its key
        (``"replacePathRegex.regex: ..."``); empty when it can be built."""
        for key, value in self._kinds():
            if value is not None and hasattr(value, "check"):
                try:
                    value.check()
                except ValueError as exc:
                    text = str(exc)
                    return [f"{key}{text}" if text.startswith(":") else f"{key}.{text}"]
        return []


_MIDDLEWARE_KEYS = {
    f.name: f.encode_name
    for f in msgspec.structs.fields(Middleware)
    if f.name not in ("unsupported", "problems")
}


# --- Go's regexps (RE2) and their replacement templates ------------------------------


def go_regexp(pattern: str, key: str) -> re2._re2.RE2:
    """``pattern`` compiled as Go's ``regexp.Compile`` reads it (RE2's syntax, which
    has no backreference and no lookaround), capturing; ``ValueError`` naming ``key``
    otherwise. Matching is RE2's: linear in the input, whatever the pattern."""
    try:
        _compile_re2(pattern)  # Go's own refusals beside RE2's (\C)
    except ValueError as exc:
        raise ValueError(f"{key}: invalid regexp {pattern!r}: {exc}") from None
    options = re2.Options()
    options.log_errors = False
    compiled = re2._re2.RE2(pattern.encode("utf-8", "surrogateescape"), options)
    names = _GROUP_NAME.findall(pattern)  # RE2 keeps one of a repeated name; Go refuses it
    if len(names) != len(set(names)):
        raise ValueError(f"{key}: invalid regexp {pattern!r}: duplicate capture group name")
    return compiled


_GROUP_NAME = re.compile(r"(?<!\\)\(\?P?<([A-Za-z0-9_]+)>")
_TEMPLATE_NAME = re.compile(r"\$(?:\$|\{([A-Za-z0-9_]+)\}|([A-Za-z0-9_]+))")


def go_template(template: str, compiled: re2._re2.RE2, key: str) -> tuple[bytes | int, ...]:
    """Go's ``Regexp.Expand`` template as parts: literal bytes, or the number of the
    group to put there. ``$1``, ``${1}``, ``$name``, ``${name}``, ``$$`` (a ``$``);
    a ``$`` starting none of these stays as it is. ``$name`` takes the longest name
    (``$1x`` is the group named ``1x``: write ``${1}x``). A group the regexp does
    not have is refused (Go would put an empty string there) naming ``key``."""
    groups = compiled.NumberOfCapturingGroups()
    named = {name.decode(): index for name, index in compiled.NamedCapturingGroups()}
    parts: list[bytes | int] = []
    pos = 0
    for m in _TEMPLATE_NAME.finditer(template):
        parts.append(template[pos : m.start()].encode())
        pos = m.end()
        name = m.group(1) or m.group(2)
        if name is None:
            parts.append(b"$")
            continue
        index = int(name) if name.isdigit() else named.get(name)
        if index is None or index > groups:
            hint = ""
            if name[0].isdigit() and not name.isdigit():
                digits = name[: len(name) - len(name.lstrip("0123456789"))]
                hint = f" (write ${{{digits}}}{name[len(digits) :]} for group {digits})"
            raise ValueError(f"{key}: names group {name!r}, which the regex does not have{hint}")
        parts.append(index)
    parts.append(template[pos:].encode())
    return tuple(p for p in parts if p != b"")


class ForwardingTimeouts(Base):
    """Traefik's, and ``writeTimeout`` (Traefik keeps it for its ingress-nginx provider,
    out of its files; edge reads it from files too): how long an upstream connection
    edge has bytes for may take none of them (nginx's ``proxy_send_timeout``; 0: no
    limit; :meth:`edge.http.server.exchange.Exchange.pause_sending`)."""

    dial_timeout: Duration = Duration(30.0)
    response_header_timeout: Duration = Duration(0.0)  # 0: no timeout
    idle_conn_timeout: Duration = Duration(90.0)
    write_timeout: Duration = Duration(0.0)
    # HTTP/2 servers: a PING after readIdleTimeout without a frame (0: none), and the
    # connection closed when its ack takes over pingTimeout (edge.http.server.upstream_h2).
    read_idle_timeout: Duration = Duration(0.0)
    ping_timeout: Duration = Duration(15.0)


class ClientCertificate(Base):
    """A certificate edge presents to upstream servers that ask for one (mutual TLS).

    ``certFile`` / ``keyFile``: paths or inline PEM, as in ``tls.certificates``.
    """

    cert_file: str
    key_file: Secret


class PeerCertSAN(Base):
    """One of ``peerCertSANs``: a name the server's certificate must carry, a ``URI``
    SAN (a SPIFFE id; compared without regard to case, as Traefik does) or a
    host name the certificate's DNS names (wildcards included) cover, ``DNSName``."""

    type: Literal["URI", "DNSName"]
    value: str


class ServersTransport(Element):
    """How edge talks to HTTP upstreams.

    TLS settings apply to ``https://`` servers: ``serverName`` (SNI and the name
    verified), ``insecureSkipVerify``, ``rootCAs`` (paths or inline PEM; when set,
    they replace the system's CAs, as Go's RootCAs do), ``certificates``
    (client certificates), ``minVersion``/``maxVersion`` and ``cipherSuites`` (Go's
    names: :mod:`edge.config.tlsnames`), ``peerCertSANs`` (and ``peerCertURI``, one
    URI SAN: Traefik's older key). What each does under Python's ssl is in
    :func:`edge.config.runtime.client_tls_context`.
    """

    server_name: str = ""
    insecure_skip_verify: bool = False
    root_cas: list[str] = msgspec.field(default_factory=list, name="rootCAs")
    certificates: list[ClientCertificate] = []
    # 0: Go's default (2); negative: no connection reuse (edge.transports.Transport).
    max_idle_conns_per_host: int = 200
    forwarding_timeouts: ForwardingTimeouts = msgspec.field(default_factory=ForwardingTimeouts)
    # https:// servers are never offered h2 (edge.transports); h2c:// ones speak it still.
    disable_http2: bool = msgspec.field(default=False, name="disableHTTP2")
    cipher_suites: list[str] = []  # TLS 1.0-1.2 suites; "": OpenSSL's defaults
    min_version: TLSVersion | Literal[""] = ""  # "": TLS 1.2, Go's client default
    max_version: TLSVersion | Literal[""] = ""  # "": the highest supported
    peer_cert_uri: str = msgspec.field(default="", name="peerCertURI")
    peer_cert_sans: list[PeerCertSAN] = msgspec.field(default_factory=list, name="peerCertSANs")

    def __post_init__(self) -> None:
        if self.unsupported or self.problems:  # disabled anyway
            return
        try:
            tls12 = tlsnames.openssl_suites(self.cipher_suites)
        except ValueError as exc:
            raise ValueError(f"cipherSuites: {exc}") from None
        low, high = self.min_version, self.max_version
        if low and high and tlsnames.VERSIONS[low] > tlsnames.VERSIONS[high]:
            raise ValueError(f"minVersion {low} is above maxVersion {high}")
        if self.cipher_suites and not tls12 and high and high != "VersionTLS13":
            # Go offers TLS 1.3's suites alone then, which no handshake up to maxVersion takes.
            raise ValueError(f"cipherSuites names no TLS 1.0-1.2 suite while maxVersion is {high}")


class HTTPConfiguration(Base):
    routers: dict[str, Router] = {}
    services: dict[str, Service] = {}
    middlewares: dict[str, Middleware] = {}
    servers_transports: dict[str, ServersTransport] = {}


# --- tcp ----------------------------------------------------------------------


class TCPRouterTLS(Base):
    passthrough: bool = False
    options: str = ""
    cert_resolver: str = ""
    domains: list[Domain] = []


class TCPRouter(Element):
    rule: str
    service: str
    entry_points: list[str] = []
    priority: int = 0
    rule_syntax: str = ""  # as Router.rule_syntax
    middlewares: list[str] = []
    tls: TCPRouterTLS | None = None


class TCPServer(Base):
    """A TCP server; ``tls``: edge speaks TLS to it (its serversTransport's ``tls`` says how)."""

    address: str
    weight: NonNegativeInt = 1
    tls: bool = False

    def __post_init__(self) -> None:
        host, port = split_host_port(self.address)
        if not host or port == 0:
            raise ValueError(f"invalid server address {self.address!r}: expected host:port")


class ProxyProtocol(Base):
    version: Literal[1, 2] = 2


class TCPLoadBalancer(Base):
    servers: list[TCPServer] = []
    servers_transport: str = ""
    # Traefik v3 reads proxyProtocol and terminationDelay (milliseconds, negative:
    # wait for ever) here only when no serversTransport is named (deprecated there);
    # a named serversTransport's own settings win.
    proxy_protocol: ProxyProtocol | None = None
    termination_delay: int | None = None


class TCPService(Element):
    load_balancer: TCPLoadBalancer | None = None
    weighted: Weighted | None = None

    def __post_init__(self) -> None:
        if self.unsupported or self.problems:  # disabled anyway; it may have no kind
            return
        _exactly_one("a TCP service", loadBalancer=self.load_balancer, weighted=self.weighted)


class TLSClientConfig(Base):
    """``tls`` of a TCP serversTransport: how edge speaks TLS to servers with ``tls: true``."""

    server_name: str = ""
    insecure_skip_verify: bool = False
    root_cas: list[str] = msgspec.field(default_factory=list, name="rootCAs")
    certificates: list[ClientCertificate] = []
    peer_cert_uri: str = msgspec.field(default="", name="peerCertURI")  # as ServersTransport's
    peer_cert_sans: list[PeerCertSAN] = msgspec.field(default_factory=list, name="peerCertSANs")


class TCPServersTransport(Element):
    """How edge dials TCP servers. ``proxyProtocol``: a PROXY header (version 1 or 2)
    goes to every server of the load balancers using this transport, before any
    byte of the client (and before TLS to a server with ``tls: true``)."""

    dial_timeout: Duration = Duration(30.0)
    dial_keep_alive: SignedDuration = SignedDuration(15.0)  # 0: 15 s; negative: no keep-alive
    termination_delay: SignedDuration = SignedDuration(0.1)  # negative: no deadline
    proxy_protocol: ProxyProtocol | None = None
    tls: TLSClientConfig | None = None


class TCPIPAllowList(Base):
    """Connections from these IPs or CIDRs only; the others are closed.

    Checked by :mod:`edge.config.runtime` (an empty or invalid range disables the
    middleware and the routers using it, as Traefik refuses to build it).
    """

    source_range: list[str] = []


class TCPInFlightConn(Base):
    """At most ``amount`` simultaneous connections per client IP; more are closed."""

    amount: int


class TCPMiddleware(Element):
    ip_allow_list: TCPIPAllowList | None = None
    in_flight_conn: TCPInFlightConn | None = None

    def __post_init__(self) -> None:
        if self.unsupported or self.problems:  # disabled anyway; it may have no kind
            return
        _exactly_one(
            "a TCP middleware", ipAllowList=self.ip_allow_list, inFlightConn=self.in_flight_conn
        )


class TCPConfiguration(Base):
    routers: dict[str, TCPRouter] = {}
    services: dict[str, TCPService] = {}
    middlewares: dict[str, TCPMiddleware] = {}
    servers_transports: dict[str, TCPServersTransport] = {}


# --- udp ----------------------------------------------------------------------


class UDPRouter(Element):
    service: str
    entry_points: list[str] = []  # empty: every UDP entry point


class UDPServer(Base):
    address: str
    weight: NonNegativeInt = 1

    def __post_init__(self) -> None:
        host, port = split_host_port(self.address)
        if not host or port == 0:
            raise ValueError(f"invalid server address {self.address!r}: expected host:port")


class UDPLoadBalancer(Base):
    servers: list[UDPServer] = []
    servers_transport: str = ""  # "": no PROXY protocol header
    # Idle time before a session of this service ends; None: the entry point's udp.timeout.
    session_timeout: Duration | None = None

    def __post_init__(self) -> None:
        if self.session_timeout is not None and self.session_timeout <= 0:
            raise ValueError("sessionTimeout must be greater than 0")


class UDPServersTransport(Element):
    """How edge talks to UDP upstreams: an optional PROXY protocol header (version 2 only)."""

    proxy_protocol: ProxyProtocol | None = None

    def __post_init__(self) -> None:
        if self.proxy_protocol is not None and self.proxy_protocol.version != 2:
            raise ValueError("proxyProtocol: UDP needs version 2 (version 1 has no UDP form)")


class UDPService(Element):
    load_balancer: UDPLoadBalancer | None = None
    weighted: Weighted | None = None

    def __post_init__(self) -> None:
        if self.unsupported or self.problems:  # disabled anyway; it may have no kind
            return
        _exactly_one("a UDP service", loadBalancer=self.load_balancer, weighted=self.weighted)


class UDPConfiguration(Base):
    routers: dict[str, UDPRouter] = {}
    services: dict[str, UDPService] = {}
    servers_transports: dict[str, UDPServersTransport] = {}


# --- tls ----------------------------------------------------------------------

TLSVersion = Literal["VersionTLS10", "VersionTLS11", "VersionTLS12", "VersionTLS13"]


class CertAndStores(Base):
    """A certificate (file path or inline PEM) and the stores it goes to."""

    cert_file: str
    key_file: Secret
    stores: list[str] = []  # empty: the "default" store


ClientAuthType = Literal[
    "",  # NoClientCert, or RequireAndVerifyClientCert when caFiles are given (Traefik's rule)
    "NoClientCert",
    "RequestClientCert",
    "RequireAnyClientCert",
    "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert",
]


class ClientAuth(Base):
    """Client certificates (mutual TLS). ``caFiles``: paths or inline PEM.

    What each type does under Python's ssl is in :mod:`edge.tls.certs`.
    """

    ca_files: list[str] = []
    client_auth_type: ClientAuthType = ""


class TLSOptions(Element):
    """Traefik's TLS options; names (cipher suites, curves) are Go's, as in Traefik.

    Checked (and mapped to OpenSSL) by :mod:`edge.tls.certs`, which reports a bad
    value per options name so that only the routers using it are disabled.
    """

    min_version: TLSVersion = "VersionTLS12"
    max_version: TLSVersion | Literal[""] = ""  # "": the highest supported
    cipher_suites: list[str] = []
    curve_preferences: list[str] = []
    client_auth: ClientAuth | None = None
    sni_strict: bool = False
    # Traefik's default but acme-tls/1 (edge has no ACME): HTTP/2 first.
    alpn_protocols: list[str] = msgspec.field(default_factory=lambda: ["h2", "http/1.1"])
    # No session tickets: every handshake is a full one (Traefik's option of the name).
    disable_session_tickets: bool = False


class StoreCertificate(Base):
    cert_file: str
    key_file: Secret


class TLSStore(Base):
    default_certificate: StoreCertificate | None = None


class TLSConfiguration(Base):
    certificates: list[CertAndStores] = []
    options: dict[str, TLSOptions] = {}
    stores: dict[str, TLSStore] = {}


# --- the whole --------------------------------------------------------------------


class Configuration(Base):
    """One provider's dynamic configuration (or, after merge, everyone's)."""

    http: HTTPConfiguration | None = None
    tcp: TCPConfiguration | None = None
    udp: UDPConfiguration | None = None
    tls: TLSConfiguration | None = None

    def is_empty(self) -> bool:
        """True when no section holds any element."""
        return self == EMPTY or all(
            section is None or not any(_values(section))
            for section in (self.http, self.tcp, self.udp, self.tls)
        )


def _values(section: Base) -> Iterable[object]:
    for name in section.__struct_fields__:
        value = getattr(section, name)
        if isinstance(value, Mapping | list):
            yield value


EMPTY = Configuration()
"""The empty configuration (an immutable constant)."""
