"""Configuration models, durations, addresses and the loader's error messages."""

from __future__ import annotations

import json
import math
import os

import msgspec
import pytest

from edge.config.durations import Duration, dec_hook, enc_hook, format_duration, parse_duration
from edge.config.dynamic import Configuration, split_host_port
from edge.config.loader import (
    decode_dynamic,
    decode_static,
    load_dynamic,
    load_static,
    read_document,
)
from edge.config.static import StaticConfig, parse_address
from edge.errors import ConfigError

# --- durations ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("5s", 5.0),
        ("100ms", 0.1),
        ("1m30s", 90.0),
        ("2h", 7200.0),
        ("1.5s", 1.5),
        ("0", 0.0),
        ("0s", 0.0),
        ("250us", 0.00025),
        ("250µs", 0.00025),
        ("250μs", 0.00025),
        ("10ns", 1e-8),
        ("1h2m3s4ms", 3723.004),
        (".5s", 0.5),
        ("+3s", 3.0),
        ("10", 10.0),  # Traefik: a bare number is seconds
        ("2.5", 2.5),
        (10, 10.0),
        (0.25, 0.25),
        (0, 0.0),
    ],
)
def test_parse_duration(text: object, seconds: float) -> None:
    assert math.isclose(parse_duration(text), seconds, rel_tol=0, abs_tol=1e-12)


@pytest.mark.parametrize(
    "bad", ["", "5x", "s", "1m30", "-1s", "1.2.3s", "5 s", "1d", True, None, [], -3, math.inf]
)
def test_parse_duration_rejects(bad: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        parse_duration(bad)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (5, "5s"),
        (0.1, "100ms"),
        (90, "1m30s"),
        (7200, "2h"),
        (1.5, "1.5s"),
        (0.00025, "250us"),
        (1e-8, "10ns"),
        (3723.004, "1h2m3.004s"),
    ],
)
def test_format_duration_round_trips(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert math.isclose(parse_duration(text), seconds, abs_tol=1e-12)


def test_duration_hooks() -> None:
    assert dec_hook(Duration, "1m") == 60.0
    assert isinstance(dec_hook(Duration, 3), Duration)
    assert enc_hook(Duration(90)) == "1m30s"
    assert str(Duration(0.5)) == "500ms"


# --- addresses ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "parsed"),
    [
        (":8080", ("", 8080, "tcp")),
        ("127.0.0.1:8080", ("127.0.0.1", 8080, "tcp")),
        ("[::1]:8080", ("::1", 8080, "tcp")),
        (":5353/udp", ("", 5353, "udp")),
        ("0.0.0.0:443/tcp", ("0.0.0.0", 443, "tcp")),
        ("localhost:0", ("localhost", 0, "tcp")),
        (":53/UDP", ("", 53, "udp")),
    ],
)
def test_parse_address(address: str, parsed: tuple[str, int, str]) -> None:
    assert parse_address(address) == parsed
    ep = decode_static({"entryPoints": {"e": {"address": address}}}).entry_points["e"]
    assert (ep.host, ep.port, ep.protocol) == parsed


@pytest.mark.parametrize(
    "address", ["8080", ":http", ":70000", "::1:80", "[::1]8080", "[nope]:80", ":80/sctp", ""]
)
def test_parse_address_rejects(address: str) -> None:
    with pytest.raises(ValueError):
        parse_address(address)
    with pytest.raises(ConfigError) as info:
        decode_static({"entryPoints": {"web": {"address": address}}})
    assert info.value.path == "$.entryPoints.web"
    assert "address" in info.value.message


def test_split_host_port() -> None:
    assert split_host_port("svc.ns:53") == ("svc.ns", 53)
    with pytest.raises(ValueError):
        split_host_port("svc.ns")


# --- static configuration ------------------------------------------------------------------

