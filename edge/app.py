"""Wiring: providers -> watcher -> listeners -> entrypoints.

:class:`Dataplane` is the serving half of a process: its entrypoints, its
ServersTransports and the listeners that apply a validated configuration, in order:
update the ServersTransports (by diff), build the new routers, swap them into the
entrypoints. :class:`Edge` is the single-process app (``workers: 1``): providers and
watcher feeding one Dataplane. With ``workers: N`` the same Dataplane runs in each
worker process, fed over a pipe by the supervisor (:mod:`edge.supervisor`), which runs
the providers and the watcher.

SIGTERM/SIGINT drain (accept for requestAcceptGraceTimeout, then stop accepting and
finish in-flight requests within graceTimeOut);
SIGHUP makes the providers re-read their sources; SIGUSR1 reopens the log files.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from edge import __version__
from edge.api import API, APIAnswer
from edge.config.diff import Backends
from edge.config.runtime import RuntimeConfig, check_tls
from edge.config.static import INTERNAL_ENTRY_POINT, StaticConfig
from edge.config.static import EntryPoint as EntryPointConfig
from edge.descriptors import Budget
from edge.entrypoints import EntryPoints
from edge.entrypoints import metrics as prometheus
from edge.entrypoints.accesslog import AccessLogger
from edge.entrypoints.base import EntryPoint
from edge.entrypoints.observability import Observability
from edge.entrypoints.opened import OpenedEntryPoints
from edge.entrypoints.tcp import TCPEntryPoint
from edge.entrypoints.tracing import Tracer
from edge.entrypoints.udp import UDP_SHARE, UDPEntryPoint
from edge.http.server import upstream_h2
from edge.http.server.connection import Metered
from edge.logs import reopen_logs
from edge.providers.base import Provider
from edge.providers.file import FileProvider
from edge.router.factory import build_router_sets, servers_for
from edge.router.health import HealthRegistry
from edge.router.tcp import tcp_servers_for
from edge.router.udp import udp_servers_for
from edge.tls import tickets as ticket_keys
from edge.tls.certs import TLSCertificates, file_stamps
from edge.transports import TransportRegistry
from edge.watcher import Listener, Watcher

if TYPE_CHECKING:
    from edge.providers.kubernetes.client import KubeCore
    from edge.providers.kubernetes.gateway_provider import Opened

log = logging.getLogger("edge")

Internal = Callable[[bytes], tuple[int, bytes] | None]
"""The app's ``/ping`` and ``/ready``: path -> (status, text), None for another path."""
InternalAnswers = Callable[[bytes, bytes], APIAnswer | None]
"""An entry point's own answers: (path, query) -> (status, body, content type, header lines)."""
TEXT = b"text/plain; charset=utf-8"
CERT_POLL = 1.0
"""Seconds between two looks at the certificate files the configuration names."""
PROVIDERS_STOP = 5.0
"""Seconds the app waits at shutdown for its providers to stop (a Kubernetes source's
own stop is bounded by about 3 s) before it stops their Kubernetes cores itself."""
CORE_STOP = 2.0
"""Seconds a Kubernetes core's reflector threads get to end at shutdown."""
CERT_RETRY = (1.0, 5.0)
"""Seconds before the first round that reads again the certificate files a snapshot
could not read for a transient reason, and the most between two such rounds (the wait
doubles while they keep failing)."""


