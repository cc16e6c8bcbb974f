"""Validation of a merged configuration (edge.config.runtime.build_runtime): status and
errors per element, a broken element disabled while the rest is served, TCP and UDP
sections, and what a previous snapshot lends the next."""

from __future__ import annotations

import json

import pytest

from edge.config.dynamic import Configuration, ServersTransport
from edge.config.merge import merge
from edge.config.runtime import DEFAULT_TRANSPORT, build_runtime
from tests.unit.config.documents import EPS, conf, lb

BROKEN = {
    "http": {
        "routers": {
            "ok": {"rule": "Host(`ok.example`)", "service": "app"},
            "bad-rule": {"rule": "Host(`a`", "service": "app"},
            "no-service": {"rule": "Host(`b`)", "service": "nope"},
            "no-ep": {"rule": "Host(`c`)", "service": "app", "entryPoints": ["web", "admin"]},
            "udp-ep": {"rule": "Host(`d`)", "service": "app", "entryPoints": ["dns"]},
            "no-mw": {"rule": "Host(`e`)", "service": "app", "middlewares": ["strip", "auth"]},
            "to-cycle": {"rule": "Host(`f`)", "service": "loop-a"},
            "to-bad-transport": {"rule": "Host(`g`)", "service": "far"},
            "empty": {"rule": "Host(`h`)", "service": "nobody", "priority": 100},
            "cross": {"rule": "Host(`i`)", "service": "app@other"},
        },
        "services": {
            "app": lb("http://127.0.0.1:9001"),
            "nobody": {"loadBalancer": {"servers": []}},
            "loop-a": {"weighted": {"services": [{"name": "loop-b"}]}},
            "loop-b": {"weighted": {"services": [{"name": "loop-a"}, {"name": "app"}]}},
            "via-loop": {"weighted": {"services": [{"name": "loop-a"}]}},
            "missing-member": {"weighted": {"services": [{"name": "app"}, {"name": "ghost"}]}},
            "far": {
                "loadBalancer": {"servers": [{"url": "http://a"}], "serversTransport": "nowhere"}
            },
            "near": {
                "loadBalancer": {"servers": [{"url": "http://a"}], "serversTransport": "fast"}
            },
            "self": {"weighted": {"services": [{"name": "self"}]}},
        },
        "middlewares": {"strip": {"stripPrefix": {"prefixes": ["/x"]}}},
        "serversTransports": {"fast": {"forwardingTimeouts": {"dialTimeout": "1s"}}},
    }
}


@pytest.fixture
def broken():
    other = conf({"http": {"services": {"app": lb("http://127.0.0.1:9002")}}})
    return build_runtime(merge({"file": conf(BROKEN), "other": other}), EPS)


@pytest.mark.parametrize(
    ("router", "message"),
    [
        ("bad-rule@file", "rule 'Host(`a`': column"),
        ("no-service@file", "service 'nope@file' does not exist"),
        ("no-ep@file", "entryPoint 'admin' does not exist"),
        ("udp-ep@file", "entryPoint 'dns' is a UDP entry point, not TCP"),
        ("no-mw@file", "middleware 'auth@file' does not exist"),
        ("to-cycle@file", "service 'loop-a@file' is disabled"),
        ("to-bad-transport@file", "service 'far@file' is disabled"),
    ],
)
def test_broken_router_is_disabled_with_its_reason(broken, router: str, message: str) -> None:
    info = broken.http_routers[router]
    assert info.status == "disabled"
    assert len(info.errors) == 1
    assert info.errors[0].startswith(message)
    assert any(line.startswith(f"router {router}: {message}") for line in broken.errors())


def test_everything_else_keeps_working(broken) -> None:
    ok = broken.http_routers["ok@file"]
    assert ok.status == "enabled" and ok.errors == []
    assert ok.rule is not None and ok.rule.text == "Host(`ok.example`)"
    assert ok.priority == len("Host(`ok.example`)")
    assert ok.entry_points == ["web", "websecure"]  # every TCP entry point but traefik's
    assert broken.http_routers["cross@file"].status == "enabled"
    assert broken.http_services["app@file"].used_by == [
        "loop-b@file",  # weighted services are checked before routers
        "missing-member@file",
        "ok@file",
        "bad-rule@file",
        "no-ep@file",
        "udp-ep@file",
        "no-mw@file",
    ]
    assert broken.http_services["near@file"].status == "enabled"
    assert broken.http_middlewares["strip@file"].status == "enabled"
    assert broken.http_middlewares["strip@file"].used_by == ["no-mw@file"]


