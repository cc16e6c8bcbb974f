"""TCP routers and services: which TCP or TLS connection goes where, one snapshot per entrypoint.

Owns :class:`TCPRouter`, the connection-level router of one entrypoint: its TCP
routers without TLS, its TCP routers on TLS (passthrough or terminated), the
server names its HTTPS routers (``http.routers.<r>.tls``) claim with their TLS
options, and the configuration's certificate snapshot. It answers the questions
of Traefik's precedence (:meth:`TCPRouter.at_once`, :meth:`~TCPRouter.plain`,
:meth:`~TCPRouter.tls`) as pure lookups; the peek protocol
(:mod:`edge.tcp.peek`) asks them and acts. It also owns the TCP services:
:class:`TCPLoadBalancer` (smooth weighted round robin over servers) and
:class:`TCPWeighted` (over services), whose ``pick()`` gives a
:class:`TCPServer` carrying what a dial needs (address, ``dialTimeout``,
``terminationDelay``, the PROXY protocol version, and for ``tls: true`` servers
the serversTransport's TLS context and server name). A route carries its
router's TCP middlewares (:mod:`edge.tcp.middlewares`), built per router.

Where the PROXY protocol version and terminationDelay come from follows Traefik
v3: a load balancer naming a serversTransport takes them from it; one naming
none takes ``loadBalancer.proxyProtocol`` and ``loadBalancer.terminationDelay``
(milliseconds; both deprecated there), else the default transport's delay.

Invariants: built whole by :func:`build_tcp_routers` for every applied
configuration and never changed afterwards (the balancers' round-robin scores
are the only mutable state); a router that validation disabled is not in it; a
connection asks the router it read when it arrived, so a new configuration
never changes a connection already routed.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Iterable, Mapping

from edge.balancer import SmoothWeightedRoundRobin
from edge.config.dynamic import TCPLoadBalancer as TCPLoadBalancerConfig
from edge.config.dynamic import split_host_port
from edge.config.merge import DEFAULT_TLS
from edge.config.runtime import DEFAULT_TRANSPORT, DISABLED, RuntimeConfig, client_tls_context
from edge.config.runtime.tls import transport_tls_context
from edge.errors import ConfigError
from edge.router.services import build_service
from edge.rules import RequestView, RouteTable, Rule, compile_rule
from edge.tcp.middlewares import TCPChain, build_chain
from edge.tls.certs import TLSCertificates
from edge.tls.clienthello import ClientHello

log = logging.getLogger("edge.router")

__all__ = [
    "HTTPS",
    "PASSTHROUGH",
    "PLAIN",
    "TERMINATE",
    "TCPLoadBalancer",
    "TCPRoute",
    "TCPRouter",
    "TCPServer",
    "TCPWeighted",
    "build_tcp_routers",
    "tcp_servers_for",
]

# What a matched route does with the connection.
PLAIN = "plain"  # a TCP router without TLS: relay the bytes as they come
PASSTHROUGH = "passthrough"  # TLS relayed untouched to the service
TERMINATE = "terminate"  # edge terminates TLS, then relays the plaintext to the service
HTTPS = "https"  # edge terminates TLS, then serves HTTP with the HTTPS routers

# ``HostSNI(`*`)`` compiles to a node that matches everything; a rule whose whole
# tree is that node is a catch-all (Traefik's notion: ``HostSNI(`*`) && ClientIP(...)``
# is not one).
_ALWAYS = type(compile_rule("HostSNI(`*`)", kind="tcp").root)


def is_catch_all(rule: Rule) -> bool:
    """The rule is ``HostSNI(`*`)`` alone: it matches every connection."""
    return isinstance(rule.root, _ALWAYS)


# -- services -----------------------------------------------------------------------


class TCPServer:
    """One server of a TCP load balancer, with the settings of its serversTransport."""

    __slots__ = (
        "address",
        "dial_timeout",
        "host",
        "keep_alive",
        "port",
        "proxy_protocol",
        "server_name",
        "service",
        "termination_delay",
        "tls",
    )

    def __init__(
        self,
        service: str,
        address: str,
        *,
        dial_timeout: float | None,
        termination_delay: float,
        proxy_protocol: int = 0,
        tls: ssl.SSLContext | None = None,
        server_name: str = "",
        keep_alive: float = 15.0,
    ) -> None:
        self.service = service
        self.address = address
        self.host, self.port = split_host_port(address)
        self.dial_timeout = dial_timeout  # None: no bound (dialTimeout 0)
        self.keep_alive = keep_alive  # seconds between TCP keep-alive probes (dialKeepAlive)
        self.termination_delay = termination_delay
        self.proxy_protocol = proxy_protocol  # 0: none, else the version (1 or 2)
        self.tls = tls  # the client context when edge speaks TLS to this server
        self.server_name = server_name or self.host  # the name sent (SNI) and verified

    def __repr__(self) -> str:
        return f"TCPServer({self.service!r}, {self.address!r})"


class TCPLoadBalancer:
    """A ``loadBalancer`` TCP service: smooth weighted round robin over its servers."""

    __slots__ = ("_wrr", "name")

    def __init__(self, name: str, servers: Iterable[tuple[TCPServer, int]]) -> None:
        self.name = name
        self._wrr = SmoothWeightedRoundRobin(list(servers))

    def update(self, servers: Iterable[tuple[TCPServer, int]]) -> None:
        """New servers, in place (endpoints only); the rotation goes on for the servers
        that stay, and connections already relayed are left alone."""
        wrr = SmoothWeightedRoundRobin(list(servers))
        wrr.inherit(self._wrr, lambda s: s.address)
        self._wrr = wrr

    def pick(self) -> TCPServer | None:
        """The next server; None when the service has none (the connection is closed)."""
        return self._wrr.pick()


class TCPWeighted:
    """A ``weighted`` TCP service: smooth weighted round robin over child services."""

    __slots__ = ("_wrr", "name")

    def __init__(
        self, name: str, children: Iterable[tuple[TCPLoadBalancer | TCPWeighted, int]]
    ) -> None:
        self.name = name
        self._wrr = SmoothWeightedRoundRobin(list(children))

    def pick(self) -> TCPServer | None:
        child = self._wrr.pick()
        return None if child is None else child.pick()


TCPService = TCPLoadBalancer | TCPWeighted


# -- routes and the router -------------------------------------------------------------


class TCPRoute:
    """What a matched router resolves to.

    ``mode``: :data:`PLAIN`, :data:`PASSTHROUGH`, :data:`TERMINATE` or :data:`HTTPS`;
    ``service``: where the bytes go (None for HTTPS: the HTTPS routers decide per
    request); ``options``: the TLS options to terminate with (TERMINATE, HTTPS);
    ``middlewares``: the router's TCP middlewares (None: none).
    """

    __slots__ = ("middlewares", "mode", "name", "options", "service")

    def __init__(
        self,
        name: str,
        mode: str,
        service: TCPService | None,
        options: str = DEFAULT_TLS,
        middlewares: TCPChain | None = None,
    ) -> None:
        self.name = name
        self.mode = mode
        self.service = service
        self.options = options
        self.middlewares = middlewares

    def __repr__(self) -> str:
        return f"TCPRoute({self.name!r}, {self.mode})"


class TCPRouter:
    """The connection-level router of one entrypoint; see the module docstring.

    ``immediate``: the entrypoint has TCP routers without TLS and nothing that needs
    to see a ClientHello (no TCP router on TLS, no HTTPS router), so a connection a
    plain router matches is relayed before it sends anything.
    """

    __slots__ = (
        "_plain",
        "_tls",
        "certs",
        "https_any",
        "https_catch_all",
        "https_names",
        "immediate",
        "mixed_options",
        "starttls",
    )

    def __init__(
        self,
        *,
        plain: Iterable[tuple[str, Rule, int, TCPRoute]] = (),
        tls: Iterable[tuple[str, Rule, int, TCPRoute]] = (),
        https_names: dict[str, TCPRoute] | None = None,
        https_any: TCPRoute | None = None,
        https_catch_all: bool | None = None,
        certs: TLSCertificates | None = None,
    ) -> None:
        plain = list(plain)
        matched = [
            (name, rule, prio, _Matched(route, is_catch_all(rule)))
            for name, rule, prio, route in tls
        ]
        self._plain: RouteTable[TCPRoute] | None = RouteTable(plain) if plain else None
        self._tls: RouteTable[_Matched] | None = RouteTable(matched) if matched else None
        self.https_names: dict[str, TCPRoute] = https_names or {}
        self.https_any = https_any
        # Some HTTPS router names no host (PathPrefix, HostRegexp...): it may serve any
        # server name, so it comes before a TCP router on TLS that catches all (None:
        # whenever there are HTTPS routers, as a hand-built router means).
        self.https_catch_all = https_any is not None if https_catch_all is None else https_catch_all
        self.certs = certs if certs is not None else TLSCertificates(None)
        self.immediate = self._plain is not None and self._tls is None and https_any is None
        # TCP routers on TLS exist: a PostgreSQL client's STARTTLS request is answered
        # and its TLS routed by them (see starttls_route).
        self.starttls = self._tls is not None
        # Some HTTPS host has TLS options of its own: a request's Host must then ask
        # for the options its connection's handshake used (see https_options).
        default = https_any.options if https_any is not None else DEFAULT_TLS
        self.mixed_options = any(route.options != default for route in self.https_names.values())

    def https_route(self, name: str) -> TCPRoute | None:
        """The HTTPS route a server name claims: its own, else its ``*.`` parent's (a
        ``Host(`*.example.com`)`` router's options cover one label, as its rule does)."""
        route = self.https_names.get(name)
        if route is None:
            dot = name.find(".")
            if dot > 0:  # a wildcard's label is never empty: ".example.com" has none
                route = self.https_names.get("*" + name[dot:])
        return route

    def https_options(self, host: str) -> str:
        """The TLS options a request for ``host`` needs (Traefik's snicheck): those of
        the HTTPS routers naming it, else the default route's."""
        route = self.https_route(host) if host else None
        if route is None:
            route = self.https_any
        return route.options if route is not None else DEFAULT_TLS

    def __len__(self) -> int:
        return sum(len(t) for t in (self._plain, self._tls) if t is not None)

    def at_once(self, client_ip: str) -> TCPRoute | None:
        """The route of a connection that has sent nothing yet, when one can decide now."""
        if not self.immediate:
            return None
        return self._plain.match(RequestView(client_ip=client_ip))  # type: ignore[union-attr]

    def plain(self, client_ip: str) -> TCPRoute | None:
        """The TCP router without TLS for a connection whose first bytes are not TLS."""
        if self._plain is None:
            return None
        return self._plain.match(RequestView(client_ip=client_ip))

    def tls(self, hello: ClientHello, client_ip: str) -> TCPRoute | None:
        """The route of a TLS connection, in Traefik's precedence; None: refuse it."""
        sni = hello.server_name or ""
        # 1. An HTTPS router names this server: HTTPS wins over a TCP router that
        #    only catches everything (Traefik keeps 2.6's behaviour: only a specific
        #    HostSNI lets HTTPS take precedence over TCP on TLS).
        https = self.https_route(sni) if sni else None
        if https is not None:
            return https
        route = None
        if self._tls is not None:
            route = self._tls.match(RequestView(sni=sni, client_ip=client_ip, alpn=hello.alpn))
            # 2. A TCP router on TLS with a specific rule (a HostSNI name, a
            #    regexp, ClientIP, ALPN): passthrough or termination for this name.
            if route is not None and not route.catch_all:
                return route.value
        # 3. An HTTPS router without a host rule (PathPrefix, HostRegexp...) may
        #    serve any name: terminate with the default options and let the HTTP
        #    routers decide.
        if self.https_catch_all:
            return self.https_any
        # 4. A TCP router on TLS that takes any name: HostSNI(`*`). It comes before
        #    the HTTPS routers' 404 (Traefik since 2.7: HTTPS routers that all name
        #    hosts leave every other name to it).
        if route is not None:
            return route.value
        # 5. HTTPS routers exist: terminate with the default options; their 404
        #    answers a name none of them serves.
        if self.https_any is not None:
            return self.https_any
        # 6. Nothing wants this TLS connection: refused with an alert.
        return None

    def starttls_route(self, hello: ClientHello, client_ip: str) -> TCPRoute | None:
        """The route of TLS begun by PostgreSQL's STARTTLS: the TCP routers on TLS
        only, catch-all included (Traefik's servePostgres); None: refuse it."""
        if self._tls is None:
            return None
        route = self._tls.match(
            RequestView(sni=hello.server_name or "", client_ip=client_ip, alpn=hello.alpn)
        )
        return None if route is None else route.value


