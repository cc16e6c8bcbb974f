"""Server health: which servers of each load balancer are down, and what decides it.

Owns :class:`HealthRegistry`, one per process (the Dataplane's), which outlives router
snapshots: per service name, the set of its server URLs that are down. Every
:class:`~edge.router.http.LoadBalancer` built for that name reads the same set (its
``down``), so a configuration swap keeps the verdicts of the servers that stay (no
flapping on reload) and a check changes what the live routers pick at once, with no
rebuild. Only the loop writes the sets; a build (any thread) only takes them.

Two things take servers out, as Traefik's ``pkg/healthcheck`` does:

* :class:`ActiveChecker`, one asyncio task per load balancer with ``healthCheck``
  (started, kept or stopped by :meth:`HealthRegistry.reconcile` after each commit):
  each server is asked every ``interval`` (``unhealthyInterval`` while down) over a
  new connection from the service's transport (its dial, its TLS to upstreams); a
  status outside 2xx/3xx (or other than ``status``), a failed dial or no answer
  within ``timeout`` is down, a good answer up. Servers start up.
* :class:`PassiveHealth`, per load balancer with ``passiveHealthCheck``: told of
  each real request's outcome (``Backend.failed``, ``Backend.answered``), it takes a
  server out after ``maxFailedAttempts`` failures within ``failureWindow``, for
  ``failureWindow``, or until the active check passes when there is one.

With ``workers: N`` each worker process runs its own checks on its own loop: its
routers read its own sets, so no verdict has to cross processes (the simplest
correct choice; the cost is N probes per interval instead of one).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import re
import typing
from collections.abc import Mapping
from urllib.parse import urljoin, urlsplit

from edge.config.dynamic import ServerHealthCheck
from edge.errors import UpstreamConnectError
from edge.http.codec.parsers import parser_classes
from edge.router.http import Backend, LoadBalancer
from edge.router.services import Connect, StreamAnswer
from edge.transports import ServerURL, Transport

__all__ = ["ActiveChecker", "HealthRegistry", "PassiveHealth", "parse_response_head"]

log = logging.getLogger("edge.health")

MAX_HEAD = 64 * 1024
"""The most of a check's response read for its head; more is a failed check."""
MAX_REDIRECTS = 10  # Go's http.Client stops after 10
REDIRECTS = frozenset({301, 302, 303, 307, 308})

_STATUS_LINE = re.compile(rb"HTTP/1\.[01] ([0-9]{3})(?: [^\r\n]*)?")
_LOCATION = re.compile(rb"(?i)\r\nlocation:[ \t]*([^\r\n]*?)[ \t]*(?:\r\n|$)")


GRPC_CHECK = (
    b"POST /grpc.health.v1.Health/Check HTTP/1.1\r\nHost: %s\r\n%s"
    b"Content-Type: application/grpc\r\nTE: trailers\r\nContent-Length: 5\r\n\r\n"
    b"\x00\x00\x00\x00\x00"
)
"""grpc.health.v1's Check of the server as a whole (an empty HealthCheckRequest, one
uncompressed message of no bytes), as Traefik's ``mode: grpc`` asks."""
GRPC_PARSERS = parser_classes("httptools")
GRPC_ANSWER = 64  # bytes of a HealthCheckResponse kept at most
SERVING = b"\x00\x00\x00\x00\x02\x08\x01"  # one message: field 1 (status) = 1, SERVING


class HealthCheckError(Exception):
    """A check that failed: its message says how (logged with the service and server)."""


def parse_response_head(data: bytes) -> tuple[int, str | None] | None:
    """The status and ``Location`` of the first final response head in ``data``
    (interim 1xx heads skipped); None while the head is incomplete. Sans-IO: raises
    :class:`HealthCheckError` for bytes that are no HTTP/1.x response head."""
    while True:
        end = data.find(b"\r\n\r\n")
        if end < 0:
            if len(data) > MAX_HEAD:
                raise HealthCheckError(f"response head over {MAX_HEAD} bytes")
            return None
        head = data[:end]
        line = head.split(b"\r\n", 1)[0]
        match = _STATUS_LINE.fullmatch(line)
        if match is None:
            raise HealthCheckError(f"not an HTTP/1.x response: {line[:80]!r}")
        status = int(match[1])
        if 100 <= status < 200 and status != 101:
            data = data[end + 4 :]
            continue
        location = _LOCATION.search(head)
        return status, location[1].decode("latin-1") if location else None