def test_router_to_service_without_servers_stays_enabled(broken) -> None:
    info = broken.http_routers["empty@file"]
    assert info.status == "enabled"
    assert info.priority == 100
    svc = broken.http_services["nobody@file"]
    assert svc.status == "warning"
    assert svc.errors == ["no servers: requests get 503"]


def test_service_errors(broken) -> None:
    cycle = "weighted services form a cycle: loop-a@file -> loop-b@file -> loop-a@file"
    assert broken.http_services["loop-a@file"].errors == [cycle]
    assert broken.http_services["loop-b@file"].errors == [cycle]
    assert broken.http_services["via-loop@file"].errors == ["service 'loop-a@file' is disabled"]
    assert broken.http_services["self@file"].errors == [
        "weighted services form a cycle: self@file -> self@file"
    ]
    assert broken.http_services["missing-member@file"].errors == [
        "service 'ghost@file' does not exist"
    ]
    assert broken.http_services["far@file"].errors == [
        "serversTransport 'nowhere@file' does not exist"
    ]
    for name in (
        "loop-a@file",
        "loop-b@file",
        "via-loop@file",
        "self@file",
        "missing-member@file",
        "far@file",
    ):
        assert broken.http_services[name].status == "disabled", name


def test_servers_transports_include_the_default(broken) -> None:
    assert broken.servers_transports[DEFAULT_TRANSPORT] == ServersTransport()
    assert broken.servers_transports["fast@file"].forwarding_timeouts.dial_timeout == 1.0
    assert DEFAULT_TRANSPORT in build_runtime(Configuration(), EPS).servers_transports


def test_errors_and_dump(broken) -> None:
    lines = broken.errors()
    assert "service nobody@file: no servers: requests get 503" in lines
    dump = broken.to_builtins()
    json.dumps(dump)
    r = dump["http"]["routers"]["no-service@file"]
    assert r["status"] == "disabled"
    assert r["errors"] == ["service 'nope@file' does not exist"]
    assert r["provider"] == "file"
    assert r["config"]["service"] == "nope@file"
    assert dump["http"]["routers"]["ok@file"]["entryPoints"] == ["web", "websecure"]
    assert dump["http"]["services"]["app@file"]["status"] == "enabled"
    assert (
        dump["http"]["serversTransports"]["fast@file"]["forwardingTimeouts"]["dialTimeout"] == "1s"
    )
    assert "default@internal" in dump["http"]["serversTransports"]


def test_tcp_and_udp_validation() -> None:
    c = conf(
        {
            "tcp": {
                "routers": {
                    "sni": {
                        "rule": "HostSNI(`db.example`)",
                        "service": "db",
                        "tls": {"passthrough": True},
                    },
                    "raw": {"rule": "HostSNI(`*`)", "service": "db", "entryPoints": ["web"]},
                    "bad": {"rule": "Host(`x`)", "service": "db"},
                    "udp-ep": {"rule": "HostSNI(`*`)", "service": "db", "entryPoints": ["dns"]},
                    "gone": {"rule": "HostSNI(`*`)", "service": "gone"},
                    "tls-opts": {
                        "rule": "HostSNI(`t`)",
                        "service": "db",
                        "tls": {"options": "nope"},
                    },
                },
                "services": {
                    "db": {"loadBalancer": {"servers": [{"address": "10.0.0.1:5432"}]}},
                    "bad-transport": {"loadBalancer": {"servers": [], "serversTransport": "x"}},
                },
            },
            "udp": {
                "routers": {
                    "dns": {"service": "dns"},
                    "tcp-ep": {"service": "dns", "entryPoints": ["web"]},
                    "gone": {"service": "gone"},
                },
                "services": {
                    "dns": {"loadBalancer": {"servers": [{"address": "1.1.1.1:53"}]}},
                    "w": {"weighted": {"services": [{"name": "dns"}, {"name": "ghost"}]}},
                },
            },
        }
    )
    rt = build_runtime(merge({"file": c}), EPS)
    assert rt.tcp_routers["sni@file"].status == "enabled"
    assert rt.tcp_routers["sni@file"].entry_points == ["web", "websecure"]
    assert rt.tcp_routers["raw@file"].entry_points == ["web"]
    assert rt.tcp_routers["bad@file"].status == "disabled"
    assert "rule 'Host(`x`)'" in rt.tcp_routers["bad@file"].errors[0]
    assert rt.tcp_routers["udp-ep@file"].errors == [
        "entryPoint 'dns' is a UDP entry point, not TCP"
    ]
    assert rt.tcp_routers["gone@file"].errors == ["service 'gone@file' does not exist"]
    assert rt.tcp_routers["tls-opts@file"].errors == ["TLS options 'nope@file' do not exist"]
    assert rt.tcp_services["bad-transport@file"].status == "disabled"
    assert DEFAULT_TRANSPORT in rt.tcp_servers_transports

    assert rt.udp_routers["dns@file"].status == "enabled"
    assert rt.udp_routers["dns@file"].entry_points == ["dns"]
    assert rt.udp_routers["tcp-ep@file"].errors == [
        "entryPoint 'web' is a TCP entry point, not UDP"
    ]
    assert rt.udp_routers["gone@file"].status == "disabled"
    assert rt.udp_services["w@file"].errors == ["service 'ghost@file' does not exist"]
    assert "tcp router bad@file: rule 'Host(`x`)'" in "\n".join(rt.errors())
    assert "udp service w@file: service 'ghost@file' does not exist" in rt.errors()