class _Matched:
    """A TLS route as the router's table holds it: the route and whether it catches all."""

    __slots__ = ("catch_all", "value")

    def __init__(self, value: TCPRoute, catch_all: bool) -> None:
        self.value = value
        self.catch_all = catch_all


# -- building ---------------------------------------------------------------------------


class _Builder:
    def __init__(self, runtime: RuntimeConfig) -> None:
        self.runtime = runtime
        self.services: dict[str, TCPService | None] = {}
        self.contexts: dict[str, ssl.SSLContext] = {}  # serversTransport -> its TLS client context

    def context(self, name: str) -> ssl.SSLContext:
        """The TLS client context of serversTransport ``name``, built once per configuration."""
        ctx = self.contexts.get(name)
        if ctx is None:
            tls = self.runtime.tcp_servers_transports[name].tls
            ctx = client_tls_context() if tls is None else transport_tls_context(tls)
            self.contexts[name] = ctx
        return ctx

    def service(self, name: str) -> TCPService | None:
        # Typed as making any service: mypy cannot infer build_service's S from the class.
        weighted: Callable[[str, list[tuple[TCPService, int]]], TCPService] = TCPWeighted
        return build_service(
            name, self.services, self.runtime.tcp_services, self.load_balancer, weighted
        )

    def load_balancer(self, name: str, lb: TCPLoadBalancerConfig) -> TCPLoadBalancer | None:
        servers = self.servers(name, lb)
        return None if servers is None else TCPLoadBalancer(name, servers)

    def servers(self, name: str, lb: TCPLoadBalancerConfig) -> list[tuple[TCPServer, int]] | None:
        """The servers of load balancer ``name``, with their weights; None when its
        serversTransport cannot be built."""
        transport_name = lb.servers_transport or DEFAULT_TRANSPORT
        transport = self.runtime.tcp_servers_transports[transport_name]
        # Traefik v3: a named serversTransport's proxyProtocol, else the load balancer's.
        proxy = transport.proxy_protocol if lb.servers_transport else lb.proxy_protocol
        version = proxy.version if proxy is not None else 0
        # Likewise terminationDelay (milliseconds on the load balancer; Traefik v2's key).
        delay = float(transport.termination_delay)
        if not lb.servers_transport and lb.termination_delay is not None:
            delay = lb.termination_delay / 1000
        server_name = transport.tls.server_name if transport.tls is not None else ""
        try:
            servers = [
                (
                    TCPServer(
                        name,
                        s.address,
                        dial_timeout=float(transport.dial_timeout) or None,
                        keep_alive=float(transport.dial_keep_alive)
                        or 15.0,  # 0: Go's default period
                        termination_delay=delay,
                        proxy_protocol=version,
                        tls=self.context(transport_name) if s.tls else None,
                        server_name=server_name,
                    ),
                    s.weight,
                )
                for s in lb.servers
            ]
        except ConfigError as exc:  # reported by validation, which disabled the service
            log.error("tcp service %s: serversTransport %s: %s", name, transport_name, exc)
            return None
        return servers


