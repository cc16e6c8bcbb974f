"""Endpoints-only validation against full validation, on random configurations.

``build_runtime(conf, previous=...)`` takes a shortcut when ``conf`` differs from the
previous snapshot's configuration only in load balancers' servers (HTTP, TCP, UDP): it validates
those services again and reuses every other verdict. What must hold is that nobody can
tell: after ``check_tls`` (which the data plane runs on every snapshot), the snapshot's
dump (the API's view, serialised in order), its errors and the messages ``check_tls``
added equal those of a full validation of the same configuration with the same
certificates, round after round (each round's shortcut starts from the last one).

The configurations are random and broken on purpose: missing and disabled services,
weighted cycles, bad rules, missing entry points and TLS options, serversTransports
whose CA file comes and goes between rounds, a certificate that cannot be read (every
TLS router without a certificate of its own gets its error from ``check_tls``) until
its file is written and the certificates are read again, and deleted again, entry
points with an ``http.tls`` model. The rounds change servers (to none, to ``https``
ones, whose transport's files are then checked; TCP servers to none or with ``tls``,
UDP ones to none), and now and then something else, or a file. The test also counts how often the shortcut was taken and how often it
declined, so that it cannot pass by never taking it.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import msgspec

from edge.config.diff import changed_backends, changed_servers
from edge.config.dynamic import Configuration
from edge.config.merge import merge
from edge.config.runtime import RuntimeConfig, build_runtime, check_tls
from edge.config.runtime import endpoints as validation
from edge.config.static import EntryPointKind, EntryPointTLS
from edge.tls.certs import TLSCertificates
from tests.fixtures.tls.pki import PKI

HOSTS = ["a.test", "b.test", "good.test", "c.test"]
TRANSPORTS = ["", "plain", "ca", "flaky", "missing"]


def servers(rng: random.Random, https: float = 0.25) -> list[dict[str, Any]]:
    out = []
    for _ in range(rng.choice([0, 1, 1, 2, 3]) if https else rng.randrange(1, 4)):
        i = rng.randrange(1, 50)
        url = f"https://10.0.0.{i}:443" if rng.random() < https else f"http://10.0.0.{i}:80"
        out.append({"url": url, "weight": rng.randrange(1, 4)})
    return out


def tcp_servers(rng: random.Random) -> list[dict[str, Any]]:
    """TCP servers as endpoint churn gives them, now and then none or one with ``tls``."""
    out: list[dict[str, Any]] = []
    for _ in range(rng.choice([0, 1, 1, 2])):
        server: dict[str, Any] = {"address": f"10.0.1.{rng.randrange(1, 50)}:5432"}
        if rng.random() < 0.15:
            server["tls"] = True
        out.append(server)
    return out


def random_http(rng: random.Random) -> dict[str, Any]:
    lbs = [f"s{i}" for i in range(rng.randrange(1, 7))]
    weighted = [f"w{i}" for i in range(rng.randrange(0, 3))]
    services: dict[str, Any] = {}
    for name in lbs:
        lb: dict[str, Any] = {"servers": servers(rng)}
        transport = rng.choice(TRANSPORTS)
        if transport:
            lb["serversTransport"] = transport
        services[name] = {"loadBalancer": lb}
    for name in weighted:
        members = rng.sample([*lbs, *weighted, "gone"], k=rng.randrange(0, 3))
        services[name] = {"weighted": {"services": [{"name": m, "weight": 1} for m in members]}}
    routers: dict[str, Any] = {}
    for i in range(rng.randrange(1, 9)):
        host = rng.choice(HOSTS)
        router: dict[str, Any] = {
            "rule": rng.choice(
                [
                    f"Host(`{host}`)",
                    f"Host(`{host}`) && PathPrefix(`/p{i}`)",
                    "PathPrefix(`/`)",
                    "Host(",
                ]
            ),
            "service": rng.choice([*lbs, *weighted, "gone"]),
        }
        eps = rng.choice([[], ["web"], ["websecure"], ["web", "websecure"], ["udpep"], ["nope"]])
        if eps:
            router["entryPoints"] = eps
        if rng.random() < 0.4:
            router["tls"] = rng.choice(
                [{}, {"options": "weak"}, {"options": "absent"}, {"domains": [{"main": "c.test"}]}]
            )
        if rng.random() < 0.3:
            router["middlewares"] = [rng.choice(["strip", "gone"])]
        if rng.random() < 0.2:
            router["priority"] = rng.randrange(1, 100)
        routers[f"r{i}"] = router
    return {
        "routers": routers,
        "services": services,
        "middlewares": {"strip": {"stripPrefix": {"prefixes": ["/p"]}}},
        "serversTransports": {},  # filled in by the caller (file paths)
    }


def random_conf(rng: random.Random, files: dict[str, str]) -> dict[str, Any]:
    http = random_http(rng)
    http["serversTransports"] = {
        "plain": {},
        "ca": {"rootCAs": [files["ca"]]},
        "flaky": {"rootCAs": [files["flaky"]]},
    }
    certificates = [{"certFile": files["good.crt"], "keyFile": files["good.key"]}]
    if rng.random() < 0.5:
        certificates.append({"certFile": files["unreadable"], "keyFile": files["good.key"]})
    doc: dict[str, Any] = {
        "http": http,
        "tls": {"certificates": certificates, "options": {"weak": {"cipherSuites": ["TLS_NOPE"]}}},
    }
    if rng.random() < 0.5:
        doc["tcp"] = {
            "routers": {
                "db": {"rule": "HostSNI(`good.test`)", "service": "t", "tls": {}},
                "sni": {"rule": "HostSNI(`a.test`)", "service": "t"},
            },
            "services": {"t": {"loadBalancer": {"servers": [{"address": "10.0.1.1:5432"}]}}},
        }
        if rng.random() < 0.5:  # a transport whose CA file comes and goes
            doc["tcp"]["serversTransports"] = {"flaky": {"tls": {"rootCAs": [files["flaky"]]}}}
            doc["tcp"]["services"]["t"]["loadBalancer"]["serversTransport"] = "flaky"
    if rng.random() < 0.3:
        doc["udp"] = {
            "routers": {"u": {"service": "d", "entryPoints": ["udpep"]}},
            "services": {"d": {"loadBalancer": {"servers": [{"address": "10.0.2.1:53"}]}}},
        }
    return doc


def entry_points(rng: random.Random) -> dict[str, str]:
    secure: str = "tcp"
    if rng.random() < 0.3:
        secure = EntryPointKind("tcp", EntryPointTLS(options=rng.choice(["", "weak"])))
    return {"web": "tcp", "websecure": secure, "udpep": "udp"}


def validated(
    conf: Configuration, eps: dict[str, str], certs: TLSCertificates, previous: RuntimeConfig | None
) -> tuple[RuntimeConfig, list[str]]:
    rt = build_runtime(conf, eps, previous=previous)
    return rt, check_tls(rt, certs)


def seen(rt: RuntimeConfig, added: list[str]) -> tuple[bytes, list[str], list[str]]:
    """What anyone outside can see of a snapshot: the ordered dump, errors, check_tls's messages."""
    return msgspec.json.encode(rt.to_builtins()), rt.errors(), added


