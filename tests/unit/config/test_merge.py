"""Merging providers' configurations (edge.config.merge): names qualified as
``name@provider`` with their references, deterministic, inputs untouched; with a memo,
what a provider passes again unchanged is not qualified again, and the result is
always the one a merge without memo gives."""

from __future__ import annotations

import random

import msgspec

from edge.config.dynamic import (
    Configuration,
    HTTPConfiguration,
    LoadBalancer,
    Router,
    Server,
    Service,
    TLSOptions,
)
from edge.config.merge import RouterMemo, merge, qualify, split_name
from edge.config.runtime import build_runtime
from tests.unit.config.documents import EPS, conf, lb


def test_qualify_and_split() -> None:
    assert qualify("whoami", "file") == "whoami@file"
    assert qualify("whoami@k8s", "file") == "whoami@k8s"
    assert split_name("whoami@file") == ("whoami", "file")
    assert split_name("whoami") == ("whoami", "")


def test_merge_qualifies_names_and_references() -> None:
    file = conf(
        {
            "http": {
                "routers": {
                    "r": {
                        "rule": "Host(`a`)",
                        "service": "s",
                        "middlewares": ["m", "auth@k8s"],
                        "tls": {"options": "modern"},
                    },
                    "r2": {"rule": "Host(`b`)", "service": "s@k8s", "tls": {}},
                    "r3": {"rule": "Host(`c`)", "service": "s", "tls": {"options": "default"}},
                },
                "services": {
                    "s": {"loadBalancer": {"servers": [], "serversTransport": "t"}},
                    "plain": lb("http://x"),
                    "w": {
                        "weighted": {"services": [{"name": "s"}, {"name": "s@k8s", "weight": 2}]}
                    },
                },
                "middlewares": {"m": {"addPrefix": {"prefix": "/x"}}},
                "serversTransports": {"t": {}},
            },
            "tcp": {
                "routers": {
                    "t": {"rule": "HostSNI(`*`)", "service": "ts", "tls": {"options": "o"}}
                },
                "services": {
                    "ts": {
                        "loadBalancer": {"servers": [{"address": "a:1"}], "serversTransport": "tt"}
                    },
                    "tw": {"weighted": {"services": [{"name": "ts"}]}},
                },
                "serversTransports": {"tt": {}},
            },
            "udp": {
                "routers": {"u": {"service": "us"}},
                "services": {
                    "us": {"loadBalancer": {"servers": [{"address": "a:53"}]}},
                    "uw": {"weighted": {"services": [{"name": "us"}]}},
                },
            },
            "tls": {
                "certificates": [{"certFile": "a", "keyFile": "b", "stores": ["default", "mine"]}],
                "options": {"modern": {"minVersion": "VersionTLS13"}},
                "stores": {"default": {}, "mine": {}},
            },
        }
    )
    k8s = conf(
        {
            "http": {"services": {"s": lb("http://k")}},
            "tls": {"certificates": [{"certFile": "c", "keyFile": "d"}]},
        }
    )
    merged = merge({"k8s": k8s, "file": file})
    http = merged.http
    assert http is not None
    assert list(http.routers) == ["r@file", "r2@file", "r3@file"]
    r = http.routers["r@file"]
    assert r.service == "s@file"
    assert r.middlewares == ["m@file", "auth@k8s"]
    assert r.tls is not None and r.tls.options == "modern@file"
    assert http.routers["r2@file"].service == "s@k8s"
    assert http.routers["r2@file"].tls is not None and http.routers["r2@file"].tls.options == ""
    assert (
        http.routers["r3@file"].tls is not None and http.routers["r3@file"].tls.options == "default"
    )
    # sorted providers: file before k8s
    assert list(http.services) == ["s@file", "plain@file", "w@file", "s@k8s"]
    s_lb = http.services["s@file"].load_balancer
    assert s_lb is not None and s_lb.servers_transport == "t@file"
    plain = http.services["plain@file"].load_balancer
    assert plain is not None and plain.servers_transport == ""  # the default stays the default
    weighted = http.services["w@file"].weighted
    assert weighted is not None
    assert [(w.name, w.weight) for w in weighted.services] == [("s@file", 1), ("s@k8s", 2)]
    assert list(http.middlewares) == ["m@file"]
    assert list(http.servers_transports) == ["t@file"]

    assert merged.tcp is not None
    t = merged.tcp.routers["t@file"]
    assert t.service == "ts@file" and t.tls is not None and t.tls.options == "o@file"
    ts = merged.tcp.services["ts@file"].load_balancer
    assert ts is not None and ts.servers_transport == "tt@file"
    tw = merged.tcp.services["tw@file"].weighted
    assert tw is not None and tw.services[0].name == "ts@file"
    assert list(merged.tcp.servers_transports) == ["tt@file"]

    assert merged.udp is not None
    assert merged.udp.routers["u@file"].service == "us@file"
    uw = merged.udp.services["uw@file"].weighted
    assert uw is not None and uw.services[0].name == "us@file"

    assert merged.tls is not None
    assert [(c.cert_file, c.stores) for c in merged.tls.certificates] == [
        ("a", ["default", "mine@file"]),
        ("c", []),
    ]
    assert set(merged.tls.options) == {"default", "modern@file"}
    assert merged.tls.options["default"] == TLSOptions()
    assert set(merged.tls.stores) == {"default", "mine@file"}


