"""``workers: N``: one supervisor running the configuration pipeline, N worker processes serving.

With ``workers`` > 1, ``edge run`` becomes the :class:`Supervisor`: it runs the providers
and the watcher (:class:`edge.app.ControlPlane`), whose listener *sends* each validated
configuration to every worker instead of building routers. Each :class:`Worker` runs
what one process runs with ``workers: 1`` minus the providers: a
:class:`edge.app.Dataplane` (entrypoints bound with SO_REUSEPORT, ServersTransports,
routers), applying each configuration it receives with the same listeners, and
acknowledging its generation. Messages and framing are :mod:`edge.ipc`.

Why ``python -m edge worker --id K`` on a socketpair rather than multiprocessing:

* a fresh interpreter (fork+exec, done by uvloop's subprocess support): nothing of the
  supervisor's event loop, threads, watches or sockets is copied into the worker (forking
  a running event loop is unsafe), and nothing is pickled: the static configuration
  travels as an :class:`edge.ipc.Start` message like everything else, so a restarted
  worker gets the supervisor's configuration, not whatever the file says by then;
* the channel is one end of an AF_UNIX socketpair installed as the worker's stdin:
  bidirectional and framed, and its EOF is how a worker learns that the supervisor died,
  even by SIGKILL (only the supervisor holds the other end: Python's descriptors are
  close-on-exec). The worker then drains and exits, so no worker outlives it;
* stdout and stderr stay the supervisor's: the access log and the log go where they go
  with one process; worker log lines carry ``[worker K]`` (``"worker": K`` in JSON).

Ports: before starting any worker the supervisor binds every TCP entrypoint itself, with
SO_REUSEPORT, without listening (:func:`reserve_ports`). Port 0 is resolved there, once,
and the workers are given the concrete port, so they all share it and the log says
``entrypoint NAME: listening on HOST:PORT`` once, when the first worker serves. The
reservation is kept until the supervisor exits: a socket that does not listen never gets
a connection, but it keeps the port ours while workers restart (even if all of them are
down for a moment) and a port taken by another program fails at start, not in a worker.

Readiness (:class:`Readiness`): a worker answers ``/ready`` 200 only once the supervisor
has told it so (:class:`edge.ipc.Ready`): the first time when every worker has applied a
generation that holds every provider's first configuration; later, for a restarted
worker, once it applied the configuration that was current when it started. ``/ping``
answers 200 while the worker serves and 503 while it drains.

Metrics (``metrics.prometheus``): the supervisor serves one view that sums its
workers, and any worker answers ``/metrics`` with it. Every :data:`METRICS_PUSH`
seconds each worker sends its samples (:class:`edge.ipc.Metrics`) and the supervisor
sends every worker the sum of the latest ones and its own (configuration reloads, its
process). Pushed rather than scraped: a worker answers ``/metrics`` at once from what
it holds (an entry point's own answers do not wait), and every worker shows the same
sum, so a counter never goes back between two scrapes that reach different workers;
the view is at most two pushes old. What a worker that exited had counted stays in
the sum (its gauges do not), so counters survive a restart.

Run-time entry points (``runtimeEntryPoints``, :mod:`edge.entrypoints.opened`): each
worker binds them itself, so a port it cannot bind is its to report: it sends the whole
set of its errors (:class:`edge.ipc.Unopened`) each time it changes. The supervisor's
:class:`WorkersOpened` holds the union over the live workers (a worker's entry goes
with its process) and is what the providers' ``follow_opened`` gets, as the Dataplane
is with one process: a listener whose port a worker cannot bind says so in its
condition. What a provider opens each entry point for travels the other way
(:class:`edge.ipc.Origins`), so every worker's API shows it.

Life cycle: a worker that exits unexpectedly is restarted and sent the latest
configuration, at most once per second (backing off to 30 s while it keeps dying within
10 s of its start). SIGTERM/SIGINT: stop the providers, SIGTERM every worker (each keeps
accepting for requestAcceptGraceTimeout, then drains within its graceTimeOut), wait for
them (the longest of each plus a margin, then SIGKILL), exit 0. SIGHUP re-reads the
providers. SIGUSR1 reopens the log files, the supervisor's and (sent on) every worker's.
Workers ignore SIGINT and SIGHUP (a terminal sends those to the whole process group;
the supervisor acts on them) and stop on SIGTERM or when their channel reaches EOF.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence

import msgspec

from edge.app import ControlPlane, Dataplane, Stoppable, serve
from edge.config.runtime import RuntimeConfig, build_runtime
from edge.config.static import StaticConfig
from edge.entrypoints import format_address
from edge.entrypoints.internal import attach_api
from edge.entrypoints.metrics import Registry, Samples, watch_kubernetes, watch_reloads
from edge.ipc import (
    Ack,
    Apply,
    FrameDecoder,
    IPCError,
    Metrics,
    Origins,
    Ready,
    Start,
    Started,
    ToSupervisor,
    ToWorker,
    Unopened,
    encode,
)
from edge.logs import JSONFormatter, reopen_logs, setup_logging
from edge.tls.tickets import new_key as new_ticket_key
from edge.watcher import Preparer

__all__ = [
    "Readiness",
    "Supervisor",
    "Worker",
    "WorkersOpened",
    "join_host_port",
    "reserve_ports",
    "run_supervisor",
    "run_worker",
]

log = logging.getLogger("edge.supervisor")
wlog = logging.getLogger("edge.worker")

RESTART_MIN = 1.0
"""Seconds between two starts of one worker, at least."""
RESTART_MAX = 30.0
"""The longest wait before restarting a worker that keeps dying."""
HEALTHY_AFTER = 10.0
"""A worker that ran this long before exiting is restarted at once (backoff reset)."""
STOP_MARGIN = 5.0
"""Seconds granted to workers beyond the longest graceTimeOut before SIGKILL."""
KILL_WAIT = 5.0
METRICS_PUSH = 1.0
"""Seconds between two pushes of a worker's metrics, and two sums sent back."""
RESERVE_ATTEMPTS = 20