def test_endpoints_only_validation_equals_full_validation(tmp_path: Path) -> None:
    pki = PKI()
    good = pki.issue("good.test").write(tmp_path, "good")
    flaky = tmp_path / "flaky-ca.crt"
    files = {
        "ca": pki.write_ca(tmp_path),
        "flaky": str(flaky),
        "good.crt": good[0],
        "good.key": good[1],
        "unreadable": str(tmp_path / "unreadable.crt"),  # written now and then
    }
    unreadable = Path(files["unreadable"])
    taken = declined = rounds = 0
    for seed in range(150):
        rng = random.Random(seed)
        if rng.random() < 0.5:
            flaky.write_text(pki.cert_pem)
        else:
            flaky.unlink(missing_ok=True)
        unreadable.unlink(missing_ok=True)
        doc = random_conf(rng, files)
        eps = entry_points(rng)
        conf = merge({"file": msgspec.convert(doc, Configuration)})
        certs = TLSCertificates(conf.tls)
        previous, _ = validated(conf, eps, certs, None)
        for _ in range(4):
            rounds += 1
            lbs = [n for n, s in doc["http"]["services"].items() if "loadBalancer" in s]
            for name in rng.sample(lbs, k=rng.randrange(1, len(lbs) + 1)):
                # Mostly what endpoint churn does (other plain servers), now and then anything.
                churn = servers(rng, https=0.0 if rng.random() < 0.7 else 0.25)
                doc["http"]["services"][name]["loadBalancer"]["servers"] = churn
            if "tcp" in doc and rng.random() < 0.4:
                doc["tcp"]["services"]["t"]["loadBalancer"]["servers"] = tcp_servers(rng)
            if "udp" in doc and rng.random() < 0.4:
                doc["udp"]["services"]["d"]["loadBalancer"]["servers"] = [
                    {"address": f"10.0.2.{i}:53"} for i in range(rng.choice([0, 1, 1, 2]))
                ]
            if rng.random() < 0.15:  # the CA file of serversTransport "flaky" comes or goes
                if flaky.exists():
                    flaky.unlink()
                else:
                    flaky.write_text(pki.cert_pem)
            if rng.random() < 0.1:  # something other than servers: a full validation
                first = next(iter(doc["http"]["routers"].values()))
                first["priority"] = rng.randrange(1, 100)
            conf_now = merge({"file": msgspec.convert(doc, Configuration)})
            shortcut = validation._endpoints_only(conf_now, eps, previous, "v3")
            if changed_backends(previous.configuration, conf_now) is not None:
                if shortcut is not None:
                    taken += 1
                else:
                    declined += 1
            if rng.random() < 0.2:  # certificates read again, maybe changed
                if rng.random() < 0.5:
                    unreadable.unlink(missing_ok=True)
                else:
                    unreadable.write_text(Path(good[0]).read_text())
                certs = TLSCertificates(conf_now.tls)
            short = validated(conf_now, eps, certs, previous)
            full = validated(conf_now, eps, certs, None)
            assert seen(*short) == seen(*full), f"seed {seed}"
            assert short[0].changed_servers(previous) == changed_servers(
                previous.configuration, conf_now
            )
            assert short[0].changed_backends(previous) == changed_backends(
                previous.configuration, conf_now
            )
            previous = short[0]
    # Both ways were walked, the shortcut most of the time.
    assert taken > rounds // 2, (taken, declined, rounds)
    assert declined > 10, (taken, declined, rounds)


