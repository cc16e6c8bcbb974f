"""The configuration loader (edge.config.loader): files in YAML, TOML and JSON, empty ones,
syntax errors with where the parser was.

Traefik options edge does not implement: named as such with their key path, taken out so
the rest is checked; what holds one is not served, what only adds beside the traffic is
ignored and said so.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from edge.config.dynamic import Configuration
from edge.config.loader import (
    Unsupported,
    decode_dynamic,
    decode_static,
    load_dynamic,
    load_static,
    read_document,
)
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.config.static import StaticConfig
from edge.errors import ConfigError
from tests.unit.config.documents import hosts_yaml


def test_empty_files_are_empty_configurations(tmp_path) -> None:
    for name in ("a.yml", "b.yaml", "c.toml", "d.json"):
        (tmp_path / name).write_text("\n  \n" if name != "b.yaml" else "# only a comment\n")
        assert load_dynamic(tmp_path / name) == Configuration()
    (tmp_path / "s.yaml").write_text("")
    assert load_static(tmp_path / "s.yaml") == StaticConfig()


def test_yaml_syntax_error_has_line_and_column(tmp_path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("http:\n  routers:\n    r: {rule: x\n")
    with pytest.raises(ConfigError) as info:
        load_dynamic(path)
    assert info.value.source == str(path)
    # The parser's own position: the unterminated mapping on line 3 (issue 13), not a line past the end.
    assert "invalid YAML at line 3, column 8" in info.value.message
    assert "(at the end of the file)" in info.value.message


def test_toml_and_json_syntax_errors(tmp_path) -> None:
    toml = tmp_path / "bad.toml"
    toml.write_text("[http]\nrouters = \n")
    with pytest.raises(ConfigError, match=r"invalid TOML.*line 2"):
        load_dynamic(toml)
    js = tmp_path / "bad.json"
    js.write_text('{\n  "http": {\n    "routers": {,}\n  }\n}\n')
    with pytest.raises(ConfigError, match=r"invalid JSON.*line 3, column 17"):
        load_dynamic(js)


def test_unreadable_and_unknown_files(tmp_path) -> None:
    with pytest.raises(ConfigError, match="cannot read file") as info:
        load_dynamic(tmp_path / "missing.yml")
    assert info.value.source == str(tmp_path / "missing.yml")
    (tmp_path / "conf.ini").write_text("x=1")
    with pytest.raises(ConfigError, match="unsupported file extension"):
        read_document(tmp_path / "conf.ini")


def test_file_error_names_file_and_path(tmp_path) -> None:
    path = tmp_path / "edge.yml"
    path.write_text("entryPoints:\n  web:\n    adress: ':80'\n")
    with pytest.raises(ConfigError) as info:
        load_static(path)
    assert str(info.value) == f"{path}: $.entryPoints.web.adress: unknown key"


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


def test_yaml_errors_say_where_the_parser_was(tmp_path: Path) -> None:
    path = tmp_path / "dynamic.yaml"
    # Six lines; the quote opened on line 3 never closes.
    path.write_text(
        'http:\n  routers:\n    a: {rule: "Host(`a`), service: s}\n'
        "  services:\n    s:\n      loadBalancer: {servers: []}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_dynamic(path)
    assert info.value.message == (
        "invalid YAML at line 3, column 15 (while scanning a quoted scalar): "
        "found unexpected end of stream (at the end of the file)"
    )
    path.write_text("a: 1\nb: [1, 2\nc: 3\n")
    with pytest.raises(ConfigError) as info:
        load_dynamic(path)
    assert info.value.message.startswith("invalid YAML at line 2, column 4 (while parsing a flow")
    assert info.value.message.endswith("(at line 3, column 2)")
    path.write_text("a: b: c\n")
    with pytest.raises(ConfigError) as info:
        load_dynamic(path)
    assert (
        info.value.message
        == "invalid YAML at line 1, column 5: mapping values are not allowed in this context"
    )


def test_a_key_written_twice_in_a_yaml_mapping_is_an_error(tmp_path: Path) -> None:
    """Traefik's YAML decoder (go-yaml v3) refuses a mapping key written twice; PyYAML
    keeps the last value in silence, so a router block pasted under a name already used
    replaced the first one (a.test answered 404) and edge check said the file was valid."""
    from edge.config.loader import load_dynamic

    path = tmp_path / "dynamic.yaml"
    path.write_text(
        hosts_yaml({"one": "a.test", "two": "c.test"})
        + "    one:\n      rule: Host(`b.test`)\n      service: app\n"
    )
    with pytest.raises(ConfigError) as info:
        load_dynamic(path)
    message = str(info.value)
    assert "key 'one' is defined again" in message
    assert "at line 3," in message and "at line 9," in message  # the first, then the repeat
    # A key a << merge brings in may still be overridden, as YAML allows.
    path.write_text(
        "http:\n  routers:\n    one: &one {rule: Host(`a.test`), service: app}\n"
        "    two:\n      <<: *one\n      rule: Host(`b.test`)\n"
    )
    conf = load_dynamic(path)
    assert conf.http is not None and conf.http.routers["two"].rule == "Host(`b.test`)"
    assert conf.http.routers["two"].service == "app"