def tcp_servers_for(
    services: Mapping[str, TCPService | None], runtime: RuntimeConfig, names: Iterable[str]
) -> list[tuple[TCPLoadBalancer, list[tuple[TCPServer, int]]]]:
    """The live TCP load balancers ``names`` (of ``services``, what
    :func:`build_tcp_routers` built) and the servers ``runtime`` gives them: the
    endpoints-only path; the caller hands each its servers with
    :meth:`TCPLoadBalancer.update`. Builds only (any thread)."""
    builder = _Builder(runtime)
    out = []
    for name in names:
        live = services.get(name)
        config = runtime.tcp_services[name].config.load_balancer
        if isinstance(live, TCPLoadBalancer) and config is not None:
            servers = builder.servers(name, config)
            if servers is not None:
                out.append((live, servers))
    return out


def build_tcp_routers(
    runtime: RuntimeConfig,
    entry_points: Iterable[str],
    certs: TLSCertificates | Callable[[], TLSCertificates],
    services: dict[str, TCPService | None] | None = None,
) -> dict[str, TCPRouter | None]:
    """One TCPRouter per named entrypoint that has TCP routers or HTTPS routers, else None.

    ``certs`` is the configuration's certificate snapshot, or a function that builds
    it (called once, only when some entrypoint needs it). ``services``, when given,
    receives the TCP services built, by name (:func:`tcp_servers_for` updates them).
    """
    builder = _Builder(runtime)
    if services is not None:
        builder.services = services
    eps = list(entry_points)
    plain: dict[str, list] = {ep: [] for ep in eps}
    tls: dict[str, list] = {ep: [] for ep in eps}
    middlewares = {name: info.config for name, info in runtime.tcp_middlewares.items()}
    for name, info in runtime.tcp_routers.items():
        if info.status == DISABLED or info.rule is None:
            continue
        service = builder.service(info.config.service)
        if service is None:
            log.error(
                "tcp router %s: service %s could not be built; router skipped",
                name,
                info.config.service,
            )
            continue
        rt = info.config.tls
        for ep in info.entry_points:
            if ep not in plain:
                continue
            # Middlewares per entrypoint, as Traefik builds a router's chain: an
            # inFlightConn counts the connections of this router on this entrypoint.
            chain = build_chain(info.config.middlewares, middlewares)
            if rt is None:
                plain[ep].append(
                    (
                        name,
                        info.rule,
                        info.priority,
                        TCPRoute(name, PLAIN, service, middlewares=chain),
                    )
                )
            elif rt.passthrough:
                route = TCPRoute(name, PASSTHROUGH, service, middlewares=chain)
                tls[ep].append((name, info.rule, info.priority, route))
            else:
                route = TCPRoute(name, TERMINATE, service, rt.options or DEFAULT_TLS, chain)
                tls[ep].append((name, info.rule, info.priority, route))

    # The server names HTTPS routers claim, with their TLS options (Traefik: several
    # routers naming one host with different options fall back to the default ones).
    names: dict[str, dict[str, str]] = {ep: {} for ep in eps}
    has_https: set[str] = set()
    catch_all: set[str] = set()  # entrypoints with an HTTPS router that names no host
    for name, http in runtime.http_routers.items():
        if http.status == DISABLED or http.config.tls is None or http.rule is None:
            continue
        options = http.config.tls.options or DEFAULT_TLS
        for ep in http.entry_points:
            if ep not in names:
                continue
            has_https.add(ep)
            if http.rule.hosts is None:
                catch_all.add(ep)
            for host in http.rule.hosts or ():
                seen = names[ep].setdefault(host, options)
                if seen != options:
                    log.warning(
                        "router %s: host %s has routers with TLS options %s and %s; the default options serve it",
                        name,
                        host,
                        seen,
                        options,
                    )
                    names[ep][host] = DEFAULT_TLS

    snapshot: TLSCertificates | None = certs if isinstance(certs, TLSCertificates) else None
    routers: dict[str, TCPRouter | None] = {}
    https_routes: dict[str, TCPRoute] = {}
    for ep in eps:
        if not plain[ep] and not tls[ep] and ep not in has_https:
            routers[ep] = None
            continue
        if snapshot is None:
            snapshot = certs()  # type: ignore[operator]
        https_names = {
            host: https_routes.setdefault(
                options, TCPRoute(f"https@{options}", HTTPS, None, options)
            )
            for host, options in names[ep].items()
        }
        any_route = (
            https_routes.setdefault(DEFAULT_TLS, TCPRoute(f"https@{DEFAULT_TLS}", HTTPS, None))
            if ep in has_https
            else None
        )
        routers[ep] = TCPRouter(
            plain=plain[ep],
            tls=tls[ep],
            https_names=https_names,
            https_any=any_route,
            https_catch_all=ep in catch_all,
            certs=snapshot,
        )
    return routers
