"""Traefik options edge does not implement: named as such with their key path, taken out so
the rest is checked; what holds one is not served, what only adds beside the traffic is
ignored and said so."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from edge.config.loader import Unsupported, decode_dynamic, decode_static
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.errors import ConfigError

LB = {"loadBalancer": {"servers": [{"url": "http://127.0.0.1:1"}]}}


def runtime(doc: dict[str, Any], notices: list[Unsupported] | None = None) -> Any:
    conf = decode_dynamic(doc, notices=notices)
    return build_runtime(merge({"file": conf}), {"web": "tcp"})


def test_a_middleware_edge_lacks_disables_it_and_its_routers_only() -> None:
    rt = runtime(
        {
            "http": {
                "routers": {
                    "private": {"rule": "Host(`a`)", "service": "s", "middlewares": ["auth"]},
                    "public": {"rule": "Host(`b`)", "service": "s"},
                },
                "middlewares": {"auth": {"basicAuth": {"users": ["u:$apr1$x"]}}},
                "services": {"s": LB},
            }
        }
    )
    auth = rt.http_middlewares["auth@file"]
    assert auth.status == "disabled"
    assert auth.errors == [
        "$.http.middlewares.auth.basicAuth: not supported by this version of edge"
    ]
    private = rt.http_routers["private@file"]
    assert private.status == "disabled"
    assert (
        "middleware 'auth@file' is disabled: $.http.middlewares.auth.basicAuth" in private.errors[0]
    )
    assert rt.http_routers["public@file"].status == "enabled"


@pytest.mark.parametrize(
    ("section", "element", "key_path"),
    [
        ("middlewares", {"headers": {"customRequestHeaders": {"x": "1"}, "sslRedirect": True}}, "headers.sslRedirect"),
        ("middlewares", {"stripPrefix": {"prefixes": ["/a"], "forceSlash": False}}, "stripPrefix.forceSlash"),
        ("middlewares", {"rateLimit": {"average": 100}}, "rateLimit"),
        ("services", {"loadBalancer": {"servers": [{"url": "http://a"}], "healthCheck": {"path": "/h"}}}, "loadBalancer.healthCheck"),
        ("services", {"loadBalancer": {"servers": [{"url": "http://a"}], "sticky": {"cookie": {}}}}, "loadBalancer.sticky"),
        ("services", {"loadBalancer": {"servers": [{"url": "http://a", "preservePath": True}]}}, "loadBalancer.servers[0].preservePath"),
        ("services", {"mirroring": {"service": "s"}}, "mirroring"),
        ("services", {"failover": {"service": "s", "fallback": "s"}}, "failover"),
    ],
)  # fmt: skip
def test_each_element_is_disabled_with_its_key_path(
    section: str, element: dict, key_path: str
) -> None:
    doc: dict[str, Any] = {"http": {"services": {"s": LB}}}
    doc["http"].setdefault(section, {})["x"] = element
    rt = runtime(doc)
    table = rt.http_middlewares if section == "middlewares" else rt.http_services
    info = table["x@file"]
    assert info.status == "disabled"
    assert info.errors == [f"$.http.{section}.x.{key_path}: not supported by this version of edge"]
    assert rt.http_services["s@file"].status == "enabled"


def test_a_transport_or_tls_options_edge_lacks_disable_their_users() -> None:
    rt = runtime(
        {
            "http": {
                "routers": {
                    "r": {"rule": "Host(`a`)", "service": "via", "tls": {"options": "old"}},
                    "ok": {"rule": "Host(`b`)", "service": "plain"},
                },
                "services": {
                    "via": {"loadBalancer": {"servers": [], "serversTransport": "spiffe"}},
                    "plain": LB,
                },
                "serversTransports": {"spiffe": {"spiffe": {"ids": ["spiffe://x"]}}},
            },
            "tls": {"options": {"old": {"preferServerCipherSuites": True}}},
        }
    )
    via = rt.http_services["via@file"]
    assert via.status == "disabled"
    assert "serversTransport 'spiffe@file': $.http.serversTransports.spiffe.spiffe" in via.errors[0]
    r = rt.http_routers["r@file"]
    assert any(
        "TLS options 'old@file': $.tls.options.old.preferServerCipherSuites" in e for e in r.errors
    )
    assert rt.http_routers["ok@file"].status == "enabled"


def test_a_typo_is_still_an_unknown_key() -> None:
    with pytest.raises(ConfigError) as info:
        decode_dynamic({"http": {"middlewares": {"m": {"basicAuthh": {}}}}})
    assert (info.value.path, info.value.message) == (
        "$.http.middlewares.m.basicAuthh",
        "unknown key",
    )


def test_options_outside_any_element_are_notices_or_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    doc = {"tls": {"stores": {"default": {"defaultGeneratedCert": {"resolver": "le"}}}}}
    notices: list[Unsupported] = []
    decode_dynamic(doc, source="d.yml", notices=notices)
    assert notices == [Unsupported("$.tls.stores.default.defaultGeneratedCert", True, "d.yml")]
    assert str(notices[0]) == (
        "d.yml: $.tls.stores.default.defaultGeneratedCert: not supported by this version of edge (ignored)"
    )
    with caplog.at_level(logging.WARNING, logger="edge.config.loader"):
        decode_dynamic(doc)
    assert "defaultGeneratedCert: not supported by this version of edge (ignored)" in caplog.text


TRAEFIK_STATIC: dict[str, Any] = {
    "entryPoints": {
        "web": {
            "address": ":80",
            "http": {"middlewares": ["auth@file"]},
            "observability": {"accessLogs": False},
        },
    },
    "api": {"dashboard": True, "basePath": "/x"},
    "metrics": {"prometheus": {}},
    "tracing": {"otlp": {}},
    "certificatesResolvers": {"le": {"acme": {"email": "a@b.c"}}},
    "providers": {"docker": {}, "file": {"filename": "d.yml"}},
    "log": {"level": "debug", "maxSize": 10},
}


def test_static_options_are_named_and_the_rest_decodes() -> None:
    notices: list[Unsupported] = []
    static = decode_static(TRAEFIK_STATIC, source="edge.yml", notices=notices)
    assert static.log.level == "DEBUG" and static.providers.file is not None
    assert {(n.path, n.ignored) for n in notices} == {
        ("$.entryPoints.web.http.middlewares", False),
        ("$.entryPoints.web.observability", True),
        ("$.api.dashboard", True),
        ("$.api.basePath", True),
        ("$.metrics", True),
        ("$.tracing", True),
        ("$.certificatesResolvers", False),
        ("$.providers.docker", True),
        ("$.log.maxSize", True),
    }


def test_without_notices_refused_static_options_fail_the_load_naming_each() -> None:
    with pytest.raises(ConfigError) as info:
        decode_static(TRAEFIK_STATIC, source="edge.yml")
    assert str(info.value) == (
        "edge.yml: not supported by this version of edge: "
        "$.entryPoints.web.http.middlewares, $.certificatesResolvers"
    )


def test_ignored_static_options_alone_load_and_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="edge.config.loader"):
        static = decode_static(
            {"api": {"insecure": True, "dashboard": True}, "global": {"checkNewVersion": False}}
        )
    assert static.api is not None and static.api.insecure  # the API is served (edge.api)
    assert "$.api: not supported" not in caplog.text
    assert "$.api.dashboard: not supported by this version of edge (ignored)" in caplog.text
    assert "$.global: not supported by this version of edge (ignored)" in caplog.text
