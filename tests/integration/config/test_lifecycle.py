"""Reloads, readiness, signals: edge changes its routes while serving and loses nothing."""

from __future__ import annotations

import json
import signal
import threading
import time

import pytest

from tests.harness import Edge, get, lb


def dyn(whoami, extra_routers: dict | None = None, weight_a: int = 1) -> dict:
    routers = {"a": {"rule": "Host(`a.test`)", "service": "svc-a"}}
    routers.update(extra_routers or {})
    return {
        "http": {
            "routers": routers,
            "services": {
                "svc-a": {"loadBalancer": {"servers": [{"url": whoami.url, "weight": weight_a}]}}
            },
        }
    }


def test_ping_and_ready(tmp_path, whoami):
    e = Edge(tmp_path, dyn(whoami))
    try:
        assert get(e.ports["traefik"], "/ping")[:1] == (200,)
        assert get(e.ports["traefik"], "/ready")[0] == 200
        assert get(e.ports["traefik"], "/other")[0] == 404
    finally:
        e.stop()


def test_not_ready_until_first_configuration(tmp_path, whoami):
    # A file provider whose file does not parse never publishes: edge answers
    # /ping but never claims to be ready, and the log names the file and line.
    # (A file that parses but holds a bad element publishes the rest.)
    e = _edge_with_broken_file(tmp_path, whoami)
    try:
        assert get(e.ports["traefik"], "/ping")[0] == 200
        time.sleep(0.5)
        assert get(e.ports["traefik"], "/ready")[0] == 503
        assert "dynamic.yaml" in e.log and "line 3" in e.log
    finally:
        e.stop()


def _edge_with_broken_file(tmp_path, whoami) -> Edge:
    class Broken(Edge):
        def write_dynamic(self, dynamic):
            self.dynamic_path.write_text("http:\n  routers:\n    a: [rule\n      service: x\n")

    return Broken(tmp_path, dyn(whoami), wait_ready=False)


def test_route_change_picked_up_while_serving(tmp_path, whoami):
    e = Edge(tmp_path, dyn(whoami))
    try:
        assert get(e.port, "/", host="new.test")[0] == 404
        n = e.applied()
        e.write_dynamic(dyn(whoami, {"new": {"rule": "Host(`new.test`)", "service": "svc-a"}}))
        e.wait_applied(n + 1)
        assert get(e.port, "/", host="new.test")[0] == 200
    finally:
        e.stop()


def test_invalid_router_disabled_others_keep_serving(tmp_path, whoami):
    e = Edge(tmp_path, dyn(whoami))
    try:
        n = e.applied()
        e.write_dynamic(
            dyn(
                whoami,
                {
                    "broken": {"rule": "Host(`b.test`) &&", "service": "svc-a"},
                    "orphan": {"rule": "Host(`o.test`)", "service": "missing"},
                },
            )
        )
        e.wait_applied(n + 1)
        assert get(e.port, "/", host="a.test")[0] == 200
        assert get(e.port, "/", host="o.test")[0] == 404
        assert "broken@file" in e.log and "column" in e.log
        assert "orphan@file" in e.log and "missing@file" in e.log
    finally:
        e.stop()


def test_invalid_file_keeps_last_good_configuration(tmp_path, whoami):
    e = Edge(tmp_path, dyn(whoami))
    try:
        # A file that does not parse (one that parses serves its good elements).
        e.dynamic_path.write_text("http: {routers: {a: {rule: 'Host(`a.test`)', service: [svc-a}}}")
        e.wait_for(r"dynamic\.yaml.*line 1")
        time.sleep(0.5)  # a round that took the file would have applied by now
        assert get(e.port, "/", host="a.test")[0] == 200
    finally:
        e.stop()


def test_sighup_rereads_an_unwatched_file(tmp_path, whoami):
    e = Edge(tmp_path, dyn(whoami), watch=False)
    try:
        e.write_dynamic(dyn(whoami, {"new": {"rule": "Host(`new.test`)", "service": "svc-a"}}))
        time.sleep(0.6)
        assert get(e.port, "/", host="new.test")[0] == 404  # not watched
        n = e.applied()
        e.signal(signal.SIGHUP)
        e.wait_applied(n + 1)
        assert get(e.port, "/", host="new.test")[0] == 200
    finally:
        e.stop()


def test_sigterm_finishes_in_flight_requests_then_exits(tmp_path, whoami):
    e = Edge(tmp_path, dyn(whoami))
    results = []

    def slow():
        results.append(get(e.port, "/?delay=1", host="a.test", timeout=10))

    t = threading.Thread(target=slow)
    t.start()
    time.sleep(0.3)
    e.signal(signal.SIGTERM)
    time.sleep(0.2)
    assert get(e.port, "/", host="a.test")[0] == 0  # no longer accepting
    t.join(timeout=10)
    assert results and results[0][0] == 200
    assert json.loads(results[0][2])["name"] == "w1"
    assert e.proc.wait(timeout=10) == 0


@pytest.mark.parametrize("grace", ["300ms"])
def test_sigterm_cuts_requests_past_grace(tmp_path, whoami, grace):
    eps = {"web": {"address": "127.0.0.1:0", "transport": {"lifeCycle": {"graceTimeOut": grace}}}}
    e = Edge(tmp_path, dyn(whoami), entrypoints=eps)
    results = []

    def cut():
        try:
            results.append(get(e.port, "/?delay=5", host="a.test", timeout=10))
        except OSError as exc:  # the connection is cut: that is the point
            results.append(exc)

    t = threading.Thread(target=cut)
    t.start()
    time.sleep(0.3)
    start = time.monotonic()
    e.signal(signal.SIGTERM)
    assert e.proc.wait(timeout=5) == 0
    assert time.monotonic() - start < 3
    t.join(timeout=10)
    assert results and isinstance(results[0], OSError)


@pytest.mark.parametrize("workers", [1, 2])
def test_request_accept_grace_timeout_keeps_accepting_then_drains(tmp_path, whoami, workers):
    """Traefik's lifeCycle.requestAcceptGraceTimeout: after SIGTERM an entry point keeps
    accepting and serving for that long while /ping answers 503, so a load balancer
    health-checking it takes the node out of rotation before its port refuses
    connections. Edge accepted the key and ignored it: the port refused new connections
    at once (the client saw ECONNREFUSED), on every rolling update."""
    life = {"lifeCycle": {"requestAcceptGraceTimeout": "1500ms", "graceTimeOut": "1s"}}
    eps = {
        "web": {"address": "127.0.0.1:0", "transport": life},
        "traefik": {"address": "127.0.0.1:0", "transport": life},
    }
    routes = {
        "http": {
            "routers": {"a": {"rule": "Host(`a.test`)", "service": "app"}},
            "services": {"app": lb(whoami.url)},
        }
    }
    e = Edge(tmp_path, routes, entrypoints=eps, static_extra={"workers": workers})
    try:
        assert get(e.port, "/", host="a.test")[0] == 200
        start = time.monotonic()
        e.signal(signal.SIGTERM)
        e.wait_for(r"stopping")
        time.sleep(0.3)
        assert get(e.port, "/", host="a.test")[0] == 200  # a new connection, served
        assert get(e.ports["traefik"], "/ping")[0] == 503  # out of rotation
        assert e.proc.wait(timeout=15) == 0
        assert time.monotonic() - start >= 1.4
        assert get(e.port, "/", host="a.test")[0] == 0  # and then refused
        assert "SIGKILL" not in e.log
    finally:
        e.stop()
