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

import msgspec
import pytest

from edge.config.dynamic import Configuration
from edge.config.loader import (
    TRAEFIK_KEYS,
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
                "middlewares": {"auth": {"plugin": {"x": {}}}},
                "services": {"s": LB},
            }
        }
    )
    auth = rt.http_middlewares["auth@file"]
    assert auth.status == "disabled"
    assert auth.errors == ["$.http.middlewares.auth.plugin: not supported by this version of edge"]
    private = rt.http_routers["private@file"]
    assert private.status == "disabled"
    assert "middleware 'auth@file' is disabled: $.http.middlewares.auth.plugin" in private.errors[0]
    assert rt.http_routers["public@file"].status == "enabled"


@pytest.mark.parametrize(
    ("section", "element", "key_path"),
    [
        ("middlewares", {"headers": {"customRequestHeaders": {"x": "1"}, "sslRedirect": True}}, "headers.sslRedirect"),
        ("middlewares", {"stripPrefix": {"prefixes": ["/a"], "forceSlash": False}}, "stripPrefix.forceSlash"),
        ("services", {"loadBalancer": {"servers": [{"url": "http://a", "preservePath": True}]}}, "loadBalancer.servers[0].preservePath"),
        ("services", {"failover": {"service": "s", "fallback": "s", "errors": {}}}, "failover.errors"),
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
            "http": {"encodeQuerySemicolons": True},
            "observability": {"accessLogs": False},
        },
    },
    "api": {"dashboard": True, "basePath": "/x", "debug": True},
    "metrics": {"prometheus": {}},
    "tracing": {"otlp": {"grpc": {"endpoint": "collector:4317"}}},
    "certificatesResolvers": {"le": {"acme": {"email": "a@b.c"}}},
    "providers": {"docker": {}, "file": {"filename": "d.yml"}},
    "log": {"level": "debug", "maxSize": 10},
}


def test_static_options_are_named_and_the_rest_decodes() -> None:
    notices: list[Unsupported] = []
    static = decode_static(TRAEFIK_STATIC, source="edge.yml", notices=notices)
    assert static.log.level == "DEBUG" and static.providers.file is not None
    assert not static.entry_points["web"].observability.access_logs  # Traefik's, decoded
    assert {(n.path, n.ignored) for n in notices} == {
        ("$.entryPoints.web.http.encodeQuerySemicolons", False),
        ("$.api.debug", True),
        ("$.tracing.otlp.grpc", True),
        ("$.certificatesResolvers", False),
        ("$.providers.docker", True),
        ("$.log.maxSize", True),
    }


def test_without_notices_refused_static_options_fail_the_load_naming_each() -> None:
    with pytest.raises(ConfigError) as info:
        decode_static(TRAEFIK_STATIC, source="edge.yml")
    assert str(info.value) == (
        "edge.yml: not supported by this version of edge: "
        "$.entryPoints.web.http.encodeQuerySemicolons, $.certificatesResolvers"
    )


def test_ignored_static_options_alone_load_and_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="edge.config.loader"):
        static = decode_static(
            {"api": {"insecure": True, "debug": True}, "global": {"checkNewVersion": False}}
        )
    assert static.api is not None and static.api.insecure  # the API is served (edge.api)
    assert "$.api: not supported" not in caplog.text
    assert "$.api.debug: not supported by this version of edge (ignored)" in caplog.text
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


# --- keys as Traefik's parser matches them ------------------------------------------

CANONICAL: dict[str, Any] = {
    "http": {
        "routers": {
            "MyRouter": {"rule": "Host(`a`)", "service": "App", "entryPoints": ["web"]},
        },
        "services": {
            "App": {"loadBalancer": {"servers": [{"url": "http://127.0.0.1:1"}]}},
        },
        "serversTransports": {"T": {"forwardingTimeouts": {"dialTimeout": "1s"}}},
    },
    "tcp": {"middlewares": {"allow": {"ipAllowList": {"sourceRange": ["10.0.0.0/8"]}}}},
    "tls": {"options": {"strict": {"minVersion": "VersionTLS13", "sniStrict": True}}},
}
FOLDED_YAML = """\
HTTP:
  routers:
    MyRouter: {RULE: "Host(`a`)", Service: App, entrypoints: [web]}
  Services:
    App: {LOADBALANCER: {servers: [{URL: "http://127.0.0.1:1"}]}}
  serverstransports:
    T: {forwardingtimeouts: {DIALTIMEOUT: 1s}}
tcp:
  middlewares:
    allow: {ipallowlist: {SourceRange: [10.0.0.0/8]}}
TLS:
  options:
    strict: {minversion: VersionTLS13, SNISTRICT: true}
"""
FOLDED_TOML = """\
[HTTP.routers.MyRouter]
RULE = "Host(`a`)"
Service = "App"
entrypoints = ["web"]
[[HTTP.Services.App.LOADBALANCER.servers]]
URL = "http://127.0.0.1:1"
[HTTP.serverstransports.T.forwardingtimeouts]
DIALTIMEOUT = "1s"
[tcp.middlewares.allow.ipallowlist]
SourceRange = ["10.0.0.0/8"]
[TLS.options.strict]
minversion = "VersionTLS13"
SNISTRICT = true
"""


