"""What each HTTP exchange reports to, decided once per configuration: Traefik's
``observability`` of entry points and routers.

An entry point's ``observability`` (``accessLogs``, ``metrics``, ``tracing``,
``traceVerbosity``) is the default of every router on it; a router's own
``observability`` replaces each field it sets, and an unset field stays the entry
point's, as Traefik's entry point models fill a router's (:func:`decide`). Nothing here
switches on what the static configuration left off: ``accessLog``,
``metrics.prometheus`` and ``tracing`` make the objects, ``observability`` only
chooses among them; the rules for edge's own services (``addInternals``) stay with
each signal's reader.

Invariants:
- Decided when the router set is built, never per request. Each router's route on each
  entry point holds what its exchanges report to (:class:`~edge.router.http.Observers`:
  the entry point's meter or None, the access log behind tracing's hook or either alone
  or None, tracing's upstream hook or None), made by :meth:`Observability.route`, which
  the factory asks once per router and entry point; the exchange reads its route's
  (``Exchange.log``), and a route that does not trace keeps the express path.
- An exchange no router took (a 404, an answer the entry point gives itself) reports
  to what the entry point decides alone: its HTTP contexts' ``metrics`` and
  ``access_log`` (:meth:`Observability.entry_point`). Where anything observes at all,
  every exchange of the entry point is timed, so a router may ask for what its entry
  point does without.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from edge.config.static import EntryPointObservability
from edge.http.server.connection import Metered
from edge.router.http import UNOBSERVED, Observers

if TYPE_CHECKING:
    from edge.config.dynamic import RouterObservability
    from edge.entrypoints.accesslog import AccessLogger
    from edge.entrypoints.metrics import Registry
    from edge.entrypoints.tracing import Tracer

__all__ = ["Decision", "Observability", "decide"]

DEFAULT = EntryPointObservability()


class Decision(NamedTuple):
    """What one router asks for on one entry point, every field resolved."""

    access_logs: bool
    metrics: bool
    tracing: bool
    detailed: bool  # traceVerbosity: detailed


def decide(entry: EntryPointObservability, router: RouterObservability | None) -> Decision:
    """A router's ``observability`` over its entry point's: each field the router sets
    is its own, each it leaves out (None, ``""``) the entry point's."""
    if router is None:
        return Decision(
            entry.access_logs, entry.metrics, entry.tracing, entry.trace_verbosity == "detailed"
        )
    return Decision(
        entry.access_logs if router.access_logs is None else router.access_logs,
        entry.metrics if router.metrics is None else router.metrics,
        entry.tracing if router.tracing is None else router.tracing,
        (router.trace_verbosity or entry.trace_verbosity) == "detailed",
    )


class Observability:
    """One process's access log, metrics and tracer, and what each entry point and each
    route reports to (module doc). Built once with the Dataplane; :meth:`route` runs
    wherever router sets are prepared (off the loop too): it only reads the live
    objects and fills its own cache."""

    def __init__(
        self,
        access_log: AccessLogger | None,
        metrics: Registry | None,
        tracer: Tracer | None,
    ) -> None:
        self.access_log = access_log
        self.metrics = metrics
        self.tracer = tracer
        self.on = access_log is not None or metrics is not None or tracer is not None
        # Entry point name -> its observability, as each was made (entry_point).
        self.entry_points: dict[str, EntryPointObservability] = {}
        # (entry point, secure, decision) -> the Observers its routes share.
        self._observers: dict[tuple[str, bool, Decision], Observers] = {}

    def entry_point(self, name: str, config: EntryPointObservability) -> Metered | None:
        """What HTTP entry point ``name``'s contexts are handed (their ``access_log``):
        the meter and record hook of its requests no router takes, decided by ``config``
        alone (either may be None); None where nothing observes at all. Remembers
        ``config`` as the default of the routers on ``name``."""
        self.entry_points[name] = config
        self._observers = {k: v for k, v in self._observers.items() if k[0] != name}
        if not self.on:
            return None
        meter, record, _ = self._make(name, False, decide(config, None))
        return Metered(meter, record)

    def route(
        self, entry_point: str, secure: bool, router: RouterObservability | None
    ) -> Observers:
        """What a router with ``router`` observability reports to on ``entry_point``
        (``secure``: from its HTTPS router, whose meter counts TLS versions too):
        :data:`edge.router.factory.Observe`."""
        if not self.on:
            return UNOBSERVED
        decision = decide(self.entry_points.get(entry_point, DEFAULT), router)
        key = (entry_point, secure, decision)
        found = self._observers.get(key)
        if found is None:
            found = self._observers[key] = self._make(entry_point, secure, decision)
        return found

    def _make(self, entry_point: str, secure: bool, decision: Decision) -> Observers:
        meter: Any = None
        if decision.metrics and self.metrics is not None:
            meter = self.metrics.meter(entry_point)
            if secure:
                meter = meter.tls
        record: Callable[..., None] | None = self.access_log if decision.access_logs else None
        trace = None
        if decision.tracing and self.tracer is not None:
            traced = self.tracer.traced(entry_point, record, decision.detailed)
            record, trace = traced, traced.trace
        return Observers(meter, record, trace)
