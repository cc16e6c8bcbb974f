"""Entry points opened while edge runs (the static ``runtimeEntryPoints``).

Owns :class:`OpenedEntryPoints`: a listener's helper in the configuration pipeline that
diffs the run-time entry points a validated configuration wants (those of its
``entry_points`` named ``":<port>"`` or ``":<port>/udp"`` that the static file has
not: :func:`edge.config.runtime.build.build_runtime` adds them for the routers naming
them) against those open, opens the new ones (bound on ``runtimeEntryPoints.host``,
edge's defaults otherwise) and closes, after a drain, those no router names any more.
The providers publish what they want by naming these entry points in their routers, so
any provider can use it (the Gateway provider's ``openListeners``; ingress-nginx's
tcp/udp-services could).

Invariants: :meth:`plan` changes nothing live (it runs off the loop, beside the router
build, and makes the new entry points unbound, so their routers are built with the
others); :meth:`commit` runs on the loop before the router switch, so a new entry point
has its routers before its socket accepts. A port that cannot be bound (taken by another
process, privileged without ``NET_BIND_SERVICE``) is not open: its error is in
:attr:`errors` (logged when it appears), the listeners registered with :meth:`follow`
are told, and each full round tries it again; ``retry`` (a round with the
configuration served) runs ``retry_after[0]`` seconds (:data:`RETRY` unless told)
after a failure, the wait doubling up to ``retry_after[1]`` while the port stays
taken. A provider may say what it opens each entry point for
(:meth:`OpenedEntryPoints.name_origins`: the Gateway source names the listeners), which
the API shows. Binding is the loop's (``start()`` is a coroutine): it
happens a moment after the commit, in a task this object holds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from edge.config.runtime import RuntimeConfig
from edge.config.static import EntryPoint as EntryPointConfig
from edge.config.static import runtime_port
from edge.entrypoints import EntryPoints
from edge.entrypoints.base import EntryPoint

__all__ = ["OpenedEntryPoints", "Plan"]

log = logging.getLogger("edge.entrypoints")

RETRY = (1.0, 30.0)
"""Seconds before a round tries a port that could not be opened again, and the most
between two such rounds: :class:`OpenedEntryPoints`' default ``retry_after``."""

GRACE = 10.0
"""Seconds a closed run-time entry point's connections get to finish (Traefik's
default graceTimeOut, which these entry points take)."""


class Plan(NamedTuple):
    """What a configuration changes: entry points to open (made, unbound), names to close."""

    new: Mapping[str, EntryPoint]
    gone: frozenset[str]


NOTHING = Plan({}, frozenset())