# --- ports --------------------------------------------------------------------------


def join_host_port(host: str, port: int) -> str:
    """An entrypoint address: ``":80"``, ``"127.0.0.1:80"``, ``"[::1]:80"``."""
    if ":" in host:
        return f"[{host}]:{port}"
    return f"{host}:{port}"


def reserve(host: str, port: int, kind: int = socket.SOCK_STREAM) -> list[socket.socket]:
    """Bind (SO_REUSEPORT, no listen) every address ``host`` resolves to, all on one port.

    ``host`` ``""`` means every interface, as for the entrypoints; port 0 picks a port
    free on every address (retrying when one family has it taken). Raises ``OSError``.

    UDP (``kind`` SOCK_DGRAM) has no listen: a bound socket in the port's SO_REUSEPORT
    group would take its share of the datagrams and never read them. So each UDP
    reservation is connected, to its own address (loopback for a wildcard) and port:
    the kernel gives a connected socket only datagrams from that peer, which sends
    none, and leaves it out of the group's hashing (Linux 5.x and later).
    """
    infos = socket.getaddrinfo(host or None, port, socket.AF_UNSPEC, kind, 0, socket.AI_PASSIVE)
    addresses = list(dict.fromkeys((family, sockaddr) for family, _, _, _, sockaddr in infos))
    for attempt in range(RESERVE_ATTEMPTS):
        socks: list[socket.socket] = []
        chosen = port
        try:
            for family, sockaddr in addresses:
                sock = socket.socket(family, kind)
                socks.append(sock)
                if kind == socket.SOCK_STREAM:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                try:
                    sock.bind((sockaddr[0], chosen, *sockaddr[2:]))
                except OSError as exc:
                    if exc.errno == errno.EADDRNOTAVAIL and len(addresses) > 1:
                        socks.pop().close()  # that family is not configured here (as asyncio)
                        continue
                    raise OSError(
                        exc.errno,
                        f"error while attempting to bind on address {format_address((sockaddr[0], chosen))}: {exc.strerror}",
                    ) from None
                if chosen == 0:
                    chosen = sock.getsockname()[1]
            if not socks:
                raise OSError(errno.EADDRNOTAVAIL, f"no address to bind for {host!r}")
            if kind == socket.SOCK_DGRAM:
                for sock in socks:
                    bound = sock.getsockname()
                    loopback = "::1" if sock.family == socket.AF_INET6 else "127.0.0.1"
                    peer = loopback if bound[0] in ("0.0.0.0", "::") else bound[0]
                    sock.connect((peer, chosen, *bound[2:]))
            return socks
        except OSError as exc:
            for sock in socks:
                sock.close()
            if port != 0 or exc.errno != errno.EADDRINUSE or attempt == RESERVE_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def reserved_address(sock: socket.socket, host: str) -> tuple:
    """The address ``sock``, a reservation for ``host``, holds. A UDP reservation is
    connected (see :func:`reserve`), and a connected socket is named by the address it
    sends from: loopback, for one bound to every address."""
    name = sock.getsockname()
    if sock.type == socket.SOCK_DGRAM and host in ("", "0.0.0.0", "::"):
        return ("::" if sock.family == socket.AF_INET6 else "0.0.0.0", *name[1:])
    return name


