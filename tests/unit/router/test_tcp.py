"""edge.router.tcp without sockets: the precedence of routers on one entrypoint, as
Traefik decides it, TLS options per name, per-entrypoint middlewares.

Most cases here pin a defect of a review (the docstring says which); the real-socket
counterparts are in the integration tests.
"""

from __future__ import annotations

import pytest

from edge.config.loader import decode_dynamic
from edge.config.merge import merge
from edge.config.runtime import build_runtime, check_tls
from edge.router.tcp import HTTPS, PASSTHROUGH, TCPLoadBalancer, build_tcp_routers, tcp_servers_for
from edge.tls.certs import TLSCertificates
from edge.tls.clienthello import ClientHello

TCP_SVC = {"loadBalancer": {"servers": [{"address": "127.0.0.1:9"}]}}
HTTP_SVC = {"loadBalancer": {"servers": [{"url": "http://127.0.0.1:9"}]}}


def tcp_routers(dynamic: dict, eps: tuple[str, ...] = ("web",)):
    """The runtime of ``dynamic`` and the TCP routers of entrypoints ``eps``, TLS checked."""
    runtime = build_runtime(merge({"file": decode_dynamic(dynamic)}), dict.fromkeys(eps, "tcp"))
    certs = TLSCertificates(runtime.tls)
    check_tls(runtime, certs)
    return runtime, build_tcp_routers(runtime, eps, certs)


def router_for(https_rules: dict[str, str], tcp_rules: dict[str, str]):
    """The TCP router of entrypoint ``web``: HTTPS routers and passthrough TCP routers by rule."""
    dynamic = {
        "http": {
            "routers": {
                name: {"rule": rule, "service": "h", "tls": {}}
                for name, rule in https_rules.items()
            },
            "services": {"h": HTTP_SVC},
        },
        "tcp": {
            "routers": {
                name: {"rule": rule, "service": "t", "tls": {"passthrough": True}}
                for name, rule in tcp_rules.items()
            },
            "services": {"t": TCP_SVC},
        },
    }
    runtime = build_runtime(merge({"file": decode_dynamic(dynamic)}), {"web": "tcp"})
    assert not runtime.errors(), runtime.errors()
    return build_tcp_routers(runtime, ("web",), TLSCertificates(runtime.tls))["web"]


def hello(sni: str | None) -> ClientHello:
    return ClientHello(server_name=sni, alpn=(), versions=(0x0304,), length=0)


@pytest.mark.parametrize("sni", ["other.test", None])
def test_https_routers_that_all_name_hosts_leave_other_names_to_a_tcp_catch_all(sni):
    """Traefik (router.go since 2.7): an HTTPS router's Host takes its name, a TCP
    router on TLS with a specific rule comes next, then an HTTPS router with no Host
    (the catch-all), then ``HostSNI(`*`)``, and only then the HTTPS 404. HTTPS routers
    that all name hosts took every other name (and connections without SNI) from a
    passthrough ``HostSNI(`*`)`` router: terminated with edge's certificate, 404."""
    r = router_for(
        {"site": "Host(`site.test`)", "api": "Host(`api.test`) && PathPrefix(`/v1`)"},
        {"all": "HostSNI(`*`)"},
    )
    assert r.tls(hello("site.test"), "1.2.3.4").mode == HTTPS
    assert r.tls(hello("api.test"), "1.2.3.4").mode == HTTPS
    route = r.tls(hello(sni), "1.2.3.4")
    assert route.mode == PASSTHROUGH and route.name == "all@file"


def test_an_https_router_without_a_host_still_comes_before_the_tcp_catch_all():
    r = router_for(
        {"site": "Host(`site.test`)", "paths": "PathPrefix(`/p`)"}, {"all": "HostSNI(`*`)"}
    )
    assert r.tls(hello("other.test"), "1.2.3.4").mode == HTTPS
    r = router_for(
        {"site": "Host(`site.test`)", "re": "HostRegexp(`^.+\\.test$`)"}, {"all": "HostSNI(`*`)"}
    )
    assert r.tls(hello("other.test"), "1.2.3.4").mode == HTTPS