def test_no_entry_point_of_the_protocol() -> None:
    c = conf({"udp": {"routers": {"u": {"service": "s"}}, "services": {"s": {"loadBalancer": {}}}}})
    rt = build_runtime(merge({"file": c}), {"web": "tcp"})
    assert rt.udp_routers["u@file"].errors == ["no UDP entry point to attach to"]


def test_previous_snapshot_lends_compiled_rules() -> None:
    c = merge(
        {
            "file": conf(
                {
                    "http": {
                        "routers": {"r": {"rule": "Host(`a`)", "service": "s"}},
                        "services": {"s": lb("http://a")},
                    }
                }
            )
        }
    )
    first = build_runtime(c, EPS)
    second = build_runtime(c, EPS, previous=first)
    assert second.http_routers["r@file"].rule is first.http_routers["r@file"].rule
    assert (
        build_runtime(c, EPS).http_routers["r@file"].rule is not first.http_routers["r@file"].rule
    )


# --- what the static configuration adds ----------------------------------------------


def _static_eps(static: dict) -> dict[str, str]:
    from edge.config.loader import decode_static

    static_config = decode_static({"entryPoints": {"web": {"address": ":80"}}, **static})
    return static_config.entry_point_protocols()


SERVED = {
    "http": {
        "routers": {"r": {"rule": "Host(`a`)", "service": "s"}},
        "services": {
            "s": lb("https://127.0.0.1:9001"),
            "own": {"loadBalancer": {"servers": [{"url": "http://a"}], "serversTransport": "fast"}},
        },
        "serversTransports": {"fast": {"forwardingTimeouts": {"dialTimeout": "1s"}}},
    },
    "tcp": {
        "routers": {"t": {"rule": "HostSNI(`*`)", "service": "ts"}},
        "services": {"ts": {"loadBalancer": {"servers": [{"address": "127.0.0.1:9"}]}}},
    },
}


def test_static_servers_transports_are_default_at_internal() -> None:
    eps = _static_eps(
        {
            "serversTransport": {"insecureSkipVerify": True, "maxIdleConnsPerHost": 3},
            "tcpServersTransport": {"dialTimeout": "4s"},
        }
    )
    c = merge({"file": conf(SERVED)})
    rt = build_runtime(c, eps)
    default = rt.servers_transports[DEFAULT_TRANSPORT]
    assert default.insecure_skip_verify and default.max_idle_conns_per_host == 3
    assert rt.servers_transports["fast@file"].max_idle_conns_per_host == 200  # its own
    assert rt.tcp_servers_transports[DEFAULT_TRANSPORT].dial_timeout == 4.0
    assert rt.http_services["s@file"].status == "enabled"
    # A round where only servers changed keeps them (the endpoints-only shortcut).
    moved = json.loads(json.dumps(SERVED))
    moved["http"]["services"]["s"] = lb("https://127.0.0.1:9002")
    again = build_runtime(merge({"file": conf(moved)}), eps, previous=rt)
    assert again.http_routers["r@file"] is rt.http_routers["r@file"]  # the shortcut took it
    assert again.servers_transports[DEFAULT_TRANSPORT] == default
    assert again.tcp_servers_transports[DEFAULT_TRANSPORT].dial_timeout == 4.0
    # Without a static one, Traefik's defaults.
    assert build_runtime(c, EPS).servers_transports[DEFAULT_TRANSPORT] == ServersTransport()