class _Probe(asyncio.Protocol):
    """One check's connection: writes the request, reads the response head."""

    def __init__(self, request: bytes) -> None:
        self.request = request
        self.buffer = b""
        self.done: asyncio.Future[tuple[int, str | None]] = (
            asyncio.get_running_loop().create_future()
        )
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are no asyncio.Transport subclass: no isinstance check.
        self.transport = typing.cast(asyncio.Transport, transport)
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        if self.done.done():
            return
        self.buffer += data
        try:
            head = parse_response_head(self.buffer)
        except HealthCheckError as exc:
            self.done.set_exception(exc)
            return
        if head is not None:
            self.done.set_result(head)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(
                HealthCheckError(f"connection closed before a response ({exc or 'EOF'})")
            )

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()


class _Target:
    """Where one server is checked: its URL with the check's scheme, port and path."""

    __slots__ = ("server", "url")

    def __init__(self, server: ServerURL, config: ServerHealthCheck) -> None:
        scheme = config.scheme or ("https" if server.tls else "http")
        if config.mode == "grpc" and scheme == "http":
            scheme = "h2c"  # gRPC without TLS: HTTP/2 with prior knowledge
        host = f"[{server.host}]" if ":" in server.host else server.host
        port = config.port or server.port
        self.url = f"{scheme}://{host}:{port}{config.path or '/'}"
        self.server = ServerURL(f"{scheme}://{host}:{port}")