def reserve_ports(static: StaticConfig) -> tuple[StaticConfig, dict[str, list[socket.socket]]]:
    """Reserve every entrypoint's port; the static configuration for the workers.

    The configuration returned names each entrypoint's concrete port (port 0
    resolved); the sockets must stay open as long as the workers may (re)bind.
    """
    reserved: dict[str, list[socket.socket]] = {}
    entry_points = dict(static.entry_points)
    try:
        for name, ep in static.entry_points.items():
            udp = ep.protocol == "udp"
            try:
                socks = reserve(ep.host, ep.port, socket.SOCK_DGRAM if udp else socket.SOCK_STREAM)
            except OSError as exc:
                raise OSError(exc.errno, f"entrypoint {name}: {exc.strerror or exc}") from None
            reserved[name] = socks
            address = join_host_port(ep.host, socks[0].getsockname()[1]) + ("/udp" if udp else "")
            entry_points[name] = msgspec.structs.replace(ep, address=address)
    except BaseException:
        for socks in reserved.values():
            for sock in socks:
                sock.close()
        raise
    return msgspec.structs.replace(static, entry_points=entry_points), reserved


# --- readiness ------------------------------------------------------------------------


class Readiness:
    """Which workers may answer ``/ready`` 200: pure bookkeeping, no I/O.

    The set becomes ready once (a latch): when the configuration is complete
    (:meth:`configured` with generation ``g``, the first holding every provider's first
    configuration) and every worker acknowledged a generation >= ``g``. From then on a
    worker is ready once it acknowledged the generation that was current when it was
    (re)started, so a restarted worker is not ready before it caught up. Generation 0 is
    "no configuration": a started worker has it (with no provider, that is complete).
    Each method returns the workers that just became ready, to be told so.
    """

    def __init__(self, workers: Iterable[int]) -> None:
        self.required: int | None = None
        self.all_ready = False
        self._acked: dict[int, int] = dict.fromkeys(workers, -1)
        self._floor: dict[int, int] = dict.fromkeys(self._acked, 0)
        self._told: set[int] = set()

    def spawned(self, worker: int, current: int) -> list[int]:
        """``worker`` (re)started while generation ``current`` was the latest."""
        self._acked[worker] = -1
        self._floor[worker] = current
        self._told.discard(worker)
        return []

    def died(self, worker: int) -> None:
        self._acked[worker] = -1
        self._told.discard(worker)

    def configured(self, generation: int) -> list[int]:
        """``generation`` is the first with every provider's first configuration."""
        if self.required is None:
            self.required = generation
        return self._newly_ready()

    def acked(self, worker: int, generation: int) -> list[int]:
        self._acked[worker] = max(self._acked[worker], generation)
        return self._newly_ready()

    def is_ready(self, worker: int) -> bool:
        return worker in self._told

    def applied_by_all(self) -> int:
        """The newest generation every worker applied (-1: some worker applied nothing)."""
        return min(self._acked.values(), default=-1)

    def _newly_ready(self) -> list[int]:
        required = self.required
        if required is None:
            return []
        if not self.all_ready:
            if any(g < required for g in self._acked.values()):
                return []
            self.all_ready = True
        out = [
            k
            for k, g in self._acked.items()
            if k not in self._told and g >= required and g >= self._floor[k]
        ]
        self._told.update(out)
        return out


# --- the channel ----------------------------------------------------------------------