def test_the_shortcut_validates_only_the_changed_services() -> None:
    def conf(servers_a: list[str]) -> Configuration:
        http = {
            "routers": {
                "ra": {"rule": "Host(`a.test`)", "service": "a"},
                "rb": {"rule": "Host(`b.test`)", "service": "b"},
            },
            "services": {
                "a": {"loadBalancer": {"servers": [{"url": u} for u in servers_a]}},
                "b": {"loadBalancer": {"servers": [{"url": "http://10.0.0.9:80"}]}},
            },
        }
        return merge({"file": msgspec.convert({"http": http}, Configuration)})

    eps = {"web": "tcp"}
    first = build_runtime(conf(["http://10.0.0.1:80"]), eps)
    second = build_runtime(conf(["http://10.0.0.2:80"]), eps, previous=first)
    assert second.http_routers == first.http_routers  # the very infos: not validated again
    assert all(second.http_routers[n] is first.http_routers[n] for n in first.http_routers)
    assert second.http_services["b@file"] is first.http_services["b@file"]
    assert second.http_services["a@file"] is not first.http_services["a@file"]
    assert (
        second.http_services["a@file"].config.load_balancer.servers[0].url == "http://10.0.0.2:80"
    )
    assert second.http_services["a@file"].used_by == ["ra@file"]
    # No servers is a warning: the service's verdict changes, so everything is validated.
    third = build_runtime(conf([]), eps, previous=second)
    assert third.http_services["a@file"].status == "warning"
    assert third.http_routers["ra@file"] is not second.http_routers["ra@file"]