STATIC_YAML = """
entryPoints:
  web:
    address: ":8000"
    transport:
      respondingTimeouts:
        readTimeout: 5s
        writeTimeout: 1m
        idleTimeout: 90
      lifeCycle:
        requestAcceptGraceTimeout: 1s
        graceTimeOut: 3s
    forwardedHeaders:
      trustedIPs: ["10.0.0.0/8", "127.0.0.1", "::1"]
    http:
      maxHeaderBytes: 16384
      parser: h11
  dns:
    address: ":5353/udp"
    udp:
      timeout: 10s
  traefik:
    address: "127.0.0.1:8080"
providers:
  file:
    directory: dynamic
    watch: true
  kubernetesIngress:
    namespaces: [default]
    ingressClass: edge
    throttleDuration: 500ms
  kubernetesGateway:
    labelSelector: app=edge
providersThrottleDuration: 1s
ping:
  entryPoint: traefik
api:
  insecure: true
log:
  level: debug
  format: json
accessLog:
  filePath: /tmp/access.log
  format: json
  bufferingSize: 100
metrics:
  prometheus: {}
"""


def test_static_every_section(tmp_path) -> None:
    path = tmp_path / "edge.yaml"
    path.write_text(STATIC_YAML)
    static = load_static(path)
    web = static.entry_points["web"]
    assert (web.host, web.port, web.protocol) == ("", 8000, "tcp")
    rt = web.transport.responding_timeouts
    assert (rt.read_timeout, rt.write_timeout, rt.idle_timeout) == (5.0, 60.0, 90.0)
    assert web.transport.life_cycle.request_accept_grace_timeout == 1.0
    assert web.transport.life_cycle.grace_time_out == 3.0
    assert web.forwarded_headers.trusted_ips == ["10.0.0.0/8", "127.0.0.1", "::1"]
    assert len(web.forwarded_headers.trusted_networks) == 3
    assert web.http.max_header_bytes == 16384
    assert web.http.parser == "h11"
    assert static.entry_points["dns"].protocol == "udp"
    assert static.entry_points["dns"].udp.timeout == 10.0
    assert static.providers.file is not None
    assert static.providers.file.directory == "dynamic"
    assert static.providers.file.watch is True
    assert static.providers.kubernetes_ingress is not None
    assert static.providers.kubernetes_ingress.throttle_duration == 0.5
    assert static.providers.kubernetes_ingress.namespaces == ["default"]
    assert static.providers.kubernetes_gateway is not None
    assert static.providers.kubernetes_gateway.label_selector == "app=edge"
    assert static.providers_throttle_duration == 1.0
    assert static.ping is not None and static.ping.entry_point == "traefik"
    assert static.api is not None and static.api.insecure
    assert static.log.level == "DEBUG"
    assert static.log.format == "json"
    assert static.access_log is not None and static.access_log.buffering_size == 100
    assert static.entry_point_protocols() == {"web": "tcp", "dns": "udp", "traefik": "tcp"}


def test_static_defaults() -> None:
    static = decode_static({"entryPoints": {"web": {"address": ":80"}}})
    web = static.entry_points["web"]
    rt = web.transport.responding_timeouts
    assert (rt.read_timeout, rt.write_timeout, rt.idle_timeout) == (60.0, 0.0, 180.0)
    assert web.transport.life_cycle.request_accept_grace_timeout == 0.0
    assert web.transport.life_cycle.grace_time_out == 10.0
    assert web.http.max_header_bytes == 1048576
    assert web.http.parser == "httptools"
    assert web.forwarded_headers.insecure is False
    assert static.providers_throttle_duration == 2.0
    assert static.log.level == "INFO"
    assert static.ping is None and static.access_log is None and static.api is None


def test_static_same_in_toml_and_json(tmp_path) -> None:
    toml = tmp_path / "edge.toml"
    toml.write_text(
        '[entryPoints.web]\naddress = ":8000"\n'
        '[entryPoints.web.transport.respondingTimeouts]\nreadTimeout = "5s"\n'
        '[log]\nlevel = "warn"\n'
    )
    js = tmp_path / "edge.json"
    js.write_text(
        json.dumps(
            {
                "entryPoints": {
                    "web": {
                        "address": ":8000",
                        "transport": {"respondingTimeouts": {"readTimeout": 5}},
                    }
                },
                "log": {"level": "WARNING"},
            }
        )
    )
    assert load_static(toml) == load_static(js)
    assert load_static(toml).log.level == "WARN"