class Channel(asyncio.Protocol):
    """One end of a supervisor-worker socketpair: :mod:`edge.ipc` frames in and out."""

    def __init__(self, accepts: object, label: str) -> None:
        self.label = label
        self.decoder = FrameDecoder(accepts)
        self.transport: asyncio.Transport | None = None
        self.on_message: Callable[[object], None] = lambda msg: None
        self.on_lost: Callable[[], None] = lambda: None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            messages = self.decoder.feed(data)
        except IPCError as exc:
            log.error("%s: %s; closing the channel", self.label, exc)
            self.close()
            return
        for msg in messages:
            try:
                self.on_message(msg)
            except Exception:
                log.exception("%s: handling %s failed", self.label, type(msg).__name__)

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.on_lost()

    def send(self, msg: object) -> None:
        self.send_frame(encode(msg))  # type: ignore[arg-type]

    def send_frame(self, frame: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(frame)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


# --- supervisor -----------------------------------------------------------------------


class WorkersOpened:
    """The workers' run-time entry points as the providers' ``follow_opened`` reads them
    (:class:`edge.providers.kubernetes.gateway_provider.Opened`): :attr:`errors`, the
    ports some live worker could not bind (name -> why; the lowest worker id's words
    when several say it), replaced whole when it changes, then the followers are called
    (on the loop). ``send`` gives every worker the origins the providers named."""

    def __init__(self, loop: asyncio.AbstractEventLoop, send: Callable[[Origins], None]) -> None:
        self.loop = loop
        self.send = send
        self.errors: Mapping[str, str] = {}
        self._by_worker: dict[int, dict[str, str]] = {}
        self._followers: list[Callable[[], None]] = []
        self.origins = Origins({})

    def follow(self, callback: Callable[[], None]) -> None:
        """Have ``callback`` run (on the loop) each time :attr:`errors` changes."""
        self._followers.append(callback)

    def reported(self, worker: int, errors: Mapping[str, str]) -> None:
        """Worker ``worker`` said which ports it could not bind (all of them)."""
        if errors:
            self._by_worker[worker] = dict(errors)
        else:
            self._by_worker.pop(worker, None)
        self._update()

    def gone(self, worker: int) -> None:
        """Worker ``worker``'s process ended: what it could not bind no longer counts."""
        if self._by_worker.pop(worker, None) is not None:
            self._update()

    def _update(self) -> None:
        union: dict[str, str] = {}
        for worker in sorted(self._by_worker):
            for name, why in self._by_worker[worker].items():
                union.setdefault(name, why)
        if union == self.errors:
            return
        self.errors = union
        for callback in self._followers:
            try:
                callback()
            except Exception:
                log.exception("run-time entry points: a follower failed")

    def name_origins(self, source: str, origins: Mapping[str, Sequence[str]]) -> None:
        """``source`` (a provider, from its thread) says what each run-time entry point
        it names is for: sent to every worker, on the loop."""
        named = {ep: list(what) for ep, what in origins.items()}
        with contextlib.suppress(RuntimeError):  # the loop closed: edge is stopping
            self.loop.call_soon_threadsafe(self._named, source, named)

    def _named(self, source: str, named: dict[str, list[str]]) -> None:
        if self.origins.origins.get(source) == named:
            return  # said already (each conversion names them again)
        self.origins = Origins({**self.origins.origins, source: named})
        self.send(self.origins)


class _Slot:
    """One worker position (``--id K``) across its restarts."""

    __slots__ = ("backoff", "channel", "id", "pid", "process", "restart", "started_at")

    def __init__(self, worker_id: int) -> None:
        self.id = worker_id
        self.process: asyncio.subprocess.Process | None = None
        self.channel: Channel | None = None
        self.pid = 0
        self.started_at = float("-inf")
        self.backoff = RESTART_MIN
        self.restart: asyncio.TimerHandle | None = None


class Supervisor(Stoppable):
    """Providers and watcher here; N worker processes serving; configurations sent over pipes."""

    def __init__(self, static: StaticConfig, *, workers: int, parser: str | None = None) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.static = static
        self.parser = parser
        self.loop = asyncio.get_running_loop()
        self.control = ControlPlane(static, self.loop, [self._publish])
        self.slots = {k: _Slot(k) for k in range(1, workers + 1)}
        self.readiness = Readiness(self.slots)
        self.generation = 0
        self.worker_static: StaticConfig = static
        self.ticket_key = new_ticket_key()  # every worker's, for the supervisor's life
        self._latest: bytes | None = None  # the newest Apply frame
        self._reserved: dict[str, list[socket.socket]] = {}
        self._announced = False
        self._all_ready_logged = False
        self._applied_by_all = 0
        self._stopping = False
        self._stopped = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self._spawning: set[asyncio.Task] = set()
        # metrics.prometheus: the supervisor's own samples, each worker's latest push and
        # the counters of worker processes that ended.
        prom = static.metrics.prometheus if static.metrics is not None else None
        self.metrics = Registry(prom) if prom is not None else None
        if self.metrics is not None:
            watch_reloads(self.metrics, self.control.watcher)
            watch_kubernetes(self.metrics, self.control.providers)
        self._pushed: dict[int, Samples] = {}
        self._ended = Samples(self.metrics.bounds if self.metrics is not None else ())
        self._metrics_timer: asyncio.TimerHandle | None = None
        # runtimeEntryPoints: the ports the workers could not bind, for the providers.
        self.opened: WorkersOpened | None = None
        if static.runtime_entry_points is not None:
            self.opened = WorkersOpened(self.loop, self._send_all)
            self.control.follow_opened(self.opened)

    def reopen_logs(self) -> None:
        """SIGUSR1: this process's log file, then every worker's (each has its own)."""
        reopen_logs()
        for slot in self.slots.values():
            if slot.process is not None and slot.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    slot.process.send_signal(signal.SIGUSR1)

    # -- configuration ------------------------------------------------------------------

    def _publish(self, runtime: RuntimeConfig) -> None:
        """The watcher's listener: send the merged configuration to every worker."""
        self.generation += 1
        frame = encode(Apply(self.generation, runtime.configuration))
        self._latest = frame
        sent = 0
        for slot in self.slots.values():
            if slot.channel is not None:
                slot.channel.send_frame(frame)
                sent += 1
        log.info(
            "configuration generation %d sent to %d workers (%d bytes)",
            self.generation,
            sent,
            len(frame),
        )
        if self.readiness.required is None:
            # The watcher counts this round as delivered once the listeners return.
            self.loop.call_soon(self._check_configured)

    def _send_all(self, msg: Origins) -> None:
        frame = encode(msg)
        for slot in self.slots.values():
            if slot.channel is not None:
                slot.channel.send_frame(frame)

    def _check_configured(self) -> None:
        if self.readiness.required is None and self.control.ready:
            self._tell_ready(self.readiness.configured(self.generation))

    def _on_message(self, slot: _Slot, channel: Channel, msg: object) -> None:
        if channel is not slot.channel:
            return  # from a previous incarnation of this worker
        if isinstance(msg, Metrics):
            if self.metrics is not None:
                self._pushed[slot.id] = Samples.from_rows(self.metrics.bounds, msg.rows)
        elif isinstance(msg, Started):
            ended = self._pushed.pop(slot.id, None)
            if ended is not None:  # a new process in this slot: keep what the last counted
                self._ended.merge(ended.counters())
            log.info("worker %d (pid %d): serving", slot.id, msg.pid)
            self._announce()
            self._tell_ready(self.readiness.acked(slot.id, 0))
        elif isinstance(msg, Ack):
            log.debug("worker %d: applied generation %d", slot.id, msg.generation)
            newly = self.readiness.acked(slot.id, msg.generation)
            everyone = self.readiness.applied_by_all()
            if everyone > self._applied_by_all:
                self._applied_by_all = everyone
                log.info(
                    "configuration generation %d applied by all %d workers",
                    everyone,
                    len(self.slots),
                )
            self._tell_ready(newly)
        elif isinstance(msg, Unopened) and self.opened is not None:
            self.opened.reported(slot.id, msg.errors)

    def _tell_ready(self, workers: list[int]) -> None:
        if not workers:
            return
        if not self._all_ready_logged:
            self._all_ready_logged = True
            log.info(
                "all %d workers ready (generation %s)", len(self.slots), self.readiness.required
            )
        for k in workers:
            slot = self.slots[k]
            if slot.channel is not None:
                slot.channel.send(Ready(self.readiness.required or 0))
                log.info("worker %d (pid %d): ready", k, slot.pid)

    def _send_metrics(self) -> None:
        """Every METRICS_PUSH: the sum of the workers' latest samples, the ended
        workers' counters and the supervisor's own, sent to every worker."""
        assert self.metrics is not None
        total = self.metrics.collect()
        total.merge(self._ended)
        for pushed in self._pushed.values():
            total.merge(pushed)
        frame = encode(Metrics(total.rows()))  # type: ignore[arg-type]
        for slot in self.slots.values():
            if slot.channel is not None:
                slot.channel.send_frame(frame)
        self._metrics_timer = self.loop.call_later(METRICS_PUSH, self._send_metrics)

    def _announce(self) -> None:
        """The line the entrypoints log with one process, once, when the ports accept."""
        if self._announced:
            return
        self._announced = True
        for name, socks in self._reserved.items():
            log.info(
                "entrypoint %s: listening on %s (%d workers, SO_REUSEPORT)",
                name,
                ", ".join(
                    format_address(reserved_address(s, self.static.entry_points[name].host))
                    for s in socks
                ),
                len(self.slots),
            )

    # -- workers ----------------------------------------------------------------------

    async def _spawn(self, slot: _Slot) -> None:
        slot.restart = None
        parent, child = socket.socketpair()
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "edge", "worker", "--id", str(slot.id), stdin=child.fileno()
            )
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        channel = Channel(ToSupervisor, f"worker {slot.id}")
        channel.on_message = lambda msg: self._on_message(slot, channel, msg)
        await self.loop.create_unix_connection(lambda: channel, sock=parent)
        slot.process, slot.channel, slot.pid = proc, channel, proc.pid
        slot.started_at = self.loop.time()
        self.readiness.spawned(slot.id, self.generation)
        channel.send(Start(slot.id, self.worker_static, self.parser, self.ticket_key))
        if self._latest is not None:
            channel.send_frame(self._latest)
        if self.opened is not None and self.opened.origins.origins:
            channel.send(self.opened.origins)
        log.info("worker %d: started, pid %d", slot.id, proc.pid)
        task = self.loop.create_task(self._watch(slot, proc))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if self._stopping:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)

    async def _watch(self, slot: _Slot, proc: asyncio.subprocess.Process) -> None:
        rc = await proc.wait()
        if slot.process is proc:
            slot.process = None
            if slot.channel is not None:
                slot.channel.close()
                slot.channel = None
            self.readiness.died(slot.id)
            if self.opened is not None:
                self.opened.gone(slot.id)
        how = _describe_exit(rc)
        if self._stopping:
            log.info("worker %d (pid %d) %s", slot.id, proc.pid, how)
            return
        now = self.loop.time()
        lived = now - slot.started_at
        if lived >= HEALTHY_AFTER:
            slot.backoff = RESTART_MIN
        delay = max(0.0, slot.started_at + slot.backoff - now)
        slot.backoff = min(slot.backoff * 2, RESTART_MAX)
        log.warning(
            "worker %d (pid %d) %s after %.1fs; restarting it in %.1fs",
            slot.id,
            proc.pid,
            how,
            lived,
            delay,
        )
        slot.restart = self.loop.call_later(delay, self._restart, slot)

    def _restart(self, slot: _Slot) -> None:
        if self._stopping:
            return
        task = self.loop.create_task(self._spawn(slot))
        self._spawning.add(task)
        task.add_done_callback(lambda t: self._spawned(slot, t))

    def _spawned(self, slot: _Slot, task: asyncio.Task) -> None:
        self._spawning.discard(task)
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        slot.started_at = self.loop.time()
        delay = slot.backoff
        slot.backoff = min(slot.backoff * 2, RESTART_MAX)
        log.error("worker %d: cannot start (%s); trying again in %.1fs", slot.id, exc, delay)
        if not self._stopping:
            slot.restart = self.loop.call_later(delay, self._restart, slot)

    # -- life cycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Reserve the ports, start the workers, then the providers; ``OSError`` if impossible."""
        self.worker_static, self._reserved = reserve_ports(self.static)
        log.info("supervisor (pid %d): starting %d workers", os.getpid(), len(self.slots))
        spawns = [self.loop.create_task(self._spawn(slot)) for slot in self.slots.values()]
        self._spawning.update(spawns)
        try:
            await asyncio.gather(*spawns)
        finally:
            self._spawning.difference_update(spawns)
        self.control.start()
        if self.metrics is not None:
            self._metrics_timer = self.loop.call_later(METRICS_PUSH, self._send_metrics)
        if self.control.ready:  # no provider: there is no configuration to wait for
            self._tell_ready(self.readiness.configured(0))

    async def stop(self) -> None:
        """Stop the providers, SIGTERM the workers, wait for their drain (bounded)."""
        self._stopping = True
        if self._metrics_timer is not None:
            self._metrics_timer.cancel()
            self._metrics_timer = None
        await self.control.stop()
        for slot in self.slots.values():
            if slot.restart is not None:
                slot.restart.cancel()
                slot.restart = None
        if self._spawning:
            await asyncio.wait(list(self._spawning), timeout=KILL_WAIT)
        procs = [
            s.process
            for s in self.slots.values()
            if s.process is not None and s.process.returncode is None
        ]
        log.info("stopping: SIGTERM to %d workers, waiting for them to drain", len(procs))
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        life = [ep.transport.life_cycle for ep in self.static.entry_points.values()]
        accepting = max((c.request_accept_grace_timeout for c in life), default=0.0)
        bound = accepting + max((c.grace_time_out for c in life), default=10.0) + STOP_MARGIN
        waits = [self.loop.create_task(proc.wait()) for proc in procs]
        if waits:
            _, pending = await asyncio.wait(waits, timeout=bound)
            if pending:
                log.error(
                    "%d workers still running %.0fs after SIGTERM: SIGKILL", len(pending), bound
                )
                for proc in procs:
                    if proc.returncode is None:
                        with contextlib.suppress(ProcessLookupError):
                            proc.kill()
                await asyncio.wait(pending, timeout=KILL_WAIT)
        for slot in self.slots.values():
            if slot.channel is not None:
                slot.channel.close()
                slot.channel = None
        for socks in self._reserved.values():
            for sock in socks:
                sock.close()
        self._reserved.clear()
        log.info("stopped")
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()


