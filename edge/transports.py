"""ServersTransports: how edge talks to upstream servers.

A :class:`Transport` owns the idle keep-alive connections to every server it has
been used for (one LIFO pool per server), the dial and response timeouts, and
the TLS context for ``https://`` servers (serverName, insecureSkipVerify, rootCAs,
client certificates, versions, cipher suites, peerCertSANs:
:func:`edge.config.runtime.client_tls_context`). A transport
with its own TLS settings builds its context when it is planned (off the loop);
one without shares the registry's context over the system's CAs, built at the
first ``https://`` dial. A context that cannot be built (a file validation
already reported) fails that transport's TLS dials with the reason: 502. The :class:`TransportRegistry` holds
one Transport per configured ServersTransport and is updated by diff on every
new configuration: a transport whose configuration did not change is kept as
is, with its pools, so a reload costs no reconnection; a changed or removed one
has its idle connections closed.

HTTP/2 servers (``h2c://``, and ``https://`` ones whose ALPN chose ``h2``) are
spoken to over :class:`Multiplexed` connections, kept per server in ``shared``
lists apart from the HTTP/1.1 pools: :meth:`Transport.take_stream` opens a
stream on the first that has room (the server's SETTINGS_MAX_CONCURRENT_STREAMS),
and a connection is closed once it stayed without a stream for idleConnTimeout.

Pooled connections are asyncio protocols that offer ``is_reusable()``,
``close()`` and an ``idle_deadline`` the pool sets, which a connection zeroes
itself when it can no longer serve (closed by either side): taking one from the
pool is then a compare, and so is giving one back (a nonzero ``idle_deadline``
says it can serve; zero, and ``is_reusable()`` decides). A server's pool is a
list that its :class:`ServerURL` holds once a transport has used it (a
ServerURL belongs to one Backend, and so to one transport): a request reaches
it with an attribute and an identity compare, not a dict lookup on a tuple.
This module does not know HTTP (it sits below ``edge.http``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import ssl
from collections.abc import Callable, Mapping
from typing import Protocol
from urllib.parse import urlsplit

from edge.config.dynamic import ServersTransport
from edge.config.runtime import client_tls_context
from edge.config.runtime.tls import own_tls, transport_tls_context
from edge.errors import ConfigError, UpstreamConnectError, UpstreamDialTimeout

log = logging.getLogger("edge.transports")

DEFAULT_TRANSPORT = "default@internal"
GO_DEFAULT_MAX_IDLE_PER_HOST = (
    2  # what maxIdleConnsPerHost 0 means (net/http.DefaultMaxIdleConnsPerHost)
)


class Pooled(Protocol):
    # Set by put_idle; 0 once the connection cannot serve (it zeroes it itself).
    idle_deadline: float

    def is_reusable(self) -> bool: ...

    def close(self) -> None: ...


class Multiplexed(Protocol):
    """A connection that carries many requests at once (HTTP/2), shared by exchanges."""

    # When it stayed without a stream for idleConnTimeout (0: it has streams, or is gone).
    idle_deadline: float

    def open_stream(self) -> Pooled | None:
        """A new stream, or None: no room for one, or the connection cannot serve."""

    def usable(self) -> bool: ...

    def tick(self, now: float) -> None:
        """The sweep's call: a keepalive PING due, or one unanswered too long."""

    def close(self) -> None: ...