def test_without_a_tcp_catch_all_an_unknown_name_still_gets_the_https_404():
    r = router_for({"site": "Host(`site.test`)"}, {"db": "HostSNI(`db.test`)"})
    assert r.tls(hello("other.test"), "1.2.3.4").mode == HTTPS
    assert r.tls(hello("db.test"), "1.2.3.4").mode == PASSTHROUGH


@pytest.mark.parametrize(
    ("where", "key", "value"),
    [
        ("loadBalancer", "healthCheck", {"interval": "10s", "timeout": "3s"}),  # Traefik v3.3
        ("transport-tls", "spiffe", {"ids": ["spiffe://td/db"]}),
    ],
)
def test_a_traefik_tcp_key_edge_lacks_disables_its_service_not_the_file(where, key, value):
    """Traefik keys edge does not implement are named as such and disable only their
    element; the TCP load balancer's ``healthCheck`` and a TCP serversTransport's
    ``peerCertSANs`` (read since; its ``spiffe`` stands in) were missing from that
    list, so they read as typos ("unknown key") and the whole file was refused: every
    router in it, HTTP ones included, was gone (at start-up: not ready) for one TCP
    service's health check."""
    lb: dict = {"servers": [{"address": "127.0.0.1:9", "tls": True}], "serversTransport": "st"}
    transport: dict = {"tls": {"serverName": "db.internal"}}
    (lb if where == "loadBalancer" else transport["tls"])[key] = value
    dynamic = {
        "http": {
            "routers": {"site": {"rule": "Host(`site.test`)", "service": "h"}},
            "services": {"h": HTTP_SVC},
        },
        "tcp": {
            "routers": {"db": {"rule": "HostSNI(`*`)", "service": "db"}},
            "services": {"db": {"loadBalancer": lb}},
            "serversTransports": {"st": transport},
        },
    }
    runtime = build_runtime(merge({"file": decode_dynamic(dynamic)}), {"web": "tcp"})
    assert runtime.http_routers["site@file"].status == "enabled"
    assert runtime.tcp_routers["db@file"].status == "disabled"
    assert any(f"{key}: not supported by this version of edge" in e for e in runtime.errors()), (
        runtime.errors()
    )


def test_load_balancer_termination_delay_beside_a_named_servers_transport_is_named_as_unused():
    dynamic = {
        "tcp": {
            "routers": {"db": {"rule": "HostSNI(`*`)", "service": "db"}},
            "services": {
                "db": {
                    "loadBalancer": {
                        "servers": [{"address": "127.0.0.1:9"}],
                        "serversTransport": "st",
                        "terminationDelay": 500,
                    }
                }
            },
            "serversTransports": {"st": {"terminationDelay": "2s"}},
        },
    }
    runtime = build_runtime(merge({"file": decode_dynamic(dynamic)}), {"web": "tcp"})
    service = runtime.tcp_services["db@file"]
    assert service.status == "warning"
    assert "loadBalancer.terminationDelay is not used with serversTransport" in service.errors[0]
    router = build_tcp_routers(runtime, ("web",), TLSCertificates(runtime.tls))["web"]
    assert router.at_once("1.2.3.4").service.pick().termination_delay == 2.0


def test_a_catch_all_tcp_router_without_a_priority_comes_after_every_other():
    """Traefik gives ``HostSNI(`*`)`` the default priority -1 (GetRulePriority: "the
    lowest computable priority minus one"), every other TCP router its rule's length.
    edge gave the catch-all its length, 12, so a shorter rule such as ``ALPN(`h2`)``
    (10) ranked below it and never matched: h2 clients were passed through to the
    catch-all's service."""
    dynamic = {
        "tcp": {
            "routers": {
                "h2": {"rule": "ALPN(`h2`)", "service": "t", "tls": {}},
                "all": {"rule": "HostSNI(`*`)", "service": "t", "tls": {"passthrough": True}},
                "pinned": {
                    "rule": "HostSNI(`*`)",
                    "service": "t",
                    "tls": {"passthrough": True},
                    "priority": 5,
                },
            },
            "services": {"t": TCP_SVC},
        },
    }
    runtime = build_runtime(merge({"file": decode_dynamic(dynamic)}), {"web": "tcp"})
    assert runtime.tcp_routers["all@file"].priority == -1
    assert runtime.tcp_routers["pinned@file"].priority == 5  # a priority given is kept
    del dynamic["tcp"]["routers"]["pinned"]
    runtime = build_runtime(merge({"file": decode_dynamic(dynamic)}), {"web": "tcp"})
    r = build_tcp_routers(runtime, ("web",), TLSCertificates(runtime.tls))["web"]
    h2 = ClientHello(server_name="x.test", alpn=("h2", "http/1.1"), versions=(0x0304,), length=0)
    assert r.tls(h2, "1.2.3.4").name == "h2@file"
    assert r.tls(hello("x.test"), "1.2.3.4").name == "all@file"


