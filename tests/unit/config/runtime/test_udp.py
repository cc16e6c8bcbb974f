"""The UDP section's walk (edge.config.runtime.udp) on elements the loader stood in for:
a service with a key error shows that reason alone, and a serversTransport with one
disables the services using it, and only them."""

from __future__ import annotations

from edge.config.loader import decode_dynamic
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.errors import ConfigError

EPS = {"dns": "udp", "ntp": "udp", "syslog": "udp"}
DOC = {
    "udp": {
        "routers": {
            "dns": {"service": "dns", "entryPoints": ["dns"]},
            "ntp": {"service": "ntp", "entryPoints": ["ntp"]},
            "syslog": {"service": "syslog", "entryPoints": ["syslog"]},
        },
        "services": {
            "dns": {"loadBalancer": {"servers": [{"address": "10.0.0.1:53"}], "sessionTimeout": "-1s"}},
            "ntp": {"loadBalancer": {"servers": [{"address": "10.0.0.2:123"}], "serversTransport": "pp"}},
            "syslog": {"loadBalancer": {"servers": [{"address": "10.0.0.3:514"}]}},
        },
        "serversTransports": {"pp": {"proxyProtocol": {"version": 1}}},
    }
}  # fmt: skip


def test_broken_udp_elements_show_their_reason_alone() -> None:
    errors: list[ConfigError] = []
    rt = build_runtime(merge({"file": decode_dynamic(DOC, errors=errors)}), EPS)
    assert len(errors) == 2
    dns = rt.udp_services["dns@file"]
    assert dns.status == "disabled"
    # Its stand-in has no servers; that is no warning of its own, its key error is why.
    assert dns.errors == [
        "$.udp.services.dns.loadBalancer.sessionTimeout: invalid duration '-1s': must not be negative"
    ]
    ntp = rt.udp_services["ntp@file"]
    assert ntp.status == "disabled"
    assert ntp.errors == [
        "serversTransport 'pp@file' is disabled: $.udp.serversTransports.pp: "
        "proxyProtocol: UDP needs version 2 (version 1 has no UDP form)"
    ]
    assert rt.udp_routers["dns@file"].status == "disabled"
    assert rt.udp_routers["ntp@file"].status == "disabled"
    assert rt.udp_routers["syslog@file"].status == "enabled"