def build_providers(static: StaticConfig) -> list[Provider]:
    """The providers the static configuration asks for (those this version has)."""
    providers: list[Provider] = []
    if static.providers.file is not None:
        f = static.providers.file
        providers.append(
            FileProvider(filename=f.filename or None, directory=f.directory or None, watch=f.watch)
        )
    k8s = static.providers.kubernetes_ingress
    crd = static.providers.kubernetes_crd
    gateway = static.providers.kubernetes_gateway
    nginx = static.providers.kubernetes_ingress_nginx
    if k8s is not None or crd is not None or gateway is not None or nginx is not None:
        # Imported here: the kubernetes client costs its import time only to those using it.
        from edge.providers.kubernetes.provider import (
            KubernetesCRDProvider,
            KubernetesIngressProvider,
            SharedCores,
        )

        # One core per cluster: sources on the same API server with the same credentials
        # share its connection, reflectors and cache.
        cores = SharedCores()
        throttle = static.providers_throttle_duration
        if k8s is not None:
            providers.append(
                KubernetesIngressProvider(k8s, default_throttle=throttle, core=cores.core(k8s))
            )
        if crd is not None:
            providers.append(
                KubernetesCRDProvider(crd, default_throttle=throttle, core=cores.core(crd))
            )
        # Gateway listeners and ingress-nginx's tcp/udp-services entries bind to the
        # entry points by port, as Traefik binds listeners.
        from edge.providers.kubernetes.gateway import EntryPointPort

        ports = [
            EntryPointPort(name, ep.port, ep.protocol == "udp")
            for name, ep in static.entry_points.items()
        ]
        if nginx is not None:
            from edge.providers.kubernetes.ingress_nginx_provider import IngressNGINXProvider

            providers.append(
                IngressNGINXProvider(
                    nginx,
                    default_throttle=throttle,
                    core=cores.core(nginx),  # type: ignore[arg-type]  # same credential keys
                    tcp_services_config_map=nginx.tcp_services_config_map,
                    udp_services_config_map=nginx.udp_services_config_map,
                    entry_points=ports,
                )
            )
        if gateway is not None:
            from edge.providers.kubernetes.gateway_provider import KubernetesGatewayProvider

            providers.append(
                KubernetesGatewayProvider(
                    gateway,
                    entry_points=ports,
                    default_throttle=throttle,
                    core=cores.core(gateway),
                )
            )
    return providers


def _changed_backends(previous: RuntimeConfig, runtime: RuntimeConfig) -> Backends | None:
    """The load balancers whose servers alone changed from ``previous`` to ``runtime``
    (:func:`edge.config.diff.changed_backends`), or None when routers must be rebuilt.

    An endpoints-only round validated ``runtime`` from ``previous`` and kept every
    verdict, and HTTP servers alone never change a router (a service left with none
    answers 503): what was found is the answer. Otherwise, with TCP or UDP servers,
    ``runtime`` was validated in full, so the change is applied in place only where
    every element kept its status and errors (a TCP or UDP service left with no server
    may disable its routers)."""
    found = runtime.changed_backends(previous)
    if found is None:
        return None
    if runtime.validated_from(previous) or not (found.tcp or found.udp):
        return found
    return found if _verdicts(previous) == _verdicts(runtime) else None


def _verdicts(runtime: RuntimeConfig) -> dict[tuple[str, str], tuple[str, tuple[str, ...]]]:
    return {
        (label, info.name): (info.status, tuple(info.errors)) for label, info in runtime.elements()
    }