def test_static_root_cas_that_cannot_be_read_disable_https_services(tmp_path) -> None:
    missing = str(tmp_path / "missing-ca.pem")
    eps = _static_eps({"serversTransport": {"rootCAs": [missing]}})
    rt = build_runtime(merge({"file": conf(SERVED)}), eps)
    s = rt.http_services["s@file"]
    assert s.status == "disabled" and missing in s.errors[0] and DEFAULT_TRANSPORT in s.errors[0]
    assert rt.http_routers["r@file"].status == "disabled"
    assert rt.http_services["own@file"].status == "enabled"  # plain http, its own transport


API_ROUTERS = {
    "http": {
        "routers": {
            "dash": {"rule": "Host(`api.a`)", "service": "api@internal", "middlewares": ["m"]},
        },
        "middlewares": {"m": {"stripPrefix": {"prefixes": ["/x"]}}},
    }
}


def test_api_at_internal_exists_with_api() -> None:
    c = merge({"file": conf(API_ROUTERS)})
    rt = build_runtime(c, _static_eps({"api": {}}))
    r = rt.http_routers["dash@file"]
    assert r.status == "enabled" and r.errors == []
    api = rt.http_services["api@internal"]
    assert api.status == "enabled" and api.errors == [] and api.used_by == ["dash@file"]
    assert api.provider == "internal"
    # Without `api` there is none, and the reason says where it comes from.
    rt = build_runtime(c, _static_eps({}))
    r = rt.http_routers["dash@file"]
    assert r.status == "disabled"
    assert r.errors == [
        "service 'api@internal' does not exist (it exists when the static configuration has `api`)"
    ]
    assert "api@internal" not in rt.http_services


def test_cert_resolver_edge_lacks_is_a_warning_naming_the_router() -> None:
    """Traefik logs "Router uses a nonexistent certificate resolver" and serves the router
    with the certificates it has: a warning, the router served."""
    c = merge(
        {
            "file": conf(
                {
                    "http": {
                        "routers": {
                            "le": {
                                "rule": "Host(`a`)",
                                "service": "s",
                                "tls": {"certResolver": "letsencrypt"},
                            },
                            "plain": {"rule": "Host(`b`)", "service": "s", "tls": {}},
                        },
                        "services": {"s": lb("http://a")},
                    },
                    "tcp": {
                        "routers": {
                            "t": {
                                "rule": "HostSNI(`c`)",
                                "service": "ts",
                                "tls": {"certResolver": "letsencrypt"},
                            },
                            "pass": {
                                "rule": "HostSNI(`d`)",
                                "service": "ts",
                                "tls": {"passthrough": True, "certResolver": "letsencrypt"},
                            },
                        },
                        "services": {"ts": {"loadBalancer": {"servers": [{"address": "a:1"}]}}},
                    },
                }
            )
        }
    )
    rt = build_runtime(c, EPS)
    le = rt.http_routers["le@file"]
    assert le.status == "warning"
    assert le.errors == [
        "tls.certResolver 'letsencrypt' does not exist (edge has no certificate resolvers, "
        "no ACME): served with tls.certificates, else the default certificate"
    ]
    assert "router le@file: tls.certResolver 'letsencrypt'" in "\n".join(rt.errors())
    assert rt.http_routers["plain@file"].status == "enabled"
    assert rt.tcp_routers["t@file"].status == "warning"
    assert rt.tcp_routers["pass@file"].status == "enabled"  # passthrough needs no certificate