def _describe_exit(rc: int | None) -> str:
    if rc is None:
        return "exited"
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exited with status {rc}"


async def run_supervisor(static: StaticConfig, *, workers: int, parser: str | None = None) -> None:
    await serve(Supervisor(static, workers=workers, parser=parser))


# --- worker ---------------------------------------------------------------------------


class _WorkerField(logging.Filter):
    def __init__(self, worker_id: int) -> None:
        super().__init__()
        self.worker_id = worker_id

    def filter(self, record: logging.LogRecord) -> bool:
        record.worker = self.worker_id
        return True


class _WorkerJSONFormatter(JSONFormatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)  # one JSON object: "{...}"
        return f'{line[:-1]},"worker":{int(getattr(record, "worker", 0))}}}'


WORKER_FORMAT = "%(asctime)s %(levelname)s [worker %(worker)s] %(name)s: %(message)s"


def tag_worker_logs(worker_id: int) -> None:
    """Make every log line of this process say which worker wrote it."""
    for handler in logging.getLogger().handlers:
        handler.addFilter(_WorkerField(worker_id))
        if isinstance(handler.formatter, JSONFormatter):
            handler.setFormatter(_WorkerJSONFormatter())
        else:
            handler.setFormatter(logging.Formatter(WORKER_FORMAT))