class Dataplane:
    """One process's entrypoints and ServersTransports, and the listeners that apply a snapshot.

    ``internal`` answers ``/ping`` and ``/ready`` on the ping entrypoint; ``reuse_port``
    binds every entrypoint with SO_REUSEPORT (several worker processes share each port).

    ``retry`` is set by whoever runs this Dataplane's rounds (the single process's
    watcher, a worker): it runs a round again with the configuration served. A
    certificate snapshot committed with files it could not read for a transient
    reason (EMFILE, ENOMEM, EIO: :func:`edge.tls.certs.transient`) is not current,
    so such a round reads them again; the Dataplane asks for one :data:`CERT_RETRY`
    seconds after the commit, even when no file and no route changed, until a
    snapshot reads them all. Meanwhile the routers that lost their certificate are
    disabled with the reason, which the API shows.
    """

    def __init__(
        self,
        static: StaticConfig,
        loop: asyncio.AbstractEventLoop,
        *,
        parser: str | None = None,
        internal: Internal | None = None,
        reuse_port: bool = False,
        ticket_key: bytes | None = None,
    ) -> None:
        """``ticket_key``: the session-ticket key of every TLS context this process builds
        (the supervisor's, shared by its workers); None: a new one (:mod:`edge.tls.tickets`)."""
        self.static = static
        self.ticket_key = ticket_key or ticket_keys.new_key()
        if not ticket_keys.available():
            log.warning(
                "TLS session tickets: keys cannot be shared here (%s): a ticket resumes only on"
                " the certificate snapshot, and the worker, that issued it",
                sys.implementation.name,
            )
        self.loop = loop
        self.transports = TransportRegistry(loop)
        # The servers down, by service, and the checks deciding it: outlives snapshots.
        self.health = HealthRegistry(loop, upstream_h2.connect)
        self.entrypoints = EntryPoints(loop, self.transports)
        # The descriptors the data plane may take: every TCP entry point admits its
        # connections from it, UDP session caps fit it (edge.descriptors).
        self.budget = Budget()
        self.runtime: RuntimeConfig | None = None
        self.services: dict = {}  # the HTTP services of the live routers, by name
        self.tcp_services: dict = {}  # their TCP services
        self.udp_services: dict = {}  # their UDP services
        self.certs: TLSCertificates | None = None  # the live routers' certificate snapshot
        self._tls_reported: set[str] = set()  # check_tls's messages logged, still true
        self.retry: Callable[[], None] | None = None  # runs a round again (see the class doc)
        self._retry_timer: asyncio.TimerHandle | None = None
        self._retries = 0  # rounds in a row whose snapshot had transient failures
        self.access_log = (
            AccessLogger(static.access_log, loop) if static.access_log is not None else None
        )
        # tracing: the spans of HTTP exchanges, exported off the loop; a traced route's
        # exchanges report to a Traced, which chains to the access log.
        self.tracer = Tracer(static.tracing, os.environ) if static.tracing is not None else None
        # Traefik's API: this process's runtime, on the traefik entry point with
        # api.insecure, and for the routers naming api@internal (entrypoints.internal).
        api = static.api
        self.api = (
            API(
                static,
                lambda: self.runtime,
                __version__,
                down=self.health.status,
                samples=self._samples,
                opened=lambda: self.opened,
            )
            if api is not None
            else None
        )
        ping_ep = static.ping.entry_point if static.ping is not None else None
        # metrics.prometheus: every HTTP exchange counted, /metrics where it is served.
        prom = static.metrics.prometheus if static.metrics is not None else None
        self.metrics = (
            prometheus.Registry(prom, add_internals=static.metrics.add_internals)
            if prom is not None and static.metrics is not None
            else None
        )
        metrics_ep = prom.entry_point if prom is not None and not prom.manual_routing else None
        # What each entry point's and each route's exchanges report to (observability).
        self.observability = Observability(self.access_log, self.metrics, self.tracer)
        udp_count = sum(1 for config in static.entry_points.values() if config.protocol == "udp")
        for name, config in static.entry_points.items():
            if config.protocol == "udp":
                # All UDP sessions together hold at most UDP_SHARE of the descriptors.
                share = UDP_SHARE / udp_count
                udp = UDPEntryPoint(name, config, loop, reuse_port=reuse_port, share=share)
                if self.access_log is not None and config.observability.access_logs:
                    # a line per session (edge's own)
                    udp.proxy.log_session = self.access_log.session_hook(name)
                self.entrypoints.add(udp)
                continue
            self.entrypoints.add(
                TCPEntryPoint(
                    name,
                    config,
                    loop,
                    parser=parser,
                    internal=self._internal_for(
                        internal if name == ping_ep else None,
                        self.api if name == INTERNAL_ENTRY_POINT and api and api.insecure else None,
                        self.metrics if name == metrics_ep else None,
                    ),
                    access_log=self._records(name, config),
                    reuse_port=reuse_port,
                    budget=self.budget,
                )
            )
            if self.access_log is not None and config.observability.access_logs:
                # a line per relayed connection (edge's own)
                tcp = self.entrypoints.all[name]
                assert isinstance(tcp, TCPEntryPoint)
                tcp.peek.log_relay = self.access_log.relay_hook(name)
        if self.metrics is not None:
            prometheus.watch_dataplane(self.metrics, self)
        # runtimeEntryPoints: those the routers name by port, opened and closed by rounds.
        opening = static.runtime_entry_points
        self.opened = (
            OpenedEntryPoints(
                self.entrypoints,
                opening.host,
                functools.partial(self._opened_entry_point, parser, reuse_port),
                loop,
                retry=lambda: self.retry() if self.retry is not None else None,
            )
            if opening is not None
            else None
        )

    def _opened_entry_point(
        self, parser: str | None, reuse_port: bool, name: str, config: EntryPointConfig
    ) -> EntryPoint:
        """An entry point opened at run time (:mod:`edge.entrypoints.opened`): as the
        static ones, logged and counted, but answering no ``/ping``, API or ``/metrics``;
        a UDP one's sessions may hold as much as each UDP entry point open now (those
        keep theirs: the sum may pass UDP_SHARE)."""
        if config.protocol == "udp":
            udps = sum(isinstance(ep, UDPEntryPoint) for ep in self.entrypoints.all.values())
            share = UDP_SHARE / max(udps, 1)
            udp = UDPEntryPoint(name, config, self.loop, reuse_port=reuse_port, share=share)
            if self.access_log is not None and config.observability.access_logs:
                udp.proxy.log_session = self.access_log.session_hook(name)
            return udp
        tcp = TCPEntryPoint(
            name,
            config,
            self.loop,
            parser=parser,
            access_log=self._records(name, config),
            reuse_port=reuse_port,
            budget=self.budget,
        )
        if self.access_log is not None and config.observability.access_logs:
            tcp.peek.log_relay = self.access_log.relay_hook(name)
        return tcp

    def _records(self, name: str, config: EntryPointConfig) -> Callable[..., None] | Metered | None:
        """What HTTP entry point ``name``'s exchanges report to when they end: those no
        route takes, as its ``observability`` says; routed ones, as their route's
        (edge.entrypoints.observability)."""
        return self.observability.entry_point(name, config.observability)

    def _samples(self) -> prometheus.Samples | None:
        """What ``/metrics`` shows now (the API's ``/api/requests``); None without metrics."""
        metrics = self.metrics
        if metrics is None:
            return None
        return metrics.shared if metrics.shared is not None else metrics.collect()

    @staticmethod
    def _internal_for(
        ping: Internal | None, api: API | None, metrics: prometheus.Registry | None = None
    ) -> InternalAnswers | None:
        """What an entry point answers itself (GET and HEAD): ``/ping`` and ``/ready`` where
        ping is, ``/api/...`` where the API is, ``/metrics`` where Prometheus scrapes;
        None where none is."""
        if ping is None and api is None and metrics is None:
            return None
        scrape = prometheus.answer(metrics) if metrics is not None else None

        def answer(path: bytes, query: bytes) -> APIAnswer | None:
            if ping is not None:
                found = ping(path)
                if found is not None:
                    return found[0], found[1], TEXT, b""
            if scrape is not None:
                text = scrape(path)
                if text is not None:
                    return text
            return api.answer(path, query) if api is not None else None

        return answer

    # -- the listener: prepare (any thread), commit (the loop) ----------------------

    @property
    def listeners(self) -> list[Listener]:
        """What the watcher runs for every validated configuration: this Dataplane."""
        return [self]

    def prepare(self, runtime: RuntimeConfig) -> Callable[[], None]:
        """Build everything ``runtime`` needs, changing nothing live; returns the commit.

        Safe off the loop (the watcher prepares there): it reads the live
        transports and services and builds new objects. The commit, on the loop,
        swaps them in: the ServersTransports, then every entrypoint's RouterSet
        (one assignment each), or, for an endpoints-only change, the new servers of
        the live load balancers. Rounds never overlap, so what a preparation read
        is still live when its commit runs.
        """
        transports = self.transports.plan(runtime.servers_transports)
        previous = self.runtime
        changed = _changed_backends(previous, runtime) if previous is not None else None
        live = self.certs
        # A certificate file rewritten since (renewed in place) needs the full path,
        # which reads it: its stamps, a stat per file, are checked on every round.
        certs_current = live is None or live.current(runtime.tls)
        # A port that could not be opened is tried again by a full round.
        unopened = self.opened is not None and bool(self.opened.errors)
        if (
            changed is not None
            and self.transports.is_current(transports)
            and certs_current
            and not unopened
        ):
            # Endpoints only: the live load balancers take their new servers in
            # place; routers, pools and round-robin state stay.
            self._check_tls(runtime, self.certs)  # the same tls section: the same verdicts
            http = servers_for(self.services, runtime, changed.http, transports, self.health)
            tcp = tcp_servers_for(self.tcp_services, runtime, changed.tcp)
            udp = udp_servers_for(self.udp_services, runtime, changed.udp)

            def in_place() -> None:
                for service, servers in http:
                    service.update(servers)
                for tcp_service, tcp_servers in tcp:
                    tcp_service.update(tcp_servers)
                for udp_service, udp_servers in udp:
                    udp_service.update(udp_servers)
                if udp:
                    self._udp_servers_changed()
                if http:
                    self.health.reconcile(self.services)
                self.runtime = runtime
                log.info(
                    "configuration applied in place: new servers for %d services",
                    len(http) + len(tcp) + len(udp),
                )

            return in_place
        services: dict = {}
        tcp_services: dict = {}
        udp_services: dict = {}
        # This configuration's certificates: read now where the tls section or a file it
        # names changed (a change applies to new connections), else the live snapshot:
        # its SSL contexts, and the session-ticket keys clients resume with, stay.
        if live is not None and certs_current:
            certs = live
        else:
            certs = TLSCertificates(runtime.tls, ticket_key=self.ticket_key)
        self._check_tls(runtime, certs)
        opening = self.opened.plan(runtime) if self.opened is not None else None
        routers = build_router_sets(
            runtime,
            transports,
            {**self.entrypoints.all, **opening.new}
            if opening and opening.new
            else self.entrypoints.all,
            services,
            certs,
            tcp_services=tcp_services,
            udp_services=udp_services,
            health=self.health,
            mirror_connect=upstream_h2.connect,
            observe=self.observability.route,
        )
        rules: dict[str, str] = {}
        if self.tracer is not None:
            rules = {name: info.config.rule for name, info in runtime.http_routers.items()}

        def switch() -> None:
            self.transports.commit(transports)
            self.services = services
            self.tcp_services = tcp_services
            self.udp_services = udp_services
            self.certs = certs
            if self.tracer is not None:
                self.tracer.rules = rules  # the routers' rules, for detailed spans
            if self.opened is not None and opening is not None:
                self.opened.commit(opening)
            self.entrypoints.switch(routers)
            self.health.reconcile(services)
            self.runtime = runtime
            self._retry_transient(certs)
            # The snapshot just built lives until the next one: keep it out of the
            # cyclic GC's full passes, which stop every thread for as long as they
            # take to walk the heap (0.1 s and more at 10,000 routers). Snapshots
            # hold no reference cycles, so the one they replace is freed by
            # reference counting all the same.
            gc.freeze()
            log.info(
                "configuration applied: %s",
                ", ".join(f"{ep}: {len(r)} routers" for ep, r in routers.items())
                or "no entrypoint",
            )

        return switch

    def _udp_servers_changed(self) -> None:
        """After UDP load balancers took new servers in place: each UDP entry point's
        router reads them again, and the entry point switches to the same router set
        (sessions on a server gone end, new host names are resolved)."""
        for ep in self.entrypoints.all.values():
            if isinstance(ep, UDPEntryPoint) and ep.routers.udp is not None:
                ep.routers.udp.refresh()
                ep.switch(ep.routers)

    def __call__(self, runtime: RuntimeConfig) -> None:
        self.apply(runtime)

    def apply(self, runtime: RuntimeConfig) -> None:
        """Prepare and commit ``runtime`` inline (workers, tools); a failure is logged, the
        previous configuration stays."""
        try:
            commit = self.prepare(runtime)
        except Exception:
            log.exception("configuration could not be built; keeping the previous one")
            return
        commit()

    def _retry_transient(self, certs: TLSCertificates) -> None:
        """After a commit: when ``certs`` could not read some files for a transient reason,
        have a round run again (``retry``) in a while, which reads them again; the wait
        doubles from CERT_RETRY[0] to CERT_RETRY[1] while they keep failing."""
        if self._retry_timer is not None:
            self._retry_timer.cancel()
            self._retry_timer = None
        if not certs.transient or self.retry is None:
            self._retries = 0
            return
        first, most = CERT_RETRY
        delay = min(first * 2**self._retries, most)
        self._retries += 1
        log.warning(
            "certificates: %d failed for a transient reason (%s); reading them again in %gs",
            len(certs.transient),
            certs.transient[0],
            delay,
        )
        self._retry_timer = self.loop.call_later(delay, self._run_retry)

    def _run_retry(self) -> None:
        self._retry_timer = None
        if self.retry is not None:
            self.retry()

    def _check_tls(self, runtime: RuntimeConfig, certs: TLSCertificates | None) -> None:
        """Disable the routers whose certificate or TLS options cannot serve (the reason
        names the file). Each reason is logged once, when it appears, and its end is
        said, as the watcher does for validation errors: endpoint churn every second or
        two rebuilds nothing here and must not write the same error again."""
        messages = check_tls(runtime, certs) if certs is not None else []
        for message in messages:
            if message not in self._tls_reported:
                log.error("%s", message)
        current = set(messages)
        for message in sorted(self._tls_reported - current):
            log.info("resolved: %s", message)
        self._tls_reported = current

    # -- life cycle ----------------------------------------------------------------

    async def start(self) -> None:
        """Bind every entrypoint; raises ``OSError`` when one cannot be bound."""
        await self.entrypoints.start()

    async def stop(self) -> None:
        """Keep accepting for each entrypoint's requestAcceptGraceTimeout, then stop
        accepting, drain each within its graceTimeOut, close the pools."""
        if self._retry_timer is not None:
            self._retry_timer.cancel()
            self._retry_timer = None
        if self.opened is not None:
            self.opened.close()
        await self._accept_grace()
        await self.entrypoints.stop(self.graces())
        self.health.stop()
        if self.access_log is not None:
            self.access_log.close()
        if self.tracer is not None:
            self.tracer.close()

    async def _accept_grace(self) -> None:
        """Traefik's ``lifeCycle.requestAcceptGraceTimeout``: an entrypoint keeps
        accepting and serving as before for that long once the stop began (``/ping`` and
        ``/ready`` answer 503 meanwhile), so the load balancers in front take this
        process out of rotation before its port refuses connections; then it stops
        accepting. The drain (graceTimeOut) starts when the longest of them ends."""
        waits = {
            ep: float(ep.config.transport.life_cycle.request_accept_grace_timeout)
            for ep in self.entrypoints.all.values()
        }
        longest = max(waits.values(), default=0.0)
        if longest <= 0:
            return
        log.info("stopping: accepting requests for %.1fs more (requestAcceptGraceTimeout)", longest)

        async def close_after(ep: TCPEntryPoint | UDPEntryPoint, delay: float) -> None:
            await asyncio.sleep(delay)
            ep.stop_accepting()

        await asyncio.gather(*(close_after(ep, delay) for ep, delay in waits.items()))

    def graces(self) -> dict[str, float]:
        return {
            name: ep.config.transport.life_cycle.grace_time_out
            for name, ep in self.entrypoints.all.items()
        }


