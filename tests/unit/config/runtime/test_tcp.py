"""The TCP section's walk (edge.config.runtime.tcp) on elements the loader stood in for:
a service with a key error shows that reason alone, and a serversTransport with one
disables the services using it, and only them."""

from __future__ import annotations

from edge.config.loader import decode_dynamic
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.errors import ConfigError
from tests.unit.config.documents import EPS

ROUTERS = {
    "to-broken": {"rule": "HostSNI(`*`)", "service": "broken", "entryPoints": ["web"]},
    "to-proxied": {"rule": "HostSNI(`*`)", "service": "proxied", "entryPoints": ["websecure"]},
    "to-db": {"rule": "HostSNI(`db`)", "service": "db", "tls": {}},
}
DOC = {
    "tcp": {
        "routers": ROUTERS,
        "services": {
            "broken": {"loadBalancer": {"servers": [{"adress": "10.0.0.1:5432"}]}},
            "proxied": {
                "loadBalancer": {
                    "servers": [{"address": "10.0.0.2:5432"}],
                    "serversTransport": "pp",
                    "proxyProtocol": {"version": 1},
                }
            },
            "db": {"loadBalancer": {"servers": [{"address": "10.0.0.3:5432"}]}},
        },
        "serversTransports": {"pp": {"proxyProtocol": {"version": 3}}},
    }
}


def test_broken_tcp_elements_show_their_reason_alone() -> None:
    errors: list[ConfigError] = []
    rt = build_runtime(merge({"file": decode_dynamic(DOC, errors=errors)}), EPS)
    assert len(errors) == 2
    broken = rt.tcp_services["broken@file"]
    # Its stand-in has no servers; that is no warning of its own, its key error is why.
    assert broken.status == "disabled"
    assert broken.errors == ["$.tcp.services.broken.loadBalancer.servers[0].adress: unknown key"]
    proxied = rt.tcp_services["proxied@file"]
    assert proxied.status == "disabled"
    # The transport's reason alone: nothing about its proxyProtocol, which it does not have.
    assert proxied.errors == [
        "serversTransport 'pp@file' is disabled: "
        "$.tcp.serversTransports.pp.proxyProtocol.version: invalid value 3: expected one of 1, 2"
    ]
    assert rt.tcp_routers["to-broken@file"].status == "disabled"
    assert (
        rt.tcp_routers["to-proxied@file"]
        .errors[0]
        .startswith("service 'proxied@file' is disabled: serversTransport 'pp@file' is disabled")
    )
    assert rt.tcp_routers["to-db@file"].status == "enabled"
    assert rt.tcp_services["db@file"].status == "enabled"