def ignore_group_signals() -> None:
    """In a worker: Ctrl-C and hang-ups are the supervisor's to handle (it forwards SIGTERM)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


class Worker:
    """One worker process: a Dataplane fed by the supervisor over the channel on stdin."""

    def __init__(self, worker_id: int) -> None:
        self.id = worker_id
        self.loop = asyncio.get_running_loop()
        self.dataplane: Dataplane | None = None
        self.protocols: dict[str, str] = {}
        self.default_rule_syntax = "v3"  # core.defaultRuleSyntax, from the Start message
        self.runtime: RuntimeConfig | None = None
        self.channel: Channel | None = None
        self.ready = False
        self.serving = False
        self._stopping = False
        self._stop_requested = asyncio.Event()
        self._start: asyncio.Future[Start | None] = self.loop.create_future()
        self._pending: Apply | None = None  # received before the entrypoints were bound
        self._latest: Apply | None = None  # the newest configuration not yet applied
        self._applied: Apply | None = None  # the configuration served
        self._applying: asyncio.Task | None = None
        self._preparer = Preparer()
        self._metrics_timer: asyncio.TimerHandle | None = None
        self._origins: Origins | None = None  # the latest, named to the Dataplane's

    def _internal(self, path: bytes) -> tuple[int, bytes] | None:
        if path == b"/ping":
            return (503, b"Service Unavailable") if self._stopping else (200, b"OK")
        if path == b"/ready":
            return (200, b"ready") if self.ready and not self._stopping else (503, b"not ready")
        return None

    def _on_message(self, msg: object) -> None:
        if isinstance(msg, Start):
            if not self._start.done():
                self._start.set_result(msg)
        elif isinstance(msg, Apply):
            if self._stopping:
                return
            if self.serving:
                self._apply(msg)
            else:
                self._pending = msg
        elif isinstance(msg, Metrics):
            metrics = self.dataplane.metrics if self.dataplane is not None else None
            if metrics is not None:
                metrics.shared = Samples.from_rows(metrics.bounds, msg.rows)
        elif isinstance(msg, Origins):
            self._origins = msg
            self._name_origins()
        elif isinstance(msg, Ready):
            if not self.ready:
                wlog.info("ready (all workers applied generation %d)", msg.generation)
            self.ready = True

    def _apply(self, msg: Apply) -> None:
        """Apply ``msg``, prepared off the loop; a newer one arriving meanwhile supersedes older ones."""
        self._latest = msg
        if self._applying is None:
            self._applying = self.loop.create_task(self._apply_latest())

    async def _apply_latest(self) -> None:
        assert self.dataplane is not None and self.channel is not None
        try:
            while self._latest is not None and not self._stopping:
                msg, self._latest = self._latest, None
                try:
                    runtime, commit = await self._preparer.run(self._prepare, msg)
                except Exception:
                    wlog.exception(
                        "configuration generation %d could not be built; keeping the previous one",
                        msg.generation,
                    )
                    continue
                commit()
                self.runtime = runtime
                self._applied = msg
                self.channel.send(Ack(msg.generation, self.id))
                wlog.debug("configuration generation %d applied", msg.generation)
        finally:
            self._applying = None

    def _prepare(self, msg: Apply) -> tuple[RuntimeConfig, Callable[[], None]]:
        """Validate and build (in the preparer's thread)."""
        assert self.dataplane is not None
        runtime = build_runtime(
            msg.configuration,
            self.protocols,
            previous=self.runtime,
            default_rule_syntax=self.default_rule_syntax,
        )
        return runtime, self.dataplane.prepare(runtime)

    def _reapply(self) -> None:
        """The Dataplane's ``retry``: the configuration served, prepared again (certificate
        files it could not read for a transient reason are read again), unless a newer one
        is on its way."""
        if self._applied is not None and self._latest is None and not self._stopping:
            self._apply(self._applied)

    def _push_metrics(self) -> None:
        """Every METRICS_PUSH: this worker's samples to the supervisor (module doc)."""
        metrics = self.dataplane.metrics if self.dataplane is not None else None
        if metrics is None or self.channel is None:
            return
        self.channel.send(Metrics(metrics.collect().rows()))  # type: ignore[arg-type]
        self._metrics_timer = self.loop.call_later(METRICS_PUSH, self._push_metrics)

    def _name_origins(self) -> None:
        """What the providers open each run-time entry point for, which the API shows."""
        opened = self.dataplane.opened if self.dataplane is not None else None
        if opened is not None and self._origins is not None:
            for source, named in self._origins.origins.items():
                opened.name_origins(source, named)

    def _tell_unopened(self) -> None:
        """The run-time entry points this worker could not bind changed: the supervisor's."""
        opened = self.dataplane.opened if self.dataplane is not None else None
        if opened is not None and self.channel is not None:
            self.channel.send(Unopened(self.id, dict(opened.errors)))

    def _reopen_logs(self) -> None:
        reopen_logs(self.dataplane.access_log if self.dataplane is not None else None)

    def _on_lost(self) -> None:
        if not self._stopping:
            wlog.warning("the supervisor is gone (channel closed): draining and exiting")
        self.request_stop()

    def request_stop(self) -> None:
        self._stopping = True
        self._stop_requested.set()
        if not self._start.done():
            self._start.set_result(None)

    async def run(self) -> int:
        """Serve until SIGTERM or the supervisor's end of the channel closes; the exit status.

        SIGINT and SIGHUP are ignored (:func:`ignore_group_signals`): a terminal sends them
        to the whole process group, and the supervisor is the one that acts on them.
        """
        self.loop.add_signal_handler(signal.SIGTERM, self.request_stop)
        self.loop.add_signal_handler(signal.SIGUSR1, self._reopen_logs)
        try:
            sock = socket.socket(fileno=os.dup(0))  # stdin: our end of the supervisor's socketpair
        except OSError:
            wlog.error(
                "edge worker is started by `edge run` (workers > 1): stdin must be the supervisor's socket"
            )
            return 2
        channel = self.channel = Channel(ToWorker, "supervisor channel")
        channel.on_message = self._on_message
        channel.on_lost = self._on_lost
        await self.loop.create_unix_connection(lambda: channel, sock=sock)
        start = await self._start
        if start is None:
            wlog.warning("stopped before the supervisor said what to serve")
            return 0
        setup_logging(start.static.log)
        tag_worker_logs(self.id)
        self.protocols = start.static.entry_point_protocols()
        self.default_rule_syntax = start.static.core.default_rule_syntax
        self.dataplane = Dataplane(
            start.static,
            self.loop,
            parser=start.parser,
            internal=self._internal,
            reuse_port=True,
            ticket_key=start.ticket_key,
        )
        self.dataplane.retry = self._reapply
        if self.dataplane.opened is not None:
            self.dataplane.opened.follow(self._tell_unopened)
            self._name_origins()
        attach_api(self.dataplane, start.static)
        try:
            await self.dataplane.start()
        except OSError as exc:
            wlog.error("cannot start: %s", exc)
            with contextlib.suppress(Exception):
                await self.dataplane.stop()
            return 1
        self.serving = True
        channel.send(Started(self.id, os.getpid()))
        if self.dataplane.metrics is not None:
            # /metrics shows the supervisor's sum (nothing before the first one comes).
            self.dataplane.metrics.shared = Samples(self.dataplane.metrics.bounds)
            self._push_metrics()
        if self._pending is not None and not self._stopping:
            pending, self._pending = self._pending, None
            self._apply(pending)
        await self._stop_requested.wait()
        wlog.info("stopping: draining in-flight requests")
        if self._metrics_timer is not None:
            self._metrics_timer.cancel()
        await self.dataplane.stop()
        channel.close()
        return 0


async def run_worker(worker_id: int) -> int:
    return await Worker(worker_id).run()