class FileStamps:
    """A listener, first in the watcher's list: the stamps of the certificate files
    each configuration names (:func:`edge.tls.certs.file_stamps`), taken while the
    round is prepared and before the listeners after it read the files, so a file
    rewritten meanwhile reads as changed."""

    def __init__(self) -> None:
        self.tls: object = None
        self.stamps: tuple = ()

    def prepare(self, runtime: RuntimeConfig) -> Callable[[], None]:
        stamps = file_stamps(runtime.tls)

        def commit() -> None:
            self.tls, self.stamps = runtime.tls, stamps

        return commit

    def __call__(self, runtime: RuntimeConfig) -> None:
        self.prepare(runtime)()


class ControlPlane:
    """The configuration pipeline up to the listeners: the providers and the watcher.

    Every validated configuration goes to ``listeners`` in order: a Dataplane's (one
    process) or the supervisor's, which sends it to the workers.
    """

    def __init__(
        self, static: StaticConfig, loop: asyncio.AbstractEventLoop, listeners: list[Listener]
    ) -> None:
        self.loop = loop
        self.providers: list[Provider] = build_providers(static)
        self._stamps = (
            FileStamps() if any(getattr(p, "watch", False) for p in self.providers) else None
        )
        self.watcher = Watcher(
            entry_points=static.entry_point_protocols(),
            throttle=static.providers_throttle_duration,
            listeners=listeners if self._stamps is None else [self._stamps, *listeners],
            loop=loop,
            offload=True,  # merge, validation and router builds off the loop
            default_rule_syntax=static.core.default_rule_syntax,
        )
        # Expected from the start, not when they start: a ready check answered between
        # the entry points' binding and start() must not see "nothing expected".
        for provider in self.providers:
            self.watcher.expect(provider.name)
        self._tasks: set[asyncio.Task] = set()
        self.cores_stopped: list[tuple[KubeCore, bool]] = []  # set by stop()
        # The certificate files of the configuration served, while a file provider
        # watches: their stamps, checked every CERT_POLL seconds.
        self._files_timer: asyncio.TimerHandle | None = None

    def follow_opened(self, opened: Opened) -> None:
        """Each provider that follows the run-time entry points (``follow_opened``: the
        ports that could not be opened, what each is opened for) is given ``opened``:
        the Dataplane's (one process) or the supervisor's view of its workers'."""
        for provider in self.providers:
            follow = getattr(provider, "follow_opened", None)
            if follow is not None:
                follow(opened)

    @property
    def ready(self) -> bool:
        """Every provider's first configuration went through the listeners."""
        return self.watcher.ready

    def waiting_for(self) -> bytes:
        """Why this process is not ready yet, a line per provider that says (its sources without a first sync)."""
        lines = []
        for provider in self.providers:
            waiting = getattr(provider, "waiting_for", None)
            for what, why in (waiting() if waiting is not None else {}).items():
                lines.append(f"\n{provider.name}: waiting for {what}: {why}".encode())
        return b"".join(lines)

    def start(self) -> None:
        for provider in self.providers:
            # The provider's own window (throttleDuration) when it has one, else the global one.
            publish = functools.partial(self.watcher.publish, throttle=provider.throttle)
            task = self.loop.create_task(provider.run(publish), name=f"provider {provider.name}")
            self._tasks.add(task)
            task.add_done_callback(self._provider_done)
        if self._stamps is not None:
            self._files_timer = self.loop.call_later(CERT_POLL, self._check_files)

    def _check_files(self) -> None:
        """A certificate, key or CA file the configuration names was rewritten (renewed
        in place): run a round, which reads it. Traefik's file provider reloads on any
        change in its directory, certificates there included; here any such file is
        followed, wherever it is, while a file provider watches."""
        known = self._stamps
        runtime = self.watcher.runtime
        if known is not None and runtime is not None and known.tls is runtime.tls:
            stamps = file_stamps(runtime.tls)
            if stamps != known.stamps:
                log.info("certificate files changed: reading them again")
                known.stamps = stamps  # once: the round takes them again
                self.watcher.refresh()
        self._files_timer = self.loop.call_later(CERT_POLL, self._check_files)

    def _provider_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("provider stopped: %s", task.exception(), exc_info=task.exception())

    def reload(self) -> None:
        """SIGHUP: the providers read their sources again, and a round runs even when
        nothing in them changed, so the files the configuration names (certificates
        renewed in place) are read again, as Traefik's file provider does on SIGHUP."""
        log.info("SIGHUP: re-reading the providers")
        for provider in self.providers:
            provider.reload()
        self.watcher.refresh()

    def cores(self) -> list[KubeCore]:
        """The Kubernetes cores the providers read, each once (one per cluster)."""
        found: dict[int, KubeCore] = {}
        for provider in self.providers:
            core = getattr(provider, "core", None)
            if core is not None:
                found.setdefault(id(core), core)
        return list(found.values())

    async def stop(self) -> None:
        """Stop the providers (configurations still throttled are dropped) and wait for
        them, up to PROVIDERS_STOP; then stop the Kubernetes cores they read, whatever
        the providers did: a source whose stop raised, timed out or never ran leaves no
        reflector retrying after edge. Each core's result is kept in ``cores_stopped``."""
        if self._files_timer is not None:
            self._files_timer.cancel()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await self.watcher.close()
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=PROVIDERS_STOP)
            for task in late:
                log.warning("%s: still stopping after %.0f s", task.get_name(), PROVIDERS_STOP)
        cores = self.cores()
        if cores:
            # Shielded: a stop cancelled meanwhile must not cancel this one unbegun.
            stopping = self.loop.run_in_executor(None, _stop_cores, cores)
            self.cores_stopped = await asyncio.shield(stopping)