class ActiveChecker:
    """The active health check of one load balancer: one task, every server in turn."""

    def __init__(
        self,
        name: str,
        lb: LoadBalancer,
        config: ServerHealthCheck,
        down: set[str],
        loop: asyncio.AbstractEventLoop,
        connect: Connect | None = None,
    ) -> None:
        """``connect``: how ``mode: grpc`` gets an HTTP/2 stream
        (:func:`edge.http.server.upstream_h2.connect`, a layer above: it is given)."""
        self.name = name
        self.connect = connect
        self.lb = lb  # the live snapshot's; reconcile() hands it the next one
        self.config = config
        self.down = down
        self.loop = loop
        self.interval = float(config.interval)
        unhealthy = config.unhealthy_interval
        self.unhealthy_interval = self.interval if unhealthy is None else float(unhealthy)
        self.method = (config.method or "GET").encode()
        lines = b"".join(
            f"{name}: {value}\r\n".encode("latin-1")
            for name, value in config.headers.items()
            if name.lower() not in ("host", "connection", "content-length")
        )
        self.extra = lines + b"User-Agent: edge-healthcheck\r\nConnection: close\r\n"
        self.extra_grpc = lines + b"User-Agent: edge-healthcheck\r\n"
        self._targets: dict[str, _Target] = {}
        self._due: dict[str, float] = {}
        self.task: asyncio.Task[None] = loop.create_task(self._run())

    def stop(self) -> None:
        self.task.cancel()

    async def _run(self) -> None:
        while True:
            now = self.loop.time()
            backends = {b.server.url: b for b in self.lb.backends}
            for url in list(self._due):
                if url not in backends:
                    del self._due[url]
                    self._targets.pop(url, None)
            due = []
            for url, backend in backends.items():
                # A server first seen is checked one interval later, as Traefik's ticker.
                when = self._due.setdefault(url, now + self.interval)
                if when <= now:
                    due.append(backend)
            if due:
                await asyncio.gather(*(self._check(b) for b in due))
            now = self.loop.time()
            wake = min(self._due.values(), default=now + self.interval)
            await asyncio.sleep(max(wake - now, 0.005))

    async def _check(self, backend: Backend) -> None:
        url = backend.server.url
        try:
            async with asyncio.timeout(float(self.config.timeout)):
                status = await self._probe(backend)
            reason = self._judge(status)
        except TimeoutError:
            reason = f"no answer within {self.config.timeout}"
        except (HealthCheckError, UpstreamConnectError) as exc:
            reason = str(exc)
        except Exception as exc:  # never the end of the checker: a failed check
            log.exception("service %s: server %s: health check broke", self.name, url)
            reason = f"{type(exc).__name__}: {exc}"
        if reason is None:
            if url in self.down:
                self.down.discard(url)
                log.info("service %s: server %s is up again (health check passed)", self.name, url)
        else:
            if url not in self.down:
                self.down.add(url)
                log.warning(
                    "service %s: server %s is down (health check failed: %s)",
                    self.name,
                    url,
                    reason,
                )
        interval = self.interval if reason is None else self.unhealthy_interval
        self._due[url] = self.loop.time() + interval

    def _judge(self, status: int) -> str | None:
        expected = self.config.status
        if expected == 0 and not 200 <= status < 400:
            return f"status {status}"
        if expected and status != expected:
            return f"status {status}, expected {expected}"
        return None

    async def _probe(self, backend: Backend) -> int:
        target = self._targets.get(backend.server.url)
        if target is None:
            target = self._targets[backend.server.url] = _Target(backend.server, self.config)
        server, url = target.server, target.url
        if self.config.mode == "grpc":
            return await self._ask_grpc(backend.transport, server)
        for _ in range(MAX_REDIRECTS + 1):
            status, location = await self._ask(backend.transport, server, url)
            if not (self.config.follow_redirects and status in REDIRECTS and location):
                return status
            url = urljoin(url, location)
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise HealthCheckError(f"redirect to {location!r}: not an http(s) URL")
            server = ServerURL(f"{parts.scheme}://{parts.netloc}")
        raise HealthCheckError(f"stopped after {MAX_REDIRECTS} redirects")

    async def _ask_grpc(self, transport: Transport, server: ServerURL) -> int:
        """grpc.health.v1's Check over an HTTP/2 stream: 200 when the server says
        SERVING, else HealthCheckError saying what it said."""
        if self.connect is None:
            raise HealthCheckError("gRPC health checks need HTTP/2 to the server")
        host = self.config.hostname.encode() if self.config.hostname else server.authority
        owner = StreamAnswer(self.loop, keep=GRPC_ANSWER)
        stream = await self.connect(transport, server, *GRPC_PARSERS)
        try:
            stream.owner = owner
            stream.parser.expect(b"POST")
            stream.transport.write(GRPC_CHECK % (host, self.extra_grpc))
            status = await owner.done
        except BaseException:
            stream.abort()
            raise
        stream.close()
        if status != 200:
            return status
        fields = dict(owner.trailers or (owner.head.headers if owner.head else None) or ())
        code = fields.get(b"grpc-status", b"").decode("latin-1")
        if code != "0":
            message = fields.get(b"grpc-message", b"").decode("latin-1")
            raise HealthCheckError(
                f"gRPC status {code or 'missing'}{': ' if message else ''}{message}"
            )
        if bytes(owner.body) != SERVING:
            raise HealthCheckError(f"not SERVING: {bytes(owner.body)!r}")
        return 200

    async def _ask(
        self, transport: Transport, server: ServerURL, url: str
    ) -> tuple[int, str | None]:
        parts = urlsplit(url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = self.config.hostname.encode() if self.config.hostname else server.authority
        request = b"%s %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (
            self.method,
            target.encode("latin-1"),
            host,
            self.extra,
        )
        probe = await transport.dial(server, lambda: _Probe(request))
        assert isinstance(probe, _Probe)
        try:
            return await probe.done
        finally:
            probe.close()