def test_keys_match_case_insensitively_in_yaml_toml_and_json(tmp_path: Path) -> None:
    """Traefik's parser matches a key to its option whatever its case (its own fixtures
    write ``entrypoints``); edge answered ``unknown key``. The keys of mappings, which the
    user chose (router, service, transport names), keep theirs."""
    expected = decode_dynamic(CANONICAL)
    assert expected.http is not None and "MyRouter" in expected.http.routers
    import json

    import yaml

    (tmp_path / "d.yaml").write_text(FOLDED_YAML)
    (tmp_path / "d.toml").write_text(FOLDED_TOML)
    (tmp_path / "d.json").write_text(json.dumps(yaml.safe_load(FOLDED_YAML)))
    for name in ("d.yaml", "d.toml", "d.json"):
        assert load_dynamic(tmp_path / name) == expected, name


def test_static_keys_match_case_insensitively(tmp_path: Path) -> None:
    path = tmp_path / "edge.toml"
    path.write_text(
        '[entrypoints.Web]\nADDRESS = ":8000"\n[entrypoints.Web.forwardedheaders]\n'
        'trustedips = ["10.0.0.1"]\n[Providers.File]\nfilename = "d.yaml"\n[LOG]\nlevel = "debug"\n'
    )
    static = load_static(path)
    assert static.entry_points["Web"].address == ":8000"
    assert static.entry_points["Web"].forwarded_headers.trusted_ips == ["10.0.0.1"]
    assert static.providers.file is not None and static.providers.file.filename == "d.yaml"
    assert static.log.level == "DEBUG"


def test_names_the_user_chose_keep_their_case() -> None:
    conf = decode_dynamic(
        {
            "http": {
                "routers": {
                    "r": {"rule": "Host(`a`)", "service": "s"},
                    "R": {"rule": "Host(`b`)", "service": "S"},
                },
                "middlewares": {
                    "h": {"headers": {"customRequestHeaders": {"X-Custom-Header": "v"}}}
                },
            }
        }
    )
    assert conf.http is not None
    assert set(conf.http.routers) == {"r", "R"}  # two routers, not one written twice
    assert conf.http.routers["R"].service == "S"
    headers = conf.http.middlewares["h"].headers
    assert headers is not None and headers.custom_request_headers == {"X-Custom-Header": "v"}