def _stop_cores(cores: list[KubeCore]) -> list[tuple[KubeCore, bool]]:
    """Stop each core (blocking); whether every one of its reflector threads ended."""
    stopped = []
    for core in cores:
        ended = core.stop(CORE_STOP)
        if not ended:
            log.warning(
                "kubernetes core %s: still stopping after %.1f s: %s",
                core.host,
                CORE_STOP,
                ", ".join(core.alive()),
            )
        stopped.append((core, ended))
    return stopped


class Stoppable:
    """Signals shared by the single-process app and the supervisor.

    SIGTERM/SIGINT start one graceful :meth:`stop` (a second signal changes
    nothing); SIGHUP re-reads the providers; SIGUSR1 reopens the log files.
    Subclasses set ``loop``,
    ``control``, ``_tasks`` and ``_stopping``, and define ``stop()``.
    """

    loop: asyncio.AbstractEventLoop
    control: ControlPlane
    _tasks: set[asyncio.Task]
    _stopping: bool

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def wait_stopped(self) -> None:
        raise NotImplementedError

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, self.request_stop)
        self.loop.add_signal_handler(signal.SIGHUP, self.reload)
        self.loop.add_signal_handler(signal.SIGUSR1, self.reopen_logs)

    def reopen_logs(self) -> None:
        """SIGUSR1 (Traefik's, for logrotate): the log files are opened again by path."""
        reopen_logs()

    def reload(self) -> None:
        self.control.reload()

    def request_stop(self) -> None:
        if not self._stopping:
            self._stopping = True
            task = self.loop.create_task(self.stop())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)