def test_routers_naming_a_port_open_run_time_entry_points_when_allowed() -> None:
    """With runtimeEntryPoints (RuntimeDefaults.opens) a router naming ":<port>" (a UDP
    one ":<port>/udp") validates against an entry point opened for it; a router
    naming none never lands there; without it those names do not exist."""
    from edge.config.static import EntryPointKind, RuntimeDefaults

    doc = {
        "http": {
            "routers": {
                "gw": {"rule": "Host(`a`)", "service": "app", "entryPoints": [":8080"]},
                "plain": {"rule": "Host(`b`)", "service": "app"},
                "also": {"rule": "Host(`c`)", "service": "app", "entryPoints": ["web", ":8080"]},
                "odd": {"rule": "Host(`d`)", "service": "app", "entryPoints": [":08"]},
            },
            "services": {"app": lb("http://127.0.0.1:9001")},
        },
        "tcp": {"routers": {"db": {"rule": "HostSNI(`*`)", "service": "db", "entryPoints": [":5432"]}},
                "services": {"db": {"loadBalancer": {"servers": [{"address": "127.0.0.1:1"}]}}}},
        "udp": {"routers": {"dns": {"service": "dns", "entryPoints": [":8053/udp"]},
                            "wrong": {"service": "dns", "entryPoints": [":8080"]}},
                "services": {"dns": {"loadBalancer": {"servers": [{"address": "127.0.0.1:53"}]}}}},
    }  # fmt: skip
    merged = merge({"file": conf(doc)})
    opens = RuntimeDefaults(opens=True)
    kinds = {name: EntryPointKind(p, None, opens) for name, p in EPS.items()}
    rt = build_runtime(merged, kinds)
    assert {n: p for n, p in rt.entry_points.items() if n.startswith(":")} == {
        ":5432": "tcp",
        ":8053/udp": "udp",
        ":8080": "tcp",
    }
    r = rt.http_routers
    assert r["gw@file"].status == "enabled" and r["gw@file"].entry_points == [":8080"]
    assert ":8080" not in r["plain@file"].entry_points
    assert r["also@file"].entry_points == ["web", ":8080"]
    assert r["odd@file"].status == "disabled"
    assert rt.tcp_routers["db@file"].status == "enabled"
    assert rt.udp_routers["dns@file"].status == "enabled"
    assert rt.udp_routers["dns@file"].entry_points == [":8053/udp"]
    assert rt.udp_routers["wrong@file"].status == "disabled"  # a TCP entry point's name

    closed = build_runtime(merged, EPS)
    assert not any(n.startswith(":") for n in closed.entry_points)
    assert closed.http_routers["gw@file"].status == "disabled"


def test_routers_naming_no_entry_point_attach_to_those_as_default_when_any_is() -> None:
    """Traefik's asDefault: once an entry point has it, HTTP and TCP routers naming none
    attach to the marked TCP ones only; a router naming its entry points and UDP
    routers (every UDP entry point, as before) are unaffected; none marked: all."""
    from edge.config.static import EntryPointKind

    doc = {
        "http": {
            "routers": {
                "plain": {"rule": "Host(`a`)", "service": "app"},
                "named": {"rule": "Host(`b`)", "service": "app", "entryPoints": ["web"]},
            },
            "services": {"app": lb("http://127.0.0.1:9001")},
        },
        "tcp": {"routers": {"db": {"rule": "HostSNI(`*`)", "service": "db"}},
                "services": {"db": {"loadBalancer": {"servers": [{"address": "127.0.0.1:1"}]}}}},
        "udp": {"routers": {"dns": {"service": "dns"}},
                "services": {"dns": {"loadBalancer": {"servers": [{"address": "127.0.0.1:53"}]}}}},
    }  # fmt: skip
    merged = merge({"file": conf(doc)})
    eps = {**EPS, "admin": "tcp", "dns2": "udp"}

    def attached(marked: set[str]) -> tuple[list[str], ...]:
        kinds = {n: EntryPointKind(p, as_default=n in marked) for n, p in eps.items()}
        rt = build_runtime(merged, kinds)
        return (
            rt.http_routers["plain@file"].entry_points,
            rt.http_routers["named@file"].entry_points,
            rt.tcp_routers["db@file"].entry_points,
            rt.udp_routers["dns@file"].entry_points,
        )

    assert attached(set()) == (["admin", "web", "websecure"], ["web"], ["admin", "web", "websecure"], ["dns", "dns2"])  # fmt: skip
    assert attached({"websecure"}) == (["websecure"], ["web"], ["websecure"], ["dns", "dns2"])
    assert attached({"web", "admin"}) == (["admin", "web"], ["web"], ["admin", "web"], ["dns", "dns2"])  # fmt: skip
    # the internal entry point is never a default, marked or not (Traefik's too)
    assert attached({"traefik"})[0] == []


def test_an_as_default_change_is_a_full_validation_not_an_endpoints_only_round() -> None:
    from edge.config.static import EntryPointKind

    doc = {
        "http": {
            "routers": {"plain": {"rule": "Host(`a`)", "service": "app"}},
            "services": {"app": lb("http://127.0.0.1:9001")},
        }
    }
    first = build_runtime(merge({"file": conf(doc)}), EPS)
    doc["http"]["services"]["app"] = lb("http://127.0.0.1:9002")  # servers only
    marked = {n: EntryPointKind(p, as_default=n == "web") for n, p in EPS.items()}
    again = build_runtime(merge({"file": conf(doc)}), marked, previous=first)
    assert again.http_routers["plain@file"].entry_points == ["web"]