def test_an_endpoints_only_round_keeps_the_static_default_transport(tmp_path: Path) -> None:
    """default@internal is the static serversTransport; when its rootCAs cannot be read,
    the round that moves servers keeps that verdict and takes the shortcut. It used to
    make the round's default Traefik's own (no rootCAs, no error): a verdict other
    than the previous one's, so every such round was a full validation."""
    from edge.config.loader import decode_static

    missing = str(tmp_path / "missing-ca.pem")
    static = decode_static(
        {
            "entryPoints": {"web": {"address": ":80"}},
            "serversTransport": {"rootCAs": [missing], "maxIdleConnsPerHost": 7},
        }
    )
    eps = static.entry_point_protocols()

    def conf(plain: str) -> Configuration:
        http = {
            "routers": {
                "tls": {"rule": "Host(`a.test`)", "service": "secure"},
                "plain": {"rule": "Host(`b.test`)", "service": "plain"},
            },
            "services": {
                "secure": {"loadBalancer": {"servers": [{"url": "https://10.0.0.1:443"}]}},
                "plain": {"loadBalancer": {"servers": [{"url": plain}]}},
            },
        }
        return merge({"file": msgspec.convert({"http": http}, Configuration)})

    first = build_runtime(conf("http://10.0.0.2:80"), eps)
    assert missing in first.http_services["secure@file"].errors[0]
    second = build_runtime(conf("http://10.0.0.3:80"), eps, previous=first)
    assert second.http_routers["tls@file"] is first.http_routers["tls@file"]  # the shortcut
    assert second.http_services["secure@file"] is first.http_services["secure@file"]
    default = second.servers_transports["default@internal"]
    assert default.root_cas == [missing] and default.max_idle_conns_per_host == 7


def test_a_tcp_or_udp_endpoint_change_takes_the_shortcut() -> None:
    """Servers of a TCP and of a UDP load balancer change, nothing else: only those two
    services are validated again (each by its own check), every router is the previous
    info, the snapshot says which changed, and a full validation agrees."""

    def conf(tcp: str, udp: list[str]) -> Configuration:
        doc = {
            "http": {
                "routers": {"ra": {"rule": "Host(`a.test`)", "service": "a"}},
                "services": {"a": {"loadBalancer": {"servers": [{"url": "http://10.0.0.1"}]}}},
            },
            "tcp": {
                "routers": {"db": {"rule": "HostSNI(`*`)", "service": "t"}},
                "services": {"t": {"loadBalancer": {"servers": [{"address": tcp}]}}},
            },
            "udp": {
                "routers": {"u": {"service": "d"}},
                "services": {"d": {"loadBalancer": {"servers": [{"address": a} for a in udp]}}},
            },
        }
        return merge({"file": msgspec.convert(doc, Configuration)})

    eps = {"web": "tcp", "db": "tcp", "dns": "udp"}
    first = build_runtime(conf("10.0.1.1:5432", ["10.0.2.1:53"]), eps)
    now = conf("10.0.1.2:5432", ["10.0.2.1:53", "10.0.2.2:53"])
    second = validation._endpoints_only(now, eps, first, "v3")
    assert second is not None
    assert all(second.tcp_routers[n] is first.tcp_routers[n] for n in first.tcp_routers)
    assert second.udp_routers["u@file"] is first.udp_routers["u@file"]
    assert second.http_services["a@file"] is first.http_services["a@file"]
    assert second.tcp_services["t@file"] is not first.tcp_services["t@file"]
    assert second.udp_services["d@file"] is not first.udp_services["d@file"]
    assert second.tcp_services["t@file"].used_by == ["db@file"]
    assert second.changed_backends(first) == ([], ["t@file"], ["d@file"])
    assert second.changed_servers(first) is None  # not HTTP alone
    full = build_runtime(now, eps)
    assert second.validated_from(first) and not full.validated_from(first)
    assert msgspec.json.encode(second.to_builtins()) == msgspec.json.encode(full.to_builtins())
    # No UDP server left is a warning: a verdict of its own, so a full validation.
    assert validation._endpoints_only(conf("10.0.1.2:5432", []), eps, second, "v3") is None