def test_providers_throttle_under_providers() -> None:
    static = decode_static({"providers": {"providersThrottleDuration": "500ms"}})
    assert static.providers_throttle_duration == 0.5
    with pytest.raises(ConfigError, match="both"):
        decode_static(
            {"providersThrottleDuration": "1s", "providers": {"providersThrottleDuration": "3s"}}
        )


def test_internal_entry_point_added_like_traefik() -> None:
    static = decode_static({"entryPoints": {"web": {"address": ":80"}}, "ping": {}})
    assert static.entry_points["traefik"].address == ":8080"


@pytest.mark.parametrize(
    ("obj", "path", "message"),
    [
        ({"entryPoints": {"web": {"adress": ":80"}}}, "$.entryPoints.web.adress", "unknown key"),
        (
            {"entryPoints": {"web": {"address": ":80", "http": {"maxHeaderBytes": "1k"}}}},
            "$.entryPoints.web.http.maxHeaderBytes",
            "expected int, got str",
        ),
        ({"entryPoints": {"web": {}}}, "$.entryPoints.web.address", "missing required key"),
        ({"entryPoint": {}}, "$.entryPoint", "unknown key"),
        (
            {
                "entryPoints": {
                    "a": {"address": ":1"},
                    "b": {"address": ":2", "transport": {"lifeCycle": {"graceTimeOut": "soon"}}},
                }
            },
            "$.entryPoints.b.transport.lifeCycle.graceTimeOut",
            "invalid duration 'soon'",
        ),
        (
            {
                "entryPoints": {
                    "web": {"address": ":80", "forwardedHeaders": {"trustedIPs": ["10.0.0.0/33"]}}
                }
            },
            "$.entryPoints.web.forwardedHeaders",
            "'10.0.0.0/33' is not an IP address or CIDR",
        ),
        ({"log": {"level": "chatty"}}, "$.log", "invalid log level 'chatty'"),
        (
            {"log": {"format": "xml"}},
            "$.log.format",
            "invalid value 'xml': expected one of 'common', 'json'",
        ),
        ({"providers": {"file": {}}}, "$.providers.file", "exactly one of filename, directory"),
        (
            {"providers": {"file": {"filename": "a.yml", "directory": "d"}}},
            "$.providers.file",
            "exactly one of filename, directory",
        ),
        (
            {"entryPoints": {"web": {"address": ":80"}}, "ping": {"entryPoint": "admin"}},
            "$",
            "ping: entryPoint 'admin' is not defined",
        ),
        (
            {"entryPoints": {"dns": {"address": ":53/udp"}}, "ping": {"entryPoint": "dns"}},
            "$",
            "UDP entry point",
        ),
        ({"accessLog": {"bufferingSize": -1}}, "$.accessLog.bufferingSize", "expected int >= 0"),
        (
            {"entryPoints": {8080: {"address": ":80"}}},
            '$.entryPoints["8080"]',
            "invalid key: expected str, got int",
        ),
        ([], "$", "expected object, got array"),
    ],
)
def test_static_errors_name_the_key_path(obj: object, path: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        decode_static(obj, source="edge.yaml")
    err = info.value
    assert err.path == path
    assert message in err.message
    assert err.source == "edge.yaml"
    assert str(err).startswith(f"edge.yaml: {path}: ")


# --- dynamic configuration -------------------------------------------------------------

DYNAMIC_YAML = """
http:
  routers:
    whoami:
      rule: Host(`whoami.localhost`)
      service: whoami
      entryPoints: [web, websecure]
      priority: 10
      middlewares: [strip, add, hdr, redirect@other]
      tls:
        certResolver: le
        options: modern
        domains:
          - main: example.com
            sans: [www.example.com]
  services:
    whoami:
      loadBalancer:
        servers:
          - url: http://127.0.0.1:9001
          - url: https://[::1]:9002
            weight: 0
        passHostHeader: false
        serversTransport: slow
    split:
      weighted:
        services:
          - name: whoami
            weight: 3
          - name: other@k8s
  middlewares:
    strip:
      stripPrefix:
        prefixes: [/api]
    add:
      addPrefix:
        prefix: /v1
    hdr:
      headers:
        customRequestHeaders: {X-Env: test, X-Remove: ""}
        customResponseHeaders: {Server: ""}
    redirect:
      redirectScheme:
        scheme: https
        port: "8443"
        permanent: true
  serversTransports:
    slow:
      serverName: backend.internal
      insecureSkipVerify: true
      rootCAs: [/etc/ca.pem]
      maxIdleConnsPerHost: 10
      forwardingTimeouts:
        dialTimeout: 1s
        responseHeaderTimeout: 30s
        idleConnTimeout: 5m
tcp:
  routers:
    pg:
      rule: HostSNI(`pg.example.com`)
      service: pg
      entryPoints: [websecure]
      tls:
        passthrough: true
  services:
    pg:
      loadBalancer:
        servers:
          - address: 10.0.0.5:5432
        serversTransport: tcp-slow
        proxyProtocol:
          version: 1
    both:
      weighted:
        services: [{name: pg, weight: 2}]
  serversTransports:
    tcp-slow:
      dialTimeout: 2s
      terminationDelay: 50ms
      tls:
        serverName: pg.internal
udp:
  routers:
    dns:
      service: dns
      entryPoints: [dns]
  services:
    dns:
      loadBalancer:
        servers:
          - address: 1.1.1.1:53
    dns2:
      weighted:
        services: [{name: dns}]
tls:
  certificates:
    - certFile: /certs/a.crt
      keyFile: /certs/a.key
      stores: [default]
  options:
    modern:
      minVersion: VersionTLS13
      sniStrict: true
      alpnProtocols: [http/1.1]
      cipherSuites: [TLS_AES_128_GCM_SHA256]
  stores:
    default:
      defaultCertificate:
        certFile: /certs/d.crt
        keyFile: /certs/d.key
"""


def test_dynamic_every_section(tmp_path) -> None:
    path = tmp_path / "dyn.yml"
    path.write_text(DYNAMIC_YAML)
    conf = load_dynamic(path)
    assert conf.http is not None and conf.tcp is not None
    assert conf.udp is not None and conf.tls is not None
    router = conf.http.routers["whoami"]
    assert router.entry_points == ["web", "websecure"]
    assert router.priority == 10
    assert router.middlewares == ["strip", "add", "hdr", "redirect@other"]
    assert router.tls is not None and router.tls.options == "modern"
    assert router.tls.domains[0].sans == ["www.example.com"]
    lb = conf.http.services["whoami"].load_balancer
    assert lb is not None
    assert [(s.url, s.weight) for s in lb.servers] == [
        ("http://127.0.0.1:9001", 1),
        ("https://[::1]:9002", 0),
    ]
    assert lb.pass_host_header is False and lb.servers_transport == "slow"
    weighted = conf.http.services["split"].weighted
    assert weighted is not None and [(w.name, w.weight) for w in weighted.services] == [
        ("whoami", 3),
        ("other@k8s", 1),
    ]
    mws = conf.http.middlewares
    assert mws["strip"].strip_prefix is not None and mws["strip"].kind == "stripPrefix"
    assert mws["add"].add_prefix is not None and mws["add"].add_prefix.prefix == "/v1"
    assert mws["hdr"].headers is not None
    assert mws["hdr"].headers.custom_request_headers == {"X-Env": "test", "X-Remove": ""}
    rs = mws["redirect"].redirect_scheme
    assert rs is not None and (rs.scheme, rs.port, rs.permanent) == ("https", "8443", True)
    st = conf.http.servers_transports["slow"]
    assert st.server_name == "backend.internal" and st.insecure_skip_verify
    assert st.root_cas == ["/etc/ca.pem"] and st.max_idle_conns_per_host == 10
    ft = st.forwarding_timeouts
    assert (ft.dial_timeout, ft.response_header_timeout, ft.idle_conn_timeout) == (1, 30, 300)

    pg = conf.tcp.services["pg"].load_balancer
    assert pg is not None and pg.servers[0].address == "10.0.0.5:5432"
    assert pg.proxy_protocol is not None and pg.proxy_protocol.version == 1
    assert conf.tcp.routers["pg"].tls is not None and conf.tcp.routers["pg"].tls.passthrough
    tt = conf.tcp.servers_transports["tcp-slow"]
    assert (tt.dial_timeout, tt.termination_delay) == (2.0, 0.05)
    assert tt.tls is not None and tt.tls.server_name == "pg.internal"

    assert conf.udp.routers["dns"].service == "dns"
    udp_lb = conf.udp.services["dns"].load_balancer
    assert udp_lb is not None and udp_lb.servers[0].address == "1.1.1.1:53"

    assert conf.tls.certificates[0].stores == ["default"]
    opts = conf.tls.options["modern"]
    assert opts.min_version == "VersionTLS13" and opts.sni_strict
    store = conf.tls.stores["default"].default_certificate
    assert store is not None and store.cert_file == "/certs/d.crt"


def test_dynamic_defaults() -> None:
    conf = decode_dynamic(
        {
            "http": {
                "routers": {"r": {"rule": "Path(`/`)", "service": "s"}},
                "services": {"s": {"loadBalancer": {"servers": [{"url": "http://a"}]}}},
                "serversTransports": {"t": {}},
            },
            "tls": {"options": {"o": {}}},
        }
    )
    assert conf.http is not None and conf.tls is not None
    r = conf.http.routers["r"]
    assert (r.entry_points, r.priority, r.middlewares, r.tls) == ([], 0, [], None)
    lb = conf.http.services["s"].load_balancer
    assert lb is not None and lb.pass_host_header and lb.servers_transport == ""
    assert lb.servers[0].weight == 1
    st = conf.http.servers_transports["t"]
    assert st.max_idle_conns_per_host == 200
    ft = st.forwarding_timeouts
    assert (ft.dial_timeout, ft.response_header_timeout, ft.idle_conn_timeout) == (30, 0, 90)
    assert conf.tls.options["o"].min_version == "VersionTLS12"


def test_dynamic_round_trips_through_builtins(tmp_path) -> None:
    conf = decode_dynamic(msgspec.yaml.decode(DYNAMIC_YAML))
    dumped = msgspec.to_builtins(conf, enc_hook=enc_hook)
    json.dumps(dumped)  # JSON-able
    assert decode_dynamic(dumped) == conf


def test_configurations_compare_by_value() -> None:
    a = decode_dynamic(msgspec.yaml.decode(DYNAMIC_YAML))
    b = decode_dynamic(msgspec.yaml.decode(DYNAMIC_YAML))
    assert a == b and a is not b
    assert a != Configuration()


@pytest.mark.parametrize(
    ("obj", "path", "message"),
    [
        (
            {"http": {"routers": {"r": {"rule": "x", "service": "s", "entrypoints": []}}}},
            "$.http.routers.r.entrypoints",
            "unknown key",
        ),
        (
            {"http": {"routers": {"r": {"rule": "x"}}}},
            "$.http.routers.r.service",
            "missing required key",
        ),
        (
            {"http": {"services": {"s": {}}}},
            "$.http.services.s",
            "exactly one of: loadBalancer, weighted",
        ),
        (
            {"http": {"services": {"s": {"loadBalancer": {}, "weighted": {}}}}},
            "$.http.services.s",
            "exactly one of",
        ),
        (
            {
                "http": {
                    "services": {
                        "ok": {"loadBalancer": {}},
                        "s": {
                            "loadBalancer": {"servers": [{"url": "http://a"}, {"url": "ftp://b"}]}
                        },
                    }
                }
            },
            "$.http.services.s.loadBalancer.servers[1]",
            "scheme must be http or https",
        ),
        (
            {"http": {"services": {"s": {"loadBalancer": {"servers": [{"url": "http://"}]}}}}},
            "$.http.services.s.loadBalancer.servers[0]",
            "no host",
        ),
        (
            {
                "http": {
                    "services": {
                        "s": {"loadBalancer": {"servers": [{"url": "http://a", "weight": -1}]}}
                    }
                }
            },
            "$.http.services.s.loadBalancer.servers[0].weight",
            "expected int >= 0",
        ),
        ({"http": {"middlewares": {"m": {}}}}, "$.http.middlewares.m", "exactly one of"),
        (
            {"http": {"middlewares": {"m": {"stripPrefix": {}, "addPrefix": {"prefix": "/"}}}}},
            "$.http.middlewares.m",
            "found stripPrefix, addPrefix",
        ),
        (
            {
                "http": {"middlewares": {"m": {"basicAuthh": {}}}}
            },  # basicAuth itself: "not supported" (issue 13)
            "$.http.middlewares.m.basicAuthh",
            "unknown key",
        ),
        (
            {"http": {"routers": {"a@b": {"rule": "x", "service": "s"}}}},
            '$.http.routers["a@b"]',
            "must not contain '@'",
        ),
        (
            {"tcp": {"services": {"s": {"loadBalancer": {"servers": [{"address": "db"}]}}}}},
            "$.tcp.services.s.loadBalancer.servers[0]",
            "invalid address 'db'",
        ),
        (
            {"tcp": {"services": {"s": {"loadBalancer": {"proxyProtocol": {"version": 3}}}}}},
            "$.tcp.services.s.loadBalancer.proxyProtocol.version",
            "invalid value 3",
        ),
        (
            {"udp": {"services": {"s": {"loadBalancer": {"servers": [{"address": ":53"}]}}}}},
            "$.udp.services.s.loadBalancer.servers[0]",
            "expected host:port",
        ),
        (
            {"tls": {"options": {"o": {"minVersion": "TLS1.2"}}}},
            "$.tls.options.o.minVersion",
            "VersionTLS12",
        ),
        (
            {"tls": {"certificates": [{"certFile": "a"}]}},
            "$.tls.certificates[0].keyFile",
            "missing required key",
        ),
        (
            {"http": {"serversTransports": {"t": {"forwardingTimeouts": {"dialTimeout": "fast"}}}}},
            "$.http.serversTransports.t.forwardingTimeouts.dialTimeout",
            "invalid duration 'fast'",
        ),
        (
            {"http": {"routers": {"my router": {"rule": 1, "service": "s"}}}},
            '$.http.routers["my router"].rule',
            "expected str, got int",
        ),
    ],
)
def test_dynamic_errors_name_the_key_path(obj: object, path: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        decode_dynamic(obj)
    assert info.value.path == path
    assert message in info.value.message


# --- files ------------------------------------------------------------------------------------


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


def test_is_empty() -> None:
    assert Configuration().is_empty()
    assert decode_dynamic({"http": {"routers": {}}, "tls": {"certificates": []}}).is_empty()
    assert not decode_dynamic(
        {"tls": {"certificates": [{"certFile": "a", "keyFile": "b"}]}}
    ).is_empty()


def test_workers_auto_follows_the_cpus_a_pod_may_use(tmp_path):
    """``workers: auto`` in a container: the cgroup quota and the pod's CPU limit bound the count."""
    from edge.config.static import usable_cpus

    affinity = len(os.sched_getaffinity(0))
    none = tmp_path / "none"
    none.mkdir()
    assert usable_cpus({}, str(none)) == affinity
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cpu.max").write_text("150000 100000\n")  # 1.5 CPUs: 2 workers
    assert usable_cpus({}, str(v2)) == min(affinity, 2)
    (v2 / "cpu.max").write_text("max 100000\n")
    assert usable_cpus({}, str(v2)) == affinity
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert usable_cpus({}, str(v1)) == 1
    assert usable_cpus({"EDGE_CPU_LIMIT": "1"}, str(none)) == 1
    assert usable_cpus({"EDGE_CPU_LIMIT": "64"}, str(none)) == affinity
    assert usable_cpus({"EDGE_CPU_LIMIT": "0"}, str(none)) == affinity
