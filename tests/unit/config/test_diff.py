"""edge.config.diff: which load balancers' servers alone changed, per protocol."""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import pytest

from edge.config.diff import Backends, changed_backends, changed_servers
from edge.config.dynamic import Configuration

BASE: dict[str, Any] = {
    "http": {
        "routers": {"web": {"rule": "Host(`a.test`)", "service": "web"}},
        "services": {
            "web": {"loadBalancer": {"servers": [{"url": "http://10.0.0.1:80"}]}},
            "split": {"weighted": {"services": [{"name": "web", "weight": 1}]}},
        },
    },
    "tcp": {
        "routers": {"raw": {"rule": "HostSNI(`*`)", "service": "raw"}},
        "services": {"raw": {"loadBalancer": {"servers": [{"address": "10.0.0.1:5432"}]}}},
    },
    "udp": {
        "routers": {"dns": {"entryPoints": ["dns"], "service": "dns"}},
        "services": {"dns": {"loadBalancer": {"servers": [{"address": "10.0.0.1:53"}]}}},
    },
}


def conf(edit: Any = None) -> Configuration:
    raw = copy.deepcopy(BASE)
    if edit is not None:
        edit(raw)
    return msgspec.convert(raw, Configuration)


def lb(raw: dict[str, Any], section: str, name: str) -> dict[str, Any]:
    return raw[section]["services"][name]["loadBalancer"]


def test_nothing_changed_is_empty_lists() -> None:
    found = changed_backends(conf(), conf())
    assert found == Backends([], [], []) and not found
    assert changed_servers(conf(), conf()) == []


@pytest.mark.parametrize(
    ("section", "name", "server"),
    [
        ("http", "web", {"url": "http://10.0.0.2:80"}),
        ("tcp", "raw", {"address": "10.0.0.2:5432"}),
        ("udp", "dns", {"address": "10.0.0.2:53"}),
    ],
)
def test_servers_alone_changed_are_named_under_their_protocol(
    section: str, name: str, server: dict[str, Any]
) -> None:
    new = conf(lambda raw: lb(raw, section, name)["servers"].append(server))
    found = changed_backends(conf(), new)
    assert found is not None and getattr(found, section) == [name]
    assert sum(map(len, found)) == 1
    # changed_servers is the HTTP-only form: TCP or UDP servers changed are None there.
    assert changed_servers(conf(), new) == ([name] if section == "http" else None)


def test_servers_of_every_protocol_at_once() -> None:
    def edit(raw: dict[str, Any]) -> None:
        lb(raw, "http", "web")["servers"] = []
        lb(raw, "tcp", "raw")["servers"][0]["weight"] = 3
        lb(raw, "udp", "dns")["servers"] = [{"address": "10.0.0.9:53"}]

    assert changed_backends(conf(), conf(edit)) == Backends(["web"], ["raw"], ["dns"])


@pytest.mark.parametrize(
    "edit",
    [
        lambda raw: lb(raw, "tcp", "raw").update(proxyProtocol={"version": 2}),
        lambda raw: lb(raw, "udp", "dns").update(serversTransport="pp"),
        lambda raw: lb(raw, "http", "web").update(passHostHeader=False),
        lambda raw: raw["tcp"]["routers"]["raw"].update(priority=5),
        lambda raw: raw["udp"]["routers"]["dns"].update(entryPoints=["other"]),
        lambda raw: raw["tcp"]["services"].pop("raw"),
        lambda raw: raw["udp"]["services"].update(
            dns={"weighted": {"services": [{"name": "x", "weight": 1}]}}
        ),
        lambda raw: raw["tcp"]["services"]["raw"].update(unsupported=["x"]),
        lambda raw: raw.update(tls={"options": {"default": {"minVersion": "VersionTLS13"}}}),
        lambda raw: raw.pop("udp"),
    ],
    ids=[
        "tcp-proxy-protocol",
        "udp-transport",
        "http-pass-host",
        "tcp-router",
        "udp-router",
        "tcp-service-gone",
        "udp-service-kind",
        "tcp-service-other-field",
        "tls",
        "udp-section-gone",
    ],
)
def test_anything_else_changed_is_none(edit: Any) -> None:
    both = conf(edit)
    assert changed_backends(conf(), both) is None
    assert changed_backends(both, conf()) is None


def test_an_absent_section_is_an_empty_one() -> None:
    old = msgspec.convert({"http": BASE["http"]}, Configuration)
    new = msgspec.convert({"http": BASE["http"], "tcp": {}, "udp": {}}, Configuration)
    assert changed_backends(old, new) == Backends([], [], [])