@pytest.mark.parametrize(
    ("doc", "path", "message"),
    [
        ({"HTTP": {"Routers": {"r": {"RULE": 1, "service": "s"}}}}, "$.HTTP.Routers.r.RULE", "expected str, got int"),
        ({"http": {"services": {"s": {"LoadBalancer": {"Servers": [{"URL": "ftp://x"}]}}}}}, "$.http.services.s.LoadBalancer.Servers[0]", "scheme must be http, https or h2c"),
        ({"http": {"routers": {"r": {"rule": "x", "service": "s", "entrypointz": []}}}}, "$.http.routers.r.entrypointz", "unknown key"),
        ({"tls": {"Options": {"o": {"MinVersion": "TLS12"}}}}, "$.tls.Options.o.MinVersion", "invalid value 'TLS12'"),
    ],
)  # fmt: skip
def test_errors_name_the_key_path_as_written(doc: dict, path: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        decode_dynamic(doc)
    assert info.value.path == path
    assert message in info.value.message


def test_a_key_written_twice_in_two_casings_is_an_error_naming_both(tmp_path: Path) -> None:
    doc = {"http": {"routers": {"r": {"rule": "x", "service": "s", "entryPoints": ["a"], "EntryPoints": ["b"]}}}}  # fmt: skip
    with pytest.raises(ConfigError) as info:
        decode_dynamic(doc)
    assert info.value.path == "$.http.routers.r.EntryPoints"
    assert "'entryPoints' and 'EntryPoints' are one key written twice" in info.value.message
    # Either order; at the root and in the static configuration too.
    with pytest.raises(ConfigError, match="'Http' and 'http' are one key written twice"):
        decode_dynamic({"Http": {}, "http": {}})
    path = tmp_path / "edge.yaml"
    path.write_text("entryPoints:\n  web: {address: ':80', ADDRESS: ':81'}\n")
    with pytest.raises(ConfigError) as info:
        load_static(path)
    assert str(info.value) == (
        f"{path}: $.entryPoints.web.ADDRESS: 'address' and 'ADDRESS' are one key written "
        "twice (keys match case-insensitively)"
    )


def test_keys_only_edge_writes_are_unknown_in_a_file() -> None:
    """``problems`` and ``unsupported`` are edge's own bookkeeping in an element: a file
    writing ``problems: []`` must not decide what validation reports."""
    for key in ("problems", "Unsupported"):
        with pytest.raises(ConfigError) as info:
            decode_dynamic({"http": {"routers": {"r": {"rule": "x", "service": "s", key: []}}}})
        assert (info.value.path, info.value.message) == (f"$.http.routers.r.{key}", "unknown key")


def test_a_list_may_be_one_comma_separated_string() -> None:
    """Traefik's parser splits a string at commas where its model has a list, in files
    too (paerser's setSlice), each item trimmed."""
    conf = decode_dynamic(
        {
            "http": {"routers": {"r": {"rule": "x", "service": "s", "entryPoints": "web, websecure"}}},
            "tcp": {"middlewares": {"a": {"ipAllowList": {"sourceRange": "10.0.0.0/8,192.168.0.0/16"}}}},
        }
    )  # fmt: skip
    assert conf.http is not None and conf.http.routers["r"].entry_points == ["web", "websecure"]
    assert conf.tcp is not None
    allow = conf.tcp.middlewares["a"].ip_allow_list
    assert allow is not None and allow.source_range == ["10.0.0.0/8", "192.168.0.0/16"]
    static = decode_static(
        {
            "entryPoints": {"web": {"address": ":80", "forwardedHeaders": {"trustedIPs": "10.0.0.1"}}},
            "metrics": {"prometheus": {"buckets": "0.1,0.3,1.2"}},
        }
    )  # fmt: skip
    assert static.entry_points["web"].forwarded_headers.trusted_ips == ["10.0.0.1"]
    assert static.metrics is not None and static.metrics.prometheus is not None
    assert static.metrics.prometheus.buckets == [0.1, 0.3, 1.2]
    one = decode_static({"metrics": {"prometheus": {"buckets": 2.5}}})
    assert one.metrics is not None and one.metrics.prometheus is not None
    assert one.metrics.prometheus.buckets == [2.5]
    empty = decode_dynamic(
        {"http": {"routers": {"r": {"rule": "x", "service": "s", "entryPoints": ""}}}}
    )
    assert empty.http is not None and empty.http.routers["r"].entry_points == []
    with pytest.raises(ConfigError) as info:
        decode_static({"metrics": {"prometheus": {"buckets": "0.1,fast"}}})
    assert info.value.path == "$.metrics.prometheus.buckets[1]"


# --- one element at a time -----------------------------------------------------------

ONE_BAD_EACH: dict[str, Any] = {
    "http": {
        "routers": {
            "good": {"rule": "Host(`good`)", "service": "app"},
            "no-service": {"rule": "Host(`a`)", "entryPoints": "web"},
            "uses-bad-service": {"rule": "Host(`b`)", "service": "bad-url"},
            "uses-bad-transport": {"rule": "Host(`c`)", "service": "via"},
            "uses-bad-options": {"rule": "Host(`d`)", "service": "app", "tls": {"options": "old"}},
            "twice": {"rule": "Host(`e`)", "service": "app", "service ": "x", "Service": "y"},
        },
        "services": {
            "app": {"loadBalancer": {"servers": [{"url": "http://127.0.0.1:1"}]}},
            "bad-url": {"loadBalancer": {"servers": [{"url": "ftp://127.0.0.1"}]}},
            "via": {"loadBalancer": {"servers": [{"url": "https://127.0.0.1:1"}], "serversTransport": "t"}},
        },
        "serversTransports": {"t": {"insecureSkipVerify": "yes"}},
    },
    "tcp": {
        "routers": {"t": {"rule": "HostSNI(`*`)", "service": "db", "priority": "high"}},
        "services": {"db": {"loadBalancer": {"servers": [{"address": "127.0.0.1:5432"}]}}},
    },
    "udp": {"services": {"dns": {"loadBalancer": {"servers": [{"address": "nowhere"}]}}}},
    "tls": {
        "options": {"old": {"minVersion": "TLS1.0"}},
        "stores": {"other": {"defaultCertificate": {"certFile": "c.pem"}}},
        "certificates": [{"certFile": "a.pem"}, {"certFile": "b.pem", "keyFile": "b.key"}],
    },
}  # fmt: skip


def test_a_key_error_disables_only_its_element_with_its_key_path() -> None:
    errors: list[ConfigError] = []
    conf = decode_dynamic(ONE_BAD_EACH, source="d.yaml", errors=errors)
    assert [str(e) for e in errors] == [
        "d.yaml: $.http.routers.no-service.service: missing required key (disabled)",
        "d.yaml: $.http.routers.twice.Service: 'service' and 'Service' are one key written twice (keys match case-insensitively) (disabled)",
        "d.yaml: $.http.services.bad-url.loadBalancer.servers[0]: invalid server url 'ftp://127.0.0.1': scheme must be http, https or h2c (disabled)",
        "d.yaml: $.http.serversTransports.t.insecureSkipVerify: expected bool, got str (disabled)",
        "d.yaml: $.tcp.routers.t.priority: expected int, got str (disabled)",
        "d.yaml: $.udp.services.dns.loadBalancer.servers[0]: invalid address 'nowhere': expected host:port (missing ':port') (disabled)",
        "d.yaml: $.tls.options.old.minVersion: invalid value 'TLS1.0': expected one of 'VersionTLS10', 'VersionTLS11', 'VersionTLS12', 'VersionTLS13' (disabled)",
        "d.yaml: $.tls.stores.other.defaultCertificate.keyFile: missing required key (left out)",
        "d.yaml: $.tls.certificates[0].keyFile: missing required key (left out)",
    ]  # fmt: skip
    assert conf.tls is not None and [c.cert_file for c in conf.tls.certificates] == ["b.pem"]
    assert conf.tls.stores == {}
    assert conf.tls.options["old"].problems == [
        "$.tls.options.old.minVersion: invalid value 'TLS1.0': expected one of 'VersionTLS10', 'VersionTLS11', 'VersionTLS12', 'VersionTLS13'"
    ]  # fmt: skip
    assert conf.http is not None
    transport = conf.http.servers_transports["t"]
    assert transport.problems == [
        "$.http.serversTransports.t.insecureSkipVerify: expected bool, got str"
    ]
    stand_in = conf.http.routers["no-service"]
    assert stand_in.rule == "Host(`a`)" and stand_in.entry_points == ["web"]  # what it was

    rt = build_runtime(merge({"file": conf}), {"web": "tcp", "dns": "udp"})
    assert rt.http_routers["good@file"].status == "enabled"
    assert rt.http_services["app@file"].status == "enabled"
    assert rt.tcp_services["db@file"].status == "enabled"
    reasons = {
        "no-service": "$.http.routers.no-service.service: missing required key",
        "twice": "'service' and 'Service' are one key written twice",
        "uses-bad-service": "service 'bad-url@file' is disabled: $.http.services.bad-url.loadBalancer.servers[0]: invalid server url",
        "uses-bad-transport": "service 'via@file' is disabled: serversTransport 't@file' is disabled: $.http.serversTransports.t.insecureSkipVerify: expected bool, got str",
        "uses-bad-options": "TLS options 'old@file' are disabled: $.tls.options.old.minVersion: invalid value 'TLS1.0'",
    }  # fmt: skip
    for name, reason in reasons.items():
        info = rt.http_routers[f"{name}@file"]
        assert info.status == "disabled", name
        assert any(reason in e for e in info.errors), (name, info.errors)
    assert rt.http_services["bad-url@file"].status == "disabled"
    assert rt.tcp_routers["t@file"].status == "disabled"
    assert rt.tcp_routers["t@file"].errors[0] == "$.tcp.routers.t.priority: expected int, got str"
    assert rt.udp_services["dns@file"].status == "disabled"


def test_without_errors_the_first_key_error_fails_the_whole() -> None:
    with pytest.raises(ConfigError) as info:
        decode_dynamic(ONE_BAD_EACH)
    assert info.value.path == "$.http.routers.no-service.service"


def test_a_key_error_in_the_default_tls_options_or_store_fails_the_whole() -> None:
    """Every TLS router uses them unless it names others: disabled, the options would
    take every such router with them; left out, the store's place would go to edge's
    built-in one, serving the generated certificate for the user's."""
    errors: list[ConfigError] = []
    for tls, path in (
        ({"options": {"default": {"minversion": "TLS13"}}}, "$.tls.options.default.minversion"),
        ({"stores": {"default": {"defaultCertificate": {}}}}, "$.tls.stores.default.defaultCertificate.certFile"),
    ):  # fmt: skip
        with pytest.raises(ConfigError) as info:
            decode_dynamic({"tls": tls}, errors=errors)
        assert info.value.path == path
    assert errors == []


def test_an_error_outside_any_element_fails_the_whole() -> None:
    errors: list[ConfigError] = []
    with pytest.raises(ConfigError) as info:
        decode_dynamic({"http": {"routers": []}}, errors=errors)
    assert info.value.path == "$.http.routers"
    with pytest.raises(ConfigError) as info:
        decode_dynamic({"http": {"routerz": {}}}, errors=errors)
    assert (info.value.path, info.value.message) == ("$.http.routerz", "unknown key")


def test_a_bad_name_leaves_its_element_out() -> None:
    errors: list[ConfigError] = []
    conf = decode_dynamic(
        {"http": {"routers": {"a@b": {"rule": "x", "service": "s"}, " ": {"rule": "x", "service": "s"}, "ok": {"rule": "x", "service": "s"}}}},
        errors=errors,
    )  # fmt: skip
    assert conf.http is not None and list(conf.http.routers) == ["ok"]
    assert [(e.path, e.message) for e in errors] == [
        ('$.http.routers["a@b"]', "a name must not contain '@' (it separates a name from its provider) (left out)"),
        ('$.http.routers[" "]', "empty name (left out)"),
    ]  # fmt: skip


# --- Traefik's single-file layout ------------------------------------------------------

SINGLE_FILE = """\
entrypoints:
  web: {address: ":8000"}
providers:
  file: {filename: "%s"}
log: {level: DEBUG}
http:
  routers:
    r: {rule: "Host(`a`)", service: s}
  services:
    s: {loadBalancer: {servers: [{url: "http://127.0.0.1:1"}]}}
"""


def test_a_file_both_static_and_the_file_providers_is_read_as_two_halves(tmp_path: Path) -> None:
    """Traefik's fixtures hold both in one file whose file provider names the file
    itself; edge refused the static half (``$.http: unknown key``) and the dynamic half
    (``$.entrypoints: unknown key``)."""
    for i, filename in enumerate(("traefik.yaml", "./traefik.yaml", str(tmp_path / "traefik.yaml"))):  # fmt: skip
        path = tmp_path / "traefik.yaml"
        path.write_text(SINGLE_FILE % filename)
        static = load_static(path)
        assert static.entry_points["web"].address == ":8000", i
        conf = load_dynamic(path)
        assert conf.http is not None and list(conf.http.routers) == ["r"], i
    # A provider reading a folder that holds the file reads it too.
    path.write_text(SINGLE_FILE.replace('filename: "%s"', 'directory: "."'))
    assert load_static(path).providers.file is not None
    assert load_dynamic(path).http is not None


def test_dynamic_configuration_in_a_static_file_nothing_reads_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "traefik.yaml"
    path.write_text(SINGLE_FILE % "other.yaml")
    with pytest.raises(ConfigError) as info:
        load_static(path)
    assert info.value.path == "$.http"
    assert "dynamic configuration in the static file" in info.value.message
    # Its dynamic half is not a dynamic file either: the static keys are unknown there.
    with pytest.raises(ConfigError) as info:
        load_dynamic(path)
    assert (info.value.path, info.value.message) == ("$.entrypoints", "unknown key")


def test_an_error_names_its_own_keys_as_written_not_another_elements() -> None:
    """Each router's keys as its user wrote them: a mapping the walk renamed keys in
    must not lend its spelling to another made after it in the same memory."""
    routers = {f"r{i}": {"rule": "x", "service": "s", "entrypoints": ["web"]} for i in range(50)}
    routers["last"] = {"rule": "x", "service": "s", "entryPoints": 1}
    with pytest.raises(ConfigError) as info:
        decode_dynamic({"http": {"routers": routers}})
    assert info.value.path == "$.http.routers.last.entryPoints[0]"


def test_no_traefik_key_edge_lacks_is_a_field_its_model_declares() -> None:
    """TRAEFIK_KEYS lists only what the models do not declare: a key implemented since
    must leave the table (else it goes stale)."""
    declared_there = []
    for model, (refused, ignored) in TRAEFIK_KEYS.items():
        declared = {f.encode_name for f in msgspec.structs.fields(model)}
        declared_there += [(model.__name__, key) for key in sorted((refused | ignored) & declared)]
    assert declared_there == []