class OpenedEntryPoints:
    """The run-time entry points of one process (see the module doc). ``make(name,
    config)`` builds an entry point as the process builds its static ones (the
    Dataplane's, with its access log and metrics); ``retry_after`` is the first and
    the longest wait before ``retry`` runs after a port could not be bound."""

    def __init__(
        self,
        entrypoints: EntryPoints,
        host: str,
        make: Callable[[str, EntryPointConfig], EntryPoint],
        loop: asyncio.AbstractEventLoop,
        retry: Callable[[], None] | None = None,
        retry_after: tuple[float, float] = RETRY,
    ) -> None:
        self.entrypoints = entrypoints
        self.static = frozenset(entrypoints.all)
        self.host = host
        self.make = make
        self.loop = loop
        self.open: dict[str, EntryPoint] = {}  # bound, or binding
        self.errors: dict[str, str] = {}  # name -> why it could not be bound
        self._followers: list[Callable[[], None]] = []
        self._tasks: set[asyncio.Task] = set()
        self.retry = retry
        self.retry_after = retry_after
        self._retry_timer: asyncio.TimerHandle | None = None
        self._retries = 0
        # Per source (a provider), what it opens each entry point for: replaced whole
        # by its thread, read by the API on the loop.
        self._origins: Mapping[str, Mapping[str, tuple[str, ...]]] = {}

    def name_origins(self, source: str, origins: Mapping[str, Sequence[str]]) -> None:
        """``source`` (a provider, from its own thread) says what each run-time entry
        point it names is for (``Gateway ns/name listener x``); replaces its last word."""
        named = {ep: tuple(what) for ep, what in origins.items()}
        self._origins = {**self._origins, source: named}

    def origin(self, name: str) -> list[str]:
        """What the entry point ``name`` is opened for, as its sources said."""
        return [what for named in self._origins.values() for what in named.get(name, ())]

    def follow(self, callback: Callable[[], None]) -> None:
        """Have ``callback`` run (on the loop) each time :attr:`errors` changes."""
        self._followers.append(callback)

    def address(self, name: str) -> str | None:
        """The address an entry point named ``name`` binds, None when not a run-time name."""
        found = runtime_port(name)
        if found is None:
            return None
        port, protocol = found
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{port}" + ("/udp" if protocol == "udp" else "")

    def plan(self, runtime: RuntimeConfig) -> Plan:
        """The entry points ``runtime`` opens and closes (any thread; nothing live changes)."""
        wanted = {
            name
            for name in runtime.entry_points
            if name not in self.static and runtime_port(name) is not None
        }
        gone = frozenset(self.open) - wanted
        new = {}
        for name in sorted(wanted - set(self.open)):
            address = self.address(name)
            assert address is not None  # a run-time name
            new[name] = self.make(name, EntryPointConfig(address=address))
        if not new and not gone:
            return NOTHING
        return Plan(new, gone)

    def commit(self, plan: Plan) -> None:
        """On the loop, before the routers switch: the new entry points join the
        process's (and get their routers with the others), their sockets are bound in
        a task; those gone stop accepting and drain."""
        for name, ep in plan.new.items():
            self.open[name] = ep
            self.entrypoints.add(ep)
            self._spawn(self._bind(name, ep))
        for name in sorted(plan.gone):
            ep = self.open.pop(name)
            log.info("entrypoint %s: no router names it any more: closing", name)
            self._spawn(self._close(name, ep))
        if plan.gone & set(self.errors):
            for name in plan.gone:
                self.errors.pop(name, None)
            self._changed()

    def _spawn(self, coro) -> None:
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _bind(self, name: str, ep: EntryPoint) -> None:
        try:
            await ep.start()
        except OSError as exc:
            if self.open.get(name) is ep:
                del self.open[name]
            if self.entrypoints.all.get(name) is ep:
                del self.entrypoints.all[name]
            why = str(exc.strerror or exc)
            if self.errors.get(name) != why:
                log.error("entrypoint %s: cannot be opened: %s", name, why)
                self.errors[name] = why
                self._changed()
            self._retry_later()
            return
        ep.bound({n: e.port for n, e in self.entrypoints.all.items()})
        if self.errors.pop(name, None) is not None:
            log.info("entrypoint %s: opened", name)
            self._changed()
        if not self.errors:
            self._retries = 0

    def _retry_later(self) -> None:
        if self.retry is None or self._retry_timer is not None:
            return
        first, most = self.retry_after
        delay = min(first * 2**self._retries, most)
        self._retries += 1
        self._retry_timer = self.loop.call_later(delay, self._run_retry)

    def _run_retry(self) -> None:
        self._retry_timer = None
        if self.errors and self.retry is not None:
            self.retry()

    def close(self) -> None:
        """No more retries (the process stops)."""
        if self._retry_timer is not None:
            self._retry_timer.cancel()
            self._retry_timer = None

    async def _close(self, name: str, ep: EntryPoint) -> None:
        ep.stop_accepting()
        try:
            await ep.drain(GRACE)
        finally:
            if self.entrypoints.all.get(name) is ep:
                del self.entrypoints.all[name]

    def _changed(self) -> None:
        for callback in self._followers:
            try:
                callback()
            except Exception:
                log.exception("run-time entry points: a follower failed")
