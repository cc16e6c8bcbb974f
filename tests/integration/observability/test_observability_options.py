"""Traefik's ``observability`` of entry points and routers through a real edge: curl as
the client, whoami as the backend, the access log's file, ``/metrics`` and a small
OTLP/HTTP collector read back. A router's ``accessLogs``, ``metrics`` or ``tracing``
false leaves its requests out of that signal alone, beside a neighbour that keeps
them; an entry point's false is the default of its routers, which a router may turn
back on. Last, in process (a real Dataplane on a loop of its own): a route that does
not trace keeps the express path while its neighbour is traced.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import uvloop

from edge.app import Dataplane
from edge.config.loader import decode_dynamic, decode_static
from edge.config.runtime import build_runtime
from edge.http.server.exchange import Exchange
from tests.harness import Edge, lb
from tests.integration.observability.metrics_text import scrape
from tests.integration.peers import curl

SERVER = 2  # OTLP's span kind
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


pytestmark = pytest.mark.usefixtures("quick_batches")  # conftest.py


def router(name: str, entry_point: str = "web", **observability: Any) -> dict:
    r: dict[str, Any] = {
        "rule": f"Host(`{name}.test`)",
        "service": "s",
        "entryPoints": [entry_point],
    }
    if observability:
        r["observability"] = observability
    return r


def get(port: int, host: str, *headers: str) -> dict:
    """curl's GET through edge; whoami's echo of what it received."""
    args = [arg for h in (f"Host: {host}", *headers) for arg in ("-H", h)]
    done = curl("--max-time", "10", *args, f"http://127.0.0.1:{port}/")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def parents(echo: dict) -> list[str]:
    """The traceparent values the backend received."""
    return [v for k, vs in echo["headers"].items() if k.lower() == "traceparent" for v in vs]


def server_hosts(spans: list[dict]) -> list[str]:
    """The Host of each SERVER span's request."""
    return [
        attr["value"]["stringValue"]
        for span in spans
        if span["kind"] == SERVER
        for attr in span["attributes"]
        if attr["key"] == "server.address"
    ]


def wait_routers(path: Path, last: str, timeout: float = 30.0) -> list[str]:
    """The RouterName of every access-log line, once router ``last``'s line is in (the
    log is written in order, so every line before it is in too)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            names = [json.loads(line)["RouterName"] for line in path.read_text().splitlines()]
            if last in names:
                return names
        time.sleep(0.05)
    raise TimeoutError(f"{path}: no line of router {last}")


def test_each_signal_follows_the_router_then_its_entry_point(tmp_path, whoami, collector):
    log = tmp_path / "access.log"
    static = {
        "accessLog": {"filePath": str(log), "format": "json"},
        "metrics": {"prometheus": {"addRoutersLabels": True}},
        "tracing": {"otlp": {"http": {"endpoint": collector.endpoint}}},
    }
    entrypoints = {
        "web": {"address": "127.0.0.1:0"},
        "quiet": {
            "address": "127.0.0.1:0",
            "observability": {"accessLogs": False, "metrics": False, "tracing": False},
        },
    }
    dynamic = {
        "http": {
            "routers": {
                "loud": router("loud"),
                "nolog": router("nolog", accessLogs=False),
                "nometrics": router("nometrics", metrics=False),
                "notrace": router("notrace", tracing=False),
                "hush": router("hush", "quiet"),
                "back": router("back", "quiet", accessLogs=True, metrics=True),
            },
            "services": {"s": lb(whoami.url)},
        }
    }
    e = Edge(tmp_path, dynamic, entrypoints=entrypoints, static_extra=static)
    try:
        web, quiet = e.ports["web"], e.ports["quiet"]
        get(web, "nolog.test")
        get(quiet, "hush.test")
        get(web, "nometrics.test")
        untraced = get(web, "notrace.test", f"traceparent: {TRACEPARENT}")
        get(quiet, "back.test")
        traced = get(web, "loud.test", f"traceparent: {TRACEPARENT}")  # last: every signal
        routers = wait_routers(log, "loud@file")
        # Spans leave in the order exchanges end: once loud's are in, all before are.
        spans = collector.wait_for(lambda s: "loud.test" in server_hosts([s]))
        samples, _ = scrape(e.ports["traefik"])
    finally:
        e.stop()
    assert routers == ["nometrics@file", "notrace@file", "back@file", "loud@file"]
    assert spans is not None
    assert sorted(server_hosts(collector.spans)) == ["loud.test", "nolog.test", "nometrics.test"]
    # Not traced: the backend gets the client's traceparent as sent; traced: edge's own.
    assert parents(untraced) == [TRACEPARENT]
    assert len(parents(traced)) == 1 and parents(traced) != [TRACEPARENT]

    def counted(label: str, value: str) -> set[str]:
        """The routers of traefik_router_requests_total's samples with ``label``."""
        return {
            dict(labels)["router"]
            for name, labels in samples
            if name == "traefik_router_requests_total" and (label, value) in labels
        }

    assert counted("code", "200") == {"loud@file", "nolog@file", "notrace@file", "back@file"}
    entry_points = {
        dict(labels)["entrypoint"]
        for name, labels in samples
        if name == "traefik_entrypoint_requests_total"
    }
    assert "web" in entry_points and "quiet" in entry_points  # back@file's request only
    quiet_total = sum(
        v
        for (name, labels), v in samples.items()
        if name == "traefik_entrypoint_requests_total" and ("entrypoint", "quiet") in labels
    )
    assert quiet_total == 1


class InProcess:
    """A real Dataplane on a uvloop of its own thread, fed a configuration by hand."""

    def __init__(self, static: dict) -> None:
        self.static = decode_static(static)
        self.loop = uvloop.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.dataplane = self.call(self._make())

    async def _make(self) -> Dataplane:
        dataplane = Dataplane(self.static, asyncio.get_running_loop())
        await dataplane.start()
        return dataplane

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def apply(self, dynamic: dict) -> None:
        runtime = build_runtime(decode_dynamic(dynamic), self.static.entry_point_protocols())

        async def apply() -> None:
            self.dataplane.apply(runtime)

        self.call(apply())

    @property
    def port(self) -> int:
        return self.dataplane.entrypoints.all["web"].port

    def stop(self) -> None:
        try:
            self.call(self.dataplane.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


def test_a_route_that_does_not_trace_keeps_the_express_path(whoami, collector, monkeypatch):
    """As test_exchange's express checks: the general path's entry (Exchange.begin) is
    watched, and a request that skips it took the express path."""
    general: list[bytes] = []
    begin = Exchange.begin

    def watched(self: Exchange) -> None:
        general.append(self.head.host)
        begin(self)

    monkeypatch.setattr(Exchange, "begin", watched)
    edge = InProcess(
        {
            "entryPoints": {"web": {"address": "127.0.0.1:0"}},
            "tracing": {"otlp": {"http": {"endpoint": collector.endpoint}}},
        }
    )
    try:
        edge.apply(
            {
                "http": {
                    "routers": {
                        "traced": router("traced"),
                        "plain": router("plain", tracing=False),
                    },
                    "services": {"s": lb(whoami.url)},
                }
            }
        )
        for _ in range(3):
            get(edge.port, "plain.test")
            get(edge.port, "traced.test")
        spans = collector.wait_spans(6)  # the traced requests' SERVER and ReverseProxy spans
    finally:
        edge.stop()
    assert general == [b"traced.test"] * 3  # plain.test never took the general path
    assert sorted(server_hosts(spans)) == ["traced.test"] * 3