def test_merge_is_deterministic_and_leaves_inputs_alone() -> None:
    a = conf({"http": {"services": {"s": lb("http://a")}}})
    b = conf({"http": {"services": {"s": lb("http://b")}}})
    before = conf({"http": {"services": {"s": lb("http://a")}}})
    assert merge({"b": b, "a": a}) == merge({"a": a, "b": b})
    assert a == before  # inputs untouched
    assert merge({}).http is None


def test_merge_default_tls_options() -> None:
    one = conf({"tls": {"options": {"default": {"minVersion": "VersionTLS13"}}}})
    merged = merge({"file": one})
    assert merged.tls is not None and merged.tls.options["default"].min_version == "VersionTLS13"
    # Defined by two providers: neither is used (Traefik), so routers needing them fail.
    twice = merge({"file": one, "k8s": one})
    assert twice.tls is not None and "default" not in twice.tls.options
    with_router = conf(
        {
            "http": {
                "routers": {"r": {"rule": "Host(`a`)", "service": "s", "tls": {}}},
                "services": {"s": lb("http://a")},
            }
        }
    )
    rt = build_runtime(merge({"file": one, "k8s": one, "app": with_router}), EPS)
    assert rt.http_routers["r@app"].status == "disabled"
    assert "TLS options 'default' do not exist" in rt.http_routers["r@app"].errors


def routed(routers: dict[str, Router], servers: list[str]) -> Configuration:
    services = {
        "svc": Service(load_balancer=LoadBalancer(servers=[Server(url=u) for u in servers]))
    }
    return Configuration(http=HTTPConfiguration(routers=routers, services=services))


def test_the_same_routers_table_is_qualified_once_and_merges_the_same() -> None:
    routers = {"r": Router(rule="Host(`a`)", service="svc", middlewares=["m", "x@file"])}
    memo: RouterMemo = {}
    first = merge({"kubernetes": routed(routers, ["http://10.0.0.1:80"])}, memo)
    # endpoint churn: new services, the same routers table passed on
    churned = routed(routers, ["http://10.0.0.2:80"])
    second = merge({"kubernetes": churned}, memo)
    assert second == merge({"kubernetes": churned})
    assert second.http.routers["r@kubernetes"] is first.http.routers["r@kubernetes"]
    assert second.http.routers["r@kubernetes"].middlewares == ["m@kubernetes", "x@file"]
    assert (
        second.http.services["svc@kubernetes"].load_balancer.servers[0].url == "http://10.0.0.2:80"
    )


def test_another_routers_table_is_merged_afresh() -> None:
    memo: RouterMemo = {}
    old = {"r": Router(rule="Host(`a`)", service="svc")}
    merge({"kubernetes": routed(old, []), "file": routed({}, [])}, memo)
    new = dict(old, s=Router(rule="Host(`b`)", service="svc"))
    changed = merge({"kubernetes": routed(new, [])}, memo)
    assert changed == merge({"kubernetes": routed(new, [])})
    assert set(changed.http.routers) == {"r@kubernetes", "s@kubernetes"}
    assert set(memo) == {"kubernetes"}  # a provider gone is forgotten
    edited = {"r": msgspec.structs.replace(old["r"], service="other")}
    assert merge({"kubernetes": routed(edited, [])}, memo).http.routers["r@kubernetes"].service == (
        "other@kubernetes"
    )


def service(rng: random.Random, names: list[str]) -> Service:
    if rng.random() < 0.3:
        members = [{"name": rng.choice(names), "weight": 1}, {"name": "x@file", "weight": 2}]
        return msgspec.convert({"weighted": {"services": members}}, Service)
    lb: dict = {"servers": [{"url": f"http://10.0.0.{rng.randrange(1, 250)}:80"}]}
    if rng.random() < 0.5:
        lb["serversTransport"] = rng.choice(["t", "u@file"])
    return msgspec.convert({"loadBalancer": lb}, Service)


def test_services_merge_as_without_memo_round_after_round() -> None:
    reused = 0
    for seed in range(100):
        rng = random.Random(seed)
        names = [f"s{i}" for i in range(rng.randrange(1, 12))]
        services = {n: service(rng, names) for n in names}
        other = Configuration(http=HTTPConfiguration(services={"f": service(rng, ["f"])}))
        memo: RouterMemo = {}
        previous = None
        for _ in range(6):
            services = dict(services)  # a new table, as a provider publishes one
            for n in rng.sample(names, k=rng.randrange(0, len(names) + 1)):
                services[n] = service(rng, names)  # replaced (maybe equal, never the same)
            if rng.random() < 0.15:  # another order: merged afresh
                services = dict(reversed(list(services.items())))
            if rng.random() < 0.1:
                services[f"new{rng.randrange(100)}"] = service(rng, names)
            configs = {"kubernetes": Configuration(http=HTTPConfiguration(services=services))}
            if rng.random() < 0.5:
                configs["file"] = other
            merged = merge(configs, memo)
            plain = merge(configs)
            assert merged == plain
            assert list(merged.http.services) == list(plain.http.services)
            if previous is not None:
                reused += sum(
                    merged.http.services[n] is previous.http.services.get(n)
                    for n in merged.http.services
                )
            previous = merged
    assert reused > 100  # the memo did serve
