"""The configuration watcher (Traefik's ConfigurationWatcher).

Owns the step from "a provider said something" to "listeners got a validated
snapshot". For each message: drop it if identical to the last one from that provider;
throttle per provider (the first configuration applies at once, later ones at most once
per throttle window, the newest in a window wins); then merge the latest configuration
of every provider, validate it (:func:`edge.config.runtime.build_runtime`), log every
error with the element it is about, and call the listeners in order.

A round has two halves. Preparing it is the heavy part: merging, validating
(compiling rules) and whatever listeners build from the snapshot (a listener
with a ``prepare(runtime)`` method returns the commit to run later: the
Dataplane builds its routers there). Committing it is cheap: each listener's
commit, or the plain listener call, in order. With ``offload`` the preparing
runs in one worker thread, so a 10,000-router reload does not stall serving
(the loop runs between the GIL's switch intervals); without it, both halves
run inline (tests, tools).

Invariants: the state of the watcher and every commit live on the event loop
thread (timers are ``loop.call_at``; other threads go through
:meth:`Watcher.publish_threadsafe`); the preparing of a round reads only
immutable snapshots, and rounds never overlap; a listener that raises is logged
and neither stops the others nor the watcher; a snapshot given to listeners
always contains, for every provider, the latest configuration applied from it.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from edge.config.dynamic import Configuration
from edge.config.merge import RouterMemo, merge
from edge.config.runtime import DISABLED, RuntimeConfig, build_runtime
from edge.providers.base import Message

__all__ = ["Listener", "Message", "Preparer", "Watcher"]

log = logging.getLogger(__name__)

Listener = Callable[[RuntimeConfig], None]
"""Called on the loop with each validated snapshot. A listener may also have a
``prepare(runtime) -> Callable[[], None]`` method: it is then called while the
round is prepared (in the worker thread with ``offload``), and what it returns
is called on the loop instead of the listener itself."""

Prepared = tuple[list[str], RuntimeConfig, list[Callable[[], None] | None]]


class Preparer:
    """One worker thread where configurations are prepared, off the event loop.

    While it works the automatic cyclic GC waits: it would walk the half-built
    snapshot again and again, stopping every thread each time (the Dataplane
    freezes each snapshot it commits, so later full passes skip it). Used by the
    watcher and by worker processes.
    """

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="edge-config")
        collecting = gc.isenabled()
        gc.disable()
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
        finally:
            if collecting:
                gc.enable()

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False)


class _ProviderState:
    """Per provider: what it said last, what is applied, what waits for the window."""

    __slots__ = ("applied", "last", "pending", "timer", "window_end")

    def __init__(self) -> None:
        self.last: Configuration | None = None  # last received (for dropping duplicates)
        self.applied: Configuration | None = None  # the one in the current snapshot
        self.pending: Configuration | None = None  # newest received inside the window
        self.window_end: float = float("-inf")  # loop time before which nothing applies
        self.timer: asyncio.TimerHandle | None = None


class Watcher:
    """Receives providers' configurations and feeds validated snapshots to listeners."""

    def __init__(
        self,
        *,
        entry_points: Mapping[str, str],
        throttle: float,
        listeners: Sequence[Listener],
        loop: asyncio.AbstractEventLoop | None = None,
        offload: bool = False,
        default_rule_syntax: str = "v3",
    ) -> None:
        self._entry_points = dict(entry_points)
        self._throttle = float(throttle)
        self._listeners = list(listeners)
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None  # resolved on the first publish()
        self._loop = loop
        self._states: dict[str, _ProviderState] = {}
        self._expected: set[str] = set()
        self._delivered: set[str] = set()  # providers whose config reached the listeners
        self._applying = False
        self._again = False
        self._closed = False
        self._preparer = Preparer() if offload else None
        self._default_rule_syntax = default_rule_syntax  # core.defaultRuleSyntax
        self._merged: RouterMemo = {}  # what merge made of each provider's routers (rounds never overlap)
        self._reported: set[tuple[int, str, str, str]] = set()  # the errors logged, while they last
        self._task: asyncio.Task | None = None
        self.runtime: RuntimeConfig | None = None
        """The last snapshot handed to the listeners."""
        self.applied = 0
        """Number of listener rounds so far (``traefik_config_reloads_total``)."""
        self.last_success = 0.0
        """Wall-clock time of the last round every listener took without an error
        (``traefik_config_last_reload_success``); 0 before the first."""

    # -- readiness ---------------------------------------------------------------------

    def expect(self, provider: str) -> None:
        """Require ``provider``'s first configuration before :attr:`ready`."""
        self._expected.add(provider)

    @property
    def ready(self) -> bool:
        """True once every expected provider's first configuration went through a listener round."""
        return self._expected <= self._delivered

    # -- input -------------------------------------------------------------------------

    def publish(self, msg: Message, throttle: float | None = None) -> None:
        """Take ``msg`` (on the loop thread). ``throttle``: this provider's window, seconds."""
        if self._closed:
            log.debug("watcher closed: configuration from %s ignored", msg.provider)
            return
        loop = self._get_loop()
        state = self._states.get(msg.provider)
        if state is None:
            state = self._states[msg.provider] = _ProviderState()
        conf = msg.configuration
        if state.last is not None and conf == state.last:
            log.debug("configuration from %s unchanged: skipped", msg.provider)
            return
        state.last = conf
        window = self._throttle if throttle is None else max(0.0, float(throttle))
        now = loop.time()
        if state.timer is None and now >= state.window_end:
            state.pending = None
            state.applied = conf
            state.window_end = now + window
            self._apply()
            return
        state.pending = conf
        if state.timer is None:
            log.debug(
                "configuration from %s throttled for %.3fs", msg.provider, state.window_end - now
            )
            state.timer = loop.call_at(state.window_end, self._flush, msg.provider, window)

    def publish_threadsafe(self, msg: Message, throttle: float | None = None) -> None:
        """:meth:`publish` from another thread."""
        if self._loop is None:
            raise RuntimeError("the watcher has no event loop yet: pass loop= to Watcher()")
        self._loop.call_soon_threadsafe(self.publish, msg, throttle)

    def refresh(self) -> None:
        """Run a round with the configurations applied now, changed or not (SIGHUP): the
        listeners read again what they read from files, certificates included."""
        if self._closed or not self._configs():
            return
        self._apply()

    def _flush(self, provider: str, window: float) -> None:
        state = self._states[provider]
        state.timer = None
        conf, state.pending = state.pending, None
        if self._closed or conf is None or conf == state.applied:
            return
        state.applied = conf
        state.window_end = self._get_loop().time() + window
        self._apply()

    def _get_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    # -- output ------------------------------------------------------------------------

    def _apply(self) -> None:
        if self._applying:  # a round is under way: run another once it ends
            self._again = True
            return
        self._applying = True
        if self._preparer is not None:
            self._task = self._get_loop().create_task(self._rounds_offloaded(self._preparer))
            return
        try:
            while True:
                self._again = False
                prepared = self._prepare(self._configs())
                if prepared is not None:
                    self._commit(prepared)
                if not self._again or self._closed:
                    break
        finally:
            self._applying = False

    async def _rounds_offloaded(self, preparer: Preparer) -> None:
        try:
            while True:
                self._again = False
                prepared = await preparer.run(self._prepare, self._configs())
                if self._closed:
                    break
                if prepared is not None:
                    self._commit(prepared)
                if not self._again or self._closed:
                    break
        finally:
            self._applying = False
            self._task = None

    def _configs(self) -> dict[str, Configuration]:
        return {name: s.applied for name, s in self._states.items() if s.applied is not None}

    def _prepare(self, configs: dict[str, Configuration]) -> Prepared | None:
        """The heavy half of a round: merge, validate, listeners' preparations (any thread)."""
        try:
            runtime = build_runtime(
                merge(configs, self._merged),
                self._entry_points,
                previous=self.runtime,
                default_rule_syntax=self._default_rule_syntax,
            )
        except Exception:
            log.exception("configuration could not be validated; keeping the previous one")
            return None
        self._report(runtime)
        commits: list[Callable[[], None] | None] = []
        for listener in self._listeners:
            prepare = getattr(listener, "prepare", None)
            commit = None
            if prepare is not None:
                try:
                    commit = prepare(runtime)
                except Exception:
                    log.exception("configuration listener %s failed to prepare", _name(listener))
                    commit = _skip
            commits.append(commit)
        return list(configs), runtime, commits

    def _report(self, runtime: RuntimeConfig) -> None:
        """Log each element's error once, when it appears, and say when it is gone: a
        round that changes nothing about a broken router (endpoint churn every second
        or two) does not write its error again. The API shows the errors of now."""
        current = {
            (
                logging.ERROR if info.status == DISABLED else logging.WARNING,
                label,
                info.name,
                message,
            )
            for label, info in runtime.elements()
            for message in info.errors
            # a provider that left the element out logged why itself (and when it ends)
            if message not in getattr(info.config, "problems", ())
        }
        for level, label, name, message in sorted(current - self._reported, key=_by_element):
            log.log(level, "%s %s: %s", label, name, message)
        for _level, label, name, message in sorted(self._reported - current, key=_by_element):
            log.info("%s %s: resolved: %s", label, name, message)
        self._reported = current

    def _commit(self, prepared: Prepared) -> None:
        """The cheap half of a round, on the loop: every listener in order."""
        providers, runtime, commits = prepared
        failed = False
        for listener, commit in zip(self._listeners, commits, strict=True):
            try:
                if commit is None:
                    listener(runtime)
                elif commit is _skip:
                    failed = True
                else:
                    commit()
            except Exception:
                failed = True
                log.exception("configuration listener %s failed", _name(listener))
        self.runtime = runtime
        self.applied += 1
        if not failed:
            self.last_success = time.time()
        self._delivered.update(providers)
        log.debug("configuration applied (round %d) from %s", self.applied, ", ".join(providers))

    # -- life cycle --------------------------------------------------------------------

    async def close(self) -> None:
        """Stop: pending throttled configurations are dropped, later messages ignored."""
        self._closed = True
        for state in self._states.values():
            if state.timer is not None:
                state.timer.cancel()
                state.timer = None
            state.pending = None
        if self._task is not None:
            await asyncio.wait({self._task}, timeout=30.0)  # a round being prepared ends unapplied
        if self._preparer is not None:
            self._preparer.close()


def _skip() -> None:
    """The commit of a listener whose preparation failed: it keeps what it had."""


def _by_element(error: tuple[int, str, str, str]) -> tuple[str, str, str]:
    return error[1:]


def _name(listener: Listener) -> str:
    return getattr(listener, "__qualname__", None) or repr(listener)
