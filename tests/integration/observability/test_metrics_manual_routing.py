"""``metrics.prometheus.manualRouting``: ``/metrics`` served only by the routers naming
``prometheus@internal``, behind their own rule and middlewares, as in Traefik."""

from __future__ import annotations

import bcrypt

from tests.harness import Edge, get, lb
from tests.integration.observability.metrics_text import curl, parse, value

USERS = ["user:" + bcrypt.hashpw(b"secret", bcrypt.gensalt(4)).decode()]


def dynamic(whoami) -> dict:
    return {
        "http": {
            "routers": {
                "a": {"rule": "Host(`a.test`)", "service": "s"},
                "metrics": {
                    "rule": "Host(`metrics.test`) && PathPrefix(`/stats`)",
                    "service": "prometheus@internal",
                    "middlewares": ["auth"],
                },
            },
            "middlewares": {"auth": {"basicAuth": {"users": USERS}}},
            "services": {"s": lb(whoami.url)},
        }
    }


def test_metrics_are_served_by_the_routers_naming_prometheus_at_internal(tmp_path, whoami):
    # addInternals: the 401 the metrics router answers is counted too.
    static = {"metrics": {"prometheus": {"manualRouting": True}, "addInternals": True}}
    e = Edge(tmp_path, dynamic(whoami), static_extra=static)
    try:
        assert (
            curl("-o", "/dev/null", "-w", "%{http_code}", "-H", "Host: a.test", e.url).stdout
            == b"200"
        )
        # Not on the metrics entry point any more.
        status, _, _ = get(e.ports["traefik"], "/metrics")
        assert status == 404
        # The router's middlewares run first.
        denied = curl(
            "-o", "/dev/null", "-w", "%{http_code}", "-H", "Host: metrics.test", e.url + "/stats"
        )
        assert denied.stdout == b"401"
        out = curl(
            "-u",
            "user:secret",
            "-w",
            "\n%{http_code} %{content_type}",
            "-H",
            "Host: metrics.test",
            e.url + "/stats",
        )
        text, _, tail = out.stdout.decode().rpartition("\n")
        assert tail == "200 text/plain; version=0.0.4; charset=utf-8"
        samples = parse(text)
        ep = {"protocol": "http", "entrypoint": "web"}
        assert (
            value(samples, "traefik_entrypoint_requests_total", code="200", method="GET", **ep) == 1
        )
        assert (
            value(samples, "traefik_entrypoint_requests_total", code="401", method="GET", **ep) == 1
        )
        posted = curl(
            "-u",
            "user:secret",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-X",
            "POST",
            "-H",
            "Host: metrics.test",
            e.url + "/stats",
        )
        assert posted.stdout == b"405"
    finally:
        e.stop()


def test_without_manual_routing_no_router_may_name_it(tmp_path, whoami):
    e = Edge(
        tmp_path,
        dynamic(whoami),
        static_extra={"metrics": {"prometheus": {}}, "api": {"insecure": True}},
    )
    try:
        status, _, body = get(e.ports["traefik"], "/api/http/routers/metrics@file")
        assert status == 200
        assert b"prometheus@internal" in body and b"manualRouting" in body, body
        # /metrics stays where it was.
        status, _, _ = get(e.ports["traefik"], "/metrics")
        assert status == 200
    finally:
        e.stop()
