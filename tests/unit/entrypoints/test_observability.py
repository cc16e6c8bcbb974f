"""What each route and entry point reports to (edge.entrypoints.observability): a
router's ``observability`` over its entry point's, field by field, resolved into the
objects a route holds once per configuration."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from edge.config.dynamic import RouterObservability
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.config.static import OTLPHTTP, EntryPointObservability, Prometheus, Tracing
from edge.entrypoints.metrics import Registry
from edge.entrypoints.observability import Decision, Observability, decide
from edge.entrypoints.tracing import Exporter, Traced, Tracer
from edge.router.factory import build_http_routers
from edge.router.http import UNOBSERVED
from edge.transports import TransportRegistry
from tests.unit.config.documents import conf, lb

ON = EntryPointObservability()
OFF = EntryPointObservability(
    access_logs=False, metrics=False, tracing=False, trace_verbosity="detailed"
)


@pytest.mark.parametrize(
    ("entry", "router", "decision"),
    [
        (ON, None, Decision(True, True, True, False)),
        (OFF, None, Decision(False, False, False, True)),
        (ON, RouterObservability(), Decision(True, True, True, False)),  # nothing set: all the entry point's
        (OFF, RouterObservability(), Decision(False, False, False, True)),
        (ON, RouterObservability(access_logs=False), Decision(False, True, True, False)),
        (OFF, RouterObservability(metrics=True), Decision(False, True, False, True)),
        (OFF, RouterObservability(tracing=True, trace_verbosity="minimal"), Decision(False, False, True, False)),
        (ON, RouterObservability(trace_verbosity="detailed"), Decision(True, True, True, True)),
    ],
)  # fmt: skip
def test_a_router_sets_what_it_names_and_keeps_its_entry_points_rest(entry, router, decision):
    assert decide(entry, router) == decision


def record(ex: object, duration: float) -> None:
    """An access log standing in for AccessLogger (the objects are what is checked)."""


@pytest.fixture
def tracer() -> Iterator[Tracer]:
    with socket.socket() as sock:  # a collector that is down: nothing is exported here
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    exporter = Exporter(OTLPHTTP(endpoint=f"http://127.0.0.1:{port}/v1/traces"), {}, {})
    yield Tracer(Tracing(), {}, exporter=exporter)
    exporter.close(2.0)


def test_each_decision_is_resolved_into_the_objects_a_route_holds(tracer):
    metrics = Registry(Prometheus())
    o = Observability(record, metrics, tracer)
    o.entry_point("web", ON)
    o.entry_point("quiet", OFF)
    every = o.route("web", False, None)
    assert every.meter is metrics.meter("web")
    assert isinstance(every.record, Traced) and every.record.access_log is record
    assert every.trace == every.record.trace and not every.record.detailed
    assert o.route("web", True, None).meter is metrics.meter("web").tls  # HTTPS: TLS labels
    # Each signal off alone.
    unlogged = o.route("web", False, RouterObservability(access_logs=False))
    assert isinstance(unlogged.record, Traced) and unlogged.record.access_log is None
    assert unlogged.meter is metrics.meter("web")
    uncounted = o.route("web", False, RouterObservability(metrics=False))
    assert uncounted.meter is None and uncounted.record is not None
    untraced = o.route("web", False, RouterObservability(tracing=False))
    assert (untraced.meter, untraced.record, untraced.trace) == (metrics.meter("web"), record, None)
    # The entry point's defaults, and a router turning back on what they have off.
    assert o.route("quiet", False, None) == UNOBSERVED
    detailed = o.route("quiet", False, RouterObservability(tracing=True))
    assert isinstance(detailed.record, Traced) and detailed.record.detailed  # its traceVerbosity
    assert detailed.meter is None and detailed.record.access_log is None
    # Once per decision: routers deciding alike share the objects.
    assert o.route("web", False, RouterObservability(metrics=True)) is every


def test_the_entry_point_decides_for_exchanges_no_router_takes(tracer):
    metrics = Registry(Prometheus())
    o = Observability(record, metrics, tracer)
    web = o.entry_point("web", ON)
    assert web is not None and web.meter is metrics.meter("web")
    assert isinstance(web.access_log, Traced) and web.access_log.access_log is record
    quiet = o.entry_point("quiet", OFF)
    assert quiet is not None and (quiet.meter, quiet.access_log) == (None, None)


def test_nothing_configured_observes_nothing():
    o = Observability(None, None, None)
    assert o.entry_point("web", ON) is None
    assert o.route("web", False, RouterObservability(tracing=True)) == UNOBSERVED
    # Tracing alone: a router's tracing false leaves it nothing to report to.
    o = Observability(None, Registry(Prometheus()), None)
    assert o.route("web", False, RouterObservability(metrics=False)) == UNOBSERVED


def test_each_routers_route_on_each_entry_point_holds_its_own_and_traced_ones_are_not_express(
    tracer,
):
    http = {
        "routers": {
            "traced": {"rule": "Host(`traced`)", "service": "app"},
            "untraced": {
                "rule": "Host(`untraced`)",
                "service": "app",
                "observability": {"tracing": False},
            },
        },
        "services": {"app": lb("http://127.0.0.1:9001")},
    }
    runtime = build_runtime(merge({"file": conf({"http": http})}), {"web": "tcp", "other": "tcp"})
    metrics = Registry(Prometheus())
    o = Observability(record, metrics, tracer)
    o.entry_point("web", ON)
    o.entry_point("other", EntryPointObservability(metrics=False))
    loop = asyncio.new_event_loop()
    try:
        routers = build_http_routers(
            runtime, TransportRegistry(loop), ["web", "other"], observe=o.route
        )
    finally:
        loop.close()
    web, other = routers["web"].by_host, routers["other"].by_host
    assert web["traced"].trace is not None and not web["traced"].express
    assert web["untraced"].trace is None and web["untraced"].express
    assert web["untraced"].record is record and web["untraced"].meter is metrics.meter("web")
    # The same router on another entry point: its own route, that entry point's meter.
    assert other["untraced"] is not web["untraced"]
    assert other["untraced"].meter is None and other["untraced"].service is web["untraced"].service