class Edge(Stoppable):
    """The single-process app: a :class:`ControlPlane` feeding one :class:`Dataplane`."""

    def __init__(self, static: StaticConfig, *, parser: str | None = None) -> None:
        self.static = static
        self.parser = parser
        self.loop = asyncio.get_running_loop()
        self.dataplane = Dataplane(static, self.loop, parser=parser, internal=self._internal)
        self.control = ControlPlane(static, self.loop, self.dataplane.listeners)
        self.dataplane.retry = (
            self.control.watcher.refresh
        )  # a round with the configurations applied now
        self.transports = self.dataplane.transports
        self.entrypoints = self.dataplane.entrypoints
        self.access_log = self.dataplane.access_log
        self.watcher = self.control.watcher
        self.providers = self.control.providers
        if self.dataplane.opened is not None:  # a port it cannot open: its provider is told
            self.control.follow_opened(self.dataplane.opened)
        if self.dataplane.metrics is not None:
            prometheus.watch_reloads(self.dataplane.metrics, self.watcher)
            prometheus.watch_kubernetes(self.dataplane.metrics, self.providers)
        self._tasks: set[asyncio.Task] = set()
        self._stopped = asyncio.Event()
        self._stopping = False

    def reopen_logs(self) -> None:
        reopen_logs(self.access_log)

    @property
    def runtime(self) -> RuntimeConfig | None:
        """The configuration the entrypoints serve."""
        return self.dataplane.runtime

    # -- internal endpoints --------------------------------------------------------

    def _internal(self, path: bytes) -> tuple[int, bytes] | None:
        if path == b"/ping":
            return (503, b"Service Unavailable") if self._stopping else (200, b"OK")
        if path == b"/ready":
            if self.control.ready and not self._stopping:
                return 200, b"ready"
            return 503, b"not ready" + self.control.waiting_for()
        return None

    # -- life cycle ----------------------------------------------------------------

    async def start(self) -> None:
        await self.dataplane.start()
        self.control.start()

    async def stop(self) -> None:
        self._stopping = True
        log.info("stopping: draining in-flight requests")
        await self.control.stop()
        await self.dataplane.stop()
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()


async def serve(app: Stoppable) -> None:
    """Start ``app`` (an Edge or a Supervisor), serve until a signal stops it."""
    app.install_signal_handlers()
    try:
        await app.start()
    except OSError as exc:
        log.error("cannot start: %s", exc)
        with contextlib.suppress(Exception):
            await app.stop()
        raise SystemExit(1) from None
    await app.wait_stopped()


async def run(static: StaticConfig, *, parser: str | None = None) -> None:
    await serve(Edge(static, parser=parser))