def test_in_flight_conn_counts_each_entrypoint_of_a_router_apart():
    """Traefik builds a TCP router's middlewares per entrypoint, so ``inFlightConn``
    (amount 1) admits one connection per address on each entrypoint of the router;
    edge shared one chain, so a connection on one entrypoint refused the same client
    on the other."""
    dynamic = {
        "tcp": {
            "routers": {"db": {"rule": "HostSNI(`*`)", "service": "t", "middlewares": ["one"]}},
            "services": {"t": TCP_SVC},
            "middlewares": {"one": {"inFlightConn": {"amount": 1}}},
        },
    }
    runtime = build_runtime(merge({"file": decode_dynamic(dynamic)}), {"a": "tcp", "b": "tcp"})
    routers = build_tcp_routers(runtime, ("a", "b"), TLSCertificates(runtime.tls))
    on_a, on_b = (routers[ep].at_once("10.0.0.1").middlewares for ep in ("a", "b"))
    assert on_a.enter("10.0.0.1") is None
    assert on_b.enter("10.0.0.1") is None  # the other entrypoint's count
    assert on_a.enter("10.0.0.1") is not None  # the same entrypoint's: refused


def test_tcp_routers_hostsni_and_https_options_skip_the_empty_label():
    _, routers = tcp_routers(
        {
            "http": {
                "routers": {
                    "site": {
                        "rule": "Host(`*.site.test`)",
                        "service": "h",
                        "tls": {"options": "strict"},
                    },
                    "other": {"rule": "Host(`other.test`)", "service": "h", "tls": {}},
                },
                "services": {"h": HTTP_SVC},
            },
            "tcp": {
                "routers": {
                    "db": {
                        "rule": "HostSNI(`*.db.test`)",
                        "service": "t",
                        "tls": {"passthrough": True},
                    },
                },
                "services": {"t": TCP_SVC},
            },
            "tls": {"options": {"strict": {"minVersion": "VersionTLS13"}}},
        }
    )
    r = routers["web"]
    assert r.tls(hello("x.db.test"), "1.2.3.4").name == "db@file"
    assert getattr(r.tls(hello(".db.test"), "1.2.3.4"), "name", None) != "db@file"
    assert r.https_route("x.site.test").options == "strict@file"
    assert r.https_route(".site.test") is None
    assert r.https_options(".site.test") == "default"  # not the wildcard's


def test_tcp_servers_for_updates_the_live_load_balancer_in_place():
    """The endpoints-only path: the load balancer the routers hold takes the servers of
    the new runtime; the rotation goes on for the servers that stay."""
    servers = [{"address": "127.0.0.1:1001"}, {"address": "127.0.0.1:1002"}]
    dynamic = {"tcp": {"routers": {"r": {"rule": "HostSNI(`*`)", "service": "s"}},
                       "services": {"s": {"loadBalancer": {"servers": servers}}}}}  # fmt: skip
    runtime = build_runtime(merge({"file": decode_dynamic(dynamic)}), {"web": "tcp"})
    built: dict = {}
    build_tcp_routers(runtime, ("web",), TLSCertificates(runtime.tls), built)
    live = built["s@file"]
    assert isinstance(live, TCPLoadBalancer)
    assert live.pick().address == "127.0.0.1:1001"  # 1002 is next

    servers[0] = {"address": "127.0.0.1:1003"}
    new = build_runtime(merge({"file": decode_dynamic(dynamic)}), {"web": "tcp"})
    ((found, members),) = tcp_servers_for(built, new, ["s@file"])
    assert found is live
    live.update(members)
    assert [live.pick().address for _ in range(3)] == [
        "127.0.0.1:1002",
        "127.0.0.1:1003",
        "127.0.0.1:1002",
    ]