class PassiveHealth:
    """The passive health check of one load balancer (see the module doc)."""

    __slots__ = ("active", "down", "failures", "loop", "max_failed", "name", "timers", "window")

    def __init__(
        self,
        name: str,
        down: set[str],
        window: float,
        max_failed: int,
        loop: asyncio.AbstractEventLoop,
        *,
        active: bool,
    ) -> None:
        self.name = name
        self.down = down
        self.window = window
        self.max_failed = max_failed
        self.loop = loop
        self.active = active  # an active check brings servers back, not the window
        self.failures: dict[str, collections.deque[float]] = {}
        self.timers: dict[str, asyncio.TimerHandle] = {}

    def answered(self, url: str, status: int) -> None:
        if status >= 500:
            self.failed(url)
        elif url in self.failures:
            del self.failures[url]

    def failed(self, url: str) -> None:
        now = self.loop.time()
        times = self.failures.setdefault(url, collections.deque())
        times.append(now)
        while times and times[0] <= now - self.window:
            times.popleft()
        if len(times) < self.max_failed or url in self.down:
            return
        self.down.add(url)
        del self.failures[url]
        log.warning(
            "service %s: server %s is down for %gs (%d failed requests within %gs)",
            self.name,
            url,
            self.window,
            len(times),
            self.window,
        )
        if not self.active:
            self.timers[url] = self.loop.call_later(self.window, self._restore, url)

    def _restore(self, url: str) -> None:
        self.timers.pop(url, None)
        if url in self.down:
            self.down.discard(url)
            log.info("service %s: server %s is back (failureWindow passed)", self.name, url)

    def stop(self) -> None:
        for timer in self.timers.values():
            timer.cancel()
        self.timers.clear()


class HealthRegistry:
    """One process's server health (see the module doc)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, connect: Connect | None = None) -> None:
        """``connect``: HTTP/2 streams for ``mode: grpc`` checks (see ActiveChecker)."""
        self.loop = loop
        self.connect = connect
        self.down: dict[str, set[str]] = {}  # service -> URLs of its servers down
        self.checkers: dict[str, ActiveChecker] = {}
        self.passive: dict[str, PassiveHealth] = {}

    def down_for(self, service: str) -> set[str]:
        """The set of ``service``'s servers down, the same one across snapshots."""
        return self.down.setdefault(service, set())

    def passive_for(
        self, service: str, window: float, max_failed: int, *, active: bool
    ) -> PassiveHealth:
        """``service``'s passive check, kept across snapshots while its settings hold
        (its failures counted so far with it)."""
        found = self.passive.get(service)
        if found is not None and (found.window, found.max_failed, found.active) == (
            window,
            max_failed,
            active,
        ):
            return found
        made = PassiveHealth(
            service, self.down_for(service), window, max_failed, self.loop, active=active
        )
        # Swapped in on the loop by reconcile(); a build may run in another thread.
        return made

    def reconcile(self, services: Mapping[str, object]) -> None:
        """After a commit, on the loop: one checker per load balancer with a health check
        (a running one kept, and handed the new load balancer, while its settings
        hold), none for the others; the verdicts kept for the servers that stay."""
        wanted: dict[str, LoadBalancer] = {
            name: lb
            for name, lb in services.items()
            if isinstance(lb, LoadBalancer) and lb.down is not None
        }
        for name, checker in list(self.checkers.items()):
            lb = wanted.get(name)
            if lb is None or lb.health_check != checker.config:
                checker.stop()
                del self.checkers[name]
            else:
                checker.lb = lb
        passive: dict[str, PassiveHealth] = {}
        for name, lb in wanted.items():
            if lb.health_check is not None and name not in self.checkers:
                self.checkers[name] = ActiveChecker(
                    name, lb, lb.health_check, self.down_for(name), self.loop, self.connect
                )
            for backend in lb.backends:
                if backend.health is not None:
                    passive[name] = backend.health
                    break
        for name, old in self.passive.items():
            if passive.get(name) is not old:
                old.stop()
        self.passive = passive
        for name in list(self.down):
            lb = wanted.get(name)
            if lb is None:
                del self.down[name]
            else:
                self.down[name] &= {b.server.url for b in lb.backends}

    def status(self, service: str) -> set[str]:
        """The URLs of ``service``'s servers down now (empty without health checks)."""
        return self.down.get(service, set())

    def stop(self) -> None:
        for checker in self.checkers.values():
            checker.stop()
        self.checkers.clear()
        for passive in self.passive.values():
            passive.stop()
        self.passive.clear()