class ServerURL:
    """A server of a load balancer, parsed once per configuration.

    ``h2``: the server may speak HTTP/2: always for ``h2c://`` (``h2c`` is True), by
    ALPN for ``https://`` (until a handshake said ``http/1.1``: ``h2`` is then False)."""

    __slots__ = (
        "authority",
        "h2",
        "h2c",
        "host",
        "idle",
        "key",
        "pooler",
        "port",
        "shared",
        "tls",
        "url",
    )

    def __init__(self, url: str) -> None:
        plain = _PLAIN_URL.fullmatch(url)
        if plain is not None and 0 < int(plain[3]) <= 65535:
            # The common form (every server a Kubernetes sync makes), read without urlsplit.
            scheme, host, port = plain[1], plain[2].lower(), int(plain[3])
        else:
            scheme, host, port = _split(url)
        self.url = url
        self.tls = scheme == "https"
        self.h2c = scheme == "h2c"
        self.h2 = self.tls or self.h2c
        self.host = host
        self.port = port or (443 if self.tls else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.tls else 80
        # The Host header to send when passHostHeader is false.
        self.authority = (host if self.port == default else f"{host}:{self.port}").encode()
        self.key = (scheme, self.host, self.port)
        # The pool of idle connections to this server in ``pooler``, the transport
        # that used it last (Transport.idle_of): the same list as in its pools.
        self.idle: list[Pooled] = []
        self.pooler: Transport | None = None
        # Its HTTP/2 connections in ``pooler`` (Transport.shared_of).
        self.shared: list[Multiplexed] = []

    def __repr__(self) -> str:
        return f"ServerURL({self.url!r})"


_PLAIN_URL = re.compile(r"(https?|h2c)://([A-Za-z0-9.-]+):([0-9]{1,5})")
"""``scheme://name-or-IPv4:port`` and nothing else: what :func:`_split` makes of it is plain
to see (a bracketed IPv6 address goes through urlsplit, which checks it)."""


def _split(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port or None) of any server URL; ConfigError when it has none."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https", "h2c") or not parts.hostname:
        raise ConfigError(f"server url {url!r}: expected http://, https:// or h2c://host[:port]")
    try:
        return parts.scheme, parts.hostname, parts.port
    except ValueError as exc:
        raise ConfigError(f"server url {url!r}: {exc}") from None


