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

import ipaddress
import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Literal, dataclass_transform
from urllib.parse import urlsplit

import msgspec

from edge.config.durations import Duration, SignedDuration

__all__ = [
    "AddPrefix",
    "Base",
    "CertAndStores",
    "ClientAuth",
    "ClientCertificate",
    "Configuration",
    "Domain",
    "Element",
    "ForwardingTimeouts",
    "HTTPConfiguration",
    "Headers",
    "LoadBalancer",
    "Middleware",
    "ProxyProtocol",
    "RedirectScheme",
    "Router",
    "RouterTLS",
    "Server",
    "ServersTransport",
    "Service",
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


class Router(Element):
    rule: str
    service: str
    entry_points: list[str] = []  # empty: every (non-internal) TCP entry point
    priority: int = 0  # 0: default priority, len(rule)
    rule_syntax: str = ""  # "v3" or "v2"; "": core.defaultRuleSyntax (checked by runtime)
    middlewares: list[str] = []
    tls: RouterTLS | None = None


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
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"invalid server url {self.url!r}: scheme must be http or https")
        if not parts.hostname:
            raise ValueError(f"invalid server url {self.url!r}: no host")
        if port == 0:
            raise ValueError(f"invalid server url {self.url!r}: port 0")


class LoadBalancer(Base):
    servers: list[Server] = []
    pass_host_header: bool = True
    servers_transport: str = ""  # "" means the default transport, default@internal


class WRRService(Base):
    name: str
    weight: NonNegativeInt = 1


class Weighted(Base):
    services: list[WRRService] = []


class Service(Element):
    load_balancer: LoadBalancer | None = None
    weighted: Weighted | None = None

    def __post_init__(self) -> None:
        if not self.unsupported:  # else disabled anyway; it may have lost its only kind
            _exactly_one("a service", loadBalancer=self.load_balancer, weighted=self.weighted)


class StripPrefix(Base):
    prefixes: list[str] = []


class AddPrefix(Base):
    prefix: str

    def __post_init__(self) -> None:
        # It goes into the request line: a space or a line break there would start
        # another part of the line, or another line (a header, a request).
        if _NOT_IN_TARGET.search(self.prefix):
            raise ValueError(
                f"addPrefix: prefix {self.prefix!r} holds whitespace or a control character"
            )


# What a header edit writes into a head as it is: a token name, and a value of
# HTAB, SP, VCHAR and obs-text; a CR or LF would end the line and start another
# (Traefik's Go server and client never write one either).
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_NOT_IN_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_NOT_IN_TARGET = re.compile(r"[\x00-\x20\x7f]")


class Headers(Base):
    """Custom headers; an empty value removes the header, as in Traefik."""

    custom_request_headers: dict[str, str] = {}
    custom_response_headers: dict[str, str] = {}

    def __post_init__(self) -> None:
        for field, headers in (
            ("customRequestHeaders", self.custom_request_headers),
            ("customResponseHeaders", self.custom_response_headers),
        ):
            for name, value in headers.items():
                if not _HEADER_NAME.fullmatch(name):
                    raise ValueError(f"headers.{field}: invalid header name {name!r}")
                if _NOT_IN_VALUE.search(value):
                    raise ValueError(
                        f"headers.{field}.{name}: a value may not hold CR, LF or another control character"
                    )


class RedirectScheme(Base):
    scheme: str
    port: str = ""
    permanent: bool = False

    def __post_init__(self) -> None:
        if not self.scheme:
            raise ValueError("redirectScheme: scheme must not be empty")
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.\-]*", self.scheme):
            raise ValueError(f"redirectScheme: invalid scheme {self.scheme!r}")
        if self.port and not (
            self.port.isascii() and self.port.isdigit() and int(self.port) <= 65535
        ):
            raise ValueError(f"redirectScheme: invalid port {self.port!r}")


class Middleware(Element):
    strip_prefix: StripPrefix | None = None
    add_prefix: AddPrefix | None = None
    headers: Headers | None = None
    redirect_scheme: RedirectScheme | None = None

    def __post_init__(self) -> None:
        if self.unsupported:  # disabled anyway; it may have lost its only kind
            return
        _exactly_one(
            "a middleware",
            stripPrefix=self.strip_prefix,
            addPrefix=self.add_prefix,
            headers=self.headers,
            redirectScheme=self.redirect_scheme,
        )

    @property
    def kind(self) -> str:
        """Traefik's name of the middleware type set (``"stripPrefix"``, ...)."""
        for key, value in (
            ("stripPrefix", self.strip_prefix),
            ("addPrefix", self.add_prefix),
            ("headers", self.headers),
            ("redirectScheme", self.redirect_scheme),
        ):
            if value is not None:
                return key
        raise AssertionError("unreachable: validated in __post_init__")


class ForwardingTimeouts(Base):
    dial_timeout: Duration = Duration(30.0)
    response_header_timeout: Duration = Duration(0.0)  # 0: no timeout
    idle_conn_timeout: Duration = Duration(90.0)


class ClientCertificate(Base):
    """A certificate edge presents to upstream servers that ask for one (mutual TLS).

    ``certFile`` / ``keyFile``: paths or inline PEM, as in ``tls.certificates``.
    """

    cert_file: str
    key_file: str


class ServersTransport(Element):
    """How edge talks to HTTP upstreams.

    TLS settings apply to ``https://`` servers: ``serverName`` (SNI and the name
    verified), ``insecureSkipVerify``, ``rootCAs`` (paths or inline PEM; when set,
    they replace the system's CAs, as Go's RootCAs do) and ``certificates``
    (client certificates). What each does under Python's ssl is in
    :func:`edge.config.runtime.client_tls_context`.
    """

    server_name: str = ""
    insecure_skip_verify: bool = False
    root_cas: list[str] = msgspec.field(default_factory=list, name="rootCAs")
    certificates: list[ClientCertificate] = []
    # 0: Go's default (2); negative: no connection reuse (edge.transports.Transport).
    max_idle_conns_per_host: int = 200
    forwarding_timeouts: ForwardingTimeouts = msgspec.field(default_factory=ForwardingTimeouts)


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
        if not self.unsupported:
            _exactly_one("a TCP service", loadBalancer=self.load_balancer, weighted=self.weighted)


class TLSClientConfig(Base):
    """``tls`` of a TCP serversTransport: how edge speaks TLS to servers with ``tls: true``."""

    server_name: str = ""
    insecure_skip_verify: bool = False
    root_cas: list[str] = msgspec.field(default_factory=list, name="rootCAs")
    certificates: list[ClientCertificate] = []


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
        if self.unsupported:  # disabled anyway; it may have lost its only kind
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
        if not self.unsupported:
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
    key_file: str
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
    # edge speaks HTTP/1.1 only, so that is all it offers by default (Traefik adds h2).
    alpn_protocols: list[str] = msgspec.field(default_factory=lambda: ["http/1.1"])
    # No session tickets: every handshake is a full one (Traefik's option of the name).
    disable_session_tickets: bool = False


class StoreCertificate(Base):
    cert_file: str
    key_file: str


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