class Transport:
    """One ServersTransport: its pools, timeouts and TLS settings."""

    def __init__(
        self,
        name: str,
        config: ServersTransport,
        loop: asyncio.AbstractEventLoop,
        system_context: Callable[[], ssl.SSLContext] | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self.loop = loop
        timeouts = config.forwarding_timeouts
        self.dial_timeout = timeouts.dial_timeout or None
        self.response_header_timeout = timeouts.response_header_timeout or 0.0
        # As Traefik documents them (Go's Transport): idleConnTimeout 0 is no limit;
        # maxIdleConnsPerHost 0 is Go's DefaultMaxIdleConnsPerHost (2), a negative one no reuse.
        self.idle_timeout = timeouts.idle_conn_timeout or math.inf
        # HTTP/2: a PING after read_idle seconds without a frame (0: none), its ack within ping_timeout.
        self.read_idle = float(timeouts.read_idle_timeout)
        self.ping_timeout = float(timeouts.ping_timeout) or 15.0
        max_idle = config.max_idle_conns_per_host
        self.max_idle = GO_DEFAULT_MAX_IDLE_PER_HOST if max_idle == 0 else max(max_idle, 0)
        # Connections are kept for the next request (else closed after their response).
        self.pools = self.max_idle > 0
        self.http2 = not config.disable_http2  # https:// servers may be offered h2
        # How many idle connections a server's pool keeps: 0 when this transport
        # pools none, or once it is closed (what its requests in flight give back then is closed).
        self.keep = self.max_idle if self.pools else 0
        self._pools: dict[tuple, list[Pooled]] = {}
        self._shared: dict[tuple, list[Multiplexed]] = {}
        # HTTP/2 dials in flight per server, which requests needing a stream meanwhile share.
        self.dialing: dict[tuple, asyncio.Future] = {}
        self._ssl: ssl.SSLContext | None = None
        self._ssl_h2: ssl.SSLContext | None = None  # the same, offering h2 first by ALPN
        self._system_context = system_context
        self.tls_error: str | None = None  # why this transport's TLS context cannot be built
        if own_tls(config):
            try:
                self._ssl = transport_tls_context(config)
            except ConfigError as exc:
                self.tls_error = str(exc)
                log.error("serversTransport %s: %s", name, exc)
            else:
                self._ssl.set_alpn_protocols(["http/1.1"])

    # -- pools -------------------------------------------------------------------

    def idle_of(self, server: ServerURL) -> list[Pooled]:
        """``server``'s pool in this transport, bound to ``server`` for the requests after."""
        idle = self._pools.get(server.key)
        if idle is None:
            idle = self._pools[server.key] = []
        server.idle = idle
        server.pooler = self
        # The transport decides whether an https:// server may be offered h2 (disableHTTP2).
        server.h2 = server.h2c or (server.tls and self.http2)
        return idle

    def shared_of(self, server: ServerURL) -> list[Multiplexed]:
        """``server``'s HTTP/2 connections in this transport, bound to ``server``."""
        if server.pooler is not self:
            self.idle_of(server)
        shared = self._shared.get(server.key)
        if shared is None:
            shared = self._shared[server.key] = []
        server.shared = shared
        return shared

    def take_stream(self, server: ServerURL) -> Pooled | None:
        """A new stream on one of ``server``'s HTTP/2 connections with room for one."""
        shared = server.shared if server.pooler is self else self.shared_of(server)
        for conn in shared:
            stream = conn.open_stream()
            if stream is not None:
                return stream
        return None

    def add_shared(self, server: ServerURL, conn: Multiplexed) -> None:
        """A new HTTP/2 connection to ``server``: its streams are for every request."""
        shared = server.shared if server.pooler is self else self.shared_of(server)
        if self.keep or not shared:
            shared.append(conn)
        # Else this transport is closed: the connection serves its first stream, then
        # closes (it closes once without a stream, as not pooled: see upstream_h2).

    def drop_shared(self, server: ServerURL, conn: Multiplexed) -> None:
        shared = self._shared.get(server.key)
        if shared is not None and conn in shared:
            shared.remove(conn)

    def take_idle(self, server: ServerURL) -> Pooled | None:
        """The most recently used idle connection to ``server`` that is still usable
        (one that closed while pooled zeroed its ``idle_deadline``); for an ``h2c://``
        server, a stream on one of its connections."""
        if server.h2c:
            return self.take_stream(server)
        idle = server.idle if server.pooler is self else self.idle_of(server)
        if idle:
            now = self.loop.time()
            while idle:
                conn = idle.pop()
                if conn.idle_deadline > now:
                    return conn
                conn.close()
        return None

    def put_idle(self, server: ServerURL, conn: Pooled) -> None:
        idle = server.idle if server.pooler is self else self.idle_of(server)
        # A nonzero idle_deadline: the connection can serve (it zeroes it when it cannot).
        if len(idle) < self.keep and (conn.idle_deadline or conn.is_reusable()):
            conn.idle_deadline = self.loop.time() + self.idle_timeout
            idle.append(conn)
        else:
            conn.close()

    def sweep(self, now: float) -> None:
        """Close idle connections past idleConnTimeout or no longer usable."""
        for pool in self._pools.values():
            keep = []
            for conn in pool:
                if conn.idle_deadline > now and conn.is_reusable():
                    keep.append(conn)
                else:
                    conn.close()
            pool[:] = keep
        for shared in self._shared.values():
            if shared:
                # An HTTP/2 connection without a stream since its idle_deadline, or gone.
                gone = [c for c in shared if not c.usable() or 0 < c.idle_deadline <= now]
                for conn in gone:
                    shared.remove(conn)
                    conn.close()
                if self.read_idle:
                    for conn in list(shared):
                        conn.tick(now)

    def close(self) -> None:
        self.keep = 0
        for pool in self._pools.values():
            for conn in pool:
                conn.close()
            pool.clear()  # the lists its servers hold
        self._pools.clear()
        for shared in self._shared.values():
            for mux in shared:
                mux.close()  # once its streams in flight ended (upstream_h2)
            shared.clear()
        self._shared.clear()

    # -- dialing -----------------------------------------------------------------

    def ssl_context(self, h2: bool = False) -> ssl.SSLContext:
        """The context for ``https://`` servers (``h2``: the one offering ``h2`` then
        ``http/1.1`` by ALPN); UpstreamConnectError when it cannot be built."""
        if h2:
            if self._ssl_h2 is None:
                self._ssl_h2 = self._h2_context()
            return self._ssl_h2
        if self._ssl is None:
            if self.tls_error is not None:
                raise UpstreamConnectError(f"serversTransport {self.name}: {self.tls_error}")
            self._ssl = (
                self._system_context() if self._system_context is not None else system_tls_context()
            )
        return self._ssl

    def _h2_context(self) -> ssl.SSLContext:
        config = self.config
        if self.tls_error is not None:
            raise UpstreamConnectError(f"serversTransport {self.name}: {self.tls_error}")
        # Once per transport that needs h2 (with the system's CAs, when it names none).
        ctx = transport_tls_context(config)
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        return ctx

    async def dial(
        self, server: ServerURL, factory: Callable[[], asyncio.Protocol], h2: bool = False
    ) -> asyncio.Protocol:
        """A new connection to ``server`` (``h2``: offering ``h2`` by ALPN to an ``https://``
        one); raises UpstreamConnectError (UpstreamDialTimeout, 504, when dialTimeout passed)."""
        kwargs = {}
        if server.tls:
            kwargs["ssl"] = self.ssl_context(h2)
            # serverName: the name sent (SNI) and verified; else the URL's host
            # (an IP is sent no SNI and checked against the certificate's IP SANs).
            kwargs["server_hostname"] = self.config.server_name or server.host
        try:
            async with asyncio.timeout(self.dial_timeout):
                _, protocol = await self.loop.create_connection(
                    factory, server.host, server.port, **kwargs
                )
        except TimeoutError:
            raise UpstreamDialTimeout(
                f"dial {server.url}: timed out after {self.dial_timeout}s"
            ) from None
        except (OSError, ssl.SSLError, ValueError) as exc:
            # ValueError: a host the resolver cannot even be asked for (the idna codec's
            # UnicodeError for an empty label or one over 63 bytes), which validation
            # lets through as Traefik's does; a failed dial all the same.
            raise UpstreamConnectError(f"dial {server.url}: {exc}") from None
        return protocol


def system_tls_context() -> ssl.SSLContext:
    """TLS to ``https://`` servers verified against the system's CAs (HTTP/1.1 offered)."""
    ctx = client_tls_context()
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


class TransportRegistry:
    """All ServersTransports by qualified name, updated by diff."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._transports: dict[str, Transport] = {}
        self._system: ssl.SSLContext | None = None
        self.update({})

    def system_context(self) -> ssl.SSLContext:
        """One context over the system's CAs for every transport without TLS settings
        of its own (loading the CAs costs tens of milliseconds: once per process)."""
        if self._system is None:
            self._system = system_tls_context()
        return self._system

    def get(self, name: str) -> Transport:
        return self._transports[name]

    def __contains__(self, name: str) -> bool:
        return name in self._transports

    def plan(self, configs: Mapping[str, ServersTransport]) -> dict[str, Transport]:
        """The transports ``configs`` needs: the current ones where unchanged, new ones
        elsewhere. Changes nothing live (safe off the loop); :meth:`commit` swaps it in."""
        configs = dict(configs)
        configs.setdefault(DEFAULT_TRANSPORT, ServersTransport())
        old = self._transports
        new: dict[str, Transport] = {}
        for name, config in configs.items():
            current = old.get(name)
            if current is not None and current.config == config:
                new[name] = current
            else:
                new[name] = Transport(name, config, self.loop, self.system_context)
        return new

    def commit(self, new: dict[str, Transport]) -> None:
        """Serve ``new`` (from :meth:`plan`); changed or removed transports close their idle connections."""
        for name, transport in self._transports.items():
            if new.get(name) is not transport:
                log.debug(
                    "serversTransport %s changed or removed: closing its idle connections", name
                )
                transport.close()
        self._transports = new

    def update(self, configs: Mapping[str, ServersTransport]) -> None:
        self.commit(self.plan(configs))

    def is_current(self, plan: dict[str, Transport]) -> bool:
        """``plan`` changes nothing: the very transports served now."""
        return plan == self._transports

    def sweep(self) -> None:
        now = self.loop.time()
        for transport in self._transports.values():
            transport.sweep(now)

    def close(self) -> None:
        for transport in self._transports.values():
            transport.close()
